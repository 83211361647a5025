"""The one policy of every door: a line's patches judged on another release, by text and by their proofs on the
pristine release (the matrix check's own cell), each decided by :func:`matrix_checks.decide`: carry, drop, or stop
where a maintainer must judge (a proof that passes before its Drop-When holds, a text upstream with a proof that
still fails, a proof that cannot judge, a series that would be left empty). The carry engine drops only what
:func:`dropped` names."""

from __future__ import annotations

from collections.abc import Callable

from ... import series
from ...config import Artifact, Project, ReleaseLine
from ...matrix.checks import decide
from ..proving import proofenv
from ..upstream import matrixrun as upstream
from ..upstream.selection import Selection
from .outcome import Stop, Verdict

#: What every door says for each rule of :func:`matrix_checks.decide`: the problem it stops on, or the decision it
#: records.
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
    by_hand: Callable[[str, str], list[str]],
    needed: bool = False,
) -> tuple[list[Verdict], Stop | None]:
    """The verdicts of the line's patches on ``version`` (newer or older than the line), with the decision each,
    or the stop: the one policy of every door. ``by_hand(pkg, version)``: the commands a stop names. ``needed``: the
    release needs a line whatever this one's patches say (derive adopts another line's fix there)."""
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
    if not problems and not needed and all(v.decision.startswith("dropped") for v in verdicts):
        problems.append(f"every patch of {line.key} is upstream in {version}: is a +fixed line still needed?")
    if not problems:
        return verdicts, None
    env = proofenv.release_env_path(project.cache, [(line.package, artifact)] + upstream.companions(project, line))
    see = [f"{env}/bin/python -m pytest {test} --proof-expect=observe   # why it cannot judge" for test in unjudged]
    return verdicts, Stop("; ".join(problems), see + by_hand(line.package, version))


def dropped(verdicts: list[Verdict]) -> dict[str, str]:
    """What the carry engine leaves out: the patches the policy dropped, with why (the new series says it)."""
    return {v.patch: v.decision.removeprefix("dropped: ") for v in verdicts if v.decision.startswith("dropped")}
