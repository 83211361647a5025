"""The upstream watch, spread over CI workers (.github/workflows/upstream-watch.yml).

1. ``patchwheel watch list``: the (line, release) cells that upstream published since the committed matrix
   was written, as JSON for a job matrix.
2. ``patchwheel watch cell --line L <pkg>==<release> --fragment F``: one worker checks one cell (text and proofs)
   and writes a **fragment**: the cell's results, with the sha256 of every patch of the line it was judged with.
3. ``patchwheel watch merge F ... --cells LIST``: the fragments merged into the committed matrix. A cell
   job runs upstream's code (its proofs import the new release), so the merge trusts nothing a fragment says that
   it can check: the fragment's exact keys and types, a line of this checkout judged with its patch series (a
   rebase landed meanwhile otherwise), the one release of a cell the list step printed (``LIST``, with its wheel and
   sha256), each row's subject and trailers as the series has them, the verdict vocabulary, one fragment per cell.
   Anything else is refused before anything is written. The merge then
   says what needs a maintainer: a patch that stops applying on a new release, or becomes droppable there (its
   proof passes, its Drop-When holds, or upstream has the change): the exit status is 1, with the rebase
   commands, and the workflow opens no pull request.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ...atomic import replace_text
from ...config import Project
from ...errors import MatrixError
from ...matrix.checks import decide
from ...matrix.table import FEATURE, TEXT_CODE, VERDICTS, Cell, LineMatrix, Matrix, Row, drop_when_met, flags
from ...reporter import CONSOLE, Reporter
from ...series import Patch, parse_series
from ...wheels import fetch
from ..proving import proofenv
from . import matrixrun as upstream
from .selection import Selection, is_version

FRAGMENT_SCHEMA = 1
#: What `watch list` prints per cell, each a string; the merge takes that list back (--cells).
CELL_KEYS = ("line", "package", "release", "wheel", "sha256")
#: A fragment's keys and the JSON types of their values (exact: ``true`` is no integer), level by level.
_NULL = type(None)
_Keys = dict[str, tuple[type, ...]]
_FRAGMENT: _Keys = {"schema": (int,), "torch": (str,), "series": (dict,), "line": (dict,)}
_LINE: _Keys = {"line": (str,), "companions": (list,), "releases": (list,), "patches": (list,)}
_RELEASE: _Keys = {"version": (str,), "wheel": (str,), "sha256": (str,), "yanked": (bool,)}
_PATCH: _Keys = {
    "name": (str,),
    "subject": (str,),
    "drop_when": (str, _NULL),
    "upstream_status": (str, _NULL),
    "proof_test": (str, _NULL),
    "cells": (dict,),
}
_CELL: _Keys = {
    "text": (str,),
    "text_detail": (str,),
    "behaviour": (str,),
    "behaviour_detail": (str,),
    "drop_when_met": (bool, _NULL),
    "flags": (list,),
}
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a bool", dict: "an object", list: "a list", _NULL: "null"}
FORGED_HINT = (
    "merge only the fragments the watch's cell jobs wrote for the cells its list step printed (--cells), unchanged: "
    "read that cell job's log, then run the watch again"
)


def list_new(project: Project) -> list[dict[str, str]]:
    """Every (line, release) newer than the line that its committed matrix does not have yet (a new release, or a
    patch release of an older series published after a newer one), oldest first: what the watch has to check. Each
    cell names the release's wheel and its sha256 on the index, which the merge holds the cell's fragment to."""
    committed = Matrix.require(project.matrix_json)
    out = []
    for line in project.all_lines():
        known = set(ln.versions) if (ln := committed.line(line.key)) else set()
        for version, artifact, _ in fetch.releases(line.package):
            if Version(version) > Version(line.version) and version not in known:
                values = (line.key, line.package, version, artifact.filename, artifact.sha256)
                out.append(dict(zip(CELL_KEYS, values, strict=True)))
    return out


def read_cells(project: Project, path: Path) -> dict[tuple[str, str], dict[str, str]]:
    """The list step's cells (what ``watch list`` printed, saved to ``path``), by (line, release)."""
    hint = "pass the JSON that `patchwheel watch list` printed in the same run of the watch"
    try:
        cells = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise MatrixError(f"cannot read the list of cells {path}: {exc}", hint) from exc
    if type(cells) is not list:
        raise MatrixError(f"the list of cells {path} is {_short(cells)}, not a list", hint)
    lines = {line.key: line for line in project.all_lines()}
    out: dict[tuple[str, str], dict[str, str]] = {}
    for i, cell in enumerate(cells):
        where = f"the list of cells {path}: [{i}]"
        if (
            type(cell) is not dict
            or sorted(cell) != sorted(CELL_KEYS)
            or any(type(v) is not str for v in cell.values())
        ):
            raise MatrixError(f"{where} is {_short(cell)}, not a cell ({', '.join(CELL_KEYS)}: strings)", hint)
        line = lines.get(cell["line"])
        if line is None or cell["package"] != line.package:
            raise MatrixError(
                f"{where} names {cell['line']!r} ({cell['package']!r}), not a line of this checkout", hint
            )
        if not is_version(cell["release"]):
            raise MatrixError(f"{where}: release {cell['release']!r} is not a version", hint)
        out[(cell["line"], cell["release"])] = cell
    return out


def series_digest(project: Project, key: str) -> dict[str, str]:
    """patch name -> sha256 of its file, for the line ``key`` (``pkg/version``)."""
    pkg, version = key.split("/")
    return {p.name: hashlib.sha256(p.path.read_bytes()).hexdigest() for p in parse_series(project.line(pkg, version))}


def write_fragment(
    project: Project, line_key: str, release: str, out: Path, workers: int, report: Reporter = CONSOLE
) -> None:
    """Check one cell (every patch of ``line_key`` against ``release``, proofs run) into the fragment ``out``."""
    pkg, version = _split(line_key)
    line = project.line(pkg, version)
    if Version(release) <= Version(version):
        raise MatrixError(
            f"{pkg} {release} is not newer than the line {line_key}", "name a release newer than the line"
        )
    selection = Selection.parse([f"{pkg}=={release}"])
    result = upstream.check_line(project, line, selection, selection, workers, report=report)
    if not result.releases:
        raise MatrixError(
            f"{pkg} {release} is not a release with a py3-none-any wheel on the index",
            "take the releases from `patchwheel watch list`",
        )
    fragment = {
        "schema": FRAGMENT_SCHEMA,
        "torch": proofenv.torch_version(),
        "series": series_digest(project, line_key),
        "line": result.to_json(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    replace_text(out, json.dumps(fragment, indent=1, ensure_ascii=False) + "\n")
    report(f"wrote {out}")


def _split(key: str) -> tuple[str, str]:
    pkg, sep, version = key.partition("/")
    if not sep or not version:
        raise MatrixError(f"{key!r} is not a release line", "write it as <pkg>/<version>, e.g. transformers/5.24.0")
    return pkg, version


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _forged(path: Path, where: str, problem: str) -> MatrixError:
    return MatrixError(f"fragment {path}: {where}: {problem}" if where else f"fragment {path}: {problem}", FORGED_HINT)


def _shape(path: Path, where: str, value: object, keys: _Keys) -> dict:
    """``value``, an object with exactly ``keys``, each of its types (compared exactly: JSON's ``true`` is a bool,
    not an integer), or the refusal naming the fragment and the field."""
    if type(value) is not dict:
        raise _forged(path, where, f"{_short(value)} is not an object")
    for key in value:
        if key not in keys:
            raise _forged(path, where, f"unexpected key {key!r}")
    for key, types in keys.items():
        if key not in value:
            raise _forged(path, where, f"missing key {key!r}")
        if type(value[key]) not in types:
            named = " or ".join(_TYPE_NAMES[t] for t in types)
            raise _forged(path, f"{where}.{key}" if where else key, f"{_short(value[key])} is not {named}")
    return value


def read_fragment(project: Project, path: Path, cells: dict[tuple[str, str], dict[str, str]]) -> dict:
    """The fragment at ``path``, checked against this checkout and the list step's ``cells`` (module doc)."""
    try:
        fragment = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise MatrixError(f"cannot read the fragment {path}: {exc}", "pass the files the cell jobs wrote") from exc
    if not isinstance(fragment, dict) or fragment.get("schema") != FRAGMENT_SCHEMA or "line" not in fragment:
        raise MatrixError(
            f"{path} is not a fragment of this tool (schema {FRAGMENT_SCHEMA})",
            "pass the files `patchwheel watch cell` wrote",
        )
    _shape(path, "", fragment, _FRAGMENT)
    data = _shape(path, "line", fragment["line"], _LINE)
    try:
        Version(fragment["torch"])
    except InvalidVersion:
        raise _forged(path, "torch", f"{_short(fragment['torch'])} is not a version") from None
    key = data["line"]
    line = next((ln for ln in project.all_lines() if ln.key == key), None)
    if line is None:
        raise MatrixError(
            f"fragment {path}: line.line: {_short(key)} is not a release line of this checkout (gone since the cell "
            "ran?)",
            "run the watch again",
        )
    if fragment["series"] != series_digest(project, key):
        raise MatrixError(
            f"{path} was judged with another patch series of {key} than this checkout's",
            "the patches changed since the cell ran (a rebase or refresh landed): run the watch again",
        )
    if data["companions"] != upstream.companion_pins(project, line):
        companions = ", ".join(upstream.companion_pins(project, line)) or "none"
        raise _forged(path, "line.companions", f"{_short(data['companions'])} are not {key}'s ({companions})")
    if len(data["releases"]) != 1:
        raise _forged(path, "line.releases", f"{len(data['releases'])} releases, where a cell has one")
    release = _shape(path, "line.releases[0]", data["releases"][0], _RELEASE)
    version = release["version"]
    listed = cells.get((key, version))
    if listed is None:
        releases = ", ".join(r for k, r in cells if k == key) or "none"
        raise _forged(path, "line.releases[0].version", f"{version} is not a cell of the list for {key} ({releases})")
    for field in ("wheel", "sha256"):
        if release[field] != listed[field]:
            raise _forged(
                path, f"line.releases[0].{field}", f"{_short(release[field])} is not the listed {listed[field]}"
            )
    series = parse_series(line)
    names = [p.get("name") if type(p) is dict else None for p in data["patches"]]
    if names != [p.name for p in series]:
        raise _forged(path, "line.patches", f"{_short(names)} are not the series of {key}")
    for i, (row, patch) in enumerate(zip(data["patches"], series, strict=True)):
        where = f"line.patches[{i}]"
        _shape(path, where, row, _PATCH)
        for field, value in Row.of(patch).fields().items():
            if row[field] != value:
                raise _forged(path, f"{where}.{field}", f"{_short(row[field])} is not the {field} of {patch.name}")
        if list(row["cells"]) != [version]:
            raise _forged(path, f"{where}.cells", f"{_short(list(row['cells']))} are not the cell's release {version}")
        _check_cell(path, f"{where}.cells[{version!r}]", row["cells"][version], patch, version, fragment["torch"])
    return fragment


def _check_cell(path: Path, where: str, cell: object, patch: Patch, version: str, torch: str) -> None:
    # A verdict names the torch it was judged on (the fragment's); a feature's mark names none.
    cell = _shape(path, where, cell, _CELL if patch.is_feature else _CELL | {"torch": (str,)})
    if not patch.is_feature and cell["torch"] != torch:
        raise _forged(path, f"{where}.torch", f"{_short(cell['torch'])} is not the fragment's torch {torch}")
    if cell["text"] not in TEXT_CODE:
        known = ", ".join(TEXT_CODE)
        raise _forged(path, f"{where}.text", f"{_short(cell['text'])} is not a text result ({known})")
    if patch.is_feature and cell["behaviour"] != FEATURE:
        what = f"{_short(cell['behaviour'])} is not n/a: {patch.name} is a feature, which no proof judges"
        raise _forged(path, f"{where}.behaviour", what)
    if not patch.is_feature and cell["behaviour"] not in VERDICTS:
        what = f"{_short(cell['behaviour'])} is not a verdict ({', '.join(VERDICTS)})"
        raise _forged(path, f"{where}.behaviour", what)
    met = drop_when_met(patch.trailers.get("Drop-When"), version)
    if cell["drop_when_met"] != met:
        raise _forged(path, f"{where}.drop_when_met", f"{cell['drop_when_met']} is not what Drop-When says ({met})")
    if cell["flags"] != flags(met, cell["behaviour"]):
        raise _forged(path, f"{where}.flags", f"{_short(cell['flags'])} are not the flags of its verdict")


def merge(project: Project, paths: list[Path], cells_path: Path) -> tuple[Matrix, list[str]]:
    """The committed matrix with the fragments merged in, and what needs a maintainer (see the module doc)."""
    if not paths:
        raise MatrixError("--merge needs at least one fragment", "pass the files the cell jobs wrote")
    cells = read_cells(project, cells_path)
    fragments: list[dict] = []
    seen: dict[tuple[str, str], Path] = {}  # (line, release) -> the fragment of that cell
    for path in paths:
        fragment = read_fragment(project, path, cells)
        cell = (fragment["line"]["line"], fragment["line"]["releases"][0]["version"])
        if cell in seen:
            raise _forged(
                path,
                "line.releases[0].version",
                f"{cell[0]} vs {cell[1]} is the cell of {seen[cell]} too: one fragment a cell",
            )
        seen[cell] = path
        fragments.append(fragment)
    torches = {f["torch"] for f in fragments}
    if len(torches) > 1:
        raise MatrixError(
            f"the fragments were judged with different torch versions ({', '.join(sorted(torches))})",
            "run every cell with one TORCH_VERSION",
        )
    committed = Matrix.require(project.matrix_json)
    if committed.torch not in (None, *torches):
        raise MatrixError(
            f"the fragments were judged with torch {torches.pop()}, the committed matrix with torch {committed.torch}",
            "run the watch with the matrix's TORCH_VERSION, or re-run the whole matrix with the new torch",
        )
    matrix = committed
    for fragment in fragments:
        matrix = matrix.merged([LineMatrix.from_json(fragment["line"])], torch=fragment["torch"])
    new_lines = [LineMatrix.from_json(f["line"]) for f in fragments]
    newest = {lines[-1].key for lines in project.lines.values()}
    return matrix, attention(committed, new_lines, newest)


def attention(committed: Matrix, new_lines: list[LineMatrix], newest: set[str]) -> list[str]:
    """The cells of ``new_lines`` where a patch of a package's newest line (``newest``: their keys; the older
    lines are kept for their consumers, not rebased) stops applying, becomes droppable, needs a maintainer (where
    follow would stop: one policy, :func:`matrix_checks.decide`), or can no longer be judged
    by its proof, compared with the release before it in the matrix (the committed one, or another new one)."""
    by_line: dict[str, dict[str, dict[str, Cell]]] = {}  # line -> patch -> version -> cell
    for ln in [*committed.lines, *new_lines]:
        for p in ln.patches:
            by_line.setdefault(ln.line, {}).setdefault(p.name, {}).update(p.cells)
    out = []
    for ln in sorted(new_lines, key=lambda ln: ln.line):
        if ln.line not in newest:
            continue
        for p in ln.patches:
            row = by_line[ln.line][p.name]
            versions = sorted(row, key=Version)
            for version, cell in sorted(p.cells.items(), key=lambda kv: Version(kv[0])):
                i = versions.index(version)
                before = row[versions[i - 1]] if i else None
                for what, now in (
                    ("stops applying", _conflicts),
                    ("becomes droppable", _droppable),
                    ("needs a maintainer", _needs_judgement),
                ):
                    if now(cell) and not (before is not None and now(before)):  # rebase: the one policy, decide
                        out.append(
                            f"{ln.line} {p.name} {what} on {ln.package} {version} ({_why(cell)}): "
                            f"rebase with `nox -s rebase -- {ln.package} {version}` "
                            "(docs/maintainers/rebase-and-follow.md#rebase)"
                        )
                if cell.behaviour == "error" and not (before is not None and before.behaviour == "error"):
                    out.append(
                        f"{ln.line} {p.name}: its proof cannot judge {ln.package} {version} "
                        f"({cell.behaviour_detail}): fix the proof test, then run the watch again"
                    )
    return out


def _conflicts(cell: Cell) -> bool:
    return cell.text == "conflict"


def _droppable(cell: Cell) -> bool:
    return decide(cell, cell.behaviour == FEATURE).kind == "drop"


def _needs_judgement(cell: Cell) -> bool:
    """Where follow would stop (the one policy), but for a proof that cannot judge, which is said on its own."""
    decision = decide(cell, cell.behaviour == FEATURE)
    return cell.behaviour in ("passes", "fails", FEATURE) and decision.kind == "stop"


def _why(cell: Cell) -> str:
    if cell.text == "conflict":
        return "text: conflict" + (f", {cell.text_detail[:160]}" if cell.text_detail else "")
    return decide(cell, cell.behaviour == FEATURE).why
