"""Writing many files into the project as one step that a kill cannot leave half done: follow's and derive's
write-back of overlay/ and patches/.

**Where.** The journal and the staged files live in the tool's own folder, where no commit, pull request or copied
work tree puts anything (:func:`folder`): under the project's git directory (``.git/patchwheel/writeback/``, or
the git directory a worktree's ``.git`` file names; git never checks a path out there), and in a project that is
no git checkout under the user's own ``$XDG_STATE_HOME/patchwheel/projects/<sha256 of the root's path>/``.
Nothing in the work tree is read as the tool's state: a ``.patchwheel-writeback.json`` or ``.x.follow`` there
(where the tool kept them before, so that a commit could carry them) is neither read nor removed, and lint names
it.

**How.** Three phases, under a lock on ``writeback.lock`` beside the folder. (1) Every new file is staged, whole
and on disk, in the folder (``0``, ``1``, ...); a full disk stops the write here, with nothing replaced, and the
staged files are removed. (2) The journal, ``journal.json``, names each target with the sha256 of what it holds
now (``null``: no file yet) and of its staged file, and each file to remove with the sha256 it holds; it is
written whole and on disk, or not at all. (3) Each target is replaced by a copy of its staged file (written beside
it under a name made of the journal's random token, then renamed over it), each removal done; then the folder
goes, the journal first.

**After a kill.** Killed in (1), it leaves no journal: the next start removes the staged files (roll back; nothing
was replaced). Killed in (3), it leaves the journal: the next start checks every file the journal names first
(each target holds what it held or what the write-back writes, each staged file is what was staged, each file to
remove is unchanged) and then does what is left (roll forward). When anything differs (a branch checked out since,
an edit, a damaged or foreign journal) it changes nothing and says how to recover. :func:`recover` does both;
``config.load`` runs it, so any command of the tool, the first after the kill, finds the project whole.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path

from .atomic import replace_text
from .errors import PatchwheelError

#: Where the tool kept its journal before: at the project's root, where a commit could carry it. Never read now;
#: lint names it.
LEGACY_JOURNAL = ".patchwheel-writeback.json"
#: The folders a write-back writes: every path a journal names is under one of them.
WRITES = ("overlay", "patches")
#: What a copy of the tree leaves out: caches, and the build's staging folders.
SKIP = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc", ".*.partial", ".*.old")
#: What the journal's first key says: a journal of this format, written by this tool.
FORMAT = "patchwheel write-back 1"
#: A journal this tool writes is far smaller (a path and two digests per file); a bigger one is not read whole.
MAX_JOURNAL = 16 * 1024 * 1024

_JOURNAL = "journal.json"
_STAGED = re.compile(r"[0-9]{1,7}\Z")
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_TOKEN = re.compile(r"[0-9a-f]{32}\Z")


class WritebackError(PatchwheelError):
    """An unfinished write-back cannot be finished as its journal says: nothing was changed. ``why``: the reason
    alone."""

    why = ""


class _NoHome(PatchwheelError):
    """No folder to keep the state of a project that is no git checkout in."""


# --- where ---------------------------------------------------------------------------------------------------------


def _git_dir(root: Path) -> Path | None:
    """The git directory of the checkout at ``root`` (not of one above it): ``.git`` itself, or the folder a
    worktree's or submodule's ``.git`` file names (``gitdir: PATH``); None where root is no git checkout."""
    dot = root / ".git"
    if dot.is_dir():
        return dot
    try:
        first = dot.read_bytes()[:4096].decode("utf-8").splitlines()[0] if dot.is_file() else ""
    except (OSError, UnicodeDecodeError, IndexError):
        return None
    if not first.startswith("gitdir: "):
        return None
    gitdir = root / first[len("gitdir: ") :].strip()
    return gitdir if gitdir.is_dir() else None


def _state(root: Path) -> Path:
    """The tool's own folder for the project at ``root``; see the module."""
    root = root.resolve()
    gitdir = _git_dir(root)
    if gitdir is not None:
        return gitdir / "patchwheel"
    home = os.environ.get("XDG_STATE_HOME", "")
    try:
        base = Path(home) if os.path.isabs(home) else Path.home() / ".local" / "state"
    except RuntimeError as exc:  # no HOME, and no entry in the password database
        raise _NoHome(
            f"{root} is no git checkout, and there is no home folder to keep the tool's state in ({exc})",
            "set XDG_STATE_HOME (or HOME) to a folder of yours, or run the tool in a git checkout",
        ) from exc
    return base / "patchwheel" / "projects" / hashlib.sha256(os.fsencode(root)).hexdigest()[:32]


def folder(root: Path) -> Path:
    """The folder of a write-back in progress into ``root``: its staged files and its journal."""
    return _state(root) / "writeback"


def journal_file(root: Path) -> Path:
    """The journal of a write-back in progress into ``root``."""
    return folder(root) / _JOURNAL


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold the project's write-back lock: one write-back, or one recovery, at a time (released if this process
    dies)."""
    state = _state(root)
    try:
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        fh = open(state / "writeback.lock", "a+b")
    except OSError as exc:
        raise PatchwheelError(
            f"cannot use the tool's own folder {state} ({exc.strerror or exc}); nothing in the project was changed",
            "make it a folder you can write (the tool keeps a write-back's journal there), then run the command again",
        ) from exc
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


# --- writing -------------------------------------------------------------------------------------------------------


def stage(data: bytes, staged: Path) -> Path:
    """``data`` in a new file ``staged`` of the write-back's folder, on disk."""
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        discard(staged)
        raise
    return staged


def discard(path: Path) -> None:
    """Remove a staged file (one this module made)."""
    path.unlink(missing_ok=True)


def write(
    root: Path, files: dict[str, bytes], removed: list[str], hold: Callable[[], AbstractContextManager] | None = None
) -> None:
    """Write ``files`` (path relative to ``root`` -> bytes) and remove ``removed``, as one step (see the module).
    ``hold``: a context manager that holds interrupts for the renames."""
    root = root.resolve()
    for rel in [*files, *removed]:
        if _bad_path(rel):
            raise ValueError(f"a write-back writes under {', '.join(WRITES)} only, not {rel!r}")
    with _locked(root):
        _recover(root)
        wb = folder(root)
        staged: list[Path] = []
        renames = []
        try:
            wb.mkdir(mode=0o700)
        except OSError as exc:
            raise PatchwheelError(
                f"cannot make {wb} ({exc.strerror or exc}); nothing in the project was replaced",
                "make its folder one you can write, then run the command again",
            ) from exc
        try:
            for i, rel in enumerate(sorted(files)):
                staged.append(stage(files[rel], wb / str(i)))
                after = hashlib.sha256(files[rel]).hexdigest()
                renames.append({"path": rel, "staged": str(i), "before": _digest(root, rel), "after": after})
            befores = {rel: _digest(root, rel) for rel in sorted(removed)}
            removes = [{"path": rel, "before": sha} for rel, sha in befores.items() if sha is not None]
            journal = {"format": FORMAT, "token": secrets.token_hex(16), "renames": renames, "removes": removes}
            replace_text(wb / _JOURNAL, json.dumps(journal, indent=1), durable=True)
            _check(root, journal)
        except OSError as exc:
            _drop(wb, staged)
            raise PatchwheelError(
                f"could not write the new files into {root} ({exc.strerror or exc}); nothing in the project was "
                "replaced",
                "free some space (or fix the folder's permissions) and run the command again",
            ) from exc
        except WritebackError as exc:  # a file changed since it was read: nothing was replaced yet
            _drop(wb, staged)
            raise PatchwheelError(
                f"overlay/ or patches/ changed while the write-back was staged ({exc.why}); nothing was replaced",
                "run the command again",
            ) from exc
        except BaseException:
            _drop(wb, staged)
            raise
        _apply(root, journal, hold)


def _digest(root: Path, rel: str) -> str | None:
    """The sha256 of the regular file ``rel`` (None: there is none); refused when it is a link, folder or
    special file, or a folder above it is a link."""
    problem, digest = _target(root, rel)
    if problem:
        raise PatchwheelError(f"{rel} {problem}", "make it a regular file, or remove it, and run the command again")
    return digest


def _drop(wb: Path, staged: list[Path]) -> None:
    """Undo phases (1) and (2), before anything was replaced: the journal, the staged files and the folder go."""
    discard(wb / _JOURNAL)
    for path in staged:
        discard(path)
    with suppress(OSError):
        wb.rmdir()


# --- recovery ------------------------------------------------------------------------------------------------------


def recover(root: Path) -> list[str]:
    """Finish or undo a write-back a killed process left (see the module); the paths it wrote or removed."""
    root = root.resolve()
    try:
        wb = folder(root)
    except _NoHome:  # nowhere to look: no write-back can have been left there either
        return []
    if not os.path.lexists(wb):
        return []
    with _locked(root):
        return _recover(root)


def _recover(root: Path) -> list[str]:
    """:func:`recover`, the lock held."""
    wb = folder(root)
    if not os.path.lexists(wb):
        return []
    if wb.is_symlink() or not wb.is_dir():
        raise _refusal(root, f"{wb} is not a folder")
    journal_path = wb / _JOURNAL
    if not os.path.lexists(journal_path):  # killed while staging: nothing was replaced
        _clean(root, wb)
        return []
    journal = _read(root, journal_path)
    _check(root, journal)
    return _apply(root, journal, None)


def _refusal(root: Path, why: str) -> WritebackError:
    wb = folder(root)
    look = (
        "look at overlay/ and patches/ (git status) and keep or restore what the cut-short follow or derive left "
        "there (git checkout -- overlay patches)"
        if _git_dir(root.resolve()) is not None
        else "look at overlay/ and patches/ and restore what the cut-short follow or derive left there"
    )
    error = WritebackError(
        f"the unfinished write-back in {wb} cannot be finished: {why}; nothing was changed",
        f"{look}, then drop the write-back: rm -r {shlex.quote(str(wb))}",
    )
    error.why = why
    return error


def _read(root: Path, path: Path) -> dict:
    """The journal at ``path``, checked whole: every field of the type and form this tool writes."""

    def damaged(why: str) -> WritebackError:
        return _refusal(root, f"the journal is damaged ({why})")

    try:
        if path.is_symlink() or not path.is_file():
            raise damaged("it is not a regular file")
        if path.stat().st_size > MAX_JOURNAL:
            raise damaged(f"{path.stat().st_size} bytes, over the {MAX_JOURNAL} a journal of this tool can have")
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise damaged(f"not JSON: {type(exc).__name__}: {str(exc)[:200]}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise damaged(f"not a journal of this tool: its first key is not format = {FORMAT!r}")
    if set(data) != {"format", "token", "renames", "removes"}:
        raise damaged(f"keys {sorted(map(str, data))}, not format, token, renames and removes")
    if not isinstance(data["token"], str) or not _TOKEN.match(data["token"]):
        raise damaged(f"token {data['token']!r} is not 32 lower-case hex digits")
    if not isinstance(data["renames"], list) or not isinstance(data["removes"], list):
        raise damaged("renames and removes are not lists")
    seen: set[str] = set()
    for kind, keys in (("renames", ("path", "staged", "before", "after")), ("removes", ("path", "before"))):
        for entry in data[kind]:
            if not isinstance(entry, dict) or set(entry) != set(keys):
                raise damaged(f"an entry of {kind} is {_short(entry)}, not an object of {', '.join(keys)}")
            rel = entry["path"]
            if not isinstance(rel, str) or _bad_path(rel):
                raise damaged(f"{kind} names {_short(rel)}, not a plain path under {' or '.join(WRITES)}")
            if rel in seen:
                raise damaged(f"it names {rel} twice")
            seen.add(rel)
            for key in [k for k in ("before", "after") if k in keys]:
                value, may_be_null = entry[key], (kind, key) == ("renames", "before")
                if not (value is None and may_be_null) and not (isinstance(value, str) and _SHA256.match(value)):
                    raise damaged(f"{rel}: {key} {_short(value)} is not a sha256 (64 lower-case hex digits)")
            if kind == "renames" and not (isinstance(entry["staged"], str) and _STAGED.match(entry["staged"])):
                raise damaged(f"{rel}: staged {_short(entry['staged'])} is not the name of a staged file")
    return data


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _bad_path(rel: object) -> bool:
    """Whether ``rel`` is not a plain relative path to a file under one of :data:`WRITES`."""
    if not isinstance(rel, str) or "\\" in rel or "\0" in rel or rel.startswith("/"):
        return True
    parts = rel.split("/")
    return len(parts) < 2 or parts[0] not in WRITES or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts)


def _target(root: Path, rel: str) -> tuple[str | None, str | None]:
    """(what is wrong with ``rel`` as a write-back's target, its sha256): no folder on its way a link or not a
    folder; the file a regular file (sha256) or missing (None)."""
    path = root
    parts = rel.split("/")
    for part in parts[:-1]:
        path = path / part
        try:
            info = path.lstat()
        except FileNotFoundError:
            return None, None
        if stat.S_ISLNK(info.st_mode):
            return f"has a link on its way ({path.relative_to(root).as_posix()})", None
        if not stat.S_ISDIR(info.st_mode):
            return f"has a file where a folder must be ({path.relative_to(root).as_posix()})", None
    path = path / parts[-1]
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None, None
    if stat.S_ISDIR(info.st_mode):
        return "is a folder", None
    if not stat.S_ISREG(info.st_mode):
        return "is a link or a special file, not a regular file", None
    return None, _sha256(path)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _temp_name(rel: str, token: str) -> str:
    """The name a target's copy has beside it before it is renamed over it: the journal's token makes it the
    tool's (no commit can carry a file of that name), so a copy a kill left is removed."""
    return f".{rel.rsplit('/', 1)[-1]}.{token}.writeback"


def _check(root: Path, journal: dict) -> None:
    """Refuse ``journal``, touching nothing, when any file it names is not as it recorded it."""
    wb = folder(root)
    problems: list[str] = []
    for entry in journal["renames"]:
        rel = entry["path"]
        problem, now = _target(root, rel)
        temp_problem, _ = _target(root, str(Path(rel).parent / _temp_name(rel, journal["token"])))
        if problem or temp_problem:
            problems.append(f"{rel} {problem or 'has a copy beside it that is not a regular file'}")
        elif now == entry["after"]:
            continue  # done before the kill
        elif now != entry["before"]:
            problems.append(f"{rel} changed since (it holds neither what it held nor what the write-back writes)")
        else:
            staged = wb / entry["staged"]
            if staged.is_symlink() or not staged.is_file():
                problems.append(f"{rel}: its staged file {staged} is missing")
            elif _sha256(staged) != entry["after"]:
                problems.append(f"{rel}: its staged file {staged} is not the one staged (its sha256 differs)")
    for entry in journal["removes"]:
        rel = entry["path"]
        problem, now = _target(root, rel)
        if problem:
            problems.append(f"{rel} {problem}")
        elif now is not None and now != entry["before"]:
            problems.append(f"{rel} changed since it was to be removed")
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise _refusal(root, "; ".join(problems[:3]) + more)


def _apply(root: Path, journal: dict, hold: Callable[[], AbstractContextManager] | None) -> list[str]:
    """Roll a checked journal forward, then drop the write-back's folder; the paths written or removed."""
    wb = folder(root)
    try:
        if hold is None:
            done = _roll_forward(root, journal)
        else:
            with hold():
                done = _roll_forward(root, journal)
    except OSError as exc:
        raise PatchwheelError(
            f"the write-back of overlay/ and patches/ stopped halfway ({exc}); its journal {wb / _JOURNAL} is kept",
            "free some space (or fix the folders' permissions), then run any command of the tool: it finishes the "
            "write-back first",
        ) from exc
    (wb / _JOURNAL).unlink()
    _clean(root, wb)
    return done


def _roll_forward(root: Path, journal: dict) -> list[str]:
    """What is left to do of a checked journal: each target not yet written, each file not yet removed."""
    done = []
    wb = folder(root)
    for entry in journal["renames"]:
        rel = entry["path"]
        target = root / rel
        temp = target.parent / _temp_name(rel, journal["token"])
        temp.unlink(missing_ok=True)  # a copy a kill cut short (its name is the journal's)
        if _target(root, rel)[1] == entry["after"]:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            with os.fdopen(fd, "wb") as out, open(wb / entry["staged"], "rb") as src:
                shutil.copyfileobj(src, out)
                out.flush()
                os.fchmod(out.fileno(), 0o644)
                os.fsync(out.fileno())
            os.replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        done.append(rel)
    for entry in journal["removes"]:
        target = root / entry["path"]
        if target.is_file():
            target.unlink()
            prune(target, root)
            done.append(entry["path"])
    return done


def _clean(root: Path, wb: Path) -> None:
    """Remove the write-back's folder: the staged files and journal temporaries this module makes there, then the
    folder; anything else there is refused, not removed."""
    others = []
    for entry in sorted(wb.iterdir()):
        ours = _STAGED.match(entry.name) or (entry.name.startswith(f".{_JOURNAL}.") and entry.name.endswith(".tmp"))
        if ours and entry.is_file() and not entry.is_symlink():
            discard(entry)
        else:
            others.append(entry.name)
    if others:
        raise _refusal(root, f"its folder holds what the tool does not make there: {', '.join(others[:5])}")
    wb.rmdir()


def prune(path: Path, root: Path) -> None:
    """Remove the folders above a removed file that it left empty, up to (not including) the WRITES folders. What
    the copy never held there is only caches (``__pycache__``, ``.pyc``), which go with their folder: a retired
    line's folder leaves nothing behind."""
    here = path.parent
    while here != root and here.parent != root:
        for entry in list(here.iterdir()):
            if SKIP(str(here), [entry.name]) and not entry.is_symlink():
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        if any(here.iterdir()):
            return
        here.rmdir()
        here = here.parent
