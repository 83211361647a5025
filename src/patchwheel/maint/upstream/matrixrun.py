"""The matrix check's runs: every patch of a release line against newer upstream releases, by text and by
behaviour, into the line's part of the matrix (:class:`patchwheel.matrix.table.LineMatrix`).

Text: each selected release (textcheck, from the cached wheels). Behaviour: the patches' proofs on the pristine
release, in cached environments (proofenv), either on the releases asked for or, with ``bisect``, only where a
verdict can change, bisecting between run releases that disagree (maint/bisection.py); the cells between are
inferred by the matrix's own rule. A proof run of one release judges every patch of the line at once, and a run's
verdicts are shared by the lines that ask for the same proof on the same release (:class:`Judged`).

What a run means for the committed matrix (merge, compare, render) is the matrix model's business
(:mod:`patchwheel.matrix.table`); which releases a run selects is :mod:`selection`'s.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from packaging.version import Version

from ...config import Artifact, Project, ReleaseLine
from ...errors import EnvironmentFailed, FetchError
from ...matrix import checks as matrix_checks
from ...matrix.table import (
    BEHAVIOUR_CODE,
    FEATURE,
    FEATURE_DETAIL,
    TEXT_CODE,
    Cell,
    LineMatrix,
    Matrix,
    Release,
    Row,
    series_lookup,
)
from ...reporter import CONSOLE, Progress, Reporter
from ...series import checked_series, test_refs
from ...wheels import fetch
from ..proving import proofenv
from ..workrepo import release_files, touched
from . import bisection, textcheck
from .selection import Selection, check_selections

FEATURE_OUTCOME = proofenv.ProofOutcome(FEATURE, FEATURE_DETAIL)


class Judged:
    """The proof verdicts of one run, keyed by (environment, proof module): the same proof on the same release is
    judged once for every line that asks, even when two workers ask at once. One per run, so that a second run
    in the same process judges afresh (the proof file or the environment may have changed in between)."""

    def __init__(self, keep: bool = False) -> None:
        self._lock = threading.Lock()
        self._verdicts: dict[tuple[str, str], proofenv.ProofOutcome] = {}
        self._key_locks: dict[tuple[str, str], threading.Lock] = {}
        #: With ``keep``: every case of the runs, per environment, each with the inputs it was observed on, for a
        #: later run there to judge instead of running it again (follow's and derive's proofs on the pristine pins).
        self.seen: dict[str, list[dict]] | None = {} if keep else None

    def runner(self, env, root) -> Callable[[list[str]], dict[str, proofenv.ProofOutcome]]:
        """The proof run of this cache's runs in ``env`` (verdicts as ``--proof-first-bug`` gives them)."""
        sink = None if self.seen is None else self.seen.setdefault(str(env), [])
        return functools.partial(proofenv.run_proofs, env, root, first_bug=True, sink=sink)

    def get(self, env, proof: str, judge: Callable[[], proofenv.ProofOutcome]) -> proofenv.ProofOutcome:
        """The verdict for ``(env, proof)``, computed with ``judge()`` by the first caller; later callers wait for
        it. Different keys are judged in parallel: only callers of one key wait for each other."""
        return self.get_many(env, [proof], lambda proofs: {proofs[0]: judge()})[proof]

    def get_many(
        self, env, proofs: list[str], judge: Callable[[list[str]], dict[str, proofenv.ProofOutcome]]
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


def companions(project: Project, line: ReleaseLine) -> list[tuple[str, Artifact]]:
    """The other packages a proof needs, pinned to their newest release line (deterministic until a rebase)."""
    return [(pkg, project.lines[pkg][-1].wheel) for pkg in project.packages() if pkg != line.package]


def companion_pins(project: Project, line: ReleaseLine) -> list[str]:
    """The companions as a line of the matrix records them: ``pkg==version``."""
    return [f"{pkg}=={proofenv.wheel_version(a.filename)}" for pkg, a in companions(project, line)]


def check_line(
    project: Project,
    line: ReleaseLine,
    selection: Selection,
    behaviour: Selection | None,
    workers: int = 2,
    judged: Judged | None = None,
    bisect: bool = False,
    report: Reporter = CONSOLE,
    older: bool = False,
    known: Callable[[str, str], tuple[proofenv.ProofOutcome, str] | None] | None = None,
) -> LineMatrix:
    """The matrix of one release line over the selected newer releases. ``behaviour``: the releases to run proofs
    on; with ``bisect``, those are only where the verdicts can change (see maint/bisection.py) and every other cell
    is inferred. ``judged``: the run's verdict cache, shared by its lines (a fresh one when not given). ``older``:
    selected releases older than the line count too (what `derive` asks of a line it carries backwards; the
    committed matrix has only newer ones). ``known(proof module, release)``: a verdict observed already, and the
    line whose run observed it (the same proof on the same release, :func:`committed_verdicts`); a release whose
    every proof is known is not run, and needs no environment: its cells say whose run it was."""
    judged = judged if judged is not None else Judged()
    series = checked_series(line)
    releases = [
        (v, a, y)
        for v, a, y in fetch.releases(line.package)
        if (Version(v) > Version(line.version) or (older and Version(v) < Version(line.version)))
        and selection.wants(line.package, v)
    ]
    paths = touched(series)
    old = {p: d for p, d in release_files(line, paths).items() if d is not None}
    artifacts = {v: a for v, a, _ in releases}
    wanted = [v for v, _, _ in releases if behaviour is not None and behaviour.wants(line.package, v)]
    result = LineMatrix(
        line.key,
        companion_pins(project, line),
        [Release(v, a.filename, a.sha256, y) for v, a, y in releases],
        [Row.of(p) for p in series],
    )
    rows = {row.name: row for row in result.patches}

    def text(release) -> tuple[str, list[textcheck.TextResult]]:
        version, artifact, _ = release
        results = textcheck.classify(series, old, release_files(line, paths, artifact))
        progress.step(f"{line.key} vs {version}: text " + " ".join(TEXT_CODE[r.status] for r in results))
        return version, results

    def judge(version: str) -> dict[str, proofenv.ProofOutcome]:
        seen = {p.test_module: known(p.test_module, version) for p in series if known and not p.is_feature}
        ran = {module: o for module, o in seen.items() if o is not None}
        if ran and len(ran) == len(seen):
            outcomes = {p.name: FEATURE_OUTCOME if p.is_feature else ran[p.test_module][0] for p in series}
            origins[version] = {p.name: ran[p.test_module][1] for p in series if not p.is_feature}
            codes = " ".join(BEHAVIOUR_CODE[o.verdict] for o in outcomes.values())
            progress.step(f"{line.key} vs {version}: proofs {codes} (the matrix's runs of them)")
            return outcomes
        wheels = [(line.package, artifacts[version])] + companions(project, line)
        try:
            env = proofenv.release_env(project.cache, wheels)
        except (EnvironmentFailed, FetchError) as exc:  # e.g. its requirements cannot be met beside the companions
            # the installer's own words (its output's end), not the command that ran it
            why = " ".join(exc.message.partition(":\n")[2].split() or exc.message.split())
            lost = proofenv.ProofOutcome(
                "error", matrix_checks.NO_ENVIRONMENT + (why[:300] + " …" if len(why) > 300 else why)
            )
            progress.step(f"{line.key} vs {version}: {lost.detail}")
            return {p.name: FEATURE_OUTCOME if p.is_feature else lost for p in series}
        proofs = sorted({p.test_module for p in series if not p.is_feature})
        verdicts = judged.get_many(env, proofs, judged.runner(env, project.root))
        outcomes = {p.name: FEATURE_OUTCOME if p.is_feature else verdicts[p.test_module] for p in series}
        codes = " ".join(BEHAVIOUR_CODE[o.verdict] for o in outcomes.values())
        progress.step(f"{line.key} vs {version}: proofs {codes}")
        return outcomes

    origins: dict[str, dict[str, str]] = {}  # release -> patch -> the line whose committed run judged it

    def record(version: str, outcomes: dict[str, proofenv.ProofOutcome]) -> None:
        for name, o in outcomes.items():
            cell = rows[name].cells[version]
            cell.judged(o.verdict, o.detail, proofenv.torch_version())
            cell.observed_for = origins.get(version, {}).get(name)

    with report.progress(line.key, len(releases) + (0 if bisect else len(wanted))) as progress:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for version, results in pool.map(text, releases):
                for r in results:
                    rows[r.patch].cells[version] = Cell(r.status, r.detail)
            if not bisect:
                for version, outcomes in zip(wanted, pool.map(judge, wanted), strict=True):
                    record(version, outcomes)
            else:
                for p in series:  # a feature is not judged by a proof: every cell is marked so
                    for cell in rows[p.name].cells.values() if p.is_feature else ():
                        cell.judged(FEATURE, FEATURE_DETAIL)
                judged_rows = [p.name for p in series if not p.is_feature]
                if wanted and judged_rows:  # a line of features only has nothing to run
                    plan = bisection.Plan(wanted, judged_rows, result.probes(wanted))
                    _run_plan(plan, pool, workers, judge, record, progress)
    if bisect:
        result.reinfer()  # the cells between runs: by the same rule as after a merge
    result.refresh_flags()
    return result


def committed_verdicts(
    project: Project, line: ReleaseLine
) -> Callable[[str, str], tuple[proofenv.ProofOutcome, str] | None]:
    """The verdicts the committed matrix's runs observed (not inferred, not themselves taken from another line's run)
    with this run's torch, for the lines of ``line``'s package judged beside the same companions: (proof module,
    release) -> the outcome and the line whose run it was. A proof's verdict on a pristine release is the release's,
    whichever line asks (the matrix check runs each module once for every line): a line derive makes between two
    others needs no environment for a release those lines' runs judged already."""
    matrix = Matrix.load(project.matrix_json)
    torch = proofenv.torch_version()
    pins = companion_pins(project, line)
    found: dict[tuple[str, str], tuple[proofenv.ProofOutcome, str]] = {}
    for mline in matrix.lines if matrix else []:
        if mline.package != line.package or mline.companions != pins or mline.line == line.key:
            continue
        for row in mline.patches:
            refs = test_refs(row.proof_test) if row.proof_test and not row.is_feature else []
            for version, cell in row.cells.items() if refs else ():
                own = cell.was_run and cell.observed_for is None and cell.torch == torch
                if own and cell.behaviour in ("fails", "passes"):
                    detail = f"{cell.behaviour_detail or ''} [the run for the line {mline.line}]".lstrip()
                    outcome = proofenv.ProofOutcome(cell.behaviour, detail)
                    found.setdefault((refs[0][0], version), (outcome, mline.line))
    return lambda module, version: found.get((module, version))


def _run_plan(plan: bisection.Plan, pool: ThreadPoolExecutor, workers: int, judge, record, progress: Progress) -> None:
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


def check_lines(
    project: Project,
    selection: Selection,
    behaviour: Selection | None,
    *,
    workers: int,
    bisect: bool,
    report: Reporter = CONSOLE,
) -> list[LineMatrix]:
    """Every line of the selected packages over the selected releases, in one run (one verdict cache)."""
    check_selections(project, selection, behaviour)
    judged = Judged()
    return [
        check_line(project, line, selection, behaviour, workers, judged, bisect=bisect, report=report)
        for line in project.all_lines()
        if not selection.specs or line.package in selection.specs
    ]


def record(project: Project, lines: list[LineMatrix], report: Reporter = CONSOLE, *, new_torch: bool = False) -> Matrix:
    """`matrix run`'s second half: the cells :func:`check_lines` judged, merged into the committed matrix, which
    is written. ``new_torch``: the run judged the whole matrix under another torch, and replaces it."""
    base = Matrix() if new_torch else (Matrix.load(project.matrix_json) or Matrix())
    matrix = base.merged(lines, torch=proofenv.torch_version())
    matrix.save(project.matrix_json)
    report(f"wrote {project.matrix_json} and {project.matrix_json.with_suffix('.md')}")
    return matrix


def check(
    project: Project, selection: Selection, behaviour: Selection | None, *, workers: int, report: Reporter = CONSOLE
) -> tuple[list[matrix_checks.Finding], int]:
    """`matrix check`: a fresh run of the selected cells (proofs on ``behaviour``'s releases, no bisection)
    against the committed matrix, which is not written. The differences, and how many releases were run."""
    committed = Matrix.require(project.matrix_json)
    lines = check_lines(project, selection, behaviour, workers=workers, bisect=False, report=report)
    return matrix_checks.compare(committed, lines), sum(len(ln.releases) for ln in lines)


def rerender(project: Project) -> Matrix:
    """`matrix rerender`: the committed matrix with each row's trailers and flags from the series as it is now
    (after a trailer was edited); nothing is run."""
    matrix = Matrix.require(project.matrix_json)
    matrix.rerendered(series_lookup(project))
    matrix.save(project.matrix_json)
    return matrix
