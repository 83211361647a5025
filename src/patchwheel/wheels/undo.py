"""Undo a patch series in memory: the check that every patch is present, without a git process.

The build proves that each patch is in what it built by undoing the series, last patch first, and comparing the
result with upstream's bytes (:mod:`verify`, and :func:`apply.apply_series` after applying). ``git apply --reverse``
did that, one process per patch. Here each hunk is undone only where its new side is found exactly (its context
and added lines, byte for byte, at the nearest position to where its header says, as git looks): no fuzz, no
whitespace rule. This can only accept: when it cannot undo a hunk, or the result is not upstream's, the caller asks
``git apply --reverse`` for the verdict and its message. Renames and copies are left to git.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..series import HUNK_HEADER, Patch

_HUNK = re.compile(HUNK_HEADER.encode())
_DIFF = re.compile(rb"^diff --git ", re.M)


@dataclass(frozen=True)
class _Hunk:
    new_start: int
    new_count: int
    old: tuple[bytes, ...]  # lines before the change, each with its line end ("\ No newline": none)
    new: tuple[bytes, ...]  # lines after it


def _hunks(section: bytes) -> list[_Hunk] | None:
    """A file section's hunks, read by their headers' counts as git reads them; None when that fails."""
    lines = section.split(b"\n")
    out: list[_Hunk] = []
    i = 0
    while i < len(lines):
        m = _HUNK.match(lines[i])
        i += 1
        if m is None:
            continue
        left_old, left_new = int(m.group(2) or 1), int(m.group(4) or 1)
        new_start, new_count = int(m.group(3)), left_new
        old: list[bytes] = []
        new: list[bytes] = []
        last: list[list[bytes]] = []
        while i < len(lines) and (left_old or left_new or lines[i].startswith(b"\\")):
            line, kind = lines[i], lines[i][:1]
            if kind == b"\\":  # "\ No newline at end of file": the line before has no line end
                for side in last:
                    side[-1] = side[-1][:-1]
            elif kind in (b" ", b"", b"-", b"+"):
                text = line[1:] + b"\n"
                last = [s for s, takes in ((old, kind != b"+"), (new, kind != b"-")) if takes]
                for side in last:
                    side.append(text)
                left_old -= kind != b"+"
                left_new -= kind != b"-"
                if left_old < 0 or left_new < 0:
                    return None
            else:
                return None
            i += 1
        if left_old or left_new:
            return None
        out.append(_Hunk(new_start, new_count, tuple(old), tuple(new)))
    return out


def _nearest(lines: list[bytes], want: tuple[bytes, ...], expected: int, low: int) -> int | None:
    """Where ``want`` is in ``lines`` at or after ``low``, nearest to ``expected`` (after it first on a tie)."""
    n = len(want)
    for distance in range(len(lines) + 1):
        for pos in (expected + distance, expected - distance) if distance else (expected,):
            if low <= pos <= len(lines) - n and lines[pos : pos + n] == list(want):
                return pos
    return None


def _undo_file(data: bytes, hunks: list[_Hunk]) -> bytes | None:
    parts = data.split(b"\n")  # lines as git splits them: at \n only
    lines = [q + b"\n" for q in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    shift = low = 0
    for h in hunks:
        expected = (h.new_start - 1 if h.new_count else h.new_start) + shift
        if not h.new:  # nothing to find: it goes where its header says
            pos: int | None = expected if low <= expected <= len(lines) else None
        else:
            pos = _nearest(lines, h.new, expected, low)
        if pos is None:
            return None
        lines[pos : pos + len(h.new)] = h.old
        shift += pos - expected + len(h.old) - len(h.new)
        low = pos + len(h.old)
    return b"".join(lines)


def _sections(patch: Patch) -> list[bytes] | None:
    """The raw bytes of each ``diff --git`` section, as many as the parser found, or None."""
    head, sep, _ = patch.raw.partition(b"\n\n")
    starts = [m.start() for m in _DIFF.finditer(patch.raw, len(head) + len(sep))]
    if len(starts) != len(patch.files):
        return None
    return [patch.raw[a:b] for a, b in zip(starts, [*starts[1:], len(patch.raw)], strict=True)]


def undo_series(patches: list[Patch], files: Mapping[str, bytes | None]) -> dict[str, bytes | None] | None:
    """``files`` (upstream-tree paths: bytes, None for no file) with ``patches`` undone, last first; None when a
    hunk is not found exactly where it may be, or a patch renames or copies a file (then ask git)."""
    now = dict(files)
    for patch in reversed(patches):
        sections = _sections(patch)
        if sections is None:
            return None
        for diff, section in reversed(list(zip(patch.files, sections, strict=True))):
            hunks = _hunks(section)
            if hunks is None or len(hunks) != len(diff.hunks):
                return None
            if diff.old_path and diff.new_path and diff.old_path != diff.new_path:
                return None
            path = diff.path
            data = now.get(path)
            if data is None:
                return None
            if diff.new_path is None:  # a deleted file: git would find nothing to undo it from
                return None
            undone = _undo_file(data, hunks)
            if undone is None:
                return None
            if diff.old_path is None:  # a created file: undone, it must be empty, and it goes
                if undone:
                    return None
                now[path] = None
            else:
                now[path] = undone
    return now
