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

import copy
import functools
import json
import re
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
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
from . import bisect as bisection
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
        return self.get_many(env, [proof], lambda proofs: {proofs[0]: judge()})[proof]

    def get_many(
        self, env: Path, proofs: list[str], judge: Callable[[list[str]], dict[str, proofenv.ProofOutcome]]
    ) -> dict[str, proofenv.ProofOutcome]:
        """The verdicts of ``proofs`` in ``env``: those not judged yet are judged together, by one call of
        ``judge(missing)`` (one pytest process for them all). The keys' locks are taken in one order, so two
        callers asking for overlapping sets cannot wait for each other in a circle."""
        keys = sorted({(str(env), proof) for proof in proofs})
        with self._lock:
            locks = [self._key_locks.setdefault(key, threading.Lock()) for key in keys]
        for lock in locks:
            lock.acquire()
        try:
            missing = [proof for key in keys if key not in self._verdicts for proof in key[1:]]
            if missing:
                for proof, outcome in judge(missing).items():
                    self._verdicts[(str(env), proof)] = outcome
            return {proof: self._verdicts[(str(env), proof)] for proof in proofs}
        finally:
            for lock in reversed(locks):
                lock.release()


def companions(overlay: Overlay, line: ReleaseLine) -> list[tuple[str, Artifact]]:
    """The other packages a proof needs, pinned to their newest release line (deterministic until a rebase)."""
    return [(pkg, overlay.lines[pkg][-1].wheel) for pkg in overlay.packages() if pkg != line.package]


def companion_pins(overlay: Overlay, line: ReleaseLine) -> list[str]:
    """The companions as a line of the matrix records them: ``pkg==version``."""
    return [f"{pkg}=={proofenv.wheel_version(a.filename)}" for pkg, a in companions(overlay, line)]


def patch_fields(patch: Patch) -> dict[str, str | None]:
    """What a row of the matrix records of its patch, besides the cells: its name, subject and trailers."""
    return {
        "name": patch.name,
        "subject": patch.subject,
        "drop_when": patch.trailers.get("Drop-When"),
        "upstream_status": patch.trailers.get("Upstream-Status"),
        "proof_test": patch.trailers.get("Proof-Test") or patch.trailers.get("Feature-Test"),
    }


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
    """Releases done / total, elapsed and ETA: one plain line per finished step, which reads the same in a CI log,
    and a live bar on a terminal when rich is installed (the maintenance extra; `patchwheel lint` and `export`
    import this module from nox's own interpreter, which has no rich). ``grow`` raises the total as a bisection
    plans more runs."""

    def __init__(self, label: str, total: int, out=None) -> None:
        self.out, self.total, self.done, self.t0 = out or sys.stderr, total, 0, time.perf_counter()
        self._lock = threading.Lock()
        self.bar: Any = None
        try:
            from rich import progress as rp
            from rich.console import Console
        except ImportError:
            return
        self.console = Console(file=self.out, highlight=False, soft_wrap=True)
        columns = (rp.TextColumn("{task.description}"), rp.BarColumn(), rp.MofNCompleteColumn())
        timing = (rp.TimeElapsedColumn(), rp.TextColumn("ETA"), rp.TimeRemainingColumn())
        self.bar = rp.Progress(
            *columns, *timing, console=self.console, transient=True, disable=not self.console.is_terminal
        )
        self.task = self.bar.add_task(label, total=total)

    def __enter__(self) -> Progress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()

    def grow(self, n: int) -> None:
        with self._lock:
            self.total += n
            if self.bar is not None:
                self.bar.update(self.task, total=self.total)

    def step(self, what: str) -> None:
        with self._lock:
            self.done += 1
            elapsed = time.perf_counter() - self.t0
            eta = elapsed / self.done * max(0, self.total - self.done)
            line = f"[{self.done}/{self.total} {elapsed:6.1f}s, ETA {eta:5.0f}s] {what}"
            if self.bar is None:
                print(line, file=self.out, flush=True)
                return
            self.bar.update(self.task, completed=self.done)
            self.console.print(line, markup=False, highlight=False)


def check_line(
    overlay: Overlay,
    line: ReleaseLine,
    selection: Selection,
    behaviour: Selection | None,
    workers: int = 2,
    judged: Judged | None = None,
    bisect: bool = False,
) -> dict:
    """The matrix of one release line over the selected newer releases. ``behaviour``: the releases to run proofs
    on; with ``bisect``, those are only where the verdicts can change (see maint/bisect.py) and every other cell is
    inferred. ``judged``: the run's verdict cache, shared by its lines (a fresh one when not given)."""
    judged = judged if judged is not None else Judged()
    series = load_series(line)
    releases = [
        (v, a, y)
        for v, a, y in fetch.releases(line.package)
        if Version(v) > Version(line.version) and selection.wants(line.package, v)
    ]
    touched = sorted({p for s in series for p in s.touched})
    old = {p: d for p, d in release_files(line, touched).items() if d is not None}
    artifacts = {v: a for v, a, _ in releases}
    wanted = [v for v, _, _ in releases if behaviour is not None and behaviour.wants(line.package, v)]
    cells: dict[str, dict[str, dict]] = {p.name: {} for p in series}
    rows = [p.name for p in series if not p.is_feature]

    def text(release):
        version, artifact, _ = release
        results = textcheck.classify(series, old, release_files(line, touched, artifact))
        progress.step(f"{line.key} vs {version}: text " + " ".join(TEXT_CODE[r.status] for r in results))
        return version, results

    def judge(version: str) -> dict[str, proofenv.ProofOutcome]:
        wheels = [(line.package, artifacts[version])] + companions(overlay, line)
        try:
            env = proofenv.release_env(fetch.cache_dir(), wheels)
        except PatchwheelError as exc:  # e.g. the release's requirements cannot be met beside the companions
            lost = proofenv.ProofOutcome("error", "no environment: " + " ".join(exc.message.split())[:160])
            progress.step(f"{line.key} vs {version}: {lost.detail}")
            return {p.name: FEATURE if p.is_feature else lost for p in series}
        proofs = sorted({p.test_module for p in series if not p.is_feature})
        run = functools.partial(proofenv.run_proofs, env, overlay.root, first_bug=True)
        verdicts = judged.get_many(env, proofs, run)
        outcomes = {p.name: FEATURE if p.is_feature else verdicts[p.test_module] for p in series}
        progress.step(
            f"{line.key} vs {version}: proofs " + " ".join(BEHAVIOUR_CODE[o.verdict] for o in outcomes.values())
        )
        return outcomes

    def record(version: str, outcomes: dict[str, proofenv.ProofOutcome]) -> None:
        for name, o in outcomes.items():
            cells[name][version].update(behaviour=o.verdict, behaviour_detail=o.detail)

    result: dict[str, Any] = {
        "line": line.key,
        "companions": companion_pins(overlay, line),
        "releases": [{"version": v, "wheel": a.filename, "sha256": a.sha256, "yanked": y} for v, a, y in releases],
        "patches": [{**patch_fields(p), "cells": cells[p.name]} for p in series],
    }
    with Progress(f"{line.key}", len(releases) + (0 if bisect else len(wanted))) as progress:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for version, results in pool.map(text, releases):
                for r in results:
                    cells[r.patch][version] = {"text": r.status, "text_detail": r.detail, "behaviour": None}
            if not bisect:
                for version, outcomes in zip(wanted, pool.map(judge, wanted), strict=True):
                    record(version, outcomes)
            else:
                for p in series:  # a feature is not judged by a proof: every cell is marked so
                    for cell in cells[p.name].values() if p.is_feature else ():
                        cell.update(behaviour=FEATURE.verdict, behaviour_detail=FEATURE.detail)
                if wanted and rows:  # a line of features only has nothing to run
                    plan = bisection.Plan(wanted, rows, _probes(result["patches"], wanted))
                    _run_plan(plan, pool, workers, judge, record, progress)
    if bisect:
        reinfer(result)  # the cells between runs: by the same rule as after a merge
    for p in series:
        for version, cell in cells[p.name].items():
            cell["drop_when_met"] = drop_when_met(p, version)
            cell["flags"] = _flags(cell["drop_when_met"], cell["behaviour"])
    return result


def _is_feature_row(row: dict) -> bool:
    return any(c.get("behaviour") == FEATURE.verdict for c in row["cells"].values())


def _inferred_detail(anchor: dict, left: str, right: str) -> str:
    """An inferred cell's detail: the run on its left (so a test named by Partial-Fix-In is found in it, as in a run
    cell's), and that it was not run."""
    return f"{anchor.get('behaviour_detail') or ''} [inferred, not run: {left} and {right} were run and agree]"


def _probes(rows: list[dict], versions: list[str]) -> set[str]:
    """Where a verdict can change: each release where a patch's Drop-When starts to hold or its text result changes,
    and the release its Upstream-Status names (Fixed-In, Partial-Fix-In), which lint judges by its verdict. The
    first and the last release are added by the plan. ``rows``: the matrix's rows of a line's patches."""
    out: set[str] = set()
    for p in rows:
        if _is_feature_row(p):
            continue
        row = p["cells"]
        present = [v for v in versions if v in row]
        out |= bisection.probes(present, bisection.changes(present, lambda v, p=p: drop_when_met(p, v)))
        out |= bisection.probes(present, bisection.changes(present, lambda v, row=row: row[v]["text"]))
        words = (p.get("upstream_status") or "").split()
        if len(words) >= 2 and words[0] in ("Fixed-In", "Partial-Fix-In") and words[1] in row:
            out.add(words[1])
    return out


def _run_plan(plan: bisection.Plan, pool: ThreadPoolExecutor, workers: int, judge, record, progress) -> None:
    """Run the plan's releases as workers free up, asking it what to run after each result."""
    running: dict[Future, str] = {}
    planned: set[str] = set(plan.probes)
    progress.grow(len(plan.probes) if plan.rows else 0)
    while True:
        for version in plan.next(running.values()):
            if len(running) >= max(1, workers):
                break
            if version not in planned:
                planned.add(version)
                progress.grow(1)
            running[pool.submit(judge, version)] = version
        if not running:
            return
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in done:
            version = running.pop(future)
            outcomes = future.result()
            plan.record(version, {name: o.verdict for name, o in outcomes.items()})
            record(version, outcomes)


def merge(old: dict | None, new_lines: list[dict], torch: str | None = None) -> dict:
    """Update the cells that were run; keep every other cell of the committed matrix. ``torch``: the version the
    new cells were judged with (default: this process's pin)."""
    out: dict[str, Any] = {"schema": 1, "torch": torch or proofenv.torch_version(), "lines": []}
    old_lines = {ln["line"]: ln for ln in copy.deepcopy(old or {}).get("lines", [])}
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
                    old_cell = cells.get(version, {})
                    if old_cell.get("behaviour") and (
                        cell["behaviour"] is None or ("inferred_from" in cell and _was_run(old_cell))
                    ):  # keep what was judged before over nothing, and a run over an inference
                        cell.pop("inferred_from", None)
                        keys = ("behaviour", "behaviour_detail", "inferred_from")
                        cell.update({k: old_cell[k] for k in keys if k in old_cell})
                        cell["flags"] = _flags(cell["drop_when_met"], cell["behaviour"])
                    cells[version] = cell
                p["cells"] = {v: cells[v] for v in sorted(cells, key=Version)}
        out["lines"].append(new)
    for line in out["lines"] + list(old_lines.values()):
        reinfer(line)
        refresh_flags(line)
    out["lines"] += old_lines.values()
    out["lines"].sort(key=lambda ln: (ln["line"].split("/")[0], Version(ln["line"].split("/")[1])))
    return out


def reinfer(line: dict) -> None:
    """Re-derive every cell that was not run from the run cells beside it, once cells of several runs are merged,
    by the bisection's rule: a cell between two run releases that agree takes their verdict (inferred), unless a
    release where a verdict can change (a probe: a text or Drop-When change, a Fixed-In release) lies between
    them; any other cell not run is left unjudged (·) until a run bisects there. Features keep their mark."""
    versions = [r["version"] for r in line["releases"]]
    probes = _probes(line["patches"], versions)
    for p in line["patches"]:
        cells = p["cells"]
        if _is_feature_row(p):
            continue
        present = [v for v in versions if v in cells]
        run = {v for v in present if _was_run(cells[v])}
        left: str | None = None
        gap: list[str] = []
        for v in present:
            if v not in run:
                gap.append(v)
                continue
            for g in gap:
                _infer(cells, g, left, v, probes, gap)
            left, gap = v, []
        for g in gap:  # after the last run release: nothing on the right
            _infer(cells, g, None, None, probes, gap)


def _infer(cells: dict, version: str, left: str | None, right: str | None, probes: set[str], gap: list[str]) -> None:
    cell = cells[version]
    cell.pop("inferred_from", None)
    agree = left is not None and right is not None and cells[left]["behaviour"] == cells[right]["behaviour"]
    if agree and not probes.intersection(gap):
        assert left is not None and right is not None
        cell.update(
            behaviour=cells[left]["behaviour"],
            behaviour_detail=_inferred_detail(cells[left], left, right),
            inferred_from=[left, right],
        )
    else:
        cell["behaviour"] = None
        cell.pop("behaviour_detail", None)


def _was_run(cell: dict) -> bool:
    return cell.get("behaviour") not in (None, "n/a") and "inferred_from" not in cell


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


def transition_releases(matrix: dict) -> list[str]:
    """The smallest set of releases (``pkg==version``) on which a staleness check covers every Drop-When
    transition of the committed matrix: the release where a patch's Drop-When starts (or stops) to hold, and, for
    a patch dropped by its proof (``proof-passes-upstream``), the release where its verdict changes to or from
    passing. That release is where the decision to drop the patch is taken; the release before it was run when the
    matrix was written (a transition is confirmed on both sides). Releases shared by lines or patches count once."""
    out: set[tuple[str, str]] = set()
    for line in matrix.get("lines", []):
        pkg = line["line"].split("/")[0]
        versions = [r["version"] for r in line["releases"]]
        for p in line["patches"]:
            cells = p["cells"]

            def drop(v: str, p: dict = p) -> object:
                met = drop_when_met(p, v)
                if met is None and p.get("drop_when") == DROP_BY_BEHAVIOUR:
                    return p["cells"].get(v, {}).get("behaviour") == "passes"
                return met

            if p.get("drop_when") == DROP_BY_BEHAVIOUR:  # judged by the verdicts: unjudged cells say nothing
                present = [v for v in versions if cells.get(v, {}).get("behaviour") is not None]
            else:
                present = [v for v in versions if v in cells]
            for a, b in zip(present, present[1:], strict=False):
                if drop(a) != drop(b):
                    out.add((pkg, b))
    return [f"{pkg}=={v}" for pkg, v in sorted(out, key=lambda pv: (pv[0], Version(pv[1])))]


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
                    if key == "behaviour" and "inferred_from" in cell:
                        continue  # only what was run is compared
                    if cell[key] is not None and prev.get(key) != cell[key]:
                        says = "infers" if key == "behaviour" and "inferred_from" in prev else "says"
                        out.append(
                            f"{fresh['line']} {p['name']} vs {version}: {key} is {cell[key]}, "
                            f"the committed matrix {says} {prev.get(key)}"
                        )
    return out


#: Markdown punctuation that could start emphasis, a link, a code span or a table column in STATUS.md's running
#: text (a backslash escapes each in CommonMark and GitHub's tables); ``&``, ``<``, ``>`` become HTML entities.
_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]|~"} | {"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def md_text(text: object) -> str:
    """``text`` as one line of literal Markdown: a proof's detail is upstream's own message (``<class ...>``, a
    ``|``, backticks, newlines), and a fragment of the watch was written by a job that ran upstream's code."""
    return " ".join(str(text).splitlines()).translate(_MD_SPECIAL)


def md_code(text: object) -> str:
    """``text`` as one Markdown code span: fenced by more backticks than it holds in a row (CommonMark)."""
    one_line = " ".join(str(text).splitlines())
    fence = "`" * (1 + max((len(run) for run in re.findall(r"`+", one_line)), default=0))
    pad = " " if one_line.startswith("`") or one_line.endswith("`") else ""
    return f"{fence}{pad}{one_line}{pad}{fence}"


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
        "PR, not by a proof); **·** not judged.  ",
        "**(✓)**, **(✗)**, **(!)** inferred, not run: the nearest releases on both sides were run and agree. Proofs "
        "run where a verdict can change (the first and last release, each release where a Drop-When starts to hold "
        "or a text result changes) and bisect between run releases that disagree, so both sides of every change of "
        "verdict were run.  ",
        "**⚠** the Drop-When condition and the behaviour disagree (see the notes under the table). "
        "*(y)* marks a yanked release.",
        "",
    ]
    for line in matrix["lines"]:
        out += [
            f"## {md_text(line['line'])}",
            "",
            f"Proofs ran with {md_text(', '.join(line['companions']))} and torch {md_text(matrix.get('torch'))}.",
            "",
        ]
        versions = [md_text(r["version"]) + (" *(y)*" if r["yanked"] else "") for r in line["releases"]]
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
                    verdict = BEHAVIOUR_CODE[cell["behaviour"]]
                    mark = TEXT_CODE[cell["text"]] + " " + (f"({verdict})" if "inferred_from" in cell else verdict)
                    if cell["flags"]:
                        mark += " ⚠"
                        notes.append(
                            f"- {md_text(p['name'])} vs {md_text(v)}: {md_text(cell['flags'][0])}"
                            + (f" ({md_text(cell['behaviour_detail'])})" if cell.get("behaviour_detail") else "")
                        )
                    row.append(mark)
                out.append(f"| {md_text(p['name'].split('.patch')[0])} | " + " | ".join(row) + " |")
            out.append("")
        drop = [
            f"- {md_text(p['name'])}: Drop-When {md_code(p['drop_when'])}; Upstream-Status "
            f"{md_code(p.get('upstream_status'))}; test {md_code(p['proof_test'])}"
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
    bisect: bool = False,
) -> int:
    json_path = overlay.root / "patches" / "STATUS.json"
    check_selections(overlay, selection, behaviour)
    if rerender_only:
        write_matrix(json_path, rerender(overlay))
        return 0
    committed = load_matrix(json_path)
    judged = Judged()
    lines = [
        check_line(overlay, line, selection, behaviour, workers, judged, bisect=bisect and not check)
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
    write_matrix(json_path, merge(committed, lines))
    return 0


def load_matrix(json_path: Path) -> dict | None:
    """The committed matrix (patches/STATUS.json), or None where there is none yet."""
    return json.loads(json_path.read_text()) if json_path.is_file() else None


def write_matrix(json_path: Path, matrix: dict, log=print) -> None:
    tmp_json, tmp_md = json_path.with_suffix(".json.tmp"), json_path.with_suffix(".md.tmp")
    tmp_json.write_text(json.dumps(matrix, indent=1, ensure_ascii=False) + "\n")
    tmp_md.write_text(render(matrix))
    tmp_json.replace(json_path)
    tmp_md.replace(json_path.with_suffix(".md"))
    log(f"wrote {json_path} and {json_path.with_suffix('.md')}")
