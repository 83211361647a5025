"""The upstream watch, spread over CI workers (.github/workflows/upstream-watch.yml).

1. ``patchwheel upstream --list-new``: the (line, release) cells that upstream published since the committed matrix
   was written, as JSON for a job matrix.
2. ``patchwheel upstream --line L <pkg>==<release> --fragment F``: one worker checks one cell (text and proofs)
   and writes a **fragment**: the cell's results, with the sha256 of every patch of the line it was judged with.
3. ``patchwheel upstream --merge F ...``: the fragments merged into patches/STATUS.{json,md}. A fragment judged
   with another patch series (a rebase landed meanwhile) or for a line that is gone is refused. The merge then
   says what needs a maintainer: a patch that stops applying on a new release, or becomes droppable there (its
   proof passes, its Drop-When holds, or upstream has the change): the exit status is 1, with the rebase
   commands, and the workflow opens no pull request.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from packaging.version import Version

from .. import fetch
from ..config import Overlay
from ..errors import PatchwheelError
from ..patches import load_series
from . import upstream

FRAGMENT_SCHEMA = 1


def _status(overlay: Overlay) -> dict:
    path = overlay.root / "patches" / "STATUS.json"
    if not path.is_file():
        raise PatchwheelError(f"{path} does not exist", "run `nox -s upstream` and commit patches/STATUS.*")
    return json.loads(path.read_text())


def list_new(overlay: Overlay) -> list[dict[str, str]]:
    """Every (line, release) newer than the line that its committed matrix does not have yet (a new release, or a
    patch release of an older series published after a newer one), oldest first: what the watch has to check."""
    committed = {ln["line"]: ln for ln in _status(overlay).get("lines", [])}
    out = []
    for line in overlay.all_lines():
        known = {r["version"] for r in committed.get(line.key, {}).get("releases", [])}
        for version, _, _ in fetch.releases(line.package):
            if Version(version) > Version(line.version) and version not in known:
                out.append({"line": line.key, "package": line.package, "release": version})
    return out


def series_digest(overlay: Overlay, key: str) -> dict[str, str]:
    """patch name -> sha256 of its file, for the line ``key`` (``pkg/version``)."""
    pkg, version = key.split("/")
    return {p.name: hashlib.sha256(p.path.read_bytes()).hexdigest() for p in load_series(overlay.line(pkg, version))}


def write_fragment(overlay: Overlay, line_key: str, release: str, out: Path, workers: int) -> None:
    """Check one cell (every patch of ``line_key`` against ``release``, proofs run) into the fragment ``out``."""
    pkg, version = _split(line_key)
    line = overlay.line(pkg, version)
    if Version(release) <= Version(version):
        raise PatchwheelError(
            f"{pkg} {release} is not newer than the line {line_key}", "name a release newer than the line"
        )
    selection = upstream.Selection.parse([f"{pkg}=={release}"])
    result = upstream.check_line(overlay, line, selection, selection, workers)
    if not result["releases"]:
        raise PatchwheelError(
            f"{pkg} {release} is not a release with a py3-none-any wheel on the index",
            "take the releases from `patchwheel upstream --list-new`",
        )
    fragment = {
        "schema": FRAGMENT_SCHEMA,
        "torch": upstream.proofenv.torch_version(),
        "series": series_digest(overlay, line_key),
        "line": result,
    }
    tmp = out.with_name(out.name + ".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(json.dumps(fragment, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(out)
    print(f"wrote {out}")


def _split(key: str) -> tuple[str, str]:
    pkg, sep, version = key.partition("/")
    if not sep or not version:
        raise PatchwheelError(f"{key!r} is not a release line", "write it as <pkg>/<version>, e.g. transformers/5.23.0")
    return pkg, version


def read_fragment(overlay: Overlay, path: Path) -> dict:
    try:
        fragment = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PatchwheelError(f"cannot read the fragment {path}: {exc}", "pass the files the cell jobs wrote") from exc
    if not isinstance(fragment, dict) or fragment.get("schema") != FRAGMENT_SCHEMA or "line" not in fragment:
        raise PatchwheelError(
            f"{path} is not a fragment of this tool (schema {FRAGMENT_SCHEMA})",
            "pass the files `patchwheel upstream --fragment` wrote",
        )
    key = fragment["line"]["line"]
    pkg, version = _split(key)
    try:
        overlay.line(pkg, version)
    except PatchwheelError as exc:
        raise PatchwheelError(
            f"{path} is for the line {key}, which this checkout no longer has", "run the watch again"
        ) from exc
    if fragment.get("series") != series_digest(overlay, key):
        raise PatchwheelError(
            f"{path} was judged with another patch series of {key} than this checkout's",
            "the patches changed since the cell ran (a rebase or refresh landed): run the watch again",
        )
    return fragment


def merge(overlay: Overlay, paths: list[Path]) -> tuple[dict, list[str]]:
    """The committed matrix with the fragments merged in, and what needs a maintainer (see the module doc)."""
    if not paths:
        raise PatchwheelError("--merge needs at least one fragment", "pass the files the cell jobs wrote")
    fragments = [read_fragment(overlay, p) for p in paths]
    torches = {f["torch"] for f in fragments}
    if len(torches) > 1:
        raise PatchwheelError(
            f"the fragments were judged with different torch versions ({', '.join(sorted(torches))})",
            "run every cell with one TORCH_VERSION",
        )
    committed = _status(overlay)
    if committed.get("torch") not in (None, *torches):
        raise PatchwheelError(
            f"the fragments were judged with torch {torches.pop()}, the committed matrix with torch "
            f"{committed['torch']}",
            "run the watch with the matrix's TORCH_VERSION, or re-run the whole matrix with the new torch",
        )
    matrix = committed
    for fragment in fragments:
        matrix = upstream.merge(matrix, [fragment["line"]], torch=fragment["torch"])
    newest = {pkg: lines[-1].key for pkg, lines in overlay.lines.items()}
    return matrix, attention(committed, [f["line"] for f in fragments], set(newest.values()))


def attention(committed: dict, new_lines: list[dict], newest: set[str]) -> list[str]:
    """The cells of ``new_lines`` where a patch of a package's newest line (``newest``: their keys; the older
    lines are kept for their consumers, not rebased) stops applying, becomes droppable, or can no longer be judged
    by its proof, compared with the release before it in the matrix (the committed one, or another new one)."""
    old = {ln["line"]: ln for ln in committed.get("lines", [])}
    by_line: dict[str, dict[str, dict[str, dict]]] = {}  # line -> patch -> version -> cell
    for ln in [*old.values(), *new_lines]:
        for p in ln["patches"]:
            by_line.setdefault(ln["line"], {}).setdefault(p["name"], {}).update(p["cells"])
    out = []
    for ln in sorted(new_lines, key=lambda ln: ln["line"]):
        if ln["line"] not in newest:
            continue
        pkg = ln["line"].split("/")[0]
        for p in ln["patches"]:
            row = by_line[ln["line"]][p["name"]]
            versions = sorted(row, key=Version)
            for version, cell in sorted(p["cells"].items(), key=lambda kv: Version(kv[0])):
                i = versions.index(version)
                before = row[versions[i - 1]] if i else None
                for what, now in (("stops applying", _conflicts), ("becomes droppable", _droppable)):
                    if now(cell) and not (before is not None and now(before)):
                        out.append(
                            f"{ln['line']} {p['name']} {what} on {pkg} {version} ({_why(cell)}): "
                            f"rebase with `nox -s rebase -- {pkg} {version}` (docs/maintainers.md, Rebasing)"
                        )
                if cell.get("behaviour") == "error" and not (before is not None and before.get("behaviour") == "error"):
                    out.append(
                        f"{ln['line']} {p['name']}: its proof cannot judge {pkg} {version} "
                        f"({cell.get('behaviour_detail')}): fix the proof test, then run the watch again"
                    )
    return out


def _conflicts(cell: dict) -> bool:
    return cell.get("text") == "conflict"


def _droppable(cell: dict) -> bool:
    return (
        cell.get("behaviour") == "passes" or bool(cell.get("drop_when_met")) or cell.get("text") == "already-upstream"
    )


def _why(cell: dict) -> str:
    if cell.get("text") == "conflict":
        return "text: conflict" + (f", {cell['text_detail'][:160]}" if cell.get("text_detail") else "")
    if cell.get("behaviour") == "passes":
        return "its proof passes on the pristine release"
    if cell.get("drop_when_met"):
        return "its Drop-When holds"
    return "upstream already has the change"
