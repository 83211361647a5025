"""`patchwheel lint`: every problem of a release line that the suite refuses, in one list.

The series and its patch files (names, trailers, what git applies: :func:`patches.lint_line`), the committed
matrix against the trailers (:meth:`Matrix.problems`), and the build record (:func:`buildno.problem`). `follow`
asks the same of the tree it is about to write."""

from __future__ import annotations

from . import buildno, matrix_checks, patches
from .config import Project, ReleaseLine
from .matrix import Matrix


def line_problems(project: Project, line: ReleaseLine, matrix: Matrix | None) -> list[str]:
    """The first kind of problem the line has (its series, else the matrix, else its build record); none: []."""
    problems = patches.lint_line(line, project.root)
    if not problems and matrix is not None:
        problems = matrix_checks.problems(matrix, line.key, patches.load_series(line))
    if not problems and (why := buildno.problem(line)):
        problems = [why]
    return problems
