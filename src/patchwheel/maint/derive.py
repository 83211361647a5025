"""Derive a release line for a release users run: ``patchwheel derive <pkg>==<version>``.

`follow` carries a package's newest line onto the releases after it; `derive` makes a line for any other final
release a team pins (the last 4.x, a release between two lines), from the nearest line the project carries, older
or newer (``--from`` picks another), with follow's policy and guarantees:

1. **judge** the release: the source line's patches by text and by their proofs on the pristine release (follow's
   own judging, :func:`follow.judge`), and the proofs of the fixes only other lines carry (the neighbour on the
   other side may carry a fix the source dropped, or not yet needs): where such a bug is still there, it stops;
2. **carry** the series onto it (:func:`rebase.carry_line`: a patch whose proof passes is dropped, the series says
   why; the rest clean, with offsets or by a 3-way merge), which writes the series, the pin (in version order),
   the first build record and the vendored modules; name the line in a consumer set (``--set``, default
   ``v<major>.<minor>``; a new set takes the other packages' newest lines), and retire a line that set named
   before when no set names it any more (follow's retention rule);
3. judge the new line on every release newer than it for the matrix, lint the tree, **build** the set and
   **prove** it both ways with its guards.

Everything happens in a scratch copy (:class:`scratch.Scratch`) and is written back in one step only when every
step went through. On a conflict nothing is written but the work repository, moved to ``.rebase/<pkg>-<version>/``
(git-ignored) with the commands: the maintainer resolves it there (``git add``, or a ``git commit`` with a message
written for the new release), then ``--continue`` carries the rest and goes on, on a copy of that work repository
again (a stop or an interrupt leaves it as it was); ``--abort`` removes it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from .. import config, fetch, gitops, patches
from ..config import Artifact, Project, ReleaseLine
from ..errors import ConfigError, PatchwheelError
from ..reporter import CONSOLE
from . import follow, proofenv, rebase, upstream
from .follow import Prove, Stop, Verdict
from .scratch import Scratch, TreeChanged, add_set, held_interrupts, set_member
from .selection import Selection
from .setruns import Run

#: What a derive in progress keeps beside the rebase's own state, in its work folder.
STATE = "derive.json"
_SPEC = re.compile(r"(?P<pkg>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[0-9][0-9A-Za-z.+!-]*)")


@dataclass
class Derived:
    """What derive did for one release, or why it stopped (then nothing of the project was written but, at a
    conflict, the work repository in ``.rebase/``)."""

    package: str
    version: str
    source: str = ""  # the line it was carried from
    set_name: str = ""
    verdicts: list[Verdict] = field(default_factory=list)  # the source line's patches
    others: list[Verdict] = field(default_factory=list)  # fixes of other lines, judged on the release
    carried: list[str] = field(default_factory=list)  # the rebase's lines
    set_change: str = ""  # 'the set v4: transformers 4.57.6 (new)'
    retired: list[str] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    stop: Stop | None = None
    waiting: str = ""  # the work repository a conflict left for the maintainer
    seconds: float = 0.0


def parse_spec(spec: str) -> tuple[str, str]:
    """``pkg==version``, matched whole: the package's canonical name and the version, normalized."""
    m = _SPEC.fullmatch(spec)
    if m is None:
        raise ConfigError(f"{spec!r} is not <package>==<version>", "name one release, e.g. transformers==4.57.6")
    return canonicalize_name(m["pkg"]), rebase._version(m["version"])


def default_set(version: str) -> str:
    """``v<major>.<minor>``, as the project names the sets of older lines (``v4.53``)."""
    release = Version(version).release
    return "v" + ".".join(str(n) for n in (release + (0,))[:2])


def nearest(project: Project, package: str, version: str, order: list[str]) -> ReleaseLine:
    """The line closest to ``version`` in the index's order of releases (``order``, oldest first): fewest releases
    between them; of two as close, the older line (the bugs a release has are those of the releases before it)."""
    where = {v: i for i, v in enumerate(order)}
    at = where[version]

    def distance(line: ReleaseLine) -> tuple[int, int]:
        i = where.get(line.version)
        if i is None:  # a line of a release the index no longer lists: by version alone
            i = sum(Version(v) < Version(line.version) for v in order)
        return abs(i - at), 0 if Version(line.version) < Version(version) else 1

    return min(project.lines[package], key=distance)


def derive(
    project: Project,
    spec: str,
    prove: Prove,
    *,
    source: str | None = None,
    set_name: str | None = None,
    log: Callable[[str], None] = CONSOLE,
) -> Derived:
    """Make the release line of ``spec`` (``pkg==version``): see the module's docstring."""
    package, version = parse_spec(spec)
    newest = project.line(package)  # checks the package
    if version in {line.version for line in project.lines[package]}:
        raise ConfigError(f"{package} {version} is a release line already", f"pip install '{package}=={version}+fixed'")
    if rebase.in_progress(project, package, version) is not None:
        raise ConfigError(
            f"a line for {package} {version} is waiting in {_work(project.root, package, version)}",
            f"resolve it and run `nox -s derive -- {package}=={version} --continue`, or `... --abort` to drop it",
        )
    releases = fetch.releases(package)
    artifact = _release(package, version, releases)
    if Version(version) > Version(newest.version):
        raise ConfigError(
            f"{package} {version} is newer than the newest line {newest.key}",
            f"`nox -s follow -- {package}` carries the newest line onto newer releases (and moves the set latest)",
        )
    from_line = (
        project.line(package, source) if source else nearest(project, package, version, [v for v, _, _ in releases])
    )
    set_name = set_name or default_set(version)
    if not config.SET_NAME.fullmatch(set_name):
        raise ConfigError(f"{set_name!r} is not a plain set name", "letters, digits, '.', '_' and '-', e.g. v4")
    done = Derived(package, version, from_line.version, set_name)
    return _run(project, done, log, partial(_start, artifact=artifact, prove=prove))


def resume(project: Project, spec: str, prove: Prove, *, log: Callable[[str], None] = CONSOLE) -> Derived:
    """Go on with the derive of ``spec`` after its conflict was resolved in ``.rebase/<pkg>-<version>/repo``."""
    package, version = parse_spec(spec)
    saved = _saved(project, package, version)
    done = Derived(package, version, saved["source"], saved["set"])
    done.verdicts = [Verdict(**v) for v in saved["verdicts"]]
    done.others = [Verdict(**v) for v in saved["others"]]
    return _run(project, done, log, partial(_resume, prove=prove))


def abort(project: Project, spec: str) -> Path:
    """Remove the work folder of a derive waiting at a conflict (only one derive made): the folder removed."""
    package, version = parse_spec(spec)
    _saved(project, package, version)  # refuses a folder derive did not make
    work = _work(project.root, package, version)
    with held_interrupts():
        _remove(work)
    return work


def _saved(project: Project, package: str, version: str) -> dict:
    work = _work(project.root, package, version)
    state = rebase.in_progress(project, package, version)
    if state is None or not (work / STATE).is_file():
        what = "a rebase" if state is not None else "nothing"
        raise ConfigError(
            f"no derive of {package} {version} is waiting in {work} ({what} is there)",
            f"start one with `nox -s derive -- {package}=={version}`"
            if state is None
            else f"that is `nox -s rebase`'s: finish it with `nox -s rebase -- {package} {version} --continue`",
        )
    return json.loads((work / STATE).read_text())


def _work(root: Path, package: str, version: str) -> Path:
    """Where a carry onto ``package`` ``version`` waits (rebase's folder for it)."""
    return root / ".rebase" / f"{package}-{version}"


def _release(package: str, version: str, releases: list[tuple[str, Artifact, bool]]) -> Artifact:
    for v, artifact, yanked in releases:
        if v == version:
            if yanked:
                raise ConfigError(
                    f"{package} {version} is yanked on {fetch.index_url()}", "derive a line for another release"
                )
            return artifact
    near = sorted((v for v, _, _ in releases), key=lambda v: abs(Version(v).release[0] - Version(version).release[0]))
    raise ConfigError(
        f"{package} {version} is not a final release on {fetch.index_url()}",
        f"name one it lists, e.g. {', '.join(sorted(near[:5], key=Version))}",
    )


def _run(project: Project, done: Derived, log: Callable[[str], None], step) -> Derived:
    """Run ``step(work, done, say)`` in a scratch copy; write it back when it went through. Stops name the
    project's files, never the scratch copy's."""
    t0 = time.perf_counter()

    def say(message: str) -> None:
        log(f"[{time.perf_counter() - t0:6.1f}s] {done.package} {done.version}: {message}")

    scratch = ""
    try:
        with Scratch(project.root) as work:
            scratch = str(work.root)
            done.stop = step(work, done, say)
            if done.stop is None:
                with held_interrupts():
                    done.written = work.commit()
                    _drop_waiting(project, done)
                say(f"wrote {len(done.written)} file(s) of overlay/ and patches/")
    except TreeChanged as exc:
        done.stop = Stop(exc.message, _by_hand(done)[:1])
    except PatchwheelError as exc:
        done.stop = Stop(exc.message + (f" ({exc.hint})" if exc.hint else ""), _by_hand(done))
    if done.stop is not None and scratch:
        done.stop.why = done.stop.why.replace(scratch, str(project.root))
        done.stop.commands = [c.replace(scratch, str(project.root)) for c in done.stop.commands]
    done.seconds = time.perf_counter() - t0
    return done


def _start(
    work: Scratch, done: Derived, say: Callable[[str], None], *, artifact: Artifact, prove: Prove
) -> Stop | None:
    project = config.load(work.root)
    source = project.line(done.package, done.source)
    judged = upstream.Judged()
    say(f"from the line {source.key}; judging it (text, and proofs on the pristine release)")
    done.verdicts, stop = follow.judge(
        project, source, done.version, artifact, judged, by_hand=lambda p, v: _by_hand(done)
    )
    for v in done.verdicts:
        say(f"  {v.patch}: {v.text}, proof {v.behaviour} -> {v.decision or 'stop'}")
    if stop is not None:
        return stop
    done.others, stop = _judge_others(project, source, done, artifact, judged)
    for v in done.others:
        say(f"  {v.patch}: not in the line {source.version}; proof {v.behaviour} -> {v.decision or 'stop'}")
    if stop is not None:
        return stop
    said: list[str] = []
    if not rebase.carry_line(
        project, source, done.version, judge=follow.as_judged(done.verdicts), by="derive", log=said.append
    ):
        return _wait(work, done, said)
    done.carried = [s for s in said if not s.startswith("  ")]
    return _finish(work, done, prove, say)


def _resume(work: Scratch, done: Derived, say: Callable[[str], None], *, prove: Prove) -> Stop | None:
    real = _work(work.project, done.package, done.version)
    copy = _work(work.root, done.package, done.version)
    shutil.copytree(real, copy, symlinks=True)  # the maintainer's folder stays as it is until the end
    project = config.load(work.root)
    said: list[str] = []
    say(f"carrying the rest of the line {done.source} (the conflict resolved in {real / 'repo'})")
    if not rebase.resume(project, done.package, done.version, log=said.append):
        return _wait(work, done, said)
    done.carried = [s for s in said if not s.startswith("  ")]
    return _finish(work, done, prove, say)


def _wait(work: Scratch, done: Derived, said: list[str]) -> Stop:
    """A conflict: the scratch copy's work folder becomes the project's ``.rebase/<pkg>-<version>/`` (with what
    derive needs to go on), in one step; nothing else is written."""
    copy = _work(work.root, done.package, done.version)
    state = {
        "source": done.source,
        "set": done.set_name,
        "verdicts": [v.__dict__ for v in done.verdicts],
        "others": [v.__dict__ for v in done.others],
    }
    (copy / STATE).write_text(json.dumps(state, indent=1) + "\n")
    real = _work(work.project, done.package, done.version)
    staged = real.with_name(f".{real.name}.partial")
    shutil.rmtree(staged, ignore_errors=True)  # one an interrupted stop left (derive's own name)
    real.parent.mkdir(exist_ok=True)
    shutil.copytree(copy, staged, symlinks=True)
    with held_interrupts():
        old = real.with_name(f".{real.name}.old")
        if real.exists():
            os.replace(real, old)
        os.replace(staged, real)
        shutil.rmtree(old, ignore_errors=True)
    repo = real / "repo"
    done.waiting = str(repo)
    files = gitops.git(repo, "diff", "--name-only", "--diff-filter=U").decode().split()
    conflict = next((s.strip() for s in said if "CONFLICT" in s), "a conflict")
    spec = f"{done.package}=={done.version}"
    return Stop(
        f"{conflict}: carry the patch by hand in {repo}, as {done.package} {done.version}'s code requires; "
        "nothing else was written",
        [
            f"$EDITOR {' '.join(f'{repo}/{f}' for f in files)}   # resolve the conflict markers: the fix's intent",
            f"git -C {repo} add {' '.join(files)}",
            f"git -C {repo} commit   # optional: describe the fix anew for {done.version} (message and trailers)",
            f"nox -s derive -- {spec} --continue",
            f"nox -s derive -- {spec} --abort      # instead: drop the work folder",
        ],
    )


def _finish(work: Scratch, done: Derived, prove: Prove, say: Callable[[str], None]) -> Stop | None:
    """The line is written in the scratch copy: name it in its set, retire what no set names any more, judge it
    for the matrix, lint, build, prove."""
    project = config.load(work.root)
    members = project.sets.get(done.set_name)
    if members is None:
        companions = {p: project.line(p).version for p in project.packages() if p != done.package}
        add_set(project.sets_file, done.set_name, {done.package: done.version, **companions})
        done.set_change = f"the set {done.set_name} (new): " + ", ".join(
            f"{p} {v}" for p, v in {done.package: done.version, **companions}.items()
        )
    else:
        before = members.get(done.package)
        if before is None:
            raise ConfigError(
                f"the set {done.set_name} does not name {done.package}",
                f"name another set (--set), or add {done.package} to [set.{done.set_name}] first",
            )
        set_member(project.sets_file, done.set_name, done.package, done.version)
        done.set_change = f"the set {done.set_name}: {done.package} {before} -> {done.version}"
    say(done.set_change)
    done.retired = follow.retire(config.load(work.root), done.package, say)
    project = config.load(work.root)
    line = project.line(done.package, done.version)
    say(f"the matrix: the line {line.key} on every release newer than it")
    follow.judge_into_matrix(project, [line], Selection.parse([done.package]), upstream.Judged())
    problems = follow.lint(project)
    if problems:
        return Stop("the new tree does not pass lint: " + "; ".join(problems), _by_hand(done))
    members_lines = {p: project.line(p, v) for p, v in project.sets[done.set_name].items()}
    done.runs = follow.build_and_prove(project, members_lines, work, prove, say)
    return follow.proof_stop(f"{done.package} {done.version}", done.runs, _by_hand(done))


def _judge_others(
    project: Project, source: ReleaseLine, done: Derived, artifact: Artifact, judged: upstream.Judged
) -> tuple[list[Verdict], Stop | None]:
    """The proofs of the fixes the package's other lines carry and ``source`` does not (by slug; features are
    capabilities, not bugs), on the pristine release: a bug still there stops it, as does a proof that cannot
    judge."""
    carried = {p.slug for p in patches.load_series(source)}
    others: dict[str, tuple[ReleaseLine, patches.Patch]] = {}
    for line in project.lines[done.package]:
        for p in patches.load_series(line):
            if not p.is_feature and p.slug not in carried:
                others[p.test_module] = (line, p)  # the newest line's patch of a module names it
    if not others:
        return [], None
    wheels = [(done.package, artifact)] + upstream.companions(project, source)
    env = proofenv.release_env(project.cache, wheels)
    run = partial(proofenv.run_proofs, env, project.root, first_bug=True)
    outcomes = judged.get_many(env, sorted(others), run)
    verdicts, problems = [], []
    for module, (line, p) in sorted(others.items()):
        o = outcomes[module]
        v = Verdict(f"{p.name} ({line.key})", "n/a", o.verdict, o.detail)
        if o.verdict == "passes":
            v.decision = f"nothing to carry: its proof passes on pristine {done.package} {done.version}"
        elif o.verdict == "fails":
            problems.append(
                f"{p.name} of {line.key}: its bug is still in {done.package} {done.version} ({o.detail}), and the "
                f"line {source.version} does not carry it: derive from {line.version} (--from {line.version}), or "
                "carry the fix by hand"
            )
        else:
            problems.append(
                f"{p.name} of {line.key}: its proof cannot judge pristine {done.package} {done.version} ({o.detail})"
            )
        verdicts.append(v)
    if not problems:
        return verdicts, None
    return verdicts, Stop("; ".join(problems), _by_hand(done))


def _by_hand(done: Derived) -> list[str]:
    """What a maintainer runs once a stop is dealt with (docs/maintainers.md, Deriving a line): the first, again."""
    spec = f"{done.package}=={done.version}"
    return [
        f"nox -s derive -- {spec} --from {done.source} --set {done.set_name}   # again, once it is dealt with",
        f"nox -s derive -- {spec} --from <another line>   # or from another line",
        f"nox -s upstream -- run {spec}   # what every line says about {done.version}, by text and by proofs",
    ]


def _drop_waiting(project: Project, done: Derived) -> None:
    """After the write: the work folder a conflict left, now carried into the line (derive made it)."""
    work = _work(project.root, done.package, done.version)
    if (work / STATE).is_file():
        _remove(work)


def _remove(work: Path) -> None:
    """A derive's work folder, and .rebase/ when nothing else waits there."""
    shutil.rmtree(work)
    if not any(work.parent.iterdir()):
        work.parent.rmdir()
