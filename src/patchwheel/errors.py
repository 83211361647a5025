"""The one error type of the tool: what went wrong, and what to do about it."""

from __future__ import annotations


class PatchwheelError(Exception):
    """A failure the user can act on. ``hint`` says how to fix it."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  fix: {self.hint}" if self.hint else self.message
