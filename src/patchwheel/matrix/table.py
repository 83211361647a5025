"""The upstream matrix, typed: every patch of every release line against the newer upstream releases.

Per (patch, release) **cell**: the text result (clean / offset / 3-way / already-upstream / conflict) and the
behaviour result, the patch's proof on the pristine release (``passes``: the bug is gone upstream; ``fails``: the
patch is still needed; ``error``: could not judge; ``n/a``: a feature, which no proof judges; None: not judged).
A cell that was not run but lies between two run releases that agree takes their verdict, **inferred** (it names
them), unless a release where a verdict can change lies between (a **probe**: a Drop-When or text change, a
Fixed-In release). ``Drop-When`` is evaluated per cell, and contradictions are flagged.

This module is the only code that reads or writes the committed matrix (patches/MATRIX.json, and MATRIX.md, which
:func:`render` makes): the matrix check, the watch, ``follow``, ``status``, ``export`` and lint all go
through :class:`Matrix`. It needs only the standard library and ``packaging``: ``status`` and lint run in nox's own
interpreter.

The matrix as Markdown (:func:`render`): tables of ten releases a line, and the Markdown escaping that everything
showing upstream's text uses (a proof's detail is upstream's own message, ``<class 'torch.Tensor'>`` included, and a
fragment of the watch was written by a job that ran upstream's code).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.version import Version

from ..atomic import replace_text
from ..errors import MatrixError
from ..series import DROP_BY_BEHAVIOUR, DROP_BY_PR, Patch, parse_series, slug_of

SCHEMA = 1
#: Where the committed matrix lives, for messages (the path itself is ``Project.matrix_json``).
WHERE = "patches/MATRIX.*"
#: The verdicts a proof run gives; a feature's cells are marked FEATURE instead.
VERDICTS = ("passes", "fails", "error")
FEATURE = "n/a"
FEATURE_DETAIL = "a feature: dropped by release or PR, not judged by a proof"


def drop_when_met(drop_when: str | None, version: str) -> bool | None:
    """Whether a Drop-When release condition holds for ``version``; None when it is not a release condition."""
    cond = drop_when or ""
    if cond == DROP_BY_BEHAVIOUR or cond.startswith(DROP_BY_PR + " ") or not cond:
        return None
    return Version(version) in Requirement(cond).specifier


def flags(met: bool | None, behaviour: str | None) -> list[str]:
    """The contradiction between a cell's Drop-When and its verdict, if any (shown as ⚠)."""
    if met is True and behaviour == "fails":
        return ["Drop-When is met but the proof still fails: upstream's fix differs or is partial"]
    if met is False and behaviour == "passes":
        return ["the proof passes before Drop-When: upstream fixed it earlier, or the proof is too weak here"]
    return []


def changes(versions: list[str], value: Callable[[str], object]) -> list[tuple[str, str]]:
    """The adjacent pairs of ``versions`` where ``value(version)`` differs."""
    return [(a, b) for a, b in zip(versions, versions[1:], strict=False) if value(a) != value(b)]


def probes(versions: list[str], pairs: Iterable[tuple[str, str]]) -> set[str]:
    """The release after each change (``pairs`` of adjacent releases)."""
    return {after for _, after in pairs} & set(versions)


@dataclass
class Cell:
    text: str
    text_detail: str = ""
    behaviour: str | None = None
    behaviour_detail: str | None = None
    inferred_from: list[str] | None = None  # the two run releases an inferred verdict comes from
    drop_when_met: bool | None = None
    flags: list[str] = field(default_factory=list)
    torch: str | None = None  # the torch a run verdict was judged on
    observed_for: str | None = None  # a verdict another line's run observed on this release (that line's key)

    @property
    def was_run(self) -> bool:
        return self.behaviour not in (None, FEATURE) and self.inferred_from is None

    def judged(self, verdict: str | None, detail: str | None, torch: str | None = None) -> None:
        self.behaviour, self.behaviour_detail, self.inferred_from = verdict, detail, None
        self.torch = torch if verdict in VERDICTS else None
        self.observed_for = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"text": self.text, "text_detail": self.text_detail, "behaviour": self.behaviour}
        out |= {"drop_when_met": self.drop_when_met, "flags": list(self.flags)}
        if self.behaviour_detail is not None:
            out["behaviour_detail"] = self.behaviour_detail
        if self.inferred_from is not None:
            out["inferred_from"] = list(self.inferred_from)
        if self.torch is not None:
            out["torch"] = self.torch
        if self.observed_for is not None:
            out["observed_for"] = self.observed_for
        return out

    @classmethod
    def from_json(cls, d: dict) -> Cell:
        return cls(
            text=d["text"],
            text_detail=d.get("text_detail", ""),
            behaviour=d.get("behaviour"),
            behaviour_detail=d.get("behaviour_detail"),
            inferred_from=d.get("inferred_from"),
            drop_when_met=d.get("drop_when_met"),
            flags=list(d.get("flags", [])),
            torch=d.get("torch"),
            observed_for=d.get("observed_for"),
        )


@dataclass
class Row:
    """One patch of a line: what the matrix records of it (name, subject, trailers) and its cells by release."""

    name: str
    subject: str
    drop_when: str | None
    upstream_status: str | None
    proof_test: str | None
    cells: dict[str, Cell] = field(default_factory=dict)

    FIELDS = ("name", "subject", "drop_when", "upstream_status", "proof_test")

    @classmethod
    def of(cls, patch: Patch) -> Row:
        t = patch.trailers
        test = t.get("Proof-Test") or t.get("Feature-Test")
        return cls(patch.name, patch.subject, t.get("Drop-When"), t.get("Upstream-Status"), test)

    def fields(self) -> dict[str, str | None]:
        return {k: getattr(self, k) for k in self.FIELDS}

    @property
    def slug(self) -> str:
        """``0003-dataparallel-num-items.patch`` -> ``dataparallel-num-items``: the same fix on every line."""
        return slug_of(self.name)

    @property
    def is_feature(self) -> bool:
        return any(c.behaviour == FEATURE for c in self.cells.values())

    def met(self, version: str) -> bool | None:
        return drop_when_met(self.drop_when, version)

    def refresh_flags(self) -> None:
        for version, cell in self.cells.items():
            cell.drop_when_met = self.met(version)
            cell.flags = flags(cell.drop_when_met, cell.behaviour)

    def to_json(self) -> dict[str, Any]:
        return {**self.fields(), "cells": {v: c.to_json() for v, c in self.cells.items()}}

    @classmethod
    def from_json(cls, d: dict) -> Row:
        cells = {v: Cell.from_json(c) for v, c in d.get("cells", {}).items()}
        fields = (d["name"], d.get("subject", ""), d.get("drop_when"), d.get("upstream_status"), d.get("proof_test"))
        return cls(*fields, cells=cells)


@dataclass
class Release:
    version: str
    wheel: str
    sha256: str
    yanked: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "wheel": self.wheel, "sha256": self.sha256, "yanked": self.yanked}


@dataclass
class LineMatrix:
    """One release line (``pkg/version``) against its newer releases."""

    line: str
    companions: list[str]
    releases: list[Release]
    patches: list[Row]

    @property
    def package(self) -> str:
        return self.line.split("/")[0]

    @property
    def versions(self) -> list[str]:
        return [r.version for r in self.releases]

    def row(self, name: str) -> Row | None:
        return next((p for p in self.patches if p.name == name), None)

    def probes(self, versions: list[str] | None = None) -> set[str]:
        """Where a verdict can change: each release where a patch's Drop-When starts to hold or its text result
        changes, and the release its Upstream-Status names (Fixed-In, Partial-Fix-In), which lint judges."""
        versions = self.versions if versions is None else versions
        out: set[str] = set()
        for p in self.patches:
            if p.is_feature:
                continue
            present = [v for v in versions if v in p.cells]
            texts = {v: p.cells[v].text for v in present}
            out |= probes(present, changes(present, p.met))
            out |= probes(present, changes(present, texts.__getitem__))
            words = (p.upstream_status or "").split()
            if len(words) >= 2 and words[0] in ("Fixed-In", "Partial-Fix-In") and words[1] in p.cells:
                out.add(words[1])
        return out

    def reinfer(self) -> None:
        """Re-derive every cell that was not run from the run cells beside it (the bisection's rule): a cell between
        two run releases that agree takes their verdict, unless a probe lies between them; any other cell not run
        is left unjudged until a run bisects there. Features keep their mark."""
        versions, probed = self.versions, self.probes()
        for p in self.patches:
            if p.is_feature:
                continue
            left: str | None = None
            gap: list[str] = []
            for v in [v for v in versions if v in p.cells]:
                if not p.cells[v].was_run:
                    gap.append(v)
                    continue
                for g in gap:
                    _infer(p.cells, g, left, v, probed, gap)
                left, gap = v, []
            for g in gap:  # after the last run release: nothing on the right
                _infer(p.cells, g, None, None, probed, gap)

    def refresh_flags(self) -> None:
        for p in self.patches:
            p.refresh_flags()

    def to_json(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "companions": list(self.companions),
            "releases": [r.to_json() for r in self.releases],
            "patches": [p.to_json() for p in self.patches],
        }

    @classmethod
    def from_json(cls, d: dict) -> LineMatrix:
        releases = [
            Release(r["version"], r.get("wheel", ""), r.get("sha256", ""), r.get("yanked", False))
            for r in d.get("releases", [])
        ]
        return cls(d["line"], list(d.get("companions", [])), releases, [Row.from_json(p) for p in d["patches"]])


def _infer(cells: dict[str, Cell], version: str, left: str | None, right: str | None, probed: set[str], gap) -> None:
    cell = cells[version]
    if left is not None and right is not None and cells[left].behaviour == cells[right].behaviour:
        if not probed.intersection(gap):
            anchor = cells[left]
            detail = f"{anchor.behaviour_detail or ''} [inferred, not run: {left} and {right} were run and agree]"
            cell.behaviour, cell.behaviour_detail, cell.inferred_from = anchor.behaviour, detail, [left, right]
            cell.torch = anchor.torch
            return
    cell.behaviour, cell.behaviour_detail, cell.inferred_from, cell.torch = None, None, None, None


@dataclass
class Matrix:
    torch: str | None = None
    lines: list[LineMatrix] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> Matrix | None:
        """The committed matrix at ``path`` (patches/MATRIX.json), or None where there is none yet."""
        if not path.is_file():
            return None
        try:
            return cls.from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MatrixError(f"{path} cannot be read as the matrix ({exc})", "restore it from git") from exc

    @classmethod
    def require(cls, path: Path) -> Matrix:
        matrix = cls.load(path)
        if matrix is None:
            raise MatrixError(f"{path} does not exist", "run `nox -s matrix` and commit the result")
        return matrix

    def save(self, path: Path) -> None:
        """Write the JSON and its Markdown (``.md`` beside it), each replaced whole."""
        for target, text in ((path, json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n"),
                             (path.with_suffix(".md"), render(self))):  # fmt: skip
            replace_text(target, text)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "torch": self.torch, "lines": [ln.to_json() for ln in self.lines]}

    @classmethod
    def from_json(cls, data: dict) -> Matrix:
        matrix = cls(data.get("torch"), [LineMatrix.from_json(ln) for ln in data.get("lines", [])])
        for cell in matrix.cells():  # written before each cell named its torch: the matrix's, which judged them all
            if cell.torch is None and cell.behaviour in VERDICTS:
                cell.torch = matrix.torch
        return matrix

    def cells(self) -> Iterable[Cell]:
        return (cell for line in self.lines for row in line.patches for cell in row.cells.values())

    def line(self, key: str) -> LineMatrix | None:
        return next((ln for ln in self.lines if ln.line == key), None)

    def check_torch(self, torch: str) -> None:
        """Refuse a run under ``torch`` where this matrix was judged under another (callers ask before a long run)."""
        if self.torch not in (None, torch):
            raise MatrixError(
                f"{WHERE} was judged with torch {self.torch}, this run with torch {torch}: merged, it would mix them",
                f"run with TORCH_VERSION={self.torch}, or judge the whole matrix again under torch {torch}: "
                "`nox -s matrix -- run --new-torch`",
            )

    def merged(self, new_lines: list[LineMatrix], torch: str) -> Matrix:
        """This matrix with the cells that were run in ``new_lines`` taken over, every other cell kept (a run is
        kept over a new inference, a judged cell over nothing), the rest inferred again. Runs under another torch
        than this matrix's are refused: the matrix would hold verdicts of two torch releases under one name."""
        self.check_torch(torch)
        old = {ln.line: copy.deepcopy(ln) for ln in self.lines}  # this matrix stays as it was
        out = Matrix(torch, [])
        for new in new_lines:
            prev = old.pop(new.line, None)
            if prev is not None:
                _merge_line(prev, new)
            out.lines.append(new)
        out.lines += old.values()
        for line in out.lines:
            line.reinfer()
            line.refresh_flags()
        out.lines.sort(key=lambda ln: (ln.package, Version(ln.line.split("/")[1])))
        return out

    def keep_lines(self, keys: set[str]) -> None:
        """Drop the rows of lines that are no longer pinned (a retired line)."""
        self.lines = [ln for ln in self.lines if ln.line in keys]

    def rerendered(self, series_of: Callable[[str], list[Patch] | None]) -> None:
        """Each row's trailers taken from its series as it is now (``series_of(line key)``; None: not pinned), and
        the flags recomputed: no run. A patch the matrix lacks (a new fix) gets its row, without cells until a run
        judges it; a line with no newer release yet lists exactly its series."""
        for line in self.lines:
            series = {p.name: p for p in (series_of(line.line) or [])}
            if series and not line.releases:  # no newer release yet: the list of the series' patches, no cells
                line.patches = [Row.of(p) for p in series.values()]
            known = {row.name for row in line.patches}  # a new patch: listed, its cells judged by the next run
            line.patches += [Row.of(p) for name, p in series.items() if name not in known]
            for row in line.patches:
                if (p := series.get(row.name)) is not None:
                    fresh = Row.of(p)
                    row.drop_when, row.upstream_status, row.proof_test = (
                        fresh.drop_when,
                        fresh.upstream_status,
                        fresh.proof_test,
                    )
            line.refresh_flags()


def _merge_line(prev: LineMatrix, new: LineMatrix) -> None:
    releases = {r.version: r for r in prev.releases} | {r.version: r for r in new.releases}
    new.releases = [releases[v] for v in sorted(releases, key=Version)]
    for p in new.patches:
        prev_row = prev.row(p.name)
        cells = dict(prev_row.cells) if prev_row else {}
        for version, cell in p.cells.items():
            old = cells.get(version)
            if (
                old is not None
                and old.behaviour
                and (cell.behaviour is None or (cell.inferred_from is not None and old.was_run))
            ):  # keep what was judged before over nothing, and a run over an inference
                cell.behaviour, cell.behaviour_detail, cell.inferred_from, cell.torch, cell.observed_for = (
                    old.behaviour,
                    old.behaviour_detail,
                    old.inferred_from,
                    old.torch,
                    old.observed_for,  # whose run it was: only a line's own runs are reused for other lines
                )
            cells[version] = cell
        p.cells = {v: cells[v] for v in sorted(cells, key=Version)}


def series_lookup(project) -> Callable[[str], list[Patch] | None]:
    """``line key -> its series`` for :meth:`Matrix.rerendered` (None for a line no longer pinned)."""
    known = {line.key: line for line in project.all_lines()}
    return lambda key: parse_series(known[key]) if key in known else None


#: The text results and the behaviour verdicts, as one character each in the tables (the keys are the matrix's
#: vocabulary: patchwheel.matrix.table re-exports them).
TEXT_CODE = {"clean": "C", "offset": "O", "3-way": "3", "already-upstream": "U", "conflict": "X"}
BEHAVIOUR_CODE = {"passes": "✓", "fails": "✗", "error": "!", "n/a": "–", None: "·"}

#: Markdown punctuation that could start emphasis, a link, a code span or a table column in running text (a
#: backslash escapes each in CommonMark and GitHub's tables); ``&``, ``<``, ``>`` become HTML entities.
_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]|~"} | {"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def md_text(text: object) -> str:
    """``text`` as one line of literal Markdown."""
    return " ".join(str(text).splitlines()).translate(_MD_SPECIAL)


def md_code(text: object) -> str:
    """``text`` as one Markdown code span: fenced by more backticks than it holds in a row (CommonMark)."""
    one_line = " ".join(str(text).splitlines())
    fence = "`" * (1 + max((len(run) for run in re.findall(r"`+", one_line)), default=0))
    pad = " " if one_line.startswith("`") or one_line.endswith("`") else ""
    return f"{fence}{pad}{one_line}{pad}{fence}"


HEADER = [
    "# The patch x release matrix: each patch against newer upstream releases",
    "",
    "Written by `nox -s matrix`; do not edit. Each cell: text result, then behaviour.",
    "",
    "Text: **C** clean, **O** offset, **3** needs a 3-way merge, **U** already upstream (reverse-applies or "
    "empty after merge), **X** conflict.  ",
    "Behaviour (the patch's proof test on the pristine release): **✓** passes, the bug is gone upstream; "
    "**✗** fails, the patch is still needed; **!** could not judge; **–** a feature (dropped by release or "
    "PR, not by a proof); **·** not judged.  ",
    "**(✓)**, **(✗)**, **(!)** inferred, not run: the nearest releases on both sides were run and agree. Proofs "
    "run where a verdict can change (the first and last release, each release where a Drop-When starts to hold "
    "or a text result changes) and bisect between run releases that disagree, so both sides of every change of "
    "verdict were run.  ",
    "**⚠** the Drop-When condition and the behaviour disagree (see the notes under the table). "
    "*(y)* marks a yanked release.",
    "",
]


def render(matrix: Matrix, per_table: int = 10) -> str:
    out = list(HEADER)
    for line in matrix.lines:
        out += [
            f"## {md_text(line.line)}",
            "",
            f"Proofs ran with {md_text(', '.join(line.companions))} and torch {md_text(matrix.torch)}.",
            "",
        ]
        heads = [md_text(r.version) + (" *(y)*" if r.yanked else "") for r in line.releases]
        keys = line.versions
        notes = []
        for start in range(0, len(keys), per_table):
            cols = keys[start : start + per_table]
            out.append("| patch | " + " | ".join(heads[start : start + per_table]) + " |")
            out.append("|---|" + "---|" * len(cols))
            for p in line.patches:
                row = []
                for v in cols:
                    cell = p.cells.get(v)
                    if cell is None:
                        row.append("")
                        continue
                    verdict = BEHAVIOUR_CODE[cell.behaviour]
                    mark = TEXT_CODE[cell.text] + " " + (f"({verdict})" if cell.inferred_from is not None else verdict)
                    if cell.flags:
                        mark += " ⚠"
                        detail = f" ({md_text(cell.behaviour_detail)})" if cell.behaviour_detail else ""
                        notes.append(f"- {md_text(p.name)} vs {md_text(v)}: {md_text(cell.flags[0])}{detail}")
                    row.append(mark)
                out.append(f"| {md_text(p.name.split('.patch')[0])} | " + " | ".join(row) + " |")
            out.append("")
        drop = [
            f"- {md_text(p.name)}: Drop-When {md_code(p.drop_when)}; Upstream-Status "
            f"{md_code(p.upstream_status)}; test {md_code(p.proof_test)}"
            for p in line.patches
        ]
        out += drop + [""] + (["Notes:", ""] + notes + [""] if notes else [])
    return "\n".join(out).rstrip() + "\n"
