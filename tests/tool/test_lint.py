"""Lint of patch series: every rule, on the demo package, and the real series of this repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import CORE, INIT, TRAILERS, edit_greet, make_patch
from patchwheel import config, lint, series
from patchwheel.errors import PatchwheelError

ROOT = Path(__file__).resolve().parents[2]
FILES = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}


def _problems(demo):
    return series.lint_line(demo.load().line("demo"), demo.root)


def test_the_repository_series_are_clean():
    project = config.load(ROOT)
    assert {ln.key for ln in project.all_lines()} >= {"transformers/4.50.3", "accelerate/1.6.0"}
    for line in project.all_lines():
        assert series.lint_line(line, ROOT) == [], line.key


def test_demo_is_clean(demo_project):
    assert _problems(demo_project) == []


@pytest.mark.parametrize("missing", series.REQUIRED_TRAILERS)
def test_missing_trailer(demo_project, missing):
    trailers = {k: v for k, v in TRAILERS.items() if k != missing}
    demo_project.set_series(("0001-x.patch", make_patch(FILES, edit_greet, "X", trailers)))
    assert _problems(demo_project) == [
        f"0001-x.patch: missing trailer '{missing}:' (add it to the last paragraph of the message)"
    ]


@pytest.mark.parametrize(
    "key,value,expect",
    [
        ("Upstream-Status", "Maybe later", "must be one of"),
        ("Upstream-Status", "Fix-Proposed-In the forum", "must be one of"),
        ("Upstream-Status", "Fix-Proposed-In https://github.com/example/demo/issues/3", "must be one of"),
        ("Upstream-Issue", "see the forum", "is not an issue URL"),
        ("Drop-When", "transformers>=4.54", "must be a version condition on demo"),
        ("Drop-When", "demo", "must be a version condition on demo"),
        ("Proof-Test", "tests/test_x.py", "must be tests/proof/<file>.py"),
        ("Proof-Test", "tests/proof/test_nope.py", "does not exist"),
        ("Proof-Test", "tests/proof/test_demo.py::test_other", "is not defined in"),
        ("Proof-Test", "tests/proof/test_demo.py::test_greet, tests/proof/test_demo.py::test_nope", "is not defined"),
        ("Proof-Test", "tests/proof/test_demo.py::test_greet, tests/proof/test_x.py::test_greet", "tests of one such"),
        ("Proof-Test", "tests/proof/test_demo.py, tests/proof/test_demo.py::test_greet", "pick one"),
    ],
)
def test_bad_trailer_values(demo_project, key, value, expect):
    demo_project.set_series(("0001-x.patch", make_patch(FILES, edit_greet, "X", {**TRAILERS, key: value})))
    (problem,) = _problems(demo_project)
    assert expect in problem and "0001-x.patch" in problem


def test_a_proof_may_list_tests_of_its_module(demo_project):
    listed = "tests/proof/test_demo.py::test_greet, tests/proof/test_demo.py::test_greet"
    demo_project.set_series(("0001-x.patch", make_patch(FILES, edit_greet, "X", {**TRAILERS, "Proof-Test": listed})))
    assert _problems(demo_project) == []


def test_a_fix_proposed_in_someone_elses_pull_request_is_accepted(demo_project):
    status = "Fix-Proposed-In https://github.com/example/demo/pull/7"
    demo_project.set_series(
        ("0001-x.patch", make_patch(FILES, edit_greet, "X", {**TRAILERS, "Upstream-Status": status}))
    )
    assert _problems(demo_project) == []


def test_drop_when_by_behaviour_is_accepted(demo_project):
    demo_project.set_series(
        ("0001-x.patch", make_patch(FILES, edit_greet, "X", {**TRAILERS, "Drop-When": series.DROP_BY_BEHAVIOUR}))
    )
    assert _problems(demo_project) == []


def test_series_entry_without_file_and_file_not_in_series(demo_project):
    (demo_project.patch_dir / "series").write_text("0001-greet-comma.patch\n0002-gone.patch\n")
    (demo_project.patch_dir / "0003-stray.patch").write_text("x")
    problems = _problems(demo_project)
    assert any("series entry 0002-gone.patch has no file" in p for p in problems), problems
    assert any("0003-stray.patch is in" in p and "not in its series" in p for p in problems), problems


def test_numbering_duplicates_and_names(demo_project):
    data = (demo_project.patch_dir / "0001-greet-comma.patch").read_bytes()
    (demo_project.patch_dir / "0002-Bad_Name.patch").write_bytes(data)
    (demo_project.patch_dir / "series").write_text(
        "0002-Bad_Name.patch\n0001-greet-comma.patch\n0001-greet-comma.patch\n"
    )
    problems = _problems(demo_project)
    assert any("not named NNNN-slug.patch" in p for p in problems)
    assert any("is number 2 in the series; renumber it 0002-greet-comma.patch" in p for p in problems)
    assert any("series lists 0001-greet-comma.patch twice" in p for p in problems)


def test_malformed_patch_and_series(demo_project):
    (demo_project.patch_dir / "0001-greet-comma.patch").write_text("From x\nSubject: y\n\nno diff here\n")
    assert any("not a git format-patch mbox" in p or "no 'diff --git' section" in p for p in _problems(demo_project))
    (demo_project.patch_dir / "series").write_text("some/dir/0001.patch\n")
    assert "is not a plain patch file name" in _problems(demo_project)[0]
    with pytest.raises(PatchwheelError, match="patch series demo/1.0.0 is not valid"):
        series.checked_series(demo_project.load().line("demo"))


def test_patch_outside_the_package_is_rejected(demo_project):
    files = {**FILES, "setup.py": b"x = 1\n"}
    demo_project.set_series(("0001-x.patch", make_patch(files, lambda f: {**f, "setup.py": b"x = 2\n"}, "X", TRAILERS)))
    assert "touches setup.py, which is not under src/demo/" in _problems(demo_project)[0]


def test_bad_pins(demo_project):
    pins = demo_project.root / "overlay" / "demo" / "pins.toml"
    pins.write_text(pins.read_text().replace(demo_project.sha256, "abc"))
    with pytest.raises(PatchwheelError, match="is not 64 hex digits"):
        demo_project.load()
    pins.write_text("package = [")
    with pytest.raises(PatchwheelError, match="not valid TOML"):
        demo_project.load()
    demo_project.write_pins()
    (demo_project.patch_dir / "series").unlink()
    with pytest.raises(PatchwheelError, match="has no .*series") as err:
        demo_project.load()
    assert "an empty series is allowed" in err.value.hint


def test_unknown_set_member(demo_project):
    (demo_project.root / "overlay" / "sets.toml").write_text('[set.default]\ndemo = "2.0"\n')
    with pytest.raises(PatchwheelError, match="no release line demo 2.0"):
        demo_project.load()


# --- [suite] of overlay/sets.toml: the sets the default suite proves ------------------------------------------------


@pytest.mark.parametrize(
    "suite,message",
    [
        ('suite = ["default"]', "'suite' must be a table"),
        ("[suite]\nset = []", "[suite] unknown key 'set' (did you mean 'sets'?)"),
        ("[suite]\nsets = []", "[suite] sets must be a list of set names"),
        ('[suite]\nsets = "default"', "[suite] sets must be a list of set names"),
        ('[suite]\nsets = ["default", "nope"]', "[suite] sets names no set 'nope'"),
        ('[suite]\nsets = ["default", "default"]', "[suite] sets names a set twice"),
    ],
)
def test_a_suite_table_that_is_not_a_list_of_sets_is_refused(demo_project, suite, message):
    sets = demo_project.root / "overlay" / "sets.toml"
    sets.write_text(suite + "\n\n" + sets.read_text())  # first: a bare key after a table would be the table's
    with pytest.raises(PatchwheelError, match=re.escape(message)):
        demo_project.load()


def test_the_suite_proves_latest_and_the_newest_line_of_each_major(demo_project):
    from patchwheel.lint import suite_problems
    from patchwheel.maint import rebase

    demo_project.add_release("2.0.0", CORE)
    assert rebase.start(demo_project.load(), "demo", "2.0.0", behaviour=False, log=lambda m: None)
    sets = demo_project.root / "overlay" / "sets.toml"
    members = '[set.default]\ndemo = "1.0.0"\n\n[set.latest]\ndemo = "2.0.0"\n'
    sets.write_text(members)
    assert suite_problems(demo_project.load()) == [], "no [suite]: the default suite proves every set"
    sets.write_text(members + '\n[suite]\nsets = ["latest", "default"]\n')
    assert suite_problems(demo_project.load()) == []
    sets.write_text(members + '\n[suite]\nsets = ["latest"]\n')
    assert suite_problems(demo_project.load()) == [
        "overlay/sets.toml: [suite] sets proves no set naming demo/1.0.0, the newest line of demo 1.x: add default "
        "to it"
    ]
    sets.write_text(members + '\n[suite]\nsets = ["default"]\n')
    assert suite_problems(demo_project.load())[0] == (
        "overlay/sets.toml: [suite] sets leaves out latest, what new users install: add it"
    )


# --- the tree: nothing under patches/ and overlay/ that lint does not know ------------------------------------------


def test_the_repositorys_tree_holds_only_what_lint_knows():
    assert lint.tree_problems(config.load(ROOT)) == []


def test_the_demo_tree_is_clean(demo_project):
    assert lint.tree_problems(demo_project.load()) == []


@pytest.mark.parametrize(
    "path, says",
    [
        # git attributes that render the changed patches as "Binary files differ" in a pull request
        ("patches/demo/.gitattributes", "starts with '.'"),
        ("overlay/demo/.gitignore", "starts with '.'"),  # `*`: git would stop seeing the line's files
        ("overlay/demo/1.0.0/demo/.hidden.py", "starts with '.'"),
        ("patches/demo/1.0.0/notes.txt", "is not the series or a patch file"),
        ("overlay/demo/9.9.9/LICENSE", "is not a release line of demo"),  # patches/demo/9.9.9/: config refuses it
        ("overlay/other/1.0.0/LICENSE", "is not a package of this project"),
        ("overlay/demo/1.0.0/README.md", "is not LICENSE, VENDORED.json or a module under demo/"),
        ("overlay/extra.toml", "is not sets.toml, NOTICE or a package's folder"),
        ("patches/README.md", "is not MATRIX.json, MATRIX.md or a package's folder"),
        ("overlay/demo/pins.toml.orig", "is not pins.toml or a release line's folder"),
    ],
)
def test_a_file_lint_does_not_know_is_refused(demo_project, path, says):
    target = demo_project.root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("*\n")
    problems = lint.tree_problems(demo_project.load())
    # the path, or the folder above it that lint does not know (one line for the folder)
    assert len(problems) == 1 and path.startswith(problems[0].split(" ", 1)[0]) and says in problems[0], problems


def test_a_link_in_the_tree_is_refused(demo_project, tmp_path):
    (tmp_path / "outside.py").write_text("x = 1\n")
    link = demo_project.root / "overlay" / "demo" / "1.0.0" / "demo" / "linked.py"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(tmp_path / "outside.py")
    (problem,) = lint.tree_problems(demo_project.load())
    assert problem.startswith("overlay/demo/1.0.0/demo/linked.py") and "is a link" in problem


def test_patchwheel_lint_reports_the_tree(demo_project, capsys):
    from patchwheel import cli

    (demo_project.root / "patches" / "demo" / ".gitattributes").write_text("*.patch -diff linguist-generated=true\n")
    assert cli.main(["--root", str(demo_project.root), "lint"]) == 1
    out = capsys.readouterr().out
    assert (
        "patches/, overlay/: FAILED (only the files lint knows)\n  - patches/demo/.gitattributes starts with '.'" in out
    )


def test_reading_a_series_does_not_lint_it(demo_project, monkeypatch):
    """A command that only reads a series (status's known bugs, the matrix's rows, the watch's digest of a line)
    parses it: no lint, so no `git apply --numstat` process a patch and no trailer judged. Reading linted on every
    call (load_series); lint runs where a command acts on a series (checked_series) and in `patchwheel lint`."""
    from patchwheel import knownbugs
    from patchwheel.maint.upstream import watch
    from patchwheel.matrix.table import series_lookup

    def linted(*args, **kwargs):
        raise AssertionError("a read of the series linted it")

    project = demo_project.load()
    line = project.line("demo")
    monkeypatch.setattr(series, "git_disagrees", linted)
    monkeypatch.setattr(series, "validate_trailers", linted)
    assert [b["fix"] for b in knownbugs.for_package(project, None, "demo", "1.0.0")["bugs"]] == ["greet-comma"]
    assert [p.name for p in series_lookup(project)(line.key) or []] == ["0001-greet-comma.patch"]
    assert list(watch.series_digest(project, line.key)) == ["0001-greet-comma.patch"]
    with pytest.raises(AssertionError, match="linted it"):
        series.checked_series(line)  # the lint itself still asks git and judges the trailers


def test_a_checked_series_is_parsed_once_and_a_plain_read_refuses_what_is_not_a_patch(demo_project, monkeypatch):
    """checked_series lints the line and returns the patches the lint parsed (each once); parse_series reads a
    series a lint would refuse, but not a file that is not a patch, nor an entry with no file."""
    trailers_without = {k: v for k, v in TRAILERS.items() if k != "Upstream-Status"}
    demo_project.set_series(("0001-x.patch", make_patch(FILES, edit_greet, "X", TRAILERS)))
    line = demo_project.load().line("demo")
    parsed: list[str] = []
    real = series.parse_patch

    def counting(path):
        parsed.append(path.name)
        return real(path)

    monkeypatch.setattr(series, "parse_patch", counting)
    assert [p.name for p in series.checked_series(line)] == ["0001-x.patch"]
    assert parsed == ["0001-x.patch"], "each patch parsed once"
    demo_project.set_series(("0001-x.patch", make_patch(FILES, edit_greet, "X", trailers_without)))
    refused = "patch series demo/1.0.0 is not valid:\n  - 0001-x.patch: missing trailer"
    with pytest.raises(PatchwheelError, match=refused):
        series.checked_series(line)  # the refusal a command's user sees, unchanged
    assert [p.name for p in series.parse_series(line)] == ["0001-x.patch"]
    (demo_project.patch_dir / "0001-x.patch").write_text("no patch at all\n")
    with pytest.raises(PatchwheelError, match="0001-x.patch: not a git format-patch mbox"):
        series.parse_series(line)
    (demo_project.patch_dir / "0001-x.patch").unlink()
    with pytest.raises(PatchwheelError, match="series entry 0001-x.patch has no file"):
        series.parse_series(line)
