"""Apply a patch series strictly with ``git apply``, in a apply tree outside any git work tree.

Traps this module exists for (all of them exit 0 elsewhere): ``git apply`` inside another work tree silently
skips every file; ``patch --batch`` reverses an already-applied patch; GNU patch fuzzes; so does ``git apply`` under
a user's ``apply.ignoreWhitespace``. So: ``git apply`` only, with :func:`gitops.git_env` (no user configuration,
``GIT_CEILING_DIRECTORIES`` set), a fresh temporary tree, and every patch proven present afterwards by a reverse
check.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from ..config import ReleaseLine
from ..errors import ApplyError, PatchError
from ..gitops import git_env as git_env  # re-exported: mutants.py runs its own git apply with it
from ..gitops import parse_numstat, run_git, try_git
from ..series import Patch, git_disagrees
from ..tempfolder import TempFolder
from .undo import undo_series

_LINT_HINT = "fix each point above; `nox -s lint` re-checks"

_FAILED_AT = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)
_NO_FILE = re.compile(r"^error: (.+): (No such file or directory|does not exist in index)$", re.M)


def _git_apply(tree: Path, patch: Patch, *extra: str) -> tuple[int, str]:
    """``git apply`` in ``tree`` (:func:`gitops.git_env`: none of the user's configuration can make it fuzz)."""
    return try_git(tree, "apply", "--whitespace=nowarn", *extra, str(patch.path))


def explain_failure(patch: Patch, stderr: str) -> str:
    """Turn git's stderr into 'patch X: file F, hunk #N (@@ ... @@) does not apply'."""
    if m := _FAILED_AT.search(stderr):
        path, line = m.group(1), int(m.group(2))
        return f"{patch.name}: {path}: {patch.hunk_at(path, line)} does not apply"
    if m := _NO_FILE.search(stderr):
        return f"{patch.name}: {m.group(1)}: the file does not exist in the release"
    return f"{patch.name}: {stderr.strip() or 'git apply failed'}"


def read_regular(root: Path, rel: str) -> bytes | None:
    """The regular file ``root/rel``, opened one component at a time with ``O_NOFOLLOW``: a symbolic link anywhere
    below ``root`` is refused, never followed, so nothing outside the tree is read whatever put the link there.
    None when there is no file there (nothing, or a folder)."""
    parts = rel.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts):
            here = "/".join(parts[: i + 1])
            try:
                if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise OSError(errno.ELOOP, "a symbolic link")
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_DIRECTORY if i < len(parts) - 1 else 0)
                fd, parent = os.open(part, flags, dir_fd=fd), fd
                os.close(parent)
            except (FileNotFoundError, NotADirectoryError):
                return None
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                what = "" if here == rel else f"{rel} "
                raise ApplyError(
                    f"{here} in the apply tree is a symbolic link: refusing to read {what}through it",
                    "a patch may only create regular files (`nox -s lint` refuses links): report this",
                ) from None
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            return None
        if not stat.S_ISREG(mode):
            raise ApplyError(
                f"{rel} in the apply tree is not a regular file: refusing to read it",
                "a patch may only create regular files: report this",
            )
        with os.fdopen(fd, "rb") as fh:
            fd = -1  # closed with fh
            return fh.read()
    finally:
        if fd >= 0:
            os.close(fd)


def _git_would_find_a_repository(root: Path) -> bool:
    """Whether git, run in ``root`` with :func:`gitops.git_env` (no GIT_DIR; GIT_CEILING_DIRECTORIES stops it at
    ``root``'s parent), would take it for a work tree or a repository: a ``.git`` in it, or the files of a bare
    repository (``HEAD``, ``objects/``, ``refs/``). (``git rev-parse`` said so, one process per tree.)"""
    if os.path.lexists(root / ".git"):
        return True
    return all(os.path.lexists(root / name) for name in ("HEAD", "objects", "refs"))


class ApplyTree(TempFolder):
    """A temporary tree laid out like upstream's git tree, holding only the files the series touches."""

    def __init__(self, files: dict[str, bytes]) -> None:
        super().__init__("patchwheel-apply-")
        try:
            self.root = self._tmp / "tree"
            self.root.mkdir()
            for rel, data in files.items():
                p = self.root / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
            if _git_would_find_a_repository(self.root):  # git apply would skip every file
                raise ApplyError(
                    f"apply tree {self.root} is inside a git work tree",
                    "set TMPDIR to a folder outside any git repository",
                )
        except BaseException:  # nobody holds the object yet to close it
            self.close()
            raise

    def read(self, paths: Iterable[str]) -> dict[str, bytes | None]:
        """Each file's bytes (None: no file there), read without following a symbolic link (:func:`read_regular`)."""
        return {p: read_regular(self.root, p) for p in paths}


def apply_series(
    patches: list[Patch], read_upstream: Callable[[str], bytes | None], *, where: str
) -> dict[str, bytes | None]:
    """Apply ``patches`` in order to the upstream files they touch.

    ``read_upstream(path)`` returns an upstream-tree file's bytes (None when absent). Returns the touched paths
    with their patched bytes (None when a patch deleted the file). Raises PatchwheelError naming the patch, the
    file and the hunk when a patch does not apply strictly.
    """
    touched = sorted({p for patch in patches for p in patch.touched})
    start = {p: d for p in touched if (d := read_upstream(p)) is not None}
    if patches and (done := _apply_at_once(patches, start, touched)) is not None:
        return done
    for patch in patches:  # lint's check, where the build left it to the one git process above
        if disagreement := git_disagrees(patch):
            raise PatchError(f"patch series of {where} is not valid:\n  - {disagreement}", _LINT_HINT)
    with ApplyTree(start) as tree:
        for patch in patches:
            rc, out = _git_apply(tree.root, patch)
            if rc != 0:
                already = _git_apply(tree.root, patch, "--reverse", "--check")[0] == 0
                if already:
                    raise ApplyError(
                        f"{patch.name} is already present in {where} (it applies in reverse)",
                        "upstream carries this change: drop the patch from the series (record Fixed-In) "
                        "or rebase the line",
                    )
                raise ApplyError(
                    f"patch does not apply to {where}: {explain_failure(patch, out)}",
                    "refresh the patch against this release (rebase the line) — release builds never fuzz",
                )
            # Prove the patch is present: reversing it must apply cleanly on the state it produced.
            if _git_apply(tree.root, patch, "--reverse", "--check")[0] != 0:
                raise ApplyError(
                    f"{patch.name}: git apply reported success but the change is not present",
                    "report this: the apply tree must be outside any git work tree",
                )
        return tree.read(touched)


def _apply_at_once(patches: list[Patch], start: dict[str, bytes], touched: list[str]) -> dict[str, bytes | None] | None:
    """The series applied by one ``git apply`` process (it applies its patch files in turn, each on what the one
    before left), which also says what it applied (``--numstat``: it must be what lint reads, :func:`git_disagrees`),
    and proven present by undoing it in memory (:mod:`undo`). None when any of that fails: the caller then applies
    patch by patch, for the first problem and its message."""
    with ApplyTree(start) as tree:
        args = ["apply", "--whitespace=nowarn", "--numstat", "-z", "--apply", *(str(p.path) for p in patches)]
        code, out = run_git(tree.root, *args)
        if code != 0 or parse_numstat(out) != tuple((f.added, f.deleted, f.path) for p in patches for f in p.files):
            return None
        result = tree.read(touched)
    back = undo_series(patches, result)
    if back is None or any(back.get(p) != start.get(p) for p in touched):
        return None
    return result


def reverse_series(patches: list[Patch], patched: dict[str, bytes | None]) -> dict[str, bytes | None]:
    """Undo ``patches`` (last first) on ``patched`` files; each must reverse-apply strictly."""
    with ApplyTree({p: d for p, d in patched.items() if d is not None}) as tree:
        for patch in reversed(patches):
            rc, out = _git_apply(tree.root, patch, "--reverse")
            if rc != 0:
                raise ApplyError(
                    f"{patch.name} is not present in the built files ({explain_failure(patch, out)})",
                    "rebuild; the wheel does not carry what its manifest says",
                )
        return tree.read(patched)


def apply_line(line: ReleaseLine, patches: list[Patch], wheel_files: Mapping[str, bytes]) -> dict[str, bytes | None]:
    """The build's apply step for one release line: ``patches`` applied to the upstream wheel's files
    (``wheel_files``: path in the wheel -> bytes). Returns each touched file by its path in the wheel, patched
    (None: a patch deleted it). Lint guarantees that every touched path maps into the wheel."""

    def read_upstream(upstream_path: str) -> bytes | None:
        wheel_path = line.wheel_path(upstream_path)
        return wheel_files.get(wheel_path) if wheel_path else None

    result = apply_series(patches, read_upstream, where=f"{line.package} {line.version}")
    return {w: d for p, d in result.items() if (w := line.wheel_path(p)) is not None}
