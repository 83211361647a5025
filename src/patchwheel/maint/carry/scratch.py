"""A scratch copy of the project's inputs, where `follow` does all its work, and the one step that writes it back.

``follow`` rebases, vendors, moves a consumer set, retires lines and rewrites the matrix: many files in several
folders, with minutes of proof runs in between. It does all of it in a copy (``patchwheel-follow-*`` in the
temporary folder: ``overlay/`` and ``patches/``, which it changes, and ``tests/``, ``src/`` and ``pyproject.toml``,
which the proof runs read from the same root), so that a stop or an interrupt leaves the project as it was. Only
:meth:`Scratch.commit` writes into the project: the files of ``overlay/`` and ``patches/`` that differ, checked first
to be as they were when copied (nothing edited meanwhile is overwritten), with interrupts held until it is done.

Also here: the text edits of the configuration that follow and derive make (a set's member, a new set, a release's
pin table added or removed), each written only when the file reads back as intended.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from ... import config, lint, writeback
from ...config import BuildRecord, Project, ReleaseLine
from ...configfiles import set_floor, write_record
from ...errors import PatchwheelError
from ...tempfolder import TempFolder
from ...wheels import buildno
from ...writeback import SKIP as _SKIP
from ...writeback import WRITES

#: What follow copies besides what it changes (``WRITES``), because the proof runs read it from the same root.
READS = ("tests", "src", "pyproject.toml", "upstream-pr")


def _files(root: Path, top: str) -> dict[str, str]:
    """Every regular file under ``root/top`` (relative path -> sha256), links refused (to folders too: a linked
    ``patches/<pkg>`` had the copy's work written into the folder it named), caches left out."""
    out: dict[str, str] = {}
    base = root / top
    links = [base] if base.is_symlink() else []
    for folder, dirs, names in os.walk(base, followlinks=False):
        links += [Path(folder) / d for d in dirs if (Path(folder) / d).is_symlink()]
        if links:
            rel = links[0].relative_to(root).as_posix()
            raise PatchwheelError(f"{rel} is a link", "replace the link with the folder itself, then run it again")
        dirs[:] = sorted(d for d in dirs if not _SKIP(folder, [d]))
        for name in sorted(set(names) - _SKIP(folder, names)):
            path = Path(folder) / name
            info = path.lstat()
            rel = path.relative_to(root).as_posix()
            if not stat.S_ISREG(info.st_mode):
                raise PatchwheelError(f"{rel} is not a regular file", "remove the link or special file from the tree")
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


class TreeChanged(PatchwheelError):
    """The project's overlay/ or patches/ changed while the copy was worked on: the commit writes nothing."""


def digests(root: Path) -> dict[str, str]:
    """The files follow may change, with their sha256: what a commit compares before it writes."""
    return {rel: sha for top in WRITES for rel, sha in _files(root, top).items()}


class Scratch(TempFolder):
    """``with Scratch(root) as s``: ``s.root`` is a copy of the project's inputs, removed on exit."""

    def __init__(self, root: Path, command: str = "follow") -> None:
        self.project, self.command = root, command
        super().__init__("patchwheel-follow-")
        self.root = self._tmp / "project"
        try:
            self.root.mkdir()
            self.snapshot = digests(root)  # before the copy: a change while it is copied fails the commit
            for top in WRITES + READS:
                source = root / top
                if source.is_dir():
                    shutil.copytree(source, self.root / top, symlinks=True, ignore=_SKIP)
                elif source.is_file():
                    shutil.copy2(source, self.root / top)
        except BaseException:
            self.close()
            raise

    def changes(self) -> tuple[dict[str, str], list[str]]:
        """(files written or changed: path -> sha256, files removed), relative to the project."""
        now = digests(self.root)
        changed = {rel: sha for rel, sha in now.items() if self.snapshot.get(rel) != sha}
        return changed, sorted(set(self.snapshot) - set(now))

    def commit(self) -> list[str]:
        """Write the copy's changes of overlay/ and patches/ into the project; the paths written or removed.
        Refused, with nothing written, when the project's files are no longer those the copy was made from."""
        if digests(self.project) != self.snapshot:
            raise TreeChanged(
                f"overlay/ or patches/ changed while {self.command} ran; nothing was written",
                f"commit or stash what you changed, then run {self.command} again",
            )
        changed, removed = self.changes()
        files = {rel: (self.root / rel).read_bytes() for rel in changed}
        writeback.write(self.project, files, removed, hold=held_interrupts)
        return sorted(changed) + removed


@contextmanager
def held_interrupts() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends, then act on them: the block is not cut in the middle."""
    caught: list[int] = []
    handlers = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum)) for sig in _HELD}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if caught:
            signal.raise_signal(caught[0])


_HELD = (signal.SIGINT, signal.SIGTERM)


def restate_torch(project: Project, changed: list[str], made: set[str], say: Callable[[str], None]) -> Project:
    """After the sets ``changed`` were changed: each one's torch floor as its releases now declare it
    (``[torch.floor]``), and the build record of every line whose record names other inputs now (a line's wheel
    names the torch it is proven on). A line this run made (``made``: line keys) keeps its first number; any
    other takes the next one. The project as a load would read it now."""
    if project.torch is None:
        return project
    floors = dict(project.torch.floors)
    for name in changed:
        floor = lint.set_floor(project, project.sets[name])
        if floor != floors.get(name) and set_floor(project.sets_file, name, floor):
            say(f"[torch.floor] {name}: {floors.get(name)} -> {floor} (its releases declare it)")
            floors[name] = floor
    project = config.changed(project, torch=replace(project.torch, floors=floors))
    lines: dict[str, list[ReleaseLine]] = {}
    for line in project.all_lines():
        if line.build is not None and line.build.inputs != buildno.inputs_digest(line):
            if line.key in made:
                record = BuildRecord(line.build.number, buildno.inputs_digest(line))
                write_record(project.pins_file(line.package), line.version, record)
            else:
                record = buildno.bump(project, line, log=say)
            line = replace(line, build=record)
        lines.setdefault(line.package, []).append(line)
    return config.changed(project, lines=lines)
