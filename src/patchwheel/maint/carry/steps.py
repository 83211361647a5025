"""The steps `follow` and `derive` share after the carry engine wrote a line: retire the lines no set keeps, judge
lines into the committed matrix, build a set into the scratch copy and prove it both ways, and the stop when a run
failed."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from ... import config
from ...config import Project, ReleaseLine
from ...configfiles import record_retired, remove_release
from ...matrix.table import Matrix
from ...wheels import vendored
from ...wheels.build import build
from ..proving import proofenv
from ..proving.setruns import Run
from ..upstream import matrixrun as upstream
from ..upstream.selection import Selection
from .outcome import Stop
from .scratch import Scratch

#: ``prove(project, members, dist, log, seen)``: the runs that prove the set ``members`` (package -> line) both
#: ways, with its +fixed wheels in ``dist``; ``seen``: the proof cases the judge's runs observed, per environment,
#: which a run in the same environment on the same inputs judges instead of running again. The real one is
#: :func:`setruns.prove_set`.
Prove = Callable[[Project, dict[str, ReleaseLine], Path, Callable[[str], None], dict[str, list[dict]]], list[Run]]


def retained(project: Project) -> set[str]:
    """The retention rule: the lines a consumer set names, and each package's newest line."""
    named = {f"{pkg}/{version}" for members in project.sets.values() for pkg, version in members.items()}
    return named | {lines[-1].key for lines in project.lines.values()}


def retire(
    project: Project, pkg: str, say: Callable[[str], None], only: set[str] | None = None
) -> tuple[Project, list[str]]:
    """Remove the lines of ``pkg`` the retention rule does not keep (of ``only``, where given: line keys): series,
    pin, vendored modules (another package's lines are its own follow's business). Their wheels, once published,
    stay on the index, and git keeps the files; the pins keep the build number each reached ([retired]), so that a
    line made again for the release never gives a published name other bytes. The project without them, and their
    keys."""
    keep = retained(project)
    gone = [ln for ln in project.lines[pkg] if ln.key not in keep and (only is None or ln.key in only)]
    for line in gone:
        shutil.rmtree(line.patch_dir)
        pins = project.pins_file(line.package)
        record_retired(pins, line.version, max(line.build.number if line.build else 1, line.retired_build))
        remove_release(pins, line.version)
        say(f"retired the line {line.key}: no consumer set names it, and it is not the newest")
    if gone:
        project = config.changed(project, lines={pkg: [ln for ln in project.lines[pkg] if ln not in gone]})
        vendored.write(project, log=lambda m: None)  # removes their overlay/ folders, NOTICE
    return project, [line.key for line in gone]


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


def judge_into_matrix(
    project: Project, lines: list[ReleaseLine], selection: Selection, judged: upstream.Judged
) -> None:
    """Judge ``lines`` on the selected releases newer than each (bisecting as the matrix check does) into the
    committed matrix, the rows of lines no longer pinned removed; refused when the matrix was judged with another
    torch than this run's proofs use."""
    committed = Matrix.load(project.matrix_json) or Matrix()
    torch = proofenv.torch_version()
    committed.check_torch(torch)  # before the judging, which takes minutes
    judged_lines = []
    for ln in lines:
        known = upstream.committed_verdicts(project, ln)  # another line's runs: no environment for those releases
        judged_lines.append(
            upstream.check_line(project, ln, selection, selection, judged=judged, bisect=True, known=known)
        )
    matrix = committed.merged(judged_lines, torch=torch)
    matrix.keep_lines({line.key for line in project.all_lines()})
    matrix.save(project.matrix_json)
