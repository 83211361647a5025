"""The tool's errors: what went wrong, and what to do about it.

One base, :class:`PatchwheelError`, whose message and hint the command line prints (exit status 2); a subclass per
kind of failure, so that a caller who can recover from one kind catches that kind only."""

from __future__ import annotations

from .urls import redact


class PatchwheelError(Exception):
    """A failure the user can act on. ``hint`` says how to fix it. Neither shows a URL's user and password (an
    index named with them): :func:`patchwheel.urls.redact`."""

    def __init__(self, message: str, hint: str = "") -> None:
        message, hint = redact(message), redact(hint)
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  fix: {self.hint}" if self.hint else self.message


class ConfigError(PatchwheelError):
    """overlay/ (pins, sets), a command's arguments or a path given to it are not what the tool can work with."""


class PatchError(PatchwheelError):
    """A patch file or series is malformed, or refers to what it may not."""


class ApplyError(PatchwheelError):
    """A series does not apply to the release it is for (git apply refused a hunk)."""


class VerifyError(PatchwheelError):
    """A built wheel is not what its inputs must give (RECORD, files, reverse check, build number)."""


class FetchError(PatchwheelError):
    """An upstream artifact could not be had, or is not the pinned one (index, download, sha256)."""


class DistError(PatchwheelError):
    """dist/ (or the folder given for it) is not one the build may write, keep or replace."""


class OverlayError(PatchwheelError):
    """overlay/<pkg>/<version>/ (a line's fixed modules) is not what its series makes, and cannot be rewritten."""


class GitError(PatchwheelError):
    """git is missing or too old, or refused what the tool asked of it."""


class MatrixError(PatchwheelError):
    """The committed upstream matrix or a fragment of the watch cannot be used."""


class EnvironmentFailed(PatchwheelError):
    """A test environment could not be made (an installer failed)."""
