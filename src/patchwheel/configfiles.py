"""The one writer of the overlay's TOML files: ``overlay/<pkg>/pins.toml`` (a release's table, its build record,
the retired lines' numbers) and ``overlay/sets.toml`` (a set's members, its torch floor, the suite's sets);
:mod:`patchwheel.config` reads them. Each edit changes its own lines and keeps every other one (comments too), is
read back as TOML before anything is written (an edit the tool cannot make in the text writes nothing and says what
to write by hand), and replaces the file whole (:func:`atomic.replace_text`)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from .atomic import replace_text
from .config import BuildRecord
from .errors import ConfigError, PatchwheelError

_TABLE = re.compile(r"""^\s*\[\s*release\s*\.\s*(["'])(?P<version>[^"']+)\1\s*\]\s*(#.*)?\Z""")
_BUILD_KEY = re.compile(r"^\s*build\s*=")


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


def _last_key(lines: list[str], span: tuple[int, int]) -> int:
    """Where a key goes at the end of the table ``span``: after its last line, before the blank lines that close it
    and the comments above the next table's header (they are that table's)."""
    end = span[1]
    while end > span[0] + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return end


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
        lines.insert(_last_key(lines, span), f'{quoted} = "{floor}"\n')
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
    floors = _table(new_lines := new.splitlines(keepends=True), "torch.floor") if floor is not None else None
    if floors is not None:
        if not new_lines[-1].endswith("\n"):
            new_lines[-1] += "\n"
        new_lines.insert(_last_key(new_lines, floors), f'{quoted} = "{floor}"\n')
        new = "".join(new_lines)

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


def write_record(pins: Path, version: str, record: BuildRecord) -> None:
    """Set ``build = {...}`` in the ``[release."<version>"]`` table of ``pins``, keeping every other line (its
    comments too), atomically: a reader sees the old file or the new one, never a half-written one."""
    lines = pins.read_text().splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if (m := _TABLE.match(ln)) and m["version"] == version), None)
    entry = f'build = {{ number = {record.number}, inputs = "{record.inputs}" }}\n'
    if start is None:
        raise ConfigError(
            f'{pins} has no [release."{version}"] table header the tool can find',
            f"add {entry.strip()} to that release's table by hand",
        )
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
    at = next((i for i in range(start + 1, end) if _BUILD_KEY.match(lines[i])), None)
    if at is not None:
        lines[at] = entry
    else:
        last = max(i for i in range(start, end) if lines[i].strip() and not lines[i].lstrip().startswith("#"))
        if not lines[last].endswith("\n"):
            lines[last] += "\n"
        lines.insert(last + 1, entry)
    text = "".join(lines)
    try:  # a record written another way (a sub-table, dotted keys) would now be there twice: write nothing then
        written = tomllib.loads(text)["release"][version]["build"]
    except (tomllib.TOMLDecodeError, KeyError, TypeError):
        written = None
    if written != {"number": record.number, "inputs": record.inputs}:
        raise ConfigError(
            f'{pins}: the build record of [release."{version}"] is not one `build = {{ ... }}` line the tool can '
            "replace; nothing was written",
            f"write it as the single line {entry.strip()}",
        )
    replace_text(pins, text)
