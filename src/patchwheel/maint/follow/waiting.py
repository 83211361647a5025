"""The work folder a derive leaves waiting at a conflict: ``.rebase/<pkg>-<version>/`` (git-ignored).

It holds the rebase's work repository and state (:mod:`rebase`) and, beside them, derive's own state
(``derive.json``): the source line, the set, the verdicts, and the digest of the source line's series. Only a folder
that holds ``derive.json`` is derive's: a folder of ``rebase``, a link, a file or anything else there is refused
with what to do, never read through, replaced or removed. ``--continue`` works on a copy and checks, before it
writes or removes anything, that the folder is still as it was copied (the maintainer may be editing it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from ...errors import ConfigError
from .scratch import held_interrupts

STATE = "derive.json"
REBASE = ".rebase"


def path(root: Path, package: str, version: str) -> Path:
    """Where the carry onto ``package`` ``version`` waits (rebase's folder for it)."""
    return root / REBASE / f"{package}-{version}"


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
            f"finish it with `nox -s rebase -- {package} {version} --continue`, or delete {work}",
        )
    raise ConfigError(f"{work} exists and is not a derive's work folder", "move it away, then derive again")


def load(root: Path, package: str, version: str) -> dict:
    """derive's state of the folder waiting for ``package`` ``version``; refused when there is none, or the folder is
    not derive's."""
    _parent_ok(root)
    work = path(root, package, version)
    spec = f"{package}=={version}"
    if not (work.exists() or work.is_symlink()) or (work.is_dir() and not (work / STATE).exists()):
        what = "a rebase" if (work / "state.json").is_file() else ("nothing" if not work.exists() else "something else")
        hint = (
            f"that is `nox -s rebase`'s: finish it with `nox -s rebase -- {package} {version} --continue`"
            if what == "a rebase"
            else f"start one with `nox -s derive -- {spec}`"
        )
        raise ConfigError(f"no derive of {package} {version} is waiting in {work} ({what} is there)", hint)
    _folder_ok(work)
    try:
        state = json.loads((work / STATE).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot read {work / STATE}: {exc}", f"`nox -s derive -- {spec} --abort`, then derive again"
        ) from exc
    keys = {"source", "set", "verdicts", "others", "source_series"}
    if not isinstance(state, dict) or set(state) != keys:
        raise ConfigError(f"{work / STATE} is not a derive's state", f"`nox -s derive -- {spec} --abort`, then again")
    return state


def digest(folder: Path) -> str:
    """sha256 over every file under ``folder`` (its path and bytes): what ``--continue`` compares before it writes."""
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            file = Path(dirpath) / name
            h.update(file.relative_to(folder).as_posix().encode() + b"\0")
            h.update(os.readlink(file).encode() if file.is_symlink() else file.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


def unchanged(real: Path, copied: str, spec: str) -> None:
    """Refuse, before anything is written, when the waiting folder changed since ``--continue`` copied it."""
    if digest(real) != copied:
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


def remove(work: Path) -> None:
    """A derive's work folder (checked to be one), and .rebase/ when nothing else waits there."""
    _folder_ok(work)
    shutil.rmtree(work)
    if not any(work.parent.iterdir()):
        work.parent.rmdir()
