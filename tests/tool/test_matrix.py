"""The committed matrix as a model: merged runs keep what was run, cells are inferred by one rule, the staleness
check and the lint rule read it, and its Markdown shows upstream's text literally."""

from __future__ import annotations

from typing import Any

from conftest import CORE
from patchwheel import cli, series
from patchwheel.maint.upstream import matrixrun as upstream
from patchwheel.maint.upstream.selection import Selection
from patchwheel.matrix import checks as matrix_checks
from patchwheel.matrix.checks import Finding
from patchwheel.matrix.table import LineMatrix, Matrix, flags, render
from patchwheel.reporter import silent

FIX = b'"hello, " + name'


def test_merge_keeps_a_run_verdict_over_a_new_inference():
    def cell(behaviour, inferred=None):
        c = {"text": "clean", "behaviour": behaviour, "behaviour_detail": behaviour, "drop_when_met": None}
        return {**c, "inferred_from": inferred} if inferred else c

    def line(cells):
        return {
            "line": "demo/1.0.0",
            "companions": [],
            "releases": [{"version": v, "wheel": "w", "sha256": "s", "yanked": False} for v in cells],
            "patches": [{"name": "p", "drop_when": "proof-passes-upstream", "cells": cells}],
        }

    old = Matrix.from_json({"lines": [line({"1.1": cell("fails"), "1.3": cell("passes"), "1.5": cell("fails")})]})
    new = LineMatrix.from_json(line({"1.1": cell("fails"), "1.3": cell("fails", ["1.1", "1.5"]), "1.5": cell("fails")}))
    got = old.merged([new], torch="2.13.0").lines[0].patches[0].cells["1.3"]
    assert got.behaviour == "passes" and got.inferred_from is None
    assert old.lines[0].patches[0].cells["1.3"].behaviour == "passes"  # the input is not changed


def test_merge_keeps_whose_run_a_kept_verdict_was():
    """A text-only run kept an earlier verdict that another line's run had observed, but not ``observed_for``: the
    verdict then read as the line's own run, and derive's matrix reused it for other lines."""
    observed = {"text": "clean", "behaviour": "fails", "behaviour_detail": "x", "torch": "2.13.0"}
    observed["observed_for"] = "demo/0.9.0"
    line = {"line": "demo/1.0.0", "companions": [], "releases": [{"version": "1.1", "wheel": "w", "sha256": "s"}]}
    old = Matrix.from_json({"lines": [{**line, "patches": [{"name": "p", "cells": {"1.1": observed}}]}]})
    text_only = LineMatrix.from_json({**line, "patches": [{"name": "p", "cells": {"1.1": {"text": "3-way"}}}]})
    got = old.merged([text_only], torch="2.13.0").lines[0].patches[0].cells["1.1"]
    assert (got.text, got.behaviour, got.observed_for) == ("3-way", "fails", "demo/0.9.0")


def test_status_md_escapes_the_text_it_shows():
    """A proof's detail is upstream's own message (``<class 'torch.Tensor'>``, a ``|``, backticks, a newline): in
    MATRIX.md it reads as written, never as HTML, a link, a new table column or a new block."""
    detail = "expected <class 'torch.Tensor'> | got `None`\n# Heading [x](http://e) *b* \\ <script>"
    cell = {"text": "clean", "behaviour": "fails", "behaviour_detail": detail, "drop_when_met": True}
    cell["flags"] = flags(True, "fails")
    matrix = {
        "torch": "2.13.0",
        "lines": [
            {
                "line": "demo/1.0.0",
                "companions": ["other==1.0 <b>"],
                "releases": [{"version": "1.2.0", "wheel": "w", "sha256": "s", "yanked": False}],
                "patches": [
                    {
                        "name": "0001-a|b.patch",
                        "drop_when": "demo>=1.1.0",
                        "upstream_status": "Submitted `x` <y>",
                        "proof_test": "tests/proof/test_demo.py::test_greet",
                        "cells": {"1.2.0": cell},
                    }
                ],
            }
        ],
    }
    md = render(Matrix.from_json(matrix))
    assert "Proofs ran with other==1.0 &lt;b&gt; and torch 2.13.0." in md
    assert "| 0001-a\\|b | C ✗ ⚠ |" in md
    assert (
        "- 0001-a\\|b.patch: Drop-When `demo>=1.1.0`; Upstream-Status ``Submitted `x` <y>``; "
        "test `tests/proof/test_demo.py::test_greet`"
    ) in md
    note = (
        "- 0001-a\\|b.patch vs 1.2.0: Drop-When is met but the proof still fails: upstream's fix differs or is "
        "partial (expected &lt;class 'torch.Tensor'&gt; \\| got \\`None\\` # Heading \\[x\\](http://e) \\*b\\* "
        "\\\\ &lt;script&gt;)"
    )
    assert note in md.splitlines()
    assert "<" not in md.replace("<y>", "")  # no HTML, but inside a code span


def test_upstream_matrix_and_staleness_check(demo_project, capsys):
    demo_project.add_release("1.1.0", b"# moved\n" + CORE)
    demo_project.add_release("1.2.0", CORE.replace(b'"hello " + name', FIX))
    project = demo_project.load()
    sel = Selection.parse([])
    upstream.record(
        project, upstream.check_lines(project, sel, None, workers=2, bisect=False, report=silent()), silent()
    )
    md = (demo_project.root / "patches" / "MATRIX.md").read_text()
    assert "| 0001-greet-comma | O · | U · |" in md, md
    assert upstream.check(project, sel, None, workers=1, report=silent()) == ([], 2)
    status = demo_project.root / "patches" / "MATRIX.json"
    status.write_text(status.read_text().replace('"text": "offset"', '"text": "clean"'))
    diffs, _ = upstream.check(project, sel, None, workers=1, report=silent())
    assert diffs == [
        Finding("stale", "demo/1.0.0 0001-greet-comma.patch vs 1.1.0: text is offset, the committed matrix says clean")
    ]
    assert cli.main(["--root", str(demo_project.root), "matrix", "check", "--text-only"]) == 1
    assert "vs 1.1.0: text is offset, the committed matrix says clean" in capsys.readouterr().out


def test_drop_when_contradictions_are_flagged():
    assert flags(True, "fails") and flags(False, "passes")
    assert flags(True, "passes") == [] and flags(None, "fails") == []


def test_trailers_must_agree_with_the_matrix(demo_project):
    """`Fixed-In` and `Drop-When` contradicted the committed matrix (⚠ cells) and nothing said so."""
    line = demo_project.load().line("demo")
    (patch,) = series.parse_series(line)
    cell = {"text": "conflict", "behaviour": "fails", "behaviour_detail": "test_greet: BugSymptom: still wrong"}
    raw: dict[str, Any] = {
        "lines": [
            {
                "line": "demo/1.0.0",
                "patches": [
                    {
                        "name": patch.name,
                        "drop_when": "demo>=1.1.0",
                        "upstream_status": "Pending",
                        "cells": {"1.1.0": cell},
                    }
                ],
            }
        ]
    }
    problems = matrix_checks.problems(Matrix.from_json(raw), line.key, [patch])
    assert problems and "⚠ Drop-When is met but the proof still fails" in problems[0], problems
    assert "no trailer explains it" in problems[0]

    def with_status(status):
        text = patch.path.read_text().replace("Upstream-Status: Pending", f"Upstream-Status: {status}")
        patch.path.write_text(text)
        raw["lines"][0]["patches"][0]["upstream_status"] = status
        return series.parse_series(line)[0]

    fixed = with_status("Fixed-In 1.1.0")
    problems = matrix_checks.problems(Matrix.from_json(raw), line.key, [fixed])
    assert any("says Fixed-In 1.1.0, but the proof still fails there" in p for p in problems), problems
    patch.path.write_text(patch.path.read_text().replace("Fixed-In 1.1.0", "Pending"))
    partial = with_status("Partial-Fix-In 1.1.0 tests/proof/test_demo.py::test_greet")
    assert matrix_checks.problems(Matrix.from_json(raw), line.key, [partial]) == []
    raw["lines"][0]["patches"][0]["drop_when"] = "demo>=9"
    assert "written with other trailers" in matrix_checks.problems(Matrix.from_json(raw), line.key, [partial])[0]
