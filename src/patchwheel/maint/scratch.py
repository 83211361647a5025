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
import re
import shutil
import signal
import stat
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import buildno, config, lint, writeback
from ..atomic import replace_text
from ..config import BuildRecord
from ..errors import PatchwheelError
from ..tempfolder import TempFolder
from ..writeback import SKIP as _SKIP
from ..writeback import WRITES

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


def _write_checked(path: Path, text: str, reads_back, hint: str) -> None:
    try:
        ok = reads_back(tomllib.loads(text))
    except (tomllib.TOMLDecodeError, KeyError, TypeError):
        ok = False
    if not ok:
        raise PatchwheelError(f"{path}: the tool cannot make this edit in its text; nothing was written", hint)
    replace_text(path, text)


_HEADER = re.compile(r"^\s*\[\s*(?P<name>[^\]]+?)\s*\]\s*(#.*)?\Z")


def _table_name(line: str) -> str | None:
    """A table header's name as the tool spells it: dots without spaces, double quotes only where TOML needs them
    (``[ set . "old" ]`` is ``set.old``, ``[release.'5.24.0']`` is ``release."5.24.0"``)."""
    m = _HEADER.match(line)
    if m is None:
        return None
    name = re.sub(r"\s*\.\s*", ".", m["name"]).replace("'", '"')
    return re.sub(r'"([A-Za-z0-9_-]+)"', r"\1", name)


def _table(lines: list[str], name: str) -> tuple[int, int] | None:
    """[start, end) of the table ``name`` (as ``set.latest`` or ``release."5.23.0"``), header included."""
    start = next((i for i, ln in enumerate(lines) if _table_name(ln) == name), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
    return start, end


def set_member(sets_file: Path, set_name: str, package: str, version: str) -> None:
    """``[set.<set_name>] <package> = "<version>"`` in overlay/sets.toml, every other line kept."""
    lines = sets_file.read_text().splitlines(keepends=True)
    quoted = set_name if re.fullmatch(r"[A-Za-z0-9_-]+", set_name) else f'"{set_name}"'
    span = _table(lines, f"set.{quoted}")
    key = re.compile(rf"""^\s*(["']?){re.escape(package)}\1\s*=""")
    at = None if span is None else next((i for i in range(*span) if key.match(lines[i])), None)
    if at is None:
        raise PatchwheelError(
            f'{sets_file}: [set.{quoted}] has no line {package} = "..." the tool can change',
            f'write {package} = "{version}" in [set.{quoted}] as one line',
        )
    lines[at] = re.sub(r"=\s*(\"[^\"]*\"|'[^']*')", f'= "{version}"', lines[at], count=1)  # a comment after it stays

    def reads_back(data: dict) -> bool:
        return data["set"][set_name][package] == version

    _write_checked(sets_file, "".join(lines), reads_back, f'set {package} = "{version}" in [set.{quoted}] by hand')


def set_floor(sets_file: Path, set_name: str, floor: str) -> bool:
    """``<set_name> = "<floor>"`` in ``[torch.floor]`` of overlay/sets.toml (changed, or added at the table's end),
    every other line kept; False where the file has no such table (it states no torch)."""
    lines = sets_file.read_text().splitlines(keepends=True)
    span = _table(lines, "torch.floor")
    if span is None:
        return False
    key = re.compile(rf"""^\s*(["']?){re.escape(set_name)}\1\s*=""")
    at = next((i for i in range(*span) if key.match(lines[i])), None)
    quoted = set_name if re.fullmatch(r"[A-Za-z0-9_-]+", set_name) else f'"{set_name}"'
    if at is None:
        end = span[1]
        while end > span[0] + 1 and not lines[end - 1].strip():
            end -= 1  # before the blank lines that close the table
        lines.insert(end, f'{quoted} = "{floor}"\n')
    else:
        lines[at] = re.sub(r"=\s*(\"[^\"]*\"|'[^']*')", f'= "{floor}"', lines[at], count=1)

    def reads_back(data: dict) -> bool:
        return data["torch"]["floor"][set_name] == floor

    _write_checked(sets_file, "".join(lines), reads_back, f'write {quoted} = "{floor}" in [torch.floor] by hand')
    return True


def add_set(sets_file: Path, name: str, members: dict[str, str], floor: str | None = None) -> None:
    """A new ``[set.<name>]`` table after the other sets of overlay/sets.toml (before ``[suite]`` and the comments
    above it, where the file has one), every other line kept; with ``floor``, its torch floor too, in the same
    write (a set without one is refused when the file has [torch])."""
    lines = (sets_file.read_text() if sets_file.is_file() else "").splitlines(keepends=True)
    quoted = name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else f'"{name}"'
    table = f"# Made by `patchwheel derive` for users who pin {next(iter(members))} {next(iter(members.values()))}.\n"
    table += f"[set.{quoted}]\n" + "".join(f'{p} = "{v}"\n' for p, v in members.items())
    span = _table(lines, "suite")
    at = len(lines) if span is None else span[0]
    while span is not None and at > 0 and lines[at - 1].lstrip().startswith("#"):
        at -= 1  # the comments just above [suite] are its own
    head, tail = "".join(lines[:at]).rstrip("\n"), "".join(lines[at:])
    new = (head + "\n\n" if head.strip() else "") + table + ("\n" + tail if tail else "")
    if floor is not None and "[torch.floor]" in new:
        floors = new.index("[torch.floor]")
        end = new.find("\n[", floors + 1)
        end = len(new.rstrip("\n")) if end == -1 else len(new[:end].rstrip("\n"))
        new = new[:end] + f'\n{quoted} = "{floor}"' + new[end:]

    def reads_back(data: dict) -> bool:
        return data["set"][name] == members and (
            floor is None or "torch" not in data or data["torch"]["floor"][name] == floor
        )

    _write_checked(sets_file, new, reads_back, f"add it by hand: {table}")


def suite_add(sets_file: Path, name: str) -> None:
    """``name`` added to ``[suite] sets = [...]`` of overlay/sets.toml (a one-line list), every other line kept."""
    lines = sets_file.read_text().splitlines(keepends=True)
    span = _table(lines, "suite")
    one_line = re.compile(r"^(\s*sets\s*=\s*\[)(?P<names>[^\]]*)(\].*)\Z", re.S)
    at = None if span is None else next((i for i in range(*span) if one_line.match(lines[i])), None)
    hint = f'add "{name}" to [suite] sets in {sets_file} by hand (a one-line list)'
    if at is None:
        raise PatchwheelError(f"{sets_file}: no one-line [suite] sets = [...] the tool can add {name!r} to", hint)
    m = one_line.match(lines[at])
    assert m is not None
    names = m["names"].rstrip().rstrip(",")
    lines[at] = f'{m.group(1)}{names}{", " if names.strip() else ""}"{name}"{m.group(3)}'

    def reads_back(data: dict) -> bool:
        return name in data["suite"]["sets"]

    _write_checked(sets_file, "".join(lines), reads_back, hint)


RETIRED_COMMENT = "# The highest build number each retired line recorded: a line made again starts above it."


def record_retired(pins: Path, version: str, number: int) -> None:
    """``[retired] "<version>" = <number>`` in a pins.toml (the highest of it and what is there): the build number a
    retired line reached, so that a line made again for that release starts above it. Every other line kept."""
    lines = pins.read_text().splitlines(keepends=True)
    entry = f'"{version}" = {number}\n'
    span = _table(lines, "retired")
    if span is None:
        text = "".join(lines).rstrip("\n") + f"\n\n{RETIRED_COMMENT}\n[retired]\n" + entry
    else:
        key = re.compile(rf"""^\s*(["']?){re.escape(version)}\1\s*=""")
        at = next((i for i in range(*span) if key.match(lines[i])), None)
        if at is not None:
            number = max(number, tomllib.loads("".join(lines))["retired"][version])
            lines[at] = f'"{version}" = {number}\n'
        else:
            end = span[1]
            while end > span[0] + 1 and not lines[end - 1].strip():
                end -= 1
            lines.insert(end, entry)
        text = "".join(lines)

    def reads_back(data: dict) -> bool:
        return data["retired"][version] >= number

    _write_checked(pins, text, reads_back, f'add "{version}" = {number} to the [retired] table by hand')


def remove_release(pins: Path, version: str) -> None:
    """Remove the ``[release."<version>"]`` table (and the blank lines before it) from a pins.toml."""
    lines = pins.read_text().splitlines(keepends=True)
    span = _table(lines, f'release."{version}"')
    if span is None:
        raise PatchwheelError(f'{pins} has no [release."{version}"] table', "remove it by hand")
    start, end = span
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1  # the blank lines and comments just above the next table are the next table's
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1  # the comments just above this table are its own
    while start > 0 and not lines[start - 1].strip():
        start -= 1
    text = "".join(lines[:start] + lines[end:]).rstrip("\n") + "\n"

    def reads_back(data: dict) -> bool:
        return version not in data["release"]

    _write_checked(pins, text, reads_back, f'remove the [release."{version}"] table by hand')


def add_release(pins: Path, version: str, table: str) -> None:
    """Add the ``[release."<version>"]`` table ``table`` to a pins.toml, before the first release table of a newer
    version, or ``[retired]`` (so the file lists its lines oldest first, as the tool reads them), every other line
    kept."""
    from packaging.version import InvalidVersion, Version

    lines = pins.read_text().splitlines(keepends=True)
    at = len(lines)
    for i, line in enumerate(lines):
        name = _table_name(line)
        if name is None or not (name.startswith('release."') or name == "retired"):
            continue
        try:
            newer = name == "retired" or Version(name[len('release."') : -1]) > Version(version)
        except InvalidVersion:
            continue
        if newer:
            at = i
            while at > 0 and lines[at - 1].lstrip().startswith("#"):
                at -= 1  # the comments just above that table are its own
            break
    head = "".join(lines[:at]).rstrip("\n")
    tail = "".join(lines[at:])
    text = (head + "\n\n" if head else "") + table.rstrip("\n") + "\n" + ("\n" + tail if tail else "")

    def reads_back(data: dict) -> bool:
        return version in data["release"] and tomllib.loads(table)["release"][version] == data["release"][version]

    _write_checked(pins, text, reads_back, f'add the [release."{version}"] table by hand')


def restate_torch(root: Path, changed: list[str], made: set[str], say: Callable[[str], None]) -> None:
    """After the sets ``changed`` were changed: each one's torch floor as its releases now declare it
    (``[torch.floor]``), and the build record of every line whose record names other inputs now (a line's wheel
    names the torch it is proven on). A line this run made (``made``: line keys) keeps its first number; any
    other takes the next one."""
    project = config.load(root)
    if project.torch is None:
        return
    for name in changed:
        floor = lint.set_floor(project, project.sets[name])
        if floor != project.torch.floors.get(name) and set_floor(project.sets_file, name, floor):
            say(f"[torch.floor] {name}: {project.torch.floors.get(name)} -> {floor} (its releases declare it)")
    project = config.load(root)
    for line in project.all_lines():
        if line.build is None or line.build.inputs == buildno.inputs_digest(line):
            continue
        if line.key in made:
            buildno.write_record(
                project.pins_file(line.package),
                line.version,
                BuildRecord(line.build.number, buildno.inputs_digest(line)),
            )
        else:
            buildno.bump(project, line, log=say)
