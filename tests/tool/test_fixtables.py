"""The fix tables of README.md and docs/fixes.md are generated from the series and their trailers
(:mod:`patchwheel.maint.fixtables`, `patchwheel tables`), and lint fails while a committed one is stale: the facts of
a fix (its lines, patches, issues, status, drop condition, tests, guards) are written once, in its patches."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CORE, INIT, TRAILERS, Prover, edit_greet, make_patch, proofs
from patchwheel import cli, config
from patchwheel.maint import fixtables, lintall
from patchwheel.maint.follow import derive

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}


def test_the_committed_tables_are_the_series():
    """Replaces the test that only looked for each patch's link in the hand-kept tables: every column but the first
    is the series' now, so a line, an issue or a status written by hand differently fails here (and in lint)."""
    assert fixtables.problems(config.load(ROOT)) == []


def _readme(root: Path, rows: str = "") -> Path:
    path = root / "README.md"
    path.write_text(
        f"# demo\n\n## The fixes\n\n{fixtables.MARKER}\n"
        "| fix | release lines | patch (newest line) | upstream | status |\n"
        f"|---|---|---|---|---|\n{rows}\nAfter the table.\n"
    )
    return path


def test_a_fix_without_a_row_is_stale_and_tables_writes_its_row(demo_project):
    path = _readme(demo_project.root)
    project = demo_project.load()
    assert fixtables.problems(project) == [
        "README.md: its fix table is not the series' (run `nox -s tables` and commit it)"
    ]
    assert fixtables.write(project) == [path]
    assert path.read_text().split("\n")[7:10] == [
        "| Greet with a comma | demo 1.0.0 | [0001-greet-comma](patches/demo/1.0.0/0001-greet-comma.patch) | "
        "[demo#1](https://github.com/example/demo/issues/1) | Pending |",
        "",
        "After the table.",
    ]
    assert fixtables.problems(project) == [] and fixtables.write(project) == []


def test_the_first_column_is_kept_and_every_other_column_is_the_series(demo_project):
    row = (
        "| D1: greets without a comma | demo 0.9.0 | [0001-greet-comma](patches/demo/1.0.0/0001-greet-comma.patch) "
        "| #1 | Fixed-In 2.0 |\n"
    )
    path = _readme(demo_project.root, row)
    fixtables.write(demo_project.load())
    assert "| D1: greets without a comma | demo 1.0.0 | [0001-greet-comma]" in path.read_text()
    assert "Fixed-In" not in path.read_text() and "0.9.0" not in path.read_text()


def test_the_row_of_a_fix_no_line_carries_goes(demo_project):
    gone = "| gone | demo 1.0.0 | [0002-gone](patches/demo/1.0.0/0002-gone.patch) | x | Pending |\n"
    path = _readme(demo_project.root, gone)
    fixtables.write(demo_project.load())
    assert "0002-gone" not in path.read_text() and "0001-greet-comma" in path.read_text()


def test_docs_fixes_md_has_every_column_from_the_trailers(demo_project):
    trailers = {**TRAILERS, "Upstream-Status": "Partial-Fix-In 1.1.0 tests/proof/test_demo.py::test_greet"}
    demo_project.set_series(
        ("0001-greet-comma.patch", make_patch(UPSTREAM, edit_greet, "Greet with a comma", trailers))
    )
    (demo_project.root / "docs").mkdir()
    path = demo_project.root / "docs" / "fixes.md"
    path.write_text(f"# The fixes\n\n{fixtables.MARKER}\n| a |\n|---|\n")
    fixtables.write(demo_project.load())
    assert path.read_text().split("\n")[5] == (
        "| Greet with a comma | demo 1.0.0 | [0001-greet-comma](../patches/demo/1.0.0/0001-greet-comma.patch) | "
        "[demo#1](https://github.com/example/demo/issues/1) | Partial-Fix-In 1.1.0 (`test_greet` still "
        "fails) | `demo>=1.1.0` | [test_demo.py](../tests/proof/test_demo.py) | "
        "[test_demo.py](../tests/guards/test_demo.py) |"
    )


def test_lint_fails_on_a_stale_table_and_names_the_command(demo_project):
    _readme(demo_project.root)
    parts = {p.title: p for p in lintall.parts(demo_project.load())}
    assert parts["README.md, docs/fixes.md"].problems == [
        "README.md: its fix table is not the series' (run `nox -s tables` and commit it)"
    ]


def test_a_file_without_its_marker_is_a_problem_that_says_where_to_put_it(demo_project):
    (demo_project.root / "README.md").write_text("# demo\n\n| fix |\n|---|\n")
    (problem,) = fixtables.problems(demo_project.load())
    assert problem.startswith("README.md has 0 fix-table markers, not one (fix: put the line '<!-- the fix table")


@pytest.mark.parametrize(
    "after", ["\nProven on torch 2.13.0 for every set.\n", "## The fixes\n\n| fix | lines |\n|---|---|\n"]
)
def test_a_marker_not_right_before_a_table_is_refused_and_nothing_is_replaced(demo_project, after):
    """The marker above an emptied table (its header and rule gone too) or above other text: `tables` replaced the
    two lines after the marker and the paragraph after them. It refuses, writing nothing."""
    path = demo_project.root / "README.md"
    text = f"# demo\n\n{fixtables.MARKER}\n{after}\nThe rest of the page.\n"
    path.write_text(text)
    project = demo_project.load()
    (problem,) = fixtables.problems(project)
    assert "the line after the fix-table marker is not a table's header and rule (line 4)" in problem, problem
    with pytest.raises(Exception, match="not a table's header and rule"):
        fixtables.write(project)
    assert path.read_text() == text


def test_a_tree_without_the_files_has_no_table_to_check(demo_project):
    """follow and derive lint their scratch copy of overlay/ and patches/, which holds neither file."""
    assert fixtables.problems(demo_project.load()) == []


@pytest.mark.parametrize("check", [True, False])
def test_the_command_checks_or_writes(demo_project, capsys, check):
    path = _readme(demo_project.root)
    before = path.read_text()
    code = cli.main(["--root", str(demo_project.root), "tables", *(["--check"] if check else [])])
    out = capsys.readouterr().out
    if check:
        assert (code, path.read_text()) == (1, before) and "run `nox -s tables`" in out
    else:
        assert (code, out.strip()) == (
            0,
            "wrote the fix tables of README.md",
        ) and "0001-greet-comma" in path.read_text()


def test_derive_writes_the_tables_of_the_line_it_wrote(demo_project, monkeypatch, tmp_path):
    """A line derive (or rebase) writes is a release line of each fix it carries: the tables say so at once (they
    were left stale for lint to find, and for a maintainer to run `nox -s tables`)."""
    _readme(demo_project.root)
    fixtables.write(demo_project.load())
    demo_project.add_release("0.9.0", b"# an older first line\n" + CORE)
    proofs(monkeypatch, tmp_path)
    said: list[str] = []
    assert derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=said.append).stop is None
    assert said[-1].endswith("wrote the fix tables of README.md"), said[-3:]
    assert "| Greet with a comma | demo 0.9.0, 1.0.0 |" in (demo_project.root / "README.md").read_text()
    assert fixtables.problems(demo_project.load()) == []
