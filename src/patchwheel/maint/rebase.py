"""Rebase a release line onto a newer upstream release by hand: ``patchwheel rebase <pkg> <version>``.

The door of the carry engine (:mod:`.carry`) that carries without proving: the newest line's patches are judged on
the pristine new release by the one policy (:func:`carry.policy.judge`, the same as `follow`'s and `derive`'s), then
carried by text (:func:`carry.engine.carry_line`), which writes ``patches/<pkg>/<version>/``, the pin, the first
build record and the vendored modules. Where a maintainer must judge it stops (exit 1), saying why and with the
commands; at a conflict the work folder ``.rebase/<pkg>-<version>/`` waits: ``--continue`` goes on after the
conflict is resolved, ``--abort`` removes it. ``--text-only`` runs no proof: nothing is dropped (the policy drops a
fix only by its proof), and a patch whose text is upstream stops it. The old line is left as it was.
"""

from __future__ import annotations

from packaging.version import Version

from .. import gitops
from ..config import Project
from ..errors import ConfigError
from ..reporter import CONSOLE
from ..series import checked_series
from ..wheels import buildno, fetch, vendored
from . import fixtables
from .carry import engine, policy, workfolder
from .carry.outcome import Stop
from .upstream import matrixrun as upstream
from .workrepo import WorkRepo


def start(project: Project, package: str, version: str, *, behaviour: bool = True, log=CONSOLE) -> bool:
    """Start a rebase of the newest line onto a newer release: True when the new line was written, False when it
    stopped (the policy's stop, or a conflict left in the work folder with the commands to go on). ``behaviour``:
    judge by the one policy (proofs on the pristine release); without it nothing is dropped."""
    version = engine.version_of(version)
    old = project.line(package)
    if Version(version) <= Version(old.version):
        raise ConfigError(
            f"{version} is not newer than the newest line {old.key}",
            f"rebase onto a newer release; for an older one, `nox -s derive -- {package}=={version}`",
        )
    engine.check_free(project, old.package, version, "rebase")
    dropped: dict[str, str] = {}
    if behaviour:
        artifact = fetch.release_artifacts(package, version)[0]
        verdicts, stop = policy.judge(project, old, version, artifact, upstream.Judged(), by_hand)
        for v in verdicts:
            log(f"{v.patch}: {v.text}, proof {v.behaviour} -> {v.decision or 'stop'}")
        if stop is not None:
            said(stop, log)
            return False
        dropped = policy.dropped(verdicts)
    return _written(engine.carry_line(project, old, version, dropped=dropped, log=log), log)


def said(stop: Stop, log=CONSOLE) -> None:
    """A stop, for the terminal: why, and the maintainer's commands."""
    log(f"STOPPED, nothing written: {stop.why}")
    log("  a maintainer takes it from here:")
    for command in stop.commands:
        log(f"    {command}")


def by_hand(package: str, version: str) -> list[str]:
    """What a maintainer runs once the policy's stop is dealt with."""
    return [
        f"nox -s matrix -- run {package}=={version}   # what the line's patches say about {version}, text and proofs",
        f"nox -s rebase -- {package} {version}   # again, once the patch, its proof or its Drop-When is corrected",
    ]


def resume(project: Project, package: str, version: str, *, log=CONSOLE) -> bool:
    """Go on after a conflict was resolved in the work repository (:func:`carry.engine.resume`)."""
    return _written(engine.resume(project, package, version, log=log, by="rebase"), log)


def _written(carried: Project | None, log) -> bool:
    """The line was written (its fix tables too, from its series), or the carry waits at a conflict."""
    if carried is None:
        return False
    fixtables.write_pending(fixtables.pending(carried, log=log), carried.root, log)
    return True


def abort(project: Project, package: str, version: str) -> str:
    """Remove the work folder of a rebase waiting at a conflict (only one the carry engine made): its path."""
    version = engine.version_of(version)
    package = project.line(package).package
    return str(workfolder.abort(project.root, package, version, by="rebase"))


def reexport(project: Project, package: str, version: str, log=CONSOLE) -> None:
    """Re-export a line's patches through `git am` onto the pristine release and `git format-patch`, so that a
    patch edited by hand gets correct `index` lines (and the ones after it too). Nothing else changes."""
    engine.version_of(version)  # a clear error for a typo; the line itself is named as its pin names it
    line = project.line(package, version)
    series = checked_series(line, messages=False)
    with WorkRepo.of_line(line, series) as work:
        for p in series:
            new = gitops.format_patch(work.path, work.commits[p.name])
            if new != p.raw:
                p.path.write_bytes(new)
                log(f"refreshed {p.path}")
    if vendored.write(project, [line], log=lambda m: None):
        log(f"wrote the fixed modules of {line.key} into overlay/{line.key}/")
    buildno.bump_unless_draft(project, line, log=log)
