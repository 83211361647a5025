"""`patchwheel lint`: every problem of a release line that the suite refuses, in one list.

The series and its patch files (names, trailers, what git applies: :func:`patches.lint_line`), the committed
matrix against the trailers (:meth:`Matrix.problems`), and the build record (:func:`buildno.problem`). `follow`
asks the same of the tree it is about to write."""

from __future__ import annotations

from packaging.version import Version

from . import buildno, matrix_checks, patches
from .config import LATEST, Project, ReleaseLine
from .matrix import Matrix


def line_problems(project: Project, line: ReleaseLine, matrix: Matrix | None) -> list[str]:
    """The first kind of problem the line has (its series, else the matrix, else its build record); none: []."""
    problems = patches.lint_line(line, project.root)
    if not problems and matrix is not None:
        problems = matrix_checks.problems(matrix, line.key, patches.load_series(line))
    if not problems and (why := buildno.problem(line)):
        problems = [why]
    return problems


def suite_problems(project: Project) -> list[str]:
    """What ``[suite]`` of overlay/sets.toml must name, since the default suite proves only those sets (the daily
    sets workflow proves every set): the set ``latest``, and for each package the newest line of each of its major
    versions (transformers 4.x and 5.x), which are the lines most users run."""
    if project.suite is None:  # no [suite]: the default suite proves every set
        return []
    where = f"{project.sets_file.relative_to(project.root)}: [suite] sets"
    out = []
    if LATEST in project.sets and LATEST not in project.suite:
        out.append(f"{where} leaves out {LATEST}, what new users install: add it")
    proven = {(pkg, v) for name in project.suite for pkg, v in project.sets[name].items()}
    for pkg in project.packages():
        newest = {Version(line.version).major: line for line in project.lines[pkg]}  # oldest first: the newest stays
        for major, line in sorted(newest.items()):
            if (pkg, line.version) not in proven:
                naming = sorted(n for n, m in project.sets.items() if m.get(pkg) == line.version)
                out.append(
                    f"{where} proves no set naming {line.key}, the newest line of {pkg} {major}.x: add "
                    + (f"{' or '.join(naming)} to it" if naming else "a set naming it to overlay/sets.toml and to it")
                )
    return out
