"""Writing many files into the project as one step that a kill cannot leave half done: follow's and derive's
write-back of overlay/ and patches/.

Three phases. (1) Every new file is staged beside its target (``.<name>.<random>.follow``); a full disk stops the
write here, with nothing replaced, and the staged files are removed. (2) A journal, ``.patchwheel-writeback.json``
at the project's root, names each staged file's target and each file to remove; it is written to a temporary file,
flushed to disk and renamed into place, so it exists whole or not at all. (3) The renames and removals; then the
journal goes.

A process killed in (1) leaves staged files and no journal: the next start removes them (roll back). Killed in (3),
it leaves the journal: the next start does what the journal says is not done yet (roll forward), since everything
it names was staged whole before the journal was written. :func:`recover` does both; ``config.load`` runs it, so
any command of the tool, the first after the kill, finds the project whole.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from .atomic import replace_text
from .errors import PatchwheelError

#: The journal of a write-back in progress, at the project's root.
JOURNAL = ".patchwheel-writeback.json"
#: The folders a write-back writes, and so the ones recovery sweeps.
WRITES = ("overlay", "patches")
#: What a copy of the tree leaves out: caches, and the build's staging folders.
SKIP = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc", ".*.partial", ".*.old")
_SUFFIX = ".follow"


def stage(data: bytes, target: Path) -> Path:
    """``data`` in a new file beside ``target``, to be renamed over it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
    except BaseException:
        discard(Path(tmp))
        raise
    return Path(tmp)


def discard(path: Path) -> None:
    """Remove a staged file (one this module made)."""
    path.unlink(missing_ok=True)


def write(root: Path, files: dict[str, bytes], removed: list[str], hold=None) -> None:
    """Write ``files`` (path relative to ``root`` -> bytes) and remove ``removed``, as one step (see the module).
    ``hold``: a context manager that holds interrupts for the renames."""
    recover(root)
    staged: dict[str, Path] = {}
    try:
        for rel in sorted(files):
            staged[rel] = stage(files[rel], root / rel)
    except OSError as exc:
        for tmp in staged.values():
            discard(tmp)
        raise PatchwheelError(
            f"could not write the new files into {root} ({exc.strerror or exc}); nothing in the project was replaced",
            "free some space (or fix the folder's permissions) and run the command again",
        ) from exc
    except BaseException:
        for tmp in staged.values():
            discard(tmp)
        raise
    journal = {"renames": {rel: tmp.name for rel, tmp in staged.items()}, "removes": removed}
    _write_journal(root, journal)
    if hold is None:
        _roll_forward(root, journal)
    else:
        with hold():
            _roll_forward(root, journal)
    (root / JOURNAL).unlink()


def recover(root: Path) -> list[str]:
    """Finish or undo a write-back a killed process left (see the module); the paths it touched."""
    touched: list[str] = []
    journal_path = root / JOURNAL
    if journal_path.is_symlink():
        raise PatchwheelError(f"{journal_path} is a link", "remove it: the tool writes that file itself")
    if journal_path.is_file():
        try:
            journal = json.loads(journal_path.read_text())
            renames, removes = dict(journal["renames"]), list(journal["removes"])
        except (ValueError, KeyError, TypeError) as exc:
            raise PatchwheelError(
                f"{journal_path} is not a write-back journal this tool wrote ({exc})",
                "look at overlay/ and patches/ (git status), restore them, and remove the file",
            ) from exc
        touched = _roll_forward(root, {"renames": renames, "removes": removes})
        journal_path.unlink()
    for top in WRITES:
        for folder, _dirs, names in os.walk(root / top, followlinks=False):
            for name in names:
                path = Path(folder) / name
                if name.startswith(".") and name.endswith(_SUFFIX) and path.is_file() and not path.is_symlink():
                    discard(path)  # staged by a write-back killed before its journal: nothing was replaced
                    touched.append(path.relative_to(root).as_posix())
    return touched


def _write_journal(root: Path, journal: dict) -> None:
    replace_text(root / JOURNAL, json.dumps(journal, indent=1), durable=True)


def _roll_forward(root: Path, journal: dict) -> list[str]:
    """The renames whose staged file is still there, and the removals whose file still is: what is left to do."""
    done = []
    for rel, name in journal["renames"].items():
        target = root / rel
        staged = target.parent / name
        ours = "/" not in name and name.startswith(f".{target.name}.") and name.endswith(_SUFFIX)
        if ours and _inside(root, target) and staged.is_file() and not staged.is_symlink():
            os.replace(staged, target)
            done.append(rel)
    for rel in journal["removes"]:
        target = root / rel
        if _inside(root, target) and (target.is_file() or target.is_symlink()):
            target.unlink()
            prune(target, root)
            done.append(rel)
    return done


def _inside(root: Path, path: Path) -> bool:
    """A journal path under one of the WRITES folders, with no link on the way (a journal is read back as input)."""
    rel = path.relative_to(root) if path.is_relative_to(root) else None
    if rel is None or ".." in rel.parts or rel.parts[0] not in WRITES:
        return False
    folder = root
    for part in rel.parts[:-1]:
        folder = folder / part
        if folder.is_symlink():
            return False
    return True


def prune(path: Path, root: Path) -> None:
    """Remove the folders above a removed file that it left empty, up to (not including) the WRITES folders. What
    the copy never held there is only caches (``__pycache__``, ``.pyc``), which go with their folder: a retired
    line's folder leaves nothing behind."""
    folder = path.parent
    while folder != root and folder.parent != root:
        for entry in list(folder.iterdir()):
            if SKIP(str(folder), [entry.name]) and not entry.is_symlink():
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        if any(folder.iterdir()):
            return
        folder.rmdir()
        folder = folder.parent
