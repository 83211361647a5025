"""Follow upstream: ``patchwheel follow [<pkg>...]`` carries each package's newest release line onto the releases
published since, by itself where nothing needs judgement, and stops with the commands where something does.

For each package, each final release newer than its newest line (oldest first; yanked ones are left out):

1. **judge** it: the newest line's patches by text and by their proofs on the pristine release (the upstream
   check's own cell, :func:`upstream.check_line`);
2. **stop** where a person must judge: a proof that cannot judge the release, text that says upstream has a change
   whose proof still fails, a conflict (found by the rebase), a series that would be left empty;
3. **rebase** onto it with those verdicts (:func:`rebase.start`: a patch whose proof passes is dropped with that
   evidence, the rest carried by text), which writes the series, the pin, the first build record and the vendored
   modules; move the set ``latest`` to the new line; **retire** the package's lines the retention rule no longer
   keeps;
4. refresh the matrix (every kept line of the package judged on the new releases), lint, **build**, and **prove**
   the set ``latest`` both ways (its proofs on the pristine pins must fail with their bugs, on the +fixed builds
   pass) with its guards (pristine recorded, +fixed compared); a failure stops it.

The retention rule: a line stays while a consumer set (overlay/sets.toml) names it, and each package's newest line
always stays (the next release is carried from it). Everything happens in a scratch copy (:mod:`scratch`); a
package that went through is written into the project in one step, one that stopped writes nothing. ``dist/`` is
not touched: ``nox -s build`` puts the new wheels there.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from ... import config, series
from ...config import Artifact, Project, ReleaseLine
from ...configfiles import record_retired, remove_release, set_member
from ...errors import PatchwheelError
from ...matrix.checks import decide
from ...matrix.table import Matrix
from ...reporter import CONSOLE
from ...series import Patch
from ...urls import redact
from ...wheels import fetch, vendored
from ...wheels.build import build
from .. import lintall, rebase
from ..proving import proofenv
from ..proving.setruns import Run
from ..upstream import matrixrun as upstream
from ..upstream.selection import Selection
from .scratch import Scratch, TreeChanged, restate_torch

#: The consumer set follow moves to each new line: what new users install.
LATEST = config.LATEST


#: ``prove(project, members, dist, log, seen)``: the runs that prove the set ``members`` (package -> line) both
#: ways, with its +fixed wheels in ``dist``; ``seen``: the proof cases the judge's runs observed, per environment,
#: which a run in the same environment on the same inputs judges instead of running again. The real one is
#: :func:`setruns.prove_set`.
Prove = Callable[[Project, dict[str, ReleaseLine], Path, Callable[[str], None], dict[str, list[dict]]], list[Run]]


@dataclass
class Verdict:
    """One patch of the newest line judged on a new release, and what follow does with it."""

    patch: str
    text: str
    behaviour: str  # passes / fails / error / n/a
    detail: str
    decision: str = ""


@dataclass
class Stop:
    why: str
    commands: list[str]


@dataclass
class Followed:
    """What follow did for one package, or why it stopped (then nothing of it was written)."""

    package: str
    newest: str  # the line before
    releases: list[str] = field(default_factory=list)  # judged, oldest first
    verdicts: dict[str, list[Verdict]] = field(default_factory=dict)  # release -> verdicts
    carried: list[str] = field(default_factory=list)  # the rebase's lines
    moved: str = ""  # "latest: transformers 5.23.0 -> 5.24.0"
    retired: list[str] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    stop: Stop | None = None
    seconds: float = 0.0

    @property
    def line(self) -> str:
        return self.releases[-1] if self.releases else self.newest


def packages_of(project: Project, packages: list[str] | None = None) -> list[str]:
    """The packages named (checked), or every package."""
    return [project.line(p).package for p in packages] if packages else project.packages()


def newer(project: Project, pkg: str) -> list[tuple[str, Artifact]]:
    """A package's final, not yanked releases newer than its newest line, oldest first."""
    newest = Version(project.line(pkg).version)
    return [(v, a) for v, a, yanked in fetch.releases(pkg) if Version(v) > newest and not yanked]


def pending(project: Project, packages: list[str] | None = None) -> dict[str, list[tuple[str, Artifact]]]:
    """Per package (all, or those named): its releases newer than its newest line."""
    return {pkg: newer(project, pkg) for pkg in packages_of(project, packages)}


def follow(
    project: Project, packages: list[str] | None, prove: Prove, *, log: Callable[[str], None] = CONSOLE
) -> list[Followed]:
    """Follow every package (or those named), one after the other: a later one sees what an earlier one wrote
    (a new companion). A package that stops does not stop the others."""
    out = []
    for pkg in packages_of(project, packages):
        project = config.load(project.root)
        newest = project.line(pkg).version
        try:
            releases = newer(project, pkg)
        except PatchwheelError as exc:  # the index cannot be read: this package stops, the others go on
            out.append(Followed(pkg, newest, stop=Stop(_said(exc), [f"nox -s follow -- {pkg}   # once it can"])))
            continue
        if not releases:
            log(f"{pkg}: nothing newer than the line {newest} on {redact(fetch.index_url())}; nothing changed")
            out.append(Followed(pkg, newest))
            continue
        out.append(_follow_package(project, pkg, releases, prove, log))
    return out


def _said(exc: PatchwheelError) -> str:
    return exc.message + (f" ({exc.hint})" if exc.hint else "")


def _follow_package(
    project: Project, pkg: str, releases: list[tuple[str, Artifact]], prove: Prove, log: Callable[[str], None]
) -> Followed:
    t0 = time.perf_counter()
    done = Followed(pkg, project.line(pkg).version)

    def say(message: str) -> None:
        log(f"[{time.perf_counter() - t0:6.1f}s] {pkg}: {message}")

    say(f"{', '.join(v for v, _ in releases)} newer than the line {done.newest}")
    # One proof run per (release, module), shared by the line's steps and the matrix; their cases are kept for the
    # proofs on the pristine pins, which the new release's environment is.
    judged = upstream.Judged(keep=True)
    scratch = ""
    try:
        with Scratch(project.root) as work, ThreadPoolExecutor(max_workers=1) as pool:
            scratch = str(work.root)
            ahead = pool.submit(_ahead, config.load(work.root), pkg, releases[-1][1], judged)
            done.stop = _carry_all(work.root, pkg, releases, judged, done, say)
            ahead.result()
            if done.stop is None:
                done.stop = _prove(config.load(work.root), pkg, judged, done, prove, say, work)
            if done.stop is None:
                done.written = work.commit()
                say(f"wrote {len(done.written)} file(s) of overlay/ and patches/")
    except TreeChanged as exc:
        done.stop = Stop(exc.message, [f"nox -s follow -- {pkg}   # again, once your change is committed or stashed"])
    except PatchwheelError as exc:
        done.stop = Stop(_said(exc), _by_hand(pkg, done.line))
    if done.stop is not None and scratch:  # what it says names the project's files, not the scratch copy's
        done.stop.why = done.stop.why.replace(scratch, str(project.root))
        done.stop.commands = [c.replace(scratch, str(project.root)) for c in done.stop.commands]
    done.seconds = time.perf_counter() - t0
    return done


def _ahead(project: Project, pkg: str, artifact: Artifact, judged: upstream.Judged) -> None:
    """Beside the judge's run: the proofs the matrix step runs for the package's older lines on the newest release
    (its bisection always runs the last one) that the judge does not, in the same environment, so that the two
    pytest runs share the cores; the matrix step then finds their verdicts (the proving step their cases) in
    ``judged``. Where it cannot run (no environment), the matrix step meets that again, and says so."""
    newest = project.line(pkg)
    judge_runs = {p.test_module for p in series.parse_series(newest)}
    older = {p.test_module for ln in project.lines[pkg][:-1] for p in series.parse_series(ln) if not p.is_feature}
    if older - judge_runs:
        try:
            env = proofenv.release_env(project.cache, [(pkg, artifact)] + upstream.companions(project, newest))
            judged.get_many(env, sorted(older - judge_runs), judged.runner(env, project.root))
        except PatchwheelError:
            pass


def _carry_all(
    root: Path,
    pkg: str,
    releases: list[tuple[str, Artifact]],
    judged: upstream.Judged,
    done: Followed,
    say: Callable[[str], None],
) -> Stop | None:
    for version, artifact in releases:
        project = config.load(root)
        line = project.line(pkg)
        say(f"judging {version} (the line {line.version}'s patches: text, and proofs on the pristine release)")
        done.releases.append(version)  # before the judging, which may stop it: the report names the release
        verdicts, stop = judge(project, line, version, artifact, judged)
        done.verdicts[version] = verdicts
        for v in verdicts:
            say(f"  {v.patch}: {v.text}, proof {v.behaviour} -> {v.decision or 'stop'}")
        if stop is not None:
            return stop
        said: list[str] = []
        if not rebase.start(project, pkg, version, judge=as_judged(verdicts), log=said.append):
            conflict = next((s for s in said if "CONFLICT" in s), "a conflict")
            return Stop(f"{pkg} {version}: {conflict}: the patch must be carried by hand", _by_hand(pkg, version))
        done.carried += [s for s in said if not s.startswith("  ")]
        project = config.load(root)
        if pkg in project.sets.get(LATEST, {}):
            set_member(project.sets_file, LATEST, pkg, version)
            done.moved = f"{LATEST}: {pkg} {done.newest} -> {version}"
            say(f"the set {LATEST} now names {pkg} {version}")
        done.retired += retire(config.load(root), pkg, say)
        restate_torch(root, [LATEST], {f"{pkg}/{version}"}, say)
    return None


def as_judged(verdicts: list[Verdict]) -> Callable[[Patch], proofenv.ProofOutcome]:
    """The rebase's judge: the verdicts follow already has, so no proof runs twice."""
    outcomes = {v.patch: proofenv.ProofOutcome(v.behaviour, v.detail) for v in verdicts}
    return lambda patch: outcomes[patch.name]


#: What follow says for each rule of :func:`matrix_checks.decide`: the problem it stops on, or the decision it records.
_SAID = {
    "feature-drop-when": "{name}: a feature whose Drop-When holds on {version}: drop it by hand",
    "feature-upstream": "dropped: upstream has the change",
    "feature": "carried ({text})",
    "passes-before-drop-when": "{name}: its proof passes on {release}, before its Drop-When ({drop_when}): upstream "
    "fixed it earlier, or the proof is too weak here",
    "passes": "dropped: its proof passes on pristine {release} ({detail})",
    "fails-drop-when": "{name}: its Drop-When holds on {release}, but its proof still fails ({detail}): correct "
    "Drop-When, or record 'Upstream-Status: Partial-Fix-In {version} <test>'",
    "fails-upstream-text": "{name}: upstream has its text, but its proof still fails ({detail})",
    "fails-conflict": "kept: its proof still fails, and its text conflicts (the rebase stops there)",
    "fails": "carried ({text}): its proof still fails",
    "unjudged": "{name}: its proof cannot judge pristine {release} ({detail})",
}


def judge(
    project: Project,
    line: ReleaseLine,
    version: str,
    artifact: Artifact,
    judged: upstream.Judged,
    by_hand: Callable[[str, str], list[str]] | None = None,
) -> tuple[list[Verdict], Stop | None]:
    """The verdicts of the line's patches on ``version`` (newer or older than the line), with the decision each,
    or the stop: the one policy of `follow` and `derive`. ``by_hand(pkg, version)``: the commands a stop names
    (default: follow's, a rebase by hand)."""
    selection = Selection.parse([f"{line.package}=={version}"])
    judged_line = upstream.check_line(project, line, selection, selection, judged=judged, older=True)
    verdicts: list[Verdict] = []
    problems: list[str] = []
    unjudged: list[str] = []
    for row, patch in zip(judged_line.patches, series.parse_series(line), strict=True):
        cell = row.cells[version]
        v = Verdict(patch.name, cell.text, cell.behaviour or "", cell.behaviour_detail or "")
        decision = decide(cell, patch.is_feature)
        said = _SAID[decision.rule].format(
            name=patch.name, text=v.text, detail=v.detail, version=version, release=f"{line.package} {version}",
            drop_when=patch.trailers.get("Drop-When"),
        )  # fmt: skip
        if decision.kind == "stop":
            problems.append(said)
            unjudged += [patch.test_module] if decision.rule == "unjudged" else []
        else:
            v.decision = said
        verdicts.append(v)
    if not problems and all(v.decision.startswith("dropped") for v in verdicts):
        problems.append(f"every patch of {line.key} is upstream in {version}: is a +fixed line still needed?")
    if not problems:
        return verdicts, None
    env = proofenv.release_env_path(project.cache, [(line.package, artifact)] + upstream.companions(project, line))
    see = [f"{env}/bin/python -m pytest {test} --proof-expect=observe   # why it cannot judge" for test in unjudged]
    return verdicts, Stop("; ".join(problems), see + (by_hand or _by_hand)(line.package, version))


def retained(project: Project) -> set[str]:
    """The retention rule: the lines a consumer set names, and each package's newest line."""
    named = {f"{pkg}/{version}" for members in project.sets.values() for pkg, version in members.items()}
    return named | {lines[-1].key for lines in project.lines.values()}


def retire(project: Project, pkg: str, say: Callable[[str], None], only: set[str] | None = None) -> list[str]:
    """Remove the lines of ``pkg`` the retention rule does not keep (of ``only``, where given: line keys): series,
    pin, vendored modules (another package's lines are its own follow's business). Their wheels, once published,
    stay on the index, and git keeps the files; the pins keep the build number each reached ([retired]), so that a
    line made again for the release never gives a published name other bytes."""
    keep = retained(project)
    gone = [ln for ln in project.lines[pkg] if ln.key not in keep and (only is None or ln.key in only)]
    for line in gone:
        shutil.rmtree(line.patch_dir)
        pins = project.pins_file(line.package)
        record_retired(pins, line.version, max(line.build.number if line.build else 1, line.retired_build))
        remove_release(pins, line.version)
        say(f"retired the line {line.key}: no consumer set names it, and it is not the newest")
    if gone:
        vendored.write(config.load(project.root), log=lambda m: None)  # removes their overlay/ folders, NOTICE
    return [line.key for line in gone]


def _prove(project: Project, pkg: str, judged, done: Followed, prove: Prove, say, work: Scratch) -> Stop | None:
    say(f"the matrix: every line of {pkg} on {', '.join(done.releases)}")
    refresh_matrix(project, pkg, done.releases, judged)
    problems = lintall.problems(project)
    if problems:
        return Stop("the new tree does not pass lint: " + "; ".join(problems), _by_hand(pkg, done.line))
    done.runs = build_and_prove(project, _proven_set(project, pkg), work, prove, say, judged.seen or {})
    return proof_stop(f"{pkg} {done.line}", done.runs, _by_hand(pkg, done.line))


def build_and_prove(
    project: Project,
    members: dict[str, ReleaseLine],
    work: Scratch,
    prove: Prove,
    say: Callable[[str], None],
    seen: dict[str, list[dict]],
) -> list[Run]:
    """Build the set ``members`` into the scratch copy's dist/ and prove it both ways, with its guards (``seen``:
    the judge's proof cases, see :data:`Prove`)."""
    dist = work.root / "dist"
    build(project, dist, select=[f"{line.package}=={line.version}" for line in members.values()], log=lambda m: None)
    said = ", ".join(f"{line.package} {line.version}" for line in members.values())
    say(f"built {said}; proving it both ways, with its guards")
    return prove(project, members, dist, say, seen)


def proof_stop(what: str, runs: list[Run], commands: list[str]) -> Stop | None:
    """The stop when a proof or guard run failed (its output's end in the message), else None."""
    failed = [r for r in runs if not r.ok]
    if not failed:
        return None
    why = "; ".join(f"{r.name} failed ({r.summary})" for r in failed)
    return Stop(f"{what}: {why}\n{failed[0].tail}".rstrip(), commands)


def _proven_set(project: Project, pkg: str) -> dict[str, ReleaseLine]:
    """The set follow proves: ``latest`` when it names the package, else the new line with its companions."""
    members = project.sets.get(LATEST)
    if members is None or pkg not in members:
        members = {p: project.line(p).version for p in project.packages()}
    return {p: project.line(p, v) for p, v in members.items()}


def refresh_matrix(project: Project, pkg: str, releases: list[str], judged: upstream.Judged) -> None:
    """The committed matrix: every line of ``pkg`` judged on ``releases`` (bisecting as the matrix check does), the
    rows of retired lines removed."""
    selection = Selection.parse([f"{pkg}=={v}" for v in releases])
    judge_into_matrix(project, project.lines[pkg], selection, judged)


def judge_into_matrix(
    project: Project, lines: list[ReleaseLine], selection: Selection, judged: upstream.Judged
) -> None:
    """Judge ``lines`` on the selected releases newer than each (bisecting as the matrix check does) into the
    committed matrix, the rows of lines no longer pinned removed; refused when the matrix was judged with another
    torch than this run's proofs use."""
    committed = Matrix.load(project.matrix_json) or Matrix()
    torch = proofenv.torch_version()
    committed.check_torch(torch)  # before the judging, which takes minutes
    judged_lines = [upstream.check_line(project, ln, selection, selection, judged=judged, bisect=True) for ln in lines]
    matrix = committed.merged(judged_lines, torch=torch)
    matrix.keep_lines({line.key for line in project.all_lines()})
    matrix.save(project.matrix_json)


def _by_hand(pkg: str, version: str) -> list[str]:
    """What a maintainer runs to do follow's work by hand (docs/maintainers/rebase-and-follow.md)."""
    return [
        f"nox -s rebase -- {pkg} {version}          # judge, drop, carry; stops at a conflict in .rebase/",
        f"nox -s rebase -- {pkg} {version} --continue   # after resolving it (git add)",
        f'set {pkg} = "{version}" in [set.{LATEST}] of overlay/sets.toml; remove the lines no set names',
        f"nox -s build && nox -t set-{LATEST}   # its proofs both ways and its guards",
        f"nox -s matrix -- run {pkg}=={version}   # the matrix",
    ]
