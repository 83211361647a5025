"""What the committed matrix says, checked: against a fresh run of the same cells (the staleness check), against
the patches' trailers (the lint rule: a ⚠ that no trailer explains), and which releases a staleness check must run
to cover every Drop-When transition; and what a cell means for its patch (:func:`decide`, the one verdict policy)."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from ..series import DROP_BY_BEHAVIOUR, Patch
from .table import WHERE, Cell, LineMatrix, Matrix, Row, changes, drop_when_met, flags

#: The rules of :func:`decide`: each one's decision (``carry`` the patch, ``drop`` it, or ``stop`` for a maintainer)
#: and why, in words a report can use. `follow`, `derive` and the watch word them for their readers, by rule.
RULES = {
    "feature-drop-when": ("stop", "a feature whose Drop-When holds: drop it by hand"),
    "feature-upstream": ("drop", "upstream has the change"),
    "feature": ("carry", "a feature, carried by its text"),
    "passes-before-drop-when": (
        "stop",
        "its proof passes before its Drop-When: upstream fixed it earlier, or the proof is too weak",
    ),
    "passes": ("drop", "its proof passes on the pristine release"),
    "fails-drop-when": ("stop", "its Drop-When holds, but its proof still fails"),
    "fails-upstream-text": ("stop", "upstream has its text, but its proof still fails"),
    "fails-conflict": ("carry", "its proof still fails, and its text conflicts (the rebase stops there)"),
    "fails": ("carry", "its proof still fails"),
    "unjudged": ("stop", "its proof cannot judge the pristine release"),
}


@dataclass(frozen=True)
class Decision:
    rule: str  # a key of RULES

    @property
    def kind(self) -> str:
        return RULES[self.rule][0]

    @property
    def why(self) -> str:
        return RULES[self.rule][1]


def decide(cell: Cell, feature: bool) -> Decision:
    """The one verdict policy of a patch's cell on another release: `follow` and `derive` act on it, the watch
    reports by it. A feature, which no proof judges, goes by its text; a fix by its proof, with Drop-When and the text
    as checks on it: a proof that passes before Drop-When holds, or fails once it holds or once upstream has the text,
    needs a person."""
    if feature:
        return Decision(
            "feature-drop-when"
            if cell.drop_when_met
            else "feature-upstream"
            if cell.text == "already-upstream"
            else "feature"
        )
    if cell.behaviour == "passes":
        return Decision("passes-before-drop-when" if cell.drop_when_met is False else "passes")
    if cell.behaviour != "fails":
        return Decision("unjudged")
    if cell.drop_when_met:
        return Decision("fails-drop-when")
    return Decision({"already-upstream": "fails-upstream-text", "conflict": "fails-conflict"}.get(cell.text, "fails"))


#: A proof run's detail where no environment could be made for the release (proofenv's judge writes it).
NO_ENVIRONMENT = "no environment: "


@dataclass(frozen=True)
class Finding:
    """One way a fresh run disagrees with the committed matrix. ``kind``: ``stale`` (the matrix no longer says what
    a run under its own torch gives), ``unjudged`` (the release's environment could not be made: nothing is known
    of the cell), ``torch`` (the run used another torch than the cell was judged on, and its verdict differs)."""

    kind: str
    text: str


def compare(matrix: Matrix, fresh_lines: list[LineMatrix]) -> list[Finding]:
    """How a fresh run (text, behaviour where run) differs from the committed ``matrix``: like is compared with
    like, so a cell judged on another torch, or not judged at all, is never called stale."""
    out: list[Finding] = []
    lost: set[tuple[str, str]] = set()
    for fresh in fresh_lines:
        old = matrix.line(fresh.line)
        if old is None:
            out.append(Finding("stale", f"{fresh.line}: not in the committed matrix"))
            continue
        for p in fresh.patches:
            prev_row = old.row(p.name)
            for version, cell in p.cells.items():
                prev = prev_row.cells.get(version) if prev_row else None
                if prev is None:
                    out.append(
                        Finding("stale", f"{fresh.line} {p.name} vs {version}: missing from the committed matrix")
                    )
                    continue
                if prev.text != cell.text:
                    out.append(
                        Finding(
                            "stale",
                            f"{fresh.line} {p.name} vs {version}: text is {cell.text}, the committed matrix says "
                            f"{prev.text}",
                        )
                    )
                ran = cell.behaviour is not None and cell.inferred_from is None  # only what was run
                if not ran or prev.behaviour == cell.behaviour:
                    continue
                detail = cell.behaviour_detail or ""
                if cell.behaviour == "error" and detail.startswith(NO_ENVIRONMENT):
                    if (fresh.package, version) not in lost:  # one finding per release: one environment
                        lost.add((fresh.package, version))
                        why = detail[len(NO_ENVIRONMENT) :]
                        out.append(
                            Finding(
                                "unjudged",
                                f"the environment for {fresh.package} {version} could not be made ({why})",
                            )
                        )
                    continue
                says = "infers" if prev.inferred_from is not None else "says"
                if prev.torch is not None and cell.torch is not None and prev.torch != cell.torch:
                    out.append(
                        Finding(
                            "torch",
                            f"{fresh.line} {p.name} vs {version}: behaviour under torch {cell.torch} is "
                            f"{cell.behaviour}, the committed matrix {says} {prev.behaviour} under torch {prev.torch}",
                        )
                    )
                    continue
                out.append(
                    Finding(
                        "stale",
                        f"{fresh.line} {p.name} vs {version}: behaviour is {cell.behaviour}, "
                        f"the committed matrix {says} {prev.behaviour}",
                    )
                )
    return out


def transition_releases(matrix: Matrix) -> list[str]:
    """The smallest set of releases (``pkg==version``) on which a staleness check covers every Drop-When
    transition: where a patch's Drop-When starts (or stops) to hold, and, for a patch dropped by its proof, where
    its verdict changes to or from passing (the release before it was run when the matrix was written)."""
    out: set[tuple[str, str]] = set()
    for line in matrix.lines:
        for p in line.patches:
            by_proof = p.drop_when == DROP_BY_BEHAVIOUR
            present = [v for v in line.versions if v in p.cells and (not by_proof or p.cells[v].behaviour is not None)]

            def drop(v: str, p: Row = p, by_proof: bool = by_proof) -> object:
                return p.cells[v].behaviour == "passes" if by_proof else p.met(v)

            out |= {(line.package, b) for _, b in changes(present, drop)}
    return [f"{pkg}=={v}" for pkg, v in sorted(out, key=lambda pv: (pv[0], Version(pv[1])))]


def problems(matrix: Matrix, line_key: str, series: list[Patch]) -> list[str]:
    """What the committed ``matrix`` says against the patches' trailers (the lint rule): a ⚠ cell no trailer explains, a
    Fixed-In release where the proof still fails, a matrix written with other trailers than the series has."""
    out: list[str] = []
    line = matrix.line(line_key)
    for patch in series:
        row = line.row(patch.name) if line else None
        if row is None:
            continue
        status = patch.trailers.get("Upstream-Status", "").split()
        if (row.drop_when, row.upstream_status) != (
            patch.trailers.get("Drop-When"),
            patch.trailers.get("Upstream-Status"),
        ):
            out.append(
                f"{line_key} {patch.name}: {WHERE} was written with other trailers "
                "(Drop-When, Upstream-Status): run `nox -s matrix -- rerender` and commit it"
            )
        for version, cell in row.cells.items():
            found = flags(drop_when_met(patch.trailers.get("Drop-When"), version), cell.behaviour)
            detail = cell.behaviour_detail or ""
            if status and status[0] == "Fixed-In" and version == status[1] and cell.behaviour == "fails":
                out.append(
                    f"{line_key} {patch.name}: Upstream-Status says Fixed-In {version}, but the proof still "
                    f"fails there ({detail}): write 'Partial-Fix-In {version} <the failing test>'"
                )
            explained = (
                len(status) == 3
                and status[0] == "Partial-Fix-In"
                and Version(status[1]) <= Version(version)
                and detail.startswith(status[2].split("::")[-1] + ":")
            )
            if found and not explained:
                out.append(
                    f"{line_key} {patch.name} vs {version}: ⚠ {found[0]} ({detail}), and no trailer explains "
                    "it: correct Drop-When, or record 'Upstream-Status: Partial-Fix-In <version> <test>'"
                )
    return out
