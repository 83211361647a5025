"""The upstream check: every patch of every release line against every newer upstream release.

Per (patch, release) cell: the **text** result (clean / offset / 3-way / already-upstream / conflict, see
textcheck) and the **behaviour** result: the patch's proof test run against the pristine release (``passes``: the
bug is gone upstream, possibly fixed differently; ``fails``: the patch is still needed, whatever the text says;
``error``: could not judge). ``Drop-When`` is evaluated for the release, and contradictions are flagged: the
condition met while the proof still fails, or the proof passing before the condition is met.

Results go to patches/STATUS.json (verdicts and details, no timestamps) and patches/STATUS.md (the matrix).
A run over some releases updates those cells and keeps the rest; ``--check`` compares instead of writing.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .. import fetch
from ..config import Artifact, Overlay, ReleaseLine
from ..errors import PatchwheelError
from ..patches import DROP_BY_BEHAVIOUR, DROP_BY_PR, Patch, load_series
from . import proofenv, textcheck
from .workrepo import release_files

TEXT_CODE = {"clean": "C", "offset": "O", "3-way": "3", "already-upstream": "U", "conflict": "X"}
BEHAVIOUR_CODE = {"passes": "✓", "fails": "✗", "error": "!", "n/a": "–", None: "·"}
FEATURE = proofenv.ProofOutcome("n/a", "a feature: dropped by release or PR, not judged by a proof")


@dataclass(frozen=True)
class Selection:
    """Which releases to look at, per package: a specifier (``>=4.54,<4.58``) or explicit versions."""

    specs: dict[str, list[SpecifierSet]]  # canonical name -> specifiers; wanted when any of them admits a release
    items: dict[str, str] = field(default_factory=dict)  # canonical name -> the first item naming it, as written

    @classmethod
    def parse(cls, items: list[str]) -> Selection:
        specs: dict[str, list[SpecifierSet]] = {}
        written: dict[str, str] = {}
        for item in items:
            try:
                req = Requirement(item)
            except Exception as exc:  # noqa: BLE001 - packaging raises several types
                raise PatchwheelError(
                    f"cannot read release selection {item!r}",
                    "write e.g. transformers==4.53.3 or 'transformers>=4.54,<4.58'",
                ) from exc
            name = canonicalize_name(req.name)  # Transformers, transformers and TRANSFORMERS select one package
            specs.setdefault(name, []).append(req.specifier)
            written.setdefault(name, item)
        return cls(specs, written)

    def wants(self, package: str, version: str, default: bool = True) -> bool:
        if package not in self.specs:
            return default if not self.specs else False
        return any(Version(version) in spec for spec in self.specs[package])


def check_selections(overlay: Overlay, selection: Selection, behaviour: Selection | None) -> None:
    """Refuse a selection that would silently select nothing: a package the overlay does not have (a typo, or a
    bare version, which reads as a package name), or a --behaviour package the release selection leaves out."""
    known = overlay.packages()
    for what, sel in (("the release selection", selection), ("--behaviour", behaviour)):
        for name, item in (sel.items if sel else {}).items():
            written = Requirement(item).name
            if name in known:
                continue
            if _is_version(written):
                raise PatchwheelError(
                    f"{written!r} in {what} names no package",
                    f"name the package too, e.g. {' or '.join(f'{k}=={written}' for k in known)}",
                )
            newest = overlay.lines[known[0]][-1].version
            raise PatchwheelError(
                f"unknown package {written!r} in {what}",
                f"known packages: {', '.join(known)} (each has overlay/<pkg>/pins.toml); e.g. "
                f"'{known[0]}>{newest}' selects every release newer than its newest line",
            )
    if behaviour is not None and selection.specs:
        if left_out := sorted(set(behaviour.specs) - set(selection.specs)):
            raise PatchwheelError(
                f"--behaviour names {', '.join(left_out)}, which the release selection leaves out "
                f"({', '.join(selection.items.values())}): no proof would run for it",
                "add the package to the release selection, or leave it out of --behaviour",
            )


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


class Judged:
    """The proof verdicts of one run, keyed by (environment, proof module): the same proof on the same release is
    judged once for every line that asks, even when two workers ask at once. One per run, so that a second run
    in the same process judges afresh (the proof file or the environment may have changed in between)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._verdicts: dict[tuple[str, str], proofenv.ProofOutcome] = {}
        self._key_locks: dict[tuple[str, str], threading.Lock] = {}

    def get(self, env: Path, proof: str, judge: Callable[[], proofenv.ProofOutcome]) -> proofenv.ProofOutcome:
        """The verdict for ``(env, proof)``, computed with ``judge()`` by the first caller; later callers wait for
        it. Different keys are judged in parallel: only callers of one key wait for each other."""
        key = (str(env), proof)
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            if key not in self._verdicts:
                self._verdicts[key] = judge()
            return self._verdicts[key]


def companions(overlay: Overlay, line: ReleaseLine) -> list[tuple[str, Artifact]]:
    """The other packages a proof needs, pinned to their newest release line (deterministic until a rebase)."""
    return [(pkg, overlay.lines[pkg][-1].wheel) for pkg in overlay.packages() if pkg != line.package]


def drop_when_met(patch: Patch | dict, version: str) -> bool | None:
    """Whether the patch's release condition holds for ``version``; None when it is not a release condition."""
    cond = patch.trailers.get("Drop-When", "") if isinstance(patch, Patch) else (patch.get("drop_when") or "")
    if cond == DROP_BY_BEHAVIOUR or cond.startswith(DROP_BY_PR + " ") or not cond:
        return None
    return Version(version) in Requirement(cond).specifier


def _flags(met: bool | None, behaviour: str | None) -> list[str]:
    if met is True and behaviour == "fails":
        return ["Drop-When is met but the proof still fails: upstream's fix differs or is partial"]
    if met is False and behaviour == "passes":
        return ["the proof passes before Drop-When: upstream fixed it earlier, or the proof is too weak here"]
    return []


class Progress:
    """One line per finished step, with a count; plain text so it reads the same in CI logs."""

    def __init__(self, total: int, out=sys.stderr) -> None:
        self.total, self.done, self.out, self.t0 = total, 0, out, time.perf_counter()

    def step(self, what: str) -> None:
        self.done += 1
        print(f"[{self.done}/{self.total} {time.perf_counter() - self.t0:6.1f}s] {what}", file=self.out, flush=True)


def check_line(
    overlay: Overlay,
    line: ReleaseLine,
    selection: Selection,
    behaviour: Selection | None,
    workers: int = 2,
    judged: Judged | None = None,
) -> dict:
    """The matrix of one release line over the selected newer releases. ``judged``: the run's verdict cache, shared
    by its lines (a fresh one when not given)."""
    judged = judged if judged is not None else Judged()
    series = load_series(line)
    releases = [
        (v, a, y)
        for v, a, y in fetch.releases(line.package)
        if Version(v) > Version(line.version) and selection.wants(line.package, v)
    ]
    touched = sorted({p for s in series for p in s.touched})
    old = {p: d for p, d in release_files(line, touched).items() if d is not None}
    run_behaviour = [(v, a) for v, a, _ in releases if behaviour is not None and behaviour.wants(line.package, v)]
    progress = Progress(len(releases) + len(run_behaviour))
    cells: dict[str, dict[str, dict]] = {p.name: {} for p in series}

    def text(release):
        version, artifact, _ = release
        results = textcheck.classify(series, old, release_files(line, touched, artifact))
        progress.step(f"{line.key} vs {version}: text " + " ".join(TEXT_CODE[r.status] for r in results))
        return version, results

    def judge(release):
        version, artifact = release
        env = proofenv.release_env(fetch.cache_dir(), [(line.package, artifact)] + companions(overlay, line))
        outcomes = {}
        for p in series:
            if p.is_feature:
                outcomes[p.name] = FEATURE
                continue
            proof = p.test_module
            outcomes[p.name] = judged.get(env, proof, functools.partial(proofenv.run_proof, env, overlay.root, proof))
        progress.step(
            f"{line.key} vs {version}: proofs " + " ".join(BEHAVIOUR_CODE[o.verdict] for o in outcomes.values())
        )
        return version, outcomes

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for version, results in pool.map(text, releases):
            for r in results:
                cells[r.patch][version] = {"text": r.status, "text_detail": r.detail, "behaviour": None}
        for version, outcomes in pool.map(judge, run_behaviour):
            for name, o in outcomes.items():
                cells[name][version].update(behaviour=o.verdict, behaviour_detail=o.detail)
    for p in series:
        for version, cell in cells[p.name].items():
            cell["drop_when_met"] = drop_when_met(p, version)
            cell["flags"] = _flags(cell["drop_when_met"], cell["behaviour"])
    return {
        "line": line.key,
        "companions": [f"{pkg}=={proofenv.wheel_version(a.filename)}" for pkg, a in companions(overlay, line)],
        "releases": [{"version": v, "wheel": a.filename, "sha256": a.sha256, "yanked": y} for v, a, y in releases],
        "patches": [
            {
                "name": p.name,
                "subject": p.subject,
                "drop_when": p.trailers.get("Drop-When"),
                "upstream_status": p.trailers.get("Upstream-Status"),
                "proof_test": p.trailers.get("Proof-Test") or p.trailers.get("Feature-Test"),
                "cells": cells[p.name],
            }
            for p in series
        ],
    }


def merge(old: dict | None, new_lines: list[dict]) -> dict:
    """Update the cells that were run; keep every other cell of the committed matrix."""
    out: dict[str, Any] = {"schema": 1, "torch": proofenv.torch_version(), "lines": []}
    old_lines = {ln["line"]: ln for ln in (old or {}).get("lines", [])}
    for new in new_lines:
        prev = old_lines.pop(new["line"], None)
        if prev:
            releases = {r["version"]: r for r in prev["releases"]}
            releases.update({r["version"]: r for r in new["releases"]})
            new["releases"] = [releases[v] for v in sorted(releases, key=Version)]
            prev_patches = {p["name"]: p for p in prev["patches"]}
            for p in new["patches"]:
                cells = dict(prev_patches.get(p["name"], {}).get("cells", {}))
                for version, cell in p["cells"].items():
                    if cell["behaviour"] is None and version in cells and cells[version].get("behaviour"):
                        kept = {k: cells[version][k] for k in ("behaviour", "behaviour_detail")}
                        cell.update(kept, flags=_flags(cell["drop_when_met"], kept["behaviour"]))
                    cells[version] = cell
                p["cells"] = {v: cells[v] for v in sorted(cells, key=Version)}
        out["lines"].append(new)
    for line in out["lines"] + list(old_lines.values()):
        refresh_flags(line)
    out["lines"] += old_lines.values()
    out["lines"].sort(key=lambda ln: (ln["line"].split("/")[0], Version(ln["line"].split("/")[1])))
    return out


def refresh_flags(line: dict) -> None:
    """Recompute Drop-When and its flags for every cell from the trailers recorded with each patch."""
    for p in line["patches"]:
        for version, cell in p["cells"].items():
            cell["drop_when_met"] = drop_when_met(p, version)
            cell["flags"] = _flags(cell["drop_when_met"], cell.get("behaviour"))


def matrix_problems(line: ReleaseLine, series: list[Patch], matrix: dict) -> list[str]:
    """What the committed matrix says against the patches' trailers: a ⚠ cell no trailer explains, a Fixed-In
    release where the proof still fails, a matrix written with other trailers than the series has now."""
    out = []
    rows = {p["name"]: p for ln in matrix.get("lines", []) if ln["line"] == line.key for p in ln["patches"]}
    for patch in series:
        row = rows.get(patch.name)
        if row is None:
            continue
        status = patch.trailers.get("Upstream-Status", "").split()
        if (row.get("drop_when"), row.get("upstream_status")) != (
            patch.trailers.get("Drop-When"),
            patch.trailers.get("Upstream-Status"),
        ):
            out.append(
                f"{line.key} {patch.name}: patches/STATUS.* was written with other trailers "
                "(Drop-When, Upstream-Status): run `nox -s upstream -- --rerender` and commit it"
            )
        for version, cell in row["cells"].items():
            flags = _flags(drop_when_met(patch, version), cell.get("behaviour"))
            detail = cell.get("behaviour_detail") or ""
            if status and status[0] == "Fixed-In" and version == status[1] and cell.get("behaviour") == "fails":
                out.append(
                    f"{line.key} {patch.name}: Upstream-Status says Fixed-In {version}, but the proof still "
                    f"fails there ({detail}): write 'Partial-Fix-In {version} <the failing test>'"
                )
            if not flags:
                continue
            explained = (
                len(status) == 3
                and status[0] == "Partial-Fix-In"
                and Version(status[1]) <= Version(version)
                and detail.startswith(status[2].split("::")[-1] + ":")
            )
            if not explained:
                out.append(
                    f"{line.key} {patch.name} vs {version}: ⚠ {flags[0]} ({detail}), and no trailer explains "
                    "it: correct Drop-When, or record 'Upstream-Status: Partial-Fix-In <version> <test>'"
                )
    return out


def compare(committed: dict, fresh_lines: list[dict]) -> list[str]:
    """Verdicts (text, behaviour where run) of a fresh run that differ from the committed matrix."""
    lines = {ln["line"]: ln for ln in committed.get("lines", [])}
    out = []
    for fresh in fresh_lines:
        old = lines.get(fresh["line"])
        if old is None:
            out.append(f"{fresh['line']}: not in the committed matrix")
            continue
        old_patches = {p["name"]: p for p in old["patches"]}
        for p in fresh["patches"]:
            for version, cell in p["cells"].items():
                prev = old_patches.get(p["name"], {}).get("cells", {}).get(version)
                if prev is None:
                    out.append(f"{fresh['line']} {p['name']} vs {version}: missing from the committed matrix")
                    continue
                for key in ("text", "behaviour"):
                    if cell[key] is not None and prev.get(key) != cell[key]:
                        out.append(
                            f"{fresh['line']} {p['name']} vs {version}: {key} is {cell[key]}, "
                            f"the committed matrix says {prev.get(key)}"
                        )
    return out


def render(matrix: dict, per_table: int = 10) -> str:
    out = [
        "# Patch status against newer upstream releases",
        "",
        "Written by `nox -s upstream`; do not edit. Each cell: text result, then behaviour.",
        "",
        "Text: **C** clean, **O** offset, **3** needs a 3-way merge, **U** already upstream (reverse-applies or "
        "empty after merge), **X** conflict.  ",
        "Behaviour (the patch's proof test on the pristine release): **✓** passes, the bug is gone upstream; "
        "**✗** fails, the patch is still needed; **!** could not judge; **–** a feature (dropped by release or "
        "PR, not by a proof); **·** not run.  ",
        "**⚠** the Drop-When condition and the behaviour disagree (see the notes under the table). "
        "*(y)* marks a yanked release.",
        "",
    ]
    for line in matrix["lines"]:
        out += [
            f"## {line['line']}",
            "",
            f"Proofs ran with {', '.join(line['companions'])} and torch {matrix.get('torch')}.",
            "",
        ]
        versions = [r["version"] + (" *(y)*" if r["yanked"] else "") for r in line["releases"]]
        keys = [r["version"] for r in line["releases"]]
        notes = []
        for start in range(0, len(keys), per_table):
            cols, heads = keys[start : start + per_table], versions[start : start + per_table]
            out.append("| patch | " + " | ".join(heads) + " |")
            out.append("|---|" + "---|" * len(cols))
            for p in line["patches"]:
                row = []
                for v in cols:
                    cell = p["cells"].get(v)
                    if cell is None:
                        row.append("")
                        continue
                    mark = TEXT_CODE[cell["text"]] + " " + BEHAVIOUR_CODE[cell["behaviour"]]
                    if cell["flags"]:
                        mark += " ⚠"
                        notes.append(
                            f"- {p['name']} vs {v}: {cell['flags'][0]}"
                            + (f" ({cell.get('behaviour_detail')})" if cell.get("behaviour_detail") else "")
                        )
                    row.append(mark)
                out.append(f"| {p['name'].split('.patch')[0]} | " + " | ".join(row) + " |")
            out.append("")
        drop = [
            f"- {p['name']}: Drop-When `{p['drop_when']}`; Upstream-Status `{p.get('upstream_status')}`; "
            f"test `{p['proof_test']}`"
            for p in line["patches"]
        ]
        out += drop + [""] + (["Notes:", ""] + notes + [""] if notes else [])
    return "\n".join(out).rstrip() + "\n"


def rerender(overlay: Overlay) -> dict:
    """The committed matrix with each patch's trailers and flags taken from the series as it is now (no runs)."""
    json_path = overlay.root / "patches" / "STATUS.json"
    if not json_path.is_file():
        raise PatchwheelError(f"{json_path} does not exist", "run `nox -s upstream` and commit the result")
    matrix = json.loads(json_path.read_text())
    for line in matrix["lines"]:
        pkg, version = line["line"].split("/")
        try:
            series = {p.name: p for p in load_series(overlay.line(pkg, version))}
        except PatchwheelError:
            continue
        for row in line["patches"]:
            if (p := series.get(row["name"])) is not None:
                row.update(
                    drop_when=p.trailers.get("Drop-When"),
                    upstream_status=p.trailers.get("Upstream-Status"),
                    proof_test=p.trailers.get("Proof-Test") or p.trailers.get("Feature-Test"),
                )
        refresh_flags(line)
    return matrix


def run(
    overlay: Overlay,
    selection: Selection,
    behaviour: Selection | None,
    *,
    check: bool,
    workers: int,
    rerender_only: bool = False,
) -> int:
    json_path = overlay.root / "patches" / "STATUS.json"
    check_selections(overlay, selection, behaviour)
    if rerender_only:
        _write(json_path, rerender(overlay))
        return 0
    committed = json.loads(json_path.read_text()) if json_path.is_file() else None
    judged = Judged()
    lines = [
        check_line(overlay, line, selection, behaviour, workers, judged)
        for line in overlay.all_lines()
        if not selection.specs or line.package in selection.specs
    ]
    if check:
        if committed is None:
            raise PatchwheelError(f"{json_path} does not exist", "run `nox -s upstream` and commit the result")
        diffs = compare(committed, lines)
        for d in diffs:
            print(f"stale: {d}")
        if diffs:
            print("the committed matrix is stale: run `nox -s upstream` and commit patches/STATUS.*")
            return 1
        print(f"the committed matrix agrees with a fresh run on {sum(len(ln['releases']) for ln in lines)} release(s)")
        return 0
    _write(json_path, merge(committed, lines))
    return 0


def _write(json_path: Path, matrix: dict) -> None:
    tmp_json, tmp_md = json_path.with_suffix(".json.tmp"), json_path.with_suffix(".md.tmp")
    tmp_json.write_text(json.dumps(matrix, indent=1, ensure_ascii=False) + "\n")
    tmp_md.write_text(render(matrix))
    tmp_json.replace(json_path)
    tmp_md.replace(json_path.with_suffix(".md"))
    print(f"wrote {json_path} and {json_path.with_suffix('.md')}")
