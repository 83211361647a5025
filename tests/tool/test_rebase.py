"""Text classification and rebase (with a conflict resolved by hand), on the synthetic demo package."""

from __future__ import annotations

import zipfile

import pytest

from conftest import CORE, INIT, SUBMISSION, TRAILERS, edit_greet, make_patch, proofs, tree
from patchwheel import cli, gitops, series
from patchwheel.errors import PatchwheelError
from patchwheel.maint import rebase
from patchwheel.maint.upstream import textcheck
from patchwheel.wheels import build as build_mod
from patchwheel.wheels import rewrite, vendored

FIX = b'"hello, " + name'


def _files(core):
    return {"src/demo/core.py": core, "src/demo/__init__.py": INIT}


@pytest.mark.parametrize(
    "new_core,status",
    [
        (CORE, "clean"),
        (b"# a new first line\n# and another\n" + CORE, "offset"),
        (CORE.replace(b'"hello " + name', FIX), "already-upstream"),
        (CORE.replace(b"def add(a, b):", b"def add(a, b):  # a context line of the hunk"), "3-way"),
        (CORE.replace(b'"hello " + name', b'"hi " + name'), "conflict"),
    ],
)
def test_text_classes(demo_project, new_core, status):
    patches = series.parse_series(demo_project.load().line("demo"))
    (result,) = textcheck.classify(patches, _files(CORE), _files(new_core))
    assert result.status == status, result
    if status in ("clean", "offset", "3-way"):
        assert result.rebased is not None
        assert FIX in result.rebased and b"diff --git a/src/demo/core.py" in result.rebased


def test_rebase_stops_on_conflict_and_continues(demo_project, capsys):
    demo_project.add_release("1.1.0", CORE.replace(b'"hello " + name', b'"hi " + name'))
    project = demo_project.load()
    assert rebase.start(project, "demo", "1.1.0", behaviour=False) is False
    out = capsys.readouterr().out
    work = demo_project.root / ".rebase" / "demo-1.1.0" / "repo"
    assert "CONFLICT in src/demo/core.py" in out and "--continue" in out and str(work) in out
    with pytest.raises(PatchwheelError, match="still unresolved"):
        rebase.resume(demo_project.load(), "demo", "1.1.0")
    core = work / "src" / "demo" / "core.py"
    core.write_bytes(CORE.replace(b'"hello " + name', b'"hi, " + name'))  # the patch's intent, on 1.1.0
    gitops.git(work, "add", "src/demo/core.py")
    assert rebase.resume(demo_project.load(), "demo", "1.1.0") is True
    new_dir = demo_project.root / "patches" / "demo" / "1.1.0"
    assert (new_dir / "series").read_text().splitlines()[-1] == "0001-greet-comma.patch"
    assert not (demo_project.root / ".rebase").exists()
    project = demo_project.load()
    assert [ln.version for ln in project.lines["demo"]] == ["1.0.0", "1.1.0"]
    assert series.lint_line(project.line("demo", "1.1.0"), demo_project.root) == []
    assert project.line("demo", "1.1.0").build.number == 1, "a new line starts at its first build"
    assert (demo_project.root / "overlay" / "demo" / "1.1.0" / "demo" / "core.py").is_file(), "rebase vendors"
    assert vendored.overlay_problems(project) == []
    built = build_mod.build(project, demo_project.root / "dist", log=lambda m: None)  # both lines build
    assert [b.filename for b in built] == [rewrite.wheel_names(line).filename for line in project.all_lines()]
    assert [b.filename.split("-")[2][:2] for b in built] == ["1_", "1_"]
    with zipfile.ZipFile(demo_project.root / "dist" / built[1].filename) as zf:
        assert b'"hi, " + name' in zf.read("demo/core.py")


def test_a_kept_patch_that_builds_on_a_dropped_one_is_carried(demo_project, monkeypatch, tmp_path, capsys):
    """Found rebasing transformers 4.53.3 onto 5.23.0: the behaviour check dropped a backport, and the feature
    written on top of it could not even be applied to the old release (the work repository skipped the dropped
    patch). The whole old patches is now the starting point; only the kept patches are carried. (Judged by the one
    policy since issue 46: the dropped patch's proof passes once its Drop-When holds.)"""
    files = _files(CORE)
    comma = make_patch(files, edit_greet, "Greet with a comma", TRAILERS)  # Drop-When: demo>=1.1.0
    after = edit_greet(dict(files))
    shout = make_patch(
        after,
        lambda f: {**f, "src/demo/core.py": f["src/demo/core.py"].replace(b'"hello, "', b'"HELLO, "')},
        "Shout the greeting",
        {**TRAILERS, "Drop-When": "demo>=9", "Proof-Test": "tests/proof/test_shout.py"},
    )
    (demo_project.root / "tests" / "proof" / "test_shout.py").write_text("def test_shout():\n    pass\n")
    gitops.write_files(demo_project.root / "upstream-pr" / "demo" / "shout", SUBMISSION)
    demo_project.set_series(("0001-greet-comma.patch", comma), ("0002-shout.patch", shout))
    demo_project.add_release("1.1.0", CORE.replace(b'"hello " + name', FIX))  # upstream took the comma
    proofs(monkeypatch, tmp_path, passes_from={"tests/proof/test_demo.py": "1.1.0"})

    assert rebase.start(demo_project.load(), "demo", "1.1.0") is True
    new_dir = demo_project.root / "patches" / "demo" / "1.1.0"
    patches = (new_dir / "series").read_text()
    assert "# dropped 0001-greet-comma.patch: its proof passes on pristine demo 1.1.0" in patches, patches
    assert patches.splitlines()[-1] == "0001-shout.patch"
    assert b'+    return "HELLO, " + name' in (new_dir / "0001-shout.patch").read_bytes()
    assert "0002-shout.patch: clean" in capsys.readouterr().out


def test_rebase_refuses_bad_targets(demo_project):
    project = demo_project.load()
    with pytest.raises(PatchwheelError, match="is not newer"):
        rebase.start(project, "demo", "0.9.0", behaviour=False)
    with pytest.raises(PatchwheelError, match="has no py3-none-any wheel"):
        rebase.start(project, "demo", "7.0.0", behaviour=False)
    with pytest.raises(PatchwheelError, match="no rebase onto demo 1.1.0 is in progress"):
        rebase.resume(project, "demo", "1.1.0")


def test_a_stopped_rebase_exits_1_and_abort_drops_its_work_folder(demo_project, capsys):
    """Issue 46: one exit status for "stopped, a maintainer takes it from here" in every door (rebase said 3, derive
    and follow 1), and --abort in every door that leaves a work folder (rebase offered only --continue)."""
    demo_project.add_release("1.1.0", CORE.replace(b'"hello " + name', b'"hi " + name'))
    before = tree(demo_project.root)
    argv = ["--root", str(demo_project.root), "rebase", "demo", "1.1.0"]
    assert cli.main([*argv, "--text-only"]) == 1
    out = capsys.readouterr().out
    assert "CONFLICT in src/demo/core.py" in out and "nox -s rebase -- demo 1.1.0 --continue" in out
    assert (demo_project.root / ".rebase" / "demo-1.1.0" / "state.json").is_file()
    assert cli.main([*argv, "--abort", "--text-only"]) == 2, "--text-only is the start's"
    assert cli.main([*argv, "--abort"]) == 0
    assert f"removed {demo_project.root / '.rebase' / 'demo-1.1.0'}" in capsys.readouterr().out
    assert not (demo_project.root / ".rebase").exists() and tree(demo_project.root) == before
    assert cli.main([*argv, "--abort"]) == 2
    assert "no rebase of demo 1.1.0 is waiting" in capsys.readouterr().err
