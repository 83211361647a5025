"""The one lint: everything `patchwheel lint` checks (and so `nox -s lint`, which runs it), which `follow` and
`derive` ask of the tree they are about to write.

Each release line: its series and patch files (:func:`series.lint_line`), the committed matrix against the
trailers and the build record (:func:`patchwheel.lint.record_problems`), the upstream signatures and names its
patches keep or declare (:func:`patchwheel.lint.signature_problems`), then, on a package's newest line, the
upstream-pr/ folders export sends upstream (:func:`submission.upstream_pr_problems`). The whole project besides:
the sets the default suite proves, the torch floors, the files under patches/ and overlay/, the fix tables of
README.md and docs/fixes.md against the series (:mod:`.fixtables`), and the vendored modules in
overlay/ against pristine + series (what `vendor --check` checks). Pristine + series is made once per line, for the
signature check and the overlay's (:class:`Generated`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .. import lint, series, signatures
from ..config import Project, ReleaseLine
from ..errors import PatchwheelError
from ..matrix.table import Matrix
from ..wheels import vendored
from . import fixtables
from .export import submission


@dataclass(frozen=True)
class Part:
    """One thing lint checks: what (``title``), a note on what was compared, and its problems (empty: ok)."""

    title: str
    note: str
    problems: list[str]
    of_line: bool = False  # a release line's: listed with its key in a flat list of problems
    problems_first: bool = False  # printed before its summary line (as `vendor --check` prints them)

    def lines(self) -> list[str]:
        """The part as `patchwheel lint` prints it."""
        head = f"{self.title}: {'FAILED' if self.problems else 'ok'}" + (f" ({self.note})" if self.note else "")
        said = [f"  - {p}" for p in self.problems]
        return said + [head] if self.problems_first else [head] + said


class Generated:
    """Pristine + series of each line (:func:`vendored.generate`), made once in a lint run: the signature check
    reads it, then the overlay check compares overlay/ with it. A line whose series cannot be made raises its error
    again each time it is asked for."""

    def __init__(self) -> None:
        self._made: dict[str, vendored.Vendored | PatchwheelError] = {}
        self.reader = signatures.ApiReader()  # the modules' APIs, read once in the run

    def __call__(self, line: ReleaseLine) -> vendored.Vendored:
        if line.key not in self._made:
            try:
                self._made[line.key] = vendored.generate(line)
            except PatchwheelError as exc:
                self._made[line.key] = exc
        made = self._made[line.key]
        if isinstance(made, PatchwheelError):
            raise made
        return made


def line_problems(
    project: Project, line: ReleaseLine, matrix: Matrix | None, generated: Generated | None = None
) -> list[str]:
    """Everything lint asks of one line: its series, the matrix and its build record, the upstream signatures its
    patches keep, then, on a package's newest line, what export sends upstream (the one ``line_problems``)."""
    problems = lint.record_problems(project, line, matrix)
    problems += _signature_problems(line, generated or Generated(), problems)
    if not problems and line.key == project.lines[line.package][-1].key:
        problems = submission.upstream_pr_problems(project.root, line)
    return problems


def _signature_problems(line: ReleaseLine, generated: Generated, found: list[str]) -> list[str]:
    """The signature check of a line whose series can be made (a series lint refuses is not: ``found`` says what to
    fix first); where a valid series cannot be made (a patch does not apply), that is the problem."""
    try:
        made = generated(line)
    except PatchwheelError as exc:
        return [] if found else [f"pristine + series cannot be made, so its signatures are not checked: {exc.message}"]
    return lint.signature_problems(made, generated.reader)


def parts(project: Project, lines: list[ReleaseLine] | None = None) -> Iterator[Part]:
    """What lint checks of ``lines`` (None: the whole project, which adds the project's own parts), in order."""
    matrix = Matrix.load(project.matrix_json)
    generated = Generated()
    for line in project.all_lines() if lines is None else lines:
        problems = line_problems(project, line, matrix, generated)
        n = len(series.series_names(line)) if not problems else "?"
        yield Part(line.key, f"{n} patch(es)", problems, of_line=True)
    if lines is None:
        yield Part("overlay/sets.toml [suite]", "", lint.suite_problems(project))
        yield Part("overlay/sets.toml [torch]", "floors against Requires-Dist", lint.torch_problems(project))
        yield Part("patches/, overlay/", "only the files lint knows", lint.tree_problems(project))
        yield Part("README.md, docs/fixes.md", "the fix tables against the series", fixtables.problems(project))
    yield overlay_part(project, lines, generated)


def overlay_part(project: Project, lines: list[ReleaseLine] | None, generated: Generated | None = None) -> Part:
    """The vendored modules against pristine + series (every line, the NOTICE and stale folders when ``lines`` is
    None): lint's last part, and all of `vendor --check`."""
    n = len(project.all_lines() if lines is None else lines)
    note = f"{n} release line(s) compared with pristine + series"
    problems = vendored.overlay_problems(project, lines, generated or Generated())
    return Part("overlay/", note, problems, problems_first=True)


def problems(project: Project) -> list[str]:
    """Every problem lint finds in the whole project, one flat list (a line's named by its key)."""
    return [f"{p.title}: {why}" if p.of_line else why for p in parts(project) for why in p.problems]
