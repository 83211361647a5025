"""The work folder the carry engine leaves waiting at a conflict: ``.rebase/<pkg>-<version>/`` (git-ignored).

It holds the engine's work repository and state (:mod:`.engine`, ``state.json``: a rebase's folder) and, for a
derive, beside them, derive's own state
(``derive.json``): the source line, the set, the verdicts, and the digest of the source line's series. Only a folder
that holds ``derive.json`` (a regular file) is derive's: a folder of ``rebase``, a link, a file or anything else
there is refused with what to do, never read through, replaced or removed. ``--abort`` removes derive's folder
whatever its state file holds; ``--continue`` reads the state as input, every field checked (:func:`load`), works
on a copy and checks, before it writes or removes anything, that the folder is still as it was copied (the
maintainer may be editing it).

Nothing in the folder is opened before its type is known (:func:`read_file`, :func:`entries`): a named pipe hangs
its reader, a socket cannot be opened at all. The tool makes only folders and regular files there; git's own
runtime files in ``repo/.git/`` (the socket of the fsmonitor daemon a maintainer's ``core.fsmonitor=true``
starts) are left out of every copy and comparison, and any other link or special file is refused by name. The work
repository's own git configuration is the folder's too: a setting there the tool did not write is refused by name
before git runs anything else there (:func:`git_settings`).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import reprlib
import shlex
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from ... import gitops
from ...errors import ConfigError, GitError
from ...names import SHA256, file_name_problem
from .scratch import held_interrupts

STATE = "derive.json"
REBASE = ".rebase"
#: derive.json's fields, and those of each verdict in it (:class:`carry.outcome.Verdict`).
KEYS = ("source", "set", "verdicts", "others", "source_series")
VERDICT_KEYS = ("patch", "text", "behaviour", "detail", "decision")


def path(root: Path, package: str, version: str) -> Path:
    """Where the carry onto ``package`` ``version`` waits (rebase's folder for it)."""
    return root / REBASE / f"{package}-{version}"


def kind(mode: int) -> str:
    """What an entry of ``mode`` (``lstat``) is, in words."""
    for test, words in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a link"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return words
    return "a special file"


def shown(value: object) -> str:
    """A value read from a state file, for a message: short whatever it holds."""
    return _SHORT.repr(value)


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 60, 60


def _parent_ok(root: Path) -> None:
    parent = root / REBASE
    if parent.is_symlink() or (parent.exists() and not parent.is_dir()):
        raise ConfigError(
            f"{parent} is {'a link' if parent.is_symlink() else 'not a folder'}: the tool keeps its work repositories "
            "there and follows no link",
            f"move {parent} away",
        )


def _folder_ok(work: Path) -> None:
    if work.is_symlink() or not work.is_dir():
        raise ConfigError(f"{work} is {'a link' if work.is_symlink() else 'not a folder'}", f"move {work} away")


def folder(root: Path, package: str, version: str) -> Path:
    """The work folder of ``package`` ``version``, checked to be a plain folder in a plain ``.rebase/`` (no link is
    followed); it may not exist."""
    _parent_ok(root)
    work = path(root, package, version)
    if work.exists() or work.is_symlink():
        _folder_ok(work)
    return work


def read_file(file: Path, hint: str) -> bytes:
    """The bytes of ``file``, a regular file: its type checked first (``lstat``: a named pipe is never opened, it
    would block its reader), then opened without following a link and without waiting, and checked again."""
    try:
        mode = file.lstat().st_mode
    except FileNotFoundError:
        raise ConfigError(f"{file} is missing", hint) from None
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{file} is {kind(mode)}, not the tool's state", hint)
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise ConfigError(f"{file} is missing", hint) from None
        if exc.errno not in (errno.ELOOP, errno.ENXIO):  # ELOOP: a link; ENXIO: a socket
            raise ConfigError(f"cannot read {file}: {exc.strerror}", hint) from None
        raise ConfigError(f"{file} is {kind(file.lstat().st_mode)}, not the tool's state", hint) from None
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fh.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{file} is {kind(mode)}, not the tool's state", hint)
        return fh.read()


def read_json(file: Path, hint: str) -> object:
    """A state file's JSON (:func:`read_file`); a file that is not JSON is refused with ``hint``."""
    data = read_file(file, hint)
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: thousands of nested brackets
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ConfigError(f"cannot read {file}: {reason}", hint) from None


def entries(work: Path, hint: str) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under ``work`` (relative path, ``lstat``), sorted, folders before what they hold, none followed.
    The tool makes folders and regular files there: a link or special file is refused by name, except git's
    runtime files in ``repo/.git/`` (the fsmonitor daemon's socket), which are left out."""

    def walk(rel: str) -> Iterator[tuple[str, os.stat_result]]:
        try:
            with os.scandir(work / rel if rel else work) as it:
                names = sorted(e.name for e in it)
        except OSError as exc:
            raise ConfigError(f"{work / rel} changed while it was read ({exc.strerror})", hint) from None
        for name in names:
            here = f"{rel}/{name}" if rel else name
            try:
                info = os.lstat(work / here)
            except FileNotFoundError:  # gone meanwhile (git's lock files): as if never there
                continue
            if stat.S_ISDIR(info.st_mode):
                yield here, info
                yield from walk(here)
            elif stat.S_ISREG(info.st_mode):
                yield here, info
            elif not stat.S_ISLNK(info.st_mode) and here.startswith("repo/.git/"):
                continue  # git's own: a daemon's socket, not the repository's content
            else:
                raise ConfigError(
                    f"{work / here} is {kind(info.st_mode)}: the tool's work folder holds only folders and regular "
                    "files, and the tool opens nothing else there",
                    hint,
                )

    return walk("")


#: What git reads in a repository's git folder as that repository's configuration, or to find it.
GIT_CONFIG_FILES = (".git", ".git/config", ".git/config.worktree", ".git/commondir")


def git_files(repo: Path, hint: str) -> None:
    """Refuse a work repository where what git reads as its configuration (:data:`GIT_CONFIG_FILES`) is anything
    but a plain folder and plain files: a named pipe as ``.git/config`` hung every git command there (a pipe's
    reader waits for a writer), a link would have git read a file of someone else's."""
    for name in GIT_CONFIG_FILES:
        path = repo / name
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            continue
        wanted = stat.S_ISDIR(mode) if name == ".git" else stat.S_ISREG(mode)
        if not wanted:
            what = "a folder" if name == ".git" else "a regular file"
            raise ConfigError(f"{path} is {kind(mode)}, not {what}: git reads it as the work repository's own", hint)


def git_settings(repo: Path, hint: str) -> None:
    """Refuse a work repository whose own git configuration holds a setting the tool did not write
    (:func:`patchwheel.gitops.foreign_config`): many make git run a program (a signing program, a filter driver, an
    editor, an included file's), and --continue runs git there. ``hint``: how to drop the folder instead."""
    git_files(repo, hint)
    try:
        foreign = gitops.foreign_config(repo)
    except GitError as exc:
        why = exc.message.strip().splitlines()[-1]  # git's own words: "fatal: bad config line 3 in file ..."
        raise ConfigError(f"git cannot read the configuration of {repo}: {why}", hint) from None
    if not foreign:
        return

    def name(key: str) -> str:  # a subsection may hold any character but a newline
        return shlex.quote(key) if key.isprintable() else shown(key)

    listed = ", ".join(name(k) + ("" if o == "file:.git/config" else f" ({name(o)})") for o, k, _ in foreign)
    one = name(foreign[0][1]) if len(foreign) == 1 else "<key>"
    raise ConfigError(
        f"the work repository {repo} has git settings the tool did not write: {listed} (in .git/config unless "
        "named). A setting there can make git run a program (a signing program, a filter driver, an editor): the "
        "tool runs git there with only those `git init` writes",
        f"remove {'it' if len(foreign) == 1 else 'each'} (`git -C {shlex.quote(str(repo))} config --unset-all {one}`), "
        f"then run --continue again; or instead: {hint}",
    )


def _read_entry(file: Path, hint: str) -> tuple[bytes, os.stat_result]:
    """A regular file :func:`entries` listed, and its ``fstat``: one that became something else meanwhile (opened
    without waiting and without following a link) is refused."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{file} changed while it was read ({exc.strerror})", hint) from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{file} is {kind(info.st_mode)}: the tool opens nothing but regular files", hint)
        return fh.read(), info


def digest(work: Path, hint: str = "", *, into: Path | None = None) -> str:
    """sha256 over every entry under ``work`` (:func:`entries`: its path, and a file's bytes): what ``--continue``
    compares before it writes. With ``into``, the folder is copied there (files with their mode and times) as it is
    read: the digest is that of the copy, whatever changes in ``work`` meanwhile."""
    hint = hint or f"remove it, or start over (remove {work})"
    h = hashlib.sha256()
    if into is not None:
        into.mkdir(parents=True, exist_ok=True)
    for rel, info in entries(work, hint):
        h.update(rel.encode() + b"\0")
        if stat.S_ISDIR(info.st_mode):
            h.update(b"folder\0")
            if into is not None:
                (into / rel).mkdir(parents=True, exist_ok=True)
            continue
        data, info = _read_entry(work / rel, hint)
        h.update(data + b"\0")
        if into is not None:
            target = into / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            os.chmod(target, stat.S_IMODE(info.st_mode))
            os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    return h.hexdigest()


def refuse_existing(root: Path, package: str, version: str) -> None:
    """Before a derive starts: nothing may be at its work folder's path (each kind of thing is told what to do)."""
    _parent_ok(root)
    work = path(root, package, version)
    spec = f"{package}=={version}"
    if not (work.exists() or work.is_symlink()):
        return
    if (work / STATE).is_file() and not work.is_symlink():
        raise ConfigError(
            f"a line for {package} {version} is waiting in {work}",
            f"resolve it and run `nox -s derive -- {spec} --continue`, or `nox -s derive -- {spec} --abort`",
        )
    if (work / "state.json").is_file() and not work.is_symlink():
        raise ConfigError(
            f"a rebase onto {package} {version} is in progress in {work}",
            f"finish it with `nox -s rebase -- {package} {version} --continue`, or drop it with `--abort`",
        )
    raise ConfigError(f"{work} exists and is not a derive's work folder", "move it away, then derive again")


#: The state file that marks a work folder as the door's: derive's own beside the engine's, or the engine's alone.
MARKS = {"derive": STATE, "rebase": "state.json"}


def owned(root: Path, package: str, version: str, by: str = "derive") -> Path:
    """The folder waiting for ``package`` ``version`` when the door ``by`` (derive or rebase) made it: a plain folder
    whose state file (:data:`MARKS`) is a regular file (what it holds is not read here), and, for rebase, no
    derive's. Anything else is refused with what to do."""
    _parent_ok(root)
    work = path(root, package, version)
    mark = MARKS[by]
    other = "rebase" if by == "derive" else "derive"
    if by == "rebase" and os.path.lexists(work / STATE):
        raise ConfigError(
            f"{work} is the work folder of a derive, not of a rebase",
            f"`nox -s derive -- {package}=={version} --continue`, or `--abort` it there",
        )
    if not (work.exists() or work.is_symlink()) or (work.is_dir() and not os.path.lexists(work / mark)):
        what = other if (work / MARKS[other]).is_file() else ("nothing" if not work.exists() else "something else")
        hint = (
            f"that is `nox -s {other}`'s: {door(other, package, version)} --continue, or --abort"
            if what == other
            else f"start one with `{door(by, package, version)}`"
        )
        raise ConfigError(f"no {by} of {package} {version} is waiting in {work} ({what} is there)", hint)
    _folder_ok(work)
    mode = (work / mark).lstat().st_mode
    if not stat.S_ISREG(mode):
        raise ConfigError(
            f"{work / mark} is {kind(mode)}, not {by}'s state: {work} is not a folder {by} made",
            f"move {work} away",
        )
    return work


def door(by: str, package: str, version: str) -> str:
    """The command line of the door ``by`` (rebase or derive) for ``package`` ``version``, before its option."""
    return f"nox -s derive -- {package}=={version}" if by == "derive" else f"nox -s rebase -- {package} {version}"


def abort(root: Path, package: str, version: str, by: str) -> Path:
    """Remove the work folder the door ``by`` left waiting for ``package`` ``version`` (only one it made, whatever
    its state file holds: a damaged one is what --abort is for): the folder removed."""
    work = owned(root, package, version, by)  # refuses a folder the door did not make
    with held_interrupts():
        remove(work, MARKS[by])
    return work


def load(root: Path, package: str, version: str) -> dict:
    """derive's state of the folder waiting for ``package`` ``version``, every field checked; refused when there is
    none, the folder is not derive's, or a field is not what derive writes."""
    work = owned(root, package, version)
    file = work / STATE
    hint = f"`nox -s derive -- {package}=={version} --abort`, then derive again"
    state = read_json(file, hint)

    def bad(what: str) -> ConfigError:
        return ConfigError(f"{file} is not a derive's state: {what}", hint)

    if not isinstance(state, dict) or set(state) - {"with"} != set(KEYS):
        have = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise bad(f"it holds {shown(have)}, where derive writes a table of {', '.join(KEYS)} (and with)")
    state.setdefault("with", {})  # a folder an older derive left names no --with
    paired = state["with"]
    if not isinstance(paired, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in paired.items()):
        raise bad(f'"with" is {shown(paired)}, not a table of packages and versions')
    for key in ("source", "set"):
        if not isinstance(state[key], str) or not state[key]:
            raise bad(f'"{key}" is {shown(state[key])}, not a name')
    for key in ("verdicts", "others"):
        value = state[key]
        if not isinstance(value, list) or not all(
            isinstance(v, dict) and set(v) == set(VERDICT_KEYS) and all(isinstance(x, str) for x in v.values())
            for v in value
        ):
            raise bad(f'"{key}" is {shown(value)}, not a list of verdicts (tables of {", ".join(VERDICT_KEYS)})')
    series = state["source_series"]
    if not isinstance(series, dict) or not all(
        file_name_problem(name) is None and isinstance(sha, str) and SHA256.match(sha) for name, sha in series.items()
    ):
        raise bad(f'"source_series" is {shown(series)}, not a table of file names and sha256s')
    return state


def unchanged(real: Path, copied: str, spec: str) -> None:
    """Refuse, before anything is written, when the waiting folder changed since ``--continue`` copied it."""
    if digest(real, f"`nox -s derive -- {spec} --abort`, then derive again") != copied:
        raise ConfigError(
            f"{real} changed while derive ran: nothing was written, and the folder is as you left it",
            f"run `nox -s derive -- {spec} --continue` again once your edits there are done",
        )


def put(copy: Path, real: Path, state: dict, copied: str | None, spec: str) -> None:
    """The scratch copy's work folder ``copy`` (with derive's ``state``) becomes ``real`` in one step: staged beside
    it first (an interrupt or a full disk leaves nothing), then swapped in with interrupts held. ``copied``: the
    digest the waiting folder had when ``--continue`` copied it (it must still have it), None at a first stop."""
    (copy / STATE).write_text(json.dumps(state, indent=1) + "\n")
    parent = real.parent
    made_parent = not parent.exists()
    staged = real.with_name(f".{real.name}.partial")
    try:
        parent.mkdir(exist_ok=True)
        shutil.rmtree(staged, ignore_errors=True)  # one a killed run left (derive's own name)
        shutil.copytree(copy, staged, symlinks=True)
        with held_interrupts():
            if copied is not None:
                unchanged(real, copied, spec)
            old = real.with_name(f".{real.name}.old")
            if real.exists():
                os.replace(real, old)
            os.replace(staged, real)
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        if made_parent and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
        raise


def remove(work: Path, mark: str = STATE) -> None:
    """A door's work folder (checked to be one), and .rebase/ when nothing else waits there. Its state file
    (``mark``) goes last: a removal cut short (a kill) leaves a folder that is still the door's, which ``--abort``
    removes."""
    _folder_ok(work)
    for entry in sorted(work.iterdir()):
        if entry.name == mark:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    (work / mark).unlink(missing_ok=True)
    work.rmdir()
    if not any(work.parent.iterdir()):
        work.parent.rmdir()
