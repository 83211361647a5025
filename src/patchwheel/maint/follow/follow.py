"""Follow upstream: ``patchwheel follow [<pkg>...]`` carries each package's newest release line onto the releases
published since, by itself where nothing needs judgement, and stops with the commands where something does.

For each package, each final release newer than its newest line (oldest first; yanked ones are left out):

1. **judge** it by the one policy (:func:`carry.policy.judge`): the newest line's patches by text and by their
   proofs on the pristine release;
2. **stop** where a person must judge: a proof that passes before its Drop-When holds, a proof that cannot judge
   the release, text that says upstream has a change whose proof still fails, a conflict (found by the carry), a
   series that would be left empty;
3. **carry** the line onto it with those verdicts (the carry engine, :func:`carry.engine.carry_line`: what the one
   policy dropped is left out with its evidence, the rest carried by text), which writes the series, the pin, the
   first build record and the vendored modules; move the set ``latest`` to the new line; **retire** the package's
   lines the retention rule no longer keeps;
4. refresh the matrix (every kept line of the package judged on the new releases), lint, **build**, and **prove**
   the set ``latest`` both ways (its proofs on the pristine pins must fail with their bugs, on the +fixed builds
   pass) with its guards (pristine recorded, +fixed compared); a failure stops it.

The retention rule: a line stays while a consumer set (overlay/sets.toml) names it, and each package's newest line
always stays (the next release is carried from it). Everything happens in a scratch copy (:mod:`carry.scratch`); a
package that went through is written into the project in one step, one that stopped writes nothing. ``dist/`` is
not touched: ``nox -s build`` puts the new wheels there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from packaging.version import Version

from ... import config, series
from ...config import Artifact, Project, ReleaseLine
from ...configfiles import set_member
from ...errors import PatchwheelError
from ...reporter import CONSOLE
from ...urls import redact
from ...wheels import fetch
from .. import lintall
from ..carry import engine, policy
from ..carry.outcome import Carried, Stop, Verdict
from ..carry.scratch import Scratch, TreeChanged, restate_torch
from ..carry.steps import Prove, build_and_prove, judge_into_matrix, proof_stop, retire
from ..proving import proofenv
from ..upstream import matrixrun as upstream
from ..upstream.selection import Selection

#: The consumer set follow moves to each new line: what new users install.
LATEST = config.LATEST


@dataclass
class Followed(Carried):
    """What follow did for one package (:class:`Carried`), or why it stopped (then nothing of it was written)."""

    newest: str  # the line before
    releases: list[str] = field(default_factory=list)  # judged, oldest first
    verdicts: dict[str, list[Verdict]] = field(default_factory=dict)  # release -> verdicts
    moved: str = ""  # "latest: transformers 5.23.0 -> 5.24.0"

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
    (a new companion: the project is loaded again after a package wrote). A package that stops does not stop the
    others."""
    out: list[Followed] = []
    for pkg in packages_of(project, packages):
        if out and out[-1].written:
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
            copy = config.load(work.root)  # the one load in the copy: each step passes on what it changed
            ahead = pool.submit(_ahead, copy, pkg, releases[-1][1], judged)
            copy, done.stop = _carry_all(copy, pkg, releases, judged, done, say)
            ahead.result()
            if done.stop is None:
                done.stop = _prove(copy, pkg, judged, done, prove, say, work)
            if done.stop is None:
                done.written = work.commit()
                say(f"wrote {len(done.written)} file(s) of overlay/ and patches/")
    except TreeChanged as exc:
        done.stop = Stop(exc.message, [f"nox -s follow -- {pkg}   # again, once your change is committed or stashed"])
    except PatchwheelError as exc:
        done.stop = Stop(_said(exc), _by_hand(pkg, done.line))
    if done.stop is not None:
        done.stop.named_in(scratch, str(project.root))
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
    project: Project,
    pkg: str,
    releases: list[tuple[str, Artifact]],
    judged: upstream.Judged,
    done: Followed,
    say: Callable[[str], None],
) -> tuple[Project, Stop | None]:
    """Carry the newest line onto each release in turn (``project``: the scratch copy's): the project as it then is,
    and the stop, if one."""
    for version, artifact in releases:
        line = project.line(pkg)
        say(f"judging {version} (the line {line.version}'s patches: text, and proofs on the pristine release)")
        done.releases.append(version)  # before the judging, which may stop it: the report names the release
        verdicts, stop = policy.judge(project, line, version, artifact, judged, _by_hand)
        done.verdicts[version] = verdicts
        for v in verdicts:
            say(f"  {v.patch}: {v.text}, proof {v.behaviour} -> {v.decision or 'stop'}")
        if stop is not None:
            return project, stop
        said: list[str] = []
        carried = engine.carry_line(project, line, version, dropped=policy.dropped(verdicts), log=said.append)
        if carried is None:
            conflict = next((s for s in said if "CONFLICT" in s), "a conflict")
            stop = Stop(f"{pkg} {version}: {conflict}: the patch must be carried by hand", _by_hand(pkg, version))
            return project, stop
        project = carried
        done.carried += [s for s in said if not s.startswith("  ")]
        if pkg in project.sets.get(LATEST, {}):
            set_member(project.sets_file, LATEST, pkg, version)
            project = config.changed(project, sets={**project.sets, LATEST: {**project.sets[LATEST], pkg: version}})
            done.moved = f"{LATEST}: {pkg} {done.newest} -> {version}"
            say(f"the set {LATEST} now names {pkg} {version}")
        project, retired = retire(project, pkg, say)
        done.retired += retired
        project = restate_torch(project, [LATEST], {f"{pkg}/{version}"}, say)
    return project, None


def _prove(project: Project, pkg: str, judged, done: Followed, prove: Prove, say, work: Scratch) -> Stop | None:
    say(f"the matrix: every line of {pkg} on {', '.join(done.releases)}")
    refresh_matrix(project, pkg, done.releases, judged)
    problems = lintall.problems(project)
    if problems:
        return Stop("the new tree does not pass lint: " + "; ".join(problems), _by_hand(pkg, done.line))
    done.runs = build_and_prove(project, _proven_set(project, pkg), work, prove, say, judged.seen or {})
    return proof_stop(f"{pkg} {done.line}", done.runs, _by_hand(pkg, done.line))


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


def _by_hand(pkg: str, version: str) -> list[str]:
    """What a maintainer runs to do follow's work by hand (docs/maintainers/rebase-and-follow.md)."""
    return [
        f"nox -s rebase -- {pkg} {version}          # judge, drop, carry; stops at a conflict in .rebase/",
        f"nox -s rebase -- {pkg} {version} --continue   # after resolving it (git add)",
        f"nox -s rebase -- {pkg} {version} --abort      # or drop the work folder",
        f'set {pkg} = "{version}" in [set.{LATEST}] of overlay/sets.toml; remove the lines no set names',
        f"nox -s build && nox -t set-{LATEST}   # its proofs both ways and its guards",
        f"nox -s matrix -- run {pkg}=={version}   # the matrix",
    ]
