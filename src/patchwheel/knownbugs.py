"""Which known bugs affect an environment's pristine transformers or accelerate.

The evidence is the project's own. For a release that is a release line of this project (``patches/<pkg>/<X>/``),
every patch with a ``Proof-Test`` is a bug: its proof fails on that pristine release, in the suite. For any other
release, the committed upstream matrix (:class:`matrix.Matrix`) says which proofs failed there. Releases the matrix
did not judge by behaviour are reported as unmeasured, never guessed. Features (``Feature-Test``) are not bugs.
+fixed builds are judged by their manifest (``status``), not here.
"""

from __future__ import annotations

from .config import Project
from .matrix.table import Cell, LineMatrix, Matrix, Row
from .series import parse_series, test_refs


def _tests(trailer: str) -> str:
    """A Proof-Test trailer for people: the module, and how many of its tests when it lists several."""
    refs = test_refs(trailer)
    return trailer if len(refs) == 1 else f"{refs[0][0]}, {len(refs)} of its tests"


def _fixed_builds(project: Project, package: str) -> list[str]:
    return [line.fixed_version for line in project.lines.get(package, [])]


def derive_command(package: str, version: str) -> str:
    """What the project's maintainers run to make a +fixed line of a release it has none of."""
    return f"nox -s derive -- {package}=={version}"


def for_package(project: Project, matrix: Matrix | None, package: str, version: str) -> dict:
    """``{"bugs": [...], "measured": bool, "install": str | None, "fixed_builds": [...], "derive": str | None}`` for
    a pristine release: ``derive`` is the command that makes a line of it, where the project has none."""
    own = next((line for line in project.lines.get(package, []) if line.version == version), None)
    bugs: list[dict] = []
    if own is not None:
        for patch in parse_series(own):  # a draft too: its proof runs on pristine (status)
            test = patch.trailers.get("Proof-Test")
            if not test:
                continue
            bugs.append(
                {
                    "package": package,
                    "version": version,
                    "fix": patch.slug,
                    "subject": patch.subject,
                    "upstream_issue": patch.trailers.get("Upstream-Issue", ""),
                    "evidence": f"its proof ({_tests(test)}) fails on pristine {package} {version} in this project's "
                    "suite",
                }
            )
        install = f"{package}=={own.fixed_version}"
        return {"bugs": bugs, "measured": True, "install": install, "fixed_builds": [], "derive": None}
    issues = {
        p.slug: p.trailers.get("Upstream-Issue", "")
        for line in project.lines.get(package, [])
        for p in parse_series(line)
    }
    judged = matrix_verdicts(matrix, package, version)
    bugs = [
        {
            "package": package,
            "version": version,
            "fix": slug,
            "subject": row.subject,
            "upstream_issue": issues.get(slug, ""),
            "evidence": (
                f"its proof fails on pristine {package} {version} (matrix check, line {mline.line}): "
                f"{cell.behaviour_detail or ''}"
            ),
        }
        for slug, (mline, row, cell) in judged.items()
        if cell.behaviour == "fails"
    ]
    return {
        "bugs": bugs,
        "measured": bool(judged),
        "install": None,
        "fixed_builds": _fixed_builds(project, package),
        "derive": derive_command(package, version),
    }


def matrix_verdicts(matrix: Matrix | None, package: str, version: str) -> dict[str, tuple[LineMatrix, Row, Cell]]:
    """Each fix whose proof the committed matrix ran (or inferred) on pristine ``package`` ``version``, by slug:
    the line, row and cell that judged it ("fails": the release has the bug; "passes": it does not). The newest line
    that judged a fix speaks for it: its patches describe the newest form of each fix."""
    judged: dict[str, tuple[LineMatrix, Row, Cell]] = {}
    lines = [m for m in (matrix.lines if matrix else []) if m.package == package]
    for mline in reversed(lines):
        for row in mline.patches:
            cell = row.cells.get(version)
            if cell is not None and cell.behaviour in ("fails", "passes") and row.slug not in judged:
                judged[row.slug] = (mline, row, cell)
    return judged


def annotate(project: Project, matrix: Matrix | None, report: dict) -> dict:
    """``report`` (from ``status.report``) with ``known`` added to each pristine package."""
    for p in report["packages"]:
        if p.get("installed") and not p.get("fixed"):
            p["known"] = for_package(project, matrix, p["package"], p["version"])
    return report


def affected(report: dict) -> bool:
    return any(p.get("known", {}).get("bugs") for p in report["packages"])


def render(report: dict) -> str:
    """Lines to print after ``status.render``: the known bugs of each pristine package, and what to install."""
    out: list[str] = []
    for p in report["packages"]:
        known = p.get("known")
        if known is None:
            continue
        name, version = p["package"], p["version"]
        if not known["measured"]:
            out.append(
                f"  {name} {version}: not measured by this project (no proof ran on it); "
                f"+fixed builds: {', '.join(known['fixed_builds']) or 'none'}"
            )
            out.append(f"      a +fixed line of {version}, judged and proven, is made with: {known['derive']}")
            continue
        if not known["bugs"]:
            out.append(f"  {name} {version}: no known bug (every proof run on it passes)")
            continue
        out.append(f"  {name} {version}: {len(known['bugs'])} known bug(s)")
        for bug in known["bugs"]:
            out.append(f"      {bug['fix']}: {bug['subject']}")
            out.append(f"          {bug['evidence'][:200]}")
            if bug["upstream_issue"]:
                out.append(f"          upstream: {bug['upstream_issue']}")
        if known["install"]:
            out.append(f"      install the fixes: pip install '{known['install']}' (from the +fixed index)")
        else:
            builds = ", ".join(known["fixed_builds"]) or "none"
            out.append(f"      no +fixed build of {version}; +fixed builds: {builds}")
            out.append(f"      its maintainers make one for {version} with: {known['derive']}")
    return ("known bugs (this project's proofs):\n" + "\n".join(out)) if out else ""
