"""Derive a release line for a release users run: ``patchwheel derive <pkg>==<version>``.

`follow` carries a package's newest line onto the releases after it; `derive` makes a line for any other final
release a team pins, from the line that carries most by itself (:func:`choose`: the fewest conflicts by text, its
own patches' and those of the fixes it would adopt from other lines, then the nearest; ``--from`` picks another),
with follow's policy and guarantees:

1. **judge** the release: the source line's patches by text and by proofs on the pristine release (the one policy,
   :func:`carry.policy.judge`), and the proofs of the fixes only other lines carry (one may carry a fix the source
   dropped, or not yet needs): where such a bug is still there, that line's patch is adopted;
2. **carry** the series (the carry engine, :func:`carry.engine.carry_line`: what the one policy dropped is left out,
   the series says why; the adopted patches after it, each from its own line; with ``--continue --new``, a
   maintainer's own fixes committed in the work folder),
   which writes the series, the pin (in version order), the first build record (above a retired line's of the
   release) and the vendored modules; name the line in a consumer set (``--set``, default ``v<major>.<minor>``,
   never ``latest``; a new set takes the other packages' newest lines, or those ``--with`` names), and in
   ``[suite]`` when it is the newest line of its major version; retire the line a moved set named, if no set names
   it any more;
3. judge the new line on every newer release for the matrix, lint, **build** the set, **prove** it both ways with
   its guards.

All of it in a scratch copy, written back in one step only when every step went through. A conflict writes only
the work folder (:mod:`carry.workfolder`), where the maintainer resolves it; ``--continue`` goes on from a copy of it,
``--abort`` removes it.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from ... import config, gitops, knownbugs, lint, series
from ...config import Artifact, Project, ReleaseLine
from ...configfiles import add_set, set_member, suite_add
from ...errors import ConfigError, PatchwheelError
from ...matrix.table import Matrix
from ...reporter import CONSOLE
from ...wheels import fetch
from .. import fixtables, lintall
from ..carry import engine, policy, workfolder
from ..carry.outcome import Carried, Stop, Verdict
from ..carry.scratch import Scratch, held_interrupts, restate_torch
from ..carry.steps import Prove, build_and_prove, judge_into_matrix, proof_stop, retire
from ..proving import proofenv
from ..upstream import matrixrun as upstream
from ..upstream import textcheck
from ..upstream.selection import Selection
from ..workrepo import release_files, touched

_SPEC = re.compile(r"(?P<pkg>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[0-9][0-9A-Za-z.+!-]*)")


@dataclass
class Derived(Carried):
    """What derive did for one release (:class:`Carried`), or why it stopped (nothing of the project written but
    the work folder)."""

    version: str
    source: str = ""  # the line it was carried from
    set_name: str = ""
    companions: dict[str, str] = field(default_factory=dict)  # --with: a new set's other lines (default: the newest)
    verdicts: list[Verdict] = field(default_factory=list)  # the source line's patches
    others: list[Verdict] = field(default_factory=list)  # fixes of other lines, judged on the release
    set_change: str = ""  # 'the set v4: transformers 4.57.6 (new)'
    waiting: str = ""  # the work repository a conflict left for the maintainer
    copied: str | None = None  # with --continue: the digest the waiting folder had when it was copied
    source_series: dict[str, str] = field(default_factory=dict)  # the source line's files at the start: sha256s
    seen: dict[str, list[dict]] = field(default_factory=dict, repr=False)  # the judge's proof cases, per environment
    why: str = ""  # why the source line was chosen
    tables: list[tuple[Path, str, str]] = field(default_factory=list, repr=False)  # the fix tables to write


def parse_spec(spec: str) -> tuple[str, str]:
    """``pkg==version``, matched whole: the package's canonical name and the version, normalized."""
    m = _SPEC.fullmatch(spec)
    if m is None:
        raise ConfigError(f"{spec!r} is not <package>==<version>", "name one release, e.g. transformers==4.57.6")
    return canonicalize_name(m["pkg"]), engine.version_of(m["version"])


def default_set(version: str) -> str:
    """``v<major>.<minor>``, as the project names the sets of older lines (``v4.53``)."""
    release = Version(version).release
    return "v" + ".".join(str(n) for n in (release + (0,))[:2])


def _distance(line: ReleaseLine, version: str, order: list[str]) -> tuple[int, int]:
    """How far ``line`` is from ``version`` in the index's order of releases (``order``, oldest first): the releases
    between them, then 0 for an older line (the bugs a release has are those of the releases before it)."""
    where = {v: i for i, v in enumerate(order)}
    i = where.get(line.version)
    if i is None:  # a line of a release the index no longer lists: by version alone
        i = sum(Version(v) < Version(line.version) for v in order)
    return abs(i - where[version]), 0 if Version(line.version) < Version(version) else 1


@dataclass
class Candidate:
    """A line that derive could carry onto a release, judged by text against it: its own patches, and the fixes of
    other lines it would adopt there (those the committed matrix does not show fixed in the release), each carried
    by text from its own line."""

    line: ReleaseLine
    patches: int
    conflicts: list[str]  # its patches whose text conflicts on the release (a fix the matrix shows there left out)
    adopts: list[str]  # the fixes (slugs) of other lines it lacks: derive adopts each where its proof shows the bug
    adopt_conflicts: list[str]  # those of them whose text conflicts on the release
    distance: tuple[int, int]

    @property
    def rank(self) -> tuple:
        return len(self.conflicts) + len(self.adopt_conflicts), self.distance

    def said(self) -> str:
        told = f"{len(self.conflicts)} of its {self.patches} patches conflict"
        if self.adopts:
            told += (
                f"; it lacks {len(self.adopts)} fix(es) other lines carry ({', '.join(self.adopts)}), to adopt where "
                f"the release has the bug, {len(self.adopt_conflicts)} of them conflicting"
            )
        return f"{self.line.key}: {told}"


def candidates(project: Project, package: str, version: str, artifact: Artifact, order: list[str]) -> list[Candidate]:
    """Every line of ``package`` judged as a source for ``version`` (its pristine wheel ``artifact``), by text only:
    each line's series carried onto the release's files (a second or so a line), no proof run. A fix the committed
    matrix shows fixed in the release is not counted (the judge drops it, or adopts nothing for it)."""
    verdicts = knownbugs.matrix_verdicts(Matrix.load(project.matrix_json), package, version)
    fixed_there = {slug for slug, (_, _, cell) in verdicts.items() if cell.behaviour == "passes"}
    lines = project.lines[package]
    series_of = {line.key: series.checked_series(line) for line in lines}
    status: dict[tuple[str, str], str] = {}  # (line, slug) -> its text on the release
    newest: dict[str, str] = {}  # fix (slug) -> the newest line that carries it (whose form derive adopts)
    for line in lines:
        patches = series_of[line.key]
        paths = touched(patches)
        old = {p: d for p, d in release_files(line, paths).items() if d is not None}
        results = textcheck.classify(patches, old, release_files(line, paths, artifact))
        for p, r in zip(patches, results, strict=True):
            status[(line.key, p.slug)] = r.status
            if not p.is_feature:
                newest[p.slug] = line.key
    found = []
    for line in lines:
        carried = {p.slug for p in series_of[line.key]}
        conflicts = [
            p.name
            for p in series_of[line.key]
            if status[(line.key, p.slug)] == "conflict" and p.slug not in fixed_there
        ]
        adopts = sorted(slug for slug in newest if slug not in carried and slug not in fixed_there)
        adopt_conflicts = [slug for slug in adopts if status[(newest[slug], slug)] == "conflict"]
        count = len(series_of[line.key])
        found.append(Candidate(line, count, conflicts, adopts, adopt_conflicts, _distance(line, version, order)))
    return found


def choose(found: list[Candidate], version: str) -> tuple[ReleaseLine, str]:
    """The line that carries most by itself: the fewest conflicts on ``version`` in all (its own patches', and
    those of the fixes it lacks, which derive adopts where the release has the bug: counted as if it had, since only
    the judge's proofs tell); then the fewest releases between; of two as close, the older. With why, for derive's
    first line."""
    best = min(found, key=lambda c: c.rank)
    if len(found) == 1:
        return best.line, f"the only line of {best.line.package}: {best.said()}"
    others = "; ".join(c.said() for c in sorted(found, key=lambda c: c.rank) if c is not best)
    total = best.rank[0]
    return best.line, (
        f"the fewest conflicts on {version} in all, {total}: {best.said().split(': ', 1)[1]}; "
        f"{best.distance[0]} release(s) away; {others}"
    )


def derive(
    project: Project,
    spec: str,
    prove: Prove,
    *,
    source: str | None = None,
    set_name: str | None = None,
    companions: Sequence[str] = (),
    review: bool = False,
    log: Callable[[str], None] = CONSOLE,
) -> Derived:
    """Make the release line of ``spec`` (``pkg==version``): see the module's docstring. ``companions``
    (``pkg==version``, ``--with``): the lines of the other packages a new set pairs it with. ``review``
    (``--review``): wait in the work folder once every patch is carried, before anything is built or proven, even
    where nothing conflicted (a 3-way merge that applied but is wrong for this release is corrected there)."""
    package, version = parse_spec(spec)
    newest = project.line(package)  # checks the package
    _not_a_line(project, package, version)
    set_name = default_set(version) if set_name is None else set_name
    paired = companions_of(project, package, set_name, companions)
    workfolder.refuse_existing(project.root, package, version)
    releases = fetch.releases(package)
    artifact = _release(package, version, releases)
    if Version(version) > Version(newest.version):
        raise ConfigError(
            f"{package} {version} is newer than the newest line {newest.key}",
            f"`nox -s follow -- {package}` carries the newest line onto newer releases (and moves the set latest)",
        )
    _set_can_take(project, set_name, package)
    if source:
        from_line, why = project.line(package, source), "named by --from"
    else:
        found = candidates(project, package, version, artifact, [v for v, _, _ in releases])
        from_line, why = choose(found, version)
    done = Derived(package, version, from_line.version, set_name, source_series=_series_digest(from_line), why=why)
    done.companions = paired
    return _run(project, done, log, partial(_start, artifact=artifact, prove=prove, review=review))


def resume(
    project: Project, spec: str, prove: Prove, *, log: Callable[[str], None] = CONSOLE, new: Sequence[str] = ()
) -> Derived:
    """Go on with the derive of ``spec`` after its conflict was resolved in ``.rebase/<pkg>-<version>/repo``. The
    work folder's state is input: checked, every field, against ``spec`` and the project before anything runs.
    ``new``: the slugs of fixes the maintainer committed there on top of every carried patch (``--new``)."""
    package, version = parse_spec(spec)
    saved = workfolder.load(project.root, package, version)
    work = workfolder.path(project.root, package, version)
    again = f"`nox -s derive -- {spec} --abort`, then derive again"
    carried = engine.read_state(work, package, version, by="derive")
    _not_a_line(project, package, version)
    _set_can_take(project, saved["set"], package)
    source = next((ln for ln in project.lines[package] if ln.version == saved["source"]), None)
    if source is None:
        raise ConfigError(
            f"the line {package}/{saved['source']} this derive started from is not in the project any more (or "
            f"{work / workfolder.STATE} was changed): its resolution cannot be checked against it",
            again,
        )
    if carried["from"] != source.version:
        raise ConfigError(
            f'{work / "state.json"}: "from" is {workfolder.shown(carried["from"])}, not {source.version!r}, the line '
            f"{work / workfolder.STATE} names",
            again,
        )
    if _series_digest(source) != saved["source_series"]:
        raise ConfigError(
            f"the line {source.key} changed since this derive started from it: its resolution would carry an old "
            "series",
            again,
        )
    done = Derived(package, version, saved["source"], saved["set"], source_series=saved["source_series"])
    try:  # --with as the start named it, checked again against the project as it is now
        done.companions = companions_of(project, package, saved["set"], [f"{p}=={v}" for p, v in saved["with"].items()])
    except ConfigError as refused:
        raise ConfigError(
            f'{work / workfolder.STATE}: "with" names lines this derive cannot pair its set with: {refused.message}',
            again,
        ) from None
    done.verdicts = [Verdict(**v) for v in saved["verdicts"]]
    done.others = [Verdict(**v) for v in saved["others"]]
    done.copied = workfolder.digest(work, again)  # refuses a link or a special file (git's own left out)
    workfolder.git_settings(work / "repo", again)  # in the maintainer's folder: the copy's would name the scratch one
    done.waiting = str(work / "repo")
    return _run(project, done, log, partial(_resume, prove=prove, new=tuple(new)))


def abort(project: Project, spec: str) -> Path:
    """Remove the work folder of a derive waiting at a conflict (only one derive made, whatever its state file
    holds: a damaged one is what --abort is for): the folder removed."""
    package, version = parse_spec(spec)
    return workfolder.abort(project.root, package, version, "derive")


def _not_a_line(project: Project, package: str, version: str) -> None:
    if version in {line.version for line in project.lines[package]}:
        raise ConfigError(f"{package} {version} is a release line already", f"pip install '{package}=={version}+fixed'")


def _set_can_take(project: Project, set_name: str, package: str) -> None:
    """The set named for the line: a plain name, not `latest` (follow's), and, if it exists, one that names the
    package (its line is what derive moves). Checked before anything runs, and again on --continue."""
    if not config.SET_NAME.fullmatch(set_name):
        raise ConfigError(f"{set_name!r} is not a plain set name", "letters, digits, '.', '_' and '-', e.g. v4")
    if set_name == config.LATEST:
        raise ConfigError(
            f"the set {config.LATEST} is what new users install: `nox -s follow` moves it, to newer releases only",
            "name another set (--set), e.g. the default v<major>.<minor>",
        )
    members = project.sets.get(set_name)
    if members is not None and package not in members:
        raise ConfigError(
            f"the set {set_name} does not name {package}",
            f"name another set (--set), or add {package} to [set.{set_name}] first",
        )


def companions_of(project: Project, package: str, set_name: str, specs: Sequence[str]) -> dict[str, str]:
    """``--with``: each ``pkg==version`` names a line of another package, once, for a set derive makes; checked
    before anything runs, and again on --continue (package -> version)."""
    chosen: dict[str, str] = {}
    for spec in specs:
        pkg, version = parse_spec(spec)
        if pkg == package:
            raise ConfigError(f"--with {spec}: {package} is the package derive makes the line of", "leave it out")
        if pkg not in project.lines:
            raise ConfigError(
                f"--with {spec}: {pkg} is not a package of this project", f"its packages: {', '.join(project.lines)}"
            )
        if pkg in chosen:
            raise ConfigError(f"--with names {pkg} twice", "name one line of each package")
        lines = [line.version for line in project.lines[pkg]]
        if version not in lines:
            raise ConfigError(f"--with {spec}: {pkg} has no line {version}", f"its lines: {', '.join(lines)}")
        chosen[pkg] = version
    if chosen and set_name in project.sets:
        raise ConfigError(
            f"--with pairs a new set, and the set {set_name} exists: it pairs "
            + ", ".join(f"{p} {v}" for p, v in project.sets[set_name].items() if p != package),
            f"leave --with out to move that set, or name a new one (--set); a set's other lines are changed in "
            f"{project.sets_file.name}",
        )
    return chosen


def _series_digest(line: ReleaseLine) -> dict[str, str]:
    """Every file of the line's series folder, with its sha256: what --continue holds the source line to."""
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(line.patch_dir.iterdir()) if f.is_file()}


def _release(package: str, version: str, releases: list[tuple[str, Artifact, bool]]) -> Artifact:
    for v, artifact, yanked in releases:
        if v == version:
            if yanked:
                raise ConfigError(
                    f"{package} {version} is yanked on {fetch.index_url()}", "derive a line for another release"
                )
            return artifact
    order = [v for v, _, _ in releases]  # oldest first
    at = sum(Version(v) < Version(version) for v in order)
    raise ConfigError(
        f"{package} {version} is not a final release on {fetch.index_url()}",
        f"name one it lists, e.g. {', '.join(order[max(0, at - 3) : at + 2])}",
    )


def _run(project: Project, done: Derived, log: Callable[[str], None], step) -> Derived:
    """Run ``step(work, done, say)`` in a scratch copy; write it back when it went through. Stops name the
    project's files, never the scratch copy's."""
    t0 = time.perf_counter()

    def say(message: str) -> None:
        log(f"[{time.perf_counter() - t0:6.1f}s] {done.package} {done.version}: {message}")

    scratch = ""
    real = workfolder.path(project.root, done.package, done.version)
    try:
        with Scratch(project.root, "derive") as work:
            scratch = str(work.root)
            done.stop = step(work, done, say)
            if done.stop is None:
                with held_interrupts():
                    if done.copied is not None:  # the maintainer's folder, as --continue copied it, goes
                        workfolder.unchanged(real, done.copied, f"{done.package}=={done.version}")
                    done.written = work.commit()
                    if done.copied is not None:
                        workfolder.remove(real)
                done.waiting = ""
                say(f"wrote {len(done.written)} file(s) of overlay/ and patches/")
                fixtables.write_pending(done.tables, project.root, say)
    except PatchwheelError as exc:  # TreeChanged included: nothing was written
        done.stop = Stop(exc.message + (f" ({exc.hint})" if exc.hint else ""), _by_hand(done))
    if done.stop is not None:
        done.stop.named_in(scratch, str(project.root))
    done.seconds = time.perf_counter() - t0
    return done


def _start(
    work: Scratch, done: Derived, say: Callable[[str], None], *, artifact: Artifact, prove: Prove, review: bool = False
) -> Stop | None:
    project = config.load(work.root)  # the one load in the copy: each step passes on what it changed
    source = project.line(done.package, done.source)
    judged = upstream.Judged(keep=True)
    done.seen = judged.seen or {}
    say(f"from the line {source.key} ({done.why}); judging it (text, and proofs on the pristine release)")
    # The fixes only other lines carry first: where one is adopted, the release needs a line even if every patch
    # of the source is upstream there.
    done.others, adopted, others_stop = _judge_others(project, source, done, artifact, judged)
    done.verdicts, stop = policy.judge(
        project, source, done.version, artifact, judged, lambda p, v: _by_hand(done), needed=bool(adopted)
    )
    for v in done.verdicts:
        say(f"  {v.patch}: {v.text}, proof {v.behaviour} -> {v.decision or 'stop'}")
    if stop is not None:
        return stop
    for v in done.others:
        say(f"  {v.patch}: not in the line {source.version}; proof {v.behaviour} -> {v.decision or 'stop'}")
    if others_stop is not None:
        return others_stop
    said: list[str] = []
    dropped = policy.dropped(done.verdicts)
    carried = engine.carry_line(
        project, source, done.version, dropped=dropped, adopted=adopted, by="derive", log=said.append, review=review
    )
    if carried is None:
        return _wait(work, done, said)
    done.carried = [s for s in said if not s.startswith("  ")]
    return _finish(carried, work, done, prove, say)


def _resume(
    work: Scratch, done: Derived, say: Callable[[str], None], *, prove: Prove, new: tuple[str, ...] = ()
) -> Stop | None:
    real = workfolder.path(work.project, done.package, done.version)
    again = f"`nox -s derive -- {done.package}=={done.version} --abort`, then derive again"
    copied = workfolder.digest(real, again, into=workfolder.path(work.root, done.package, done.version))
    if copied != done.copied:  # the copy is of the folder as --continue found it, or nothing
        raise ConfigError(f"{real} changed while it was copied", "run --continue again")
    project = config.load(work.root)  # the one load in the copy
    said: list[str] = []
    say(f"carrying the rest of the line {done.source} (the conflict resolved in {real / 'repo'})")
    carried = engine.resume(project, done.package, done.version, log=said.append, by="derive", new=new)
    if carried is None:
        return _wait(work, done, said)
    done.carried = [s for s in said if not s.startswith("  ")]
    return _finish(carried, work, done, prove, say)


def _wait(work: Scratch, done: Derived, said: list[str]) -> Stop:
    """A conflict: the scratch copy's work folder becomes the project's ``.rebase/<pkg>-<version>/`` (with what
    derive needs to go on), in one step; nothing else is written."""
    state = {
        "source": done.source,
        "set": done.set_name,
        "verdicts": [v.__dict__ for v in done.verdicts],
        "others": [v.__dict__ for v in done.others],
        "source_series": done.source_series,
        "with": done.companions,
    }
    real = workfolder.path(work.project, done.package, done.version)
    spec = f"{done.package}=={done.version}"
    workfolder.put(workfolder.path(work.root, done.package, done.version), real, state, done.copied, spec)
    repo = real / "repo"
    done.waiting = str(repo)
    files = gitops.git(repo, "diff", "--name-only", "--diff-filter=U").decode().split()
    conflict = next((s.strip() for s in said if "CONFLICT" in s), None)
    if conflict is None:  # --review: every patch carried, nothing built yet
        carried = [s for s in said if not s.startswith(("  ", "every patch carried"))]
        merged = [s.split(":", 1)[0] for s in carried if ": 3-way" in s]
        onto = engine.read_state(real, done.package, done.version, by="derive")["onto"]
        return Stop(
            f"every patch carried ({'; '.join(carried)}): review each carried commit in {repo} before anything "
            f"is built{', the 3-way merges first (' + ', '.join(merged) + ')' if merged else ''}; nothing else was "
            "written",
            [
                f"git -C {repo} log -p --reverse {onto[:12]}..HEAD   # one commit a patch, oldest first",
                f"git -C {repo} rebase -i {onto[:12]}   # 'edit' a commit that is wrong for {done.version}, amend "
                "it (one commit a patch)",
                f"nox -s derive -- {spec} --continue",
                f"nox -s derive -- {spec} --abort      # instead: drop the work folder",
            ],
        )
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


def _finish(project: Project, work: Scratch, done: Derived, prove: Prove, say: Callable[[str], None]) -> Stop | None:
    """The line is written in the scratch copy (``project``: as it is now): name it in its set (and in [suite]
    where it is the newest line of its major version), retire the line its set named before if no set names it,
    matrix, lint, build, prove."""
    project, before = _name_in_set(project, done)
    say(done.set_change)
    major = Version(done.version).major
    newest_of_major = [ln for ln in project.lines[done.package] if Version(ln.version).major == major][-1]
    if project.suite is not None and newest_of_major.version == done.version and done.set_name not in project.suite:
        suite_add(project.sets_file, done.set_name)  # the suite proves the newest line of each major version
        project = config.changed(project, suite=(*project.suite, done.set_name))
        say(f"[suite] proves the set {done.set_name}: it names the newest line of {done.package} {major}.x")
    if before is not None:
        project, done.retired = retire(project, done.package, say, only={f"{done.package}/{before}"})
    project = restate_torch(project, [done.set_name], {f"{done.package}/{done.version}"}, say)
    line = project.line(done.package, done.version)
    say(f"the matrix: the line {line.key} on every release newer than it")
    judge_into_matrix(project, [line], Selection.parse([done.package]), upstream.Judged())
    problems = lintall.problems(project)
    if problems:
        return Stop("the new tree does not pass lint: " + "; ".join(problems), _by_hand(done))
    members_lines = {p: project.line(p, v) for p, v in project.sets[done.set_name].items()}
    done.tables = fixtables.pending(project, work.project, say)  # the project's README.md and docs/fixes.md
    done.runs = build_and_prove(project, members_lines, work, prove, say, done.seen)
    return proof_stop(f"{done.package} {done.version}", done.runs, _by_hand(done))


def _name_in_set(project: Project, done: Derived) -> tuple[Project, str | None]:
    """The new line named in its set (a new set takes the other packages' newest lines, or --with's): the project
    as it is then, and the version the set named before (None: a new set)."""
    members = project.sets.get(done.set_name)
    before = None if members is None else members[done.package]
    torch = project.torch
    if members is None:
        companions = {p: project.line(p).version for p in project.packages() if p != done.package}
        members = {done.package: done.version, **companions, **done.companions}
        floor = lint.set_floor(project, members)
        add_set(project.sets_file, done.set_name, members, floor)
        if torch is not None:
            torch = replace(torch, floors={**torch.floors, done.set_name: floor})
        done.set_change = f"the set {done.set_name} (new): " + ", ".join(f"{p} {v}" for p, v in members.items())
    else:
        set_member(project.sets_file, done.set_name, done.package, done.version)
        members = {**members, done.package: done.version}
        done.set_change = f"the set {done.set_name}: {done.package} {before} -> {done.version}"
    return config.changed(project, sets={**project.sets, done.set_name: members}, torch=torch), before


def _judge_others(
    project: Project, source: ReleaseLine, done: Derived, artifact: Artifact, judged: upstream.Judged
) -> tuple[list[Verdict], list[tuple[ReleaseLine, series.Patch]], Stop | None]:
    """The proofs of the fixes the other lines carry and ``source`` does not (by slug; features are capabilities,
    not bugs), on the pristine release: a bug still there is fixed by adopting that line's patch (the newest line's
    form of the fix), carried after the source's own; a proof that cannot judge stops it."""
    carried = {p.slug for p in series.parse_series(source)}
    others: dict[str, tuple[ReleaseLine, series.Patch]] = {}
    for line in project.lines[done.package]:
        for p in series.parse_series(line):
            if not p.is_feature and p.slug not in carried:
                others[p.test_module] = (line, p)  # the newest line's patch of a module names it
    if not others:
        return [], [], None
    wheels = [(done.package, artifact)] + upstream.companions(project, source)
    env = proofenv.release_env(project.cache, wheels)
    outcomes = judged.get_many(env, sorted(others), judged.runner(env, project.root))
    verdicts, adopted, problems = [], [], []
    for module, (line, p) in sorted(others.items()):
        o = outcomes[module]
        v = Verdict(f"{p.name} ({line.key})", "n/a", o.verdict, o.detail)
        if o.verdict == "passes":
            v.decision = f"nothing to carry: its proof passes on pristine {done.package} {done.version}"
        elif o.verdict == "fails":
            v.decision = f"adopted from the line {line.version}: its bug is in {done.package} {done.version}"
            adopted.append((line, p))
        else:
            problems.append(
                f"{p.name} of {line.key}: its proof cannot judge pristine {done.package} {done.version} ({o.detail})"
            )
        verdicts.append(v)
    adopted.sort(key=lambda lp: (Version(lp[0].version), lp[1].name))
    return verdicts, adopted, (Stop("; ".join(problems), _by_hand(done)) if problems else None)


def _by_hand(done: Derived) -> list[str]:
    """What a maintainer runs once a stop is dealt with (docs/maintainers/derive.md): the first, again."""
    spec = f"{done.package}=={done.version}"
    if done.waiting:  # the work folder waits: it goes on from there, or is dropped
        again = [
            f"nox -s derive -- {spec} --continue   # again, once it is dealt with (the resolution waits in "
            f"{done.waiting})",
            f"nox -s derive -- {spec} --abort      # or drop the work folder",
        ]
    else:
        again = [
            f"nox -s derive -- {spec} --from {done.source} --set {done.set_name}   # again, once it is dealt with",
            f"nox -s derive -- {spec} --from {done.source} --set {done.set_name} --review   # or stop after the "
            "carry, to correct a patch that merged but is wrong (a 3-way merge is text; the proofs judge it)",
            f"nox -s derive -- {spec} --from <another line>   # or from another line",
        ]
    return again + [f"nox -s matrix -- run {spec}   # what every line says about {done.version}, by text and by proofs"]
