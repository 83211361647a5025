"""overlay/<pkg>/<version>/: the vendored fixed modules (vendor, check, the build's check) and the edit -> refresh
loop (refresh, new), on the synthetic demo wheel and on a real release line."""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from conftest import CORE, INIT, TRAILERS, edit_greet, make_patch
from patchwheel import cli, gitops, series
from patchwheel.errors import PatchwheelError
from patchwheel.maint import refresh
from patchwheel.maint.workrepo import WorkRepo
from patchwheel.wheels import build as build_mod
from patchwheel.wheels import vendored

ROOT = Path(__file__).resolve().parents[2]
FILES = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
COMMA = CORE.replace(b'"hello " + name', b'"hello, " + name')


def _swap(files):
    return {**files, "src/demo/core.py": files["src/demo/core.py"].replace(b"a + b", b"b + a")}


def _util(files):
    return {**files, "src/demo/util.py": b'"""demo helpers."""\n\nNAME = "demo"\n'}


def two_patches(demo, second) -> None:
    """0001 greets with a comma (core.py); 0002 is ``second`` on top of it."""
    first = make_patch(FILES, edit_greet, "Greet with a comma", TRAILERS)
    after = {**FILES, "src/demo/core.py": COMMA}
    demo.set_series(
        ("0001-greet-comma.patch", first),
        ("0002-second.patch", make_patch(after, second, "The second change", TRAILERS)),
    )


def _module(demo, rel="demo/core.py") -> Path:
    return demo.root / "overlay" / "demo" / "1.0.0" / rel


def _edit(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert data.count(old) == 1, old
    path.write_bytes(data.replace(old, new))


def _patch_files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes() for p in sorted((root / "patches").rglob("*")) if p.is_file()
    }


def _regenerates(line) -> None:
    """git am + format-patch give every patch of the series its committed bytes (index lines included)."""
    patches = series.parse_series(line)
    with WorkRepo.of_line(line, patches) as work:
        for p in patches:
            assert gitops.format_patch(work.path, work.commits[p.name]) == p.raw, p.name


# --- vendor and its checks ------------------------------------------------------------------------------------


def test_vendored_modules_are_the_wheels_bytes(demo_project):
    built = build_mod.build(demo_project.load(), demo_project.root / "dist", log=lambda m: None)
    with zipfile.ZipFile(demo_project.root / "dist" / built[0].filename) as zf:
        assert _module(demo_project).read_bytes() == zf.read("demo/core.py")
    assert _module(demo_project).read_bytes() == COMMA
    folder = demo_project.root / "overlay" / "demo" / "1.0.0"
    assert sorted(p.name for p in folder.iterdir()) == ["VENDORED.json", "demo"], "only what the series touches"
    record = json.loads((folder / "VENDORED.json").read_text())
    assert record["wheel"]["sha256"] == demo_project.sha256
    assert [p["name"] for p in record["series"]] == ["0001-greet-comma.patch"]
    notice = (demo_project.root / "overlay" / "NOTICE").read_text()
    assert "demo 1.0.0" in notice and demo_project.sha256 in notice and "demo/core.py" in notice


def test_a_hand_edited_module_fails_the_check_and_the_build_naming_it(demo_project, capsys):
    _edit(_module(demo_project), b"hello, ", b"hi, ")
    root = ["--root", str(demo_project.root)]
    assert cli.main(root + ["vendor", "--check"]) == 1
    out = capsys.readouterr().out
    assert "overlay/demo/1.0.0/demo/core.py was edited" in out and "nox -s refresh -- demo 1.0.0" in out
    assert cli.main(root + ["lint"]) == 1, "lint checks the vendored modules too"
    assert "overlay/demo/1.0.0/demo/core.py was edited" in capsys.readouterr().out
    with pytest.raises(PatchwheelError, match=r"demo/core.py differs from overlay/demo/1.0.0/demo/core.py"):
        build_mod.build(demo_project.load(), demo_project.root / "dist", log=lambda m: None)
    assert not (demo_project.root / "dist").exists()


def test_vendor_keeps_an_edit_unless_forced(demo_project):
    module = _module(demo_project)
    _edit(module, b"hello, ", b"hi, ")
    new_module = _module(demo_project, "demo/extra.py")
    new_module.write_bytes(b"VALUE = 1\n")
    vendored.write(demo_project.load(), log=lambda m: None)
    assert b"hi, " in module.read_bytes() and new_module.is_file(), "nothing lost"
    assert len(vendored.overlay_problems(demo_project.load())) == 2, "still reported until refreshed"
    vendored.write(demo_project.load(), force=True, log=lambda m: None)
    assert module.read_bytes() == COMMA and not new_module.exists()
    assert vendored.overlay_problems(demo_project.load()) == []


def test_an_edit_of_a_file_the_series_changed_since_is_not_folded_back(demo_project):
    """The series changes under an edit (a patch edited by hand, a pull): refreshing would undo that change."""
    _edit(_module(demo_project), b"return a + b", b"return a + b  # edited")
    patch = demo_project.patch_dir / "0001-greet-comma.patch"
    patch.write_bytes(patch.read_bytes().replace(b'+    return "hello, " + name', b'+    return "hey, " + name'))
    problems = vendored.overlay_problems(demo_project.load())
    assert any("demo/core.py was edited, and the series changed it since" in p for p in problems), problems
    with pytest.raises(PatchwheelError, match=r"demo/core.py \(edited-stale\)"):
        refresh.refresh(demo_project.load(), "demo", "1.0.0", "greet-comma")
    with pytest.raises(PatchwheelError, match="edited by hand, and vendor would overwrite"):
        vendored.write(demo_project.load(), log=lambda m: None)
    assert b"# edited" in _module(demo_project).read_bytes()
    assert b'"hey, "' in patch.read_bytes(), "nothing written"


def test_a_patch_changed_by_hand_makes_the_overlay_stale_and_refresh_waits_for_vendor(demo_project):
    patch = demo_project.patch_dir / "0001-greet-comma.patch"
    patch.write_bytes(patch.read_bytes().replace(b'+    return "hello, " + name', b'+    return "hey, " + name'))
    with pytest.raises(PatchwheelError, match=r"demo/core.py \(stale\)") as err:
        refresh.refresh(demo_project.load(), "demo", "1.0.0", "greet-comma")
    assert "run `nox -s vendor` first" in err.value.hint
    assert b'"hey, "' in patch.read_bytes(), "the hand edit of the patch is not reverted"


def test_a_series_change_makes_the_overlay_stale_and_vendor_rewrites_it(demo_project):
    two_patches(demo_project, _swap)  # set_series vendors: in step
    assert vendored.overlay_problems(demo_project.load()) == []
    (demo_project.patch_dir / "series").write_text("0001-greet-comma.patch\n")
    (demo_project.patch_dir / "0002-second.patch").unlink()
    problems = vendored.overlay_problems(demo_project.load())
    assert any("demo/core.py is out of date: the series changed" in p for p in problems), problems
    vendored.write(demo_project.load(), log=lambda m: None)  # not an edit: no --force needed
    assert _module(demo_project).read_bytes() == COMMA


def test_folders_of_lines_no_longer_pinned_are_removed(demo_project):
    stale = demo_project.root / "overlay" / "demo" / "0.9.0" / "demo"
    shutil.copytree(demo_project.root / "overlay" / "demo" / "1.0.0", stale.parent)  # as vendor wrote it
    said = vendored.overlay_problems(demo_project.load())
    assert said == ["overlay/demo/0.9.0/ belongs to no pinned line: run `nox -s vendor`"]
    (stale / "core.py").write_bytes(b"# edited\n")
    with pytest.raises(PatchwheelError, match=r"overlay/demo/0.9.0/demo/core.py \(its line is no longer pinned\)"):
        vendored.write(demo_project.load(), log=lambda m: None)
    vendored.write(demo_project.load(), force=True, log=lambda m: None)
    assert not stale.parent.exists()
    assert vendored.overlay_problems(demo_project.load()) == []


# --- refresh ---------------------------------------------------------------------------------------------------


def test_refresh_changes_exactly_that_patch(demo_project):
    two_patches(demo_project, _util)  # 0002 adds another file
    before = _patch_files(demo_project.root)
    old = series.parse_series(demo_project.load().line("demo"))
    number = demo_project.load().line("demo").build.number
    _edit(_module(demo_project), b'"hello, " + name', b'"hello, " + name.strip()')
    refresh.refresh(demo_project.load(), "demo", "1.0.0", "greet-comma", log=lambda m: None)
    after = _patch_files(demo_project.root)
    assert [k for k in after if after[k] != before[k]] == ["patches/demo/1.0.0/0001-greet-comma.patch"]
    assert demo_project.load().line("demo").build.number == number + 1, "a changed series is the next build"
    new = series.parse_series(demo_project.load().line("demo"))
    assert (new[0].subject, new[0].message, new[0].trailers) == (old[0].subject, old[0].message, old[0].trailers)
    assert b'+    return "hello, " + name.strip()' in new[0].raw
    assert vendored.overlay_problems(demo_project.load()) == []
    _regenerates(demo_project.load().line("demo"))
    built = build_mod.build(demo_project.load(), demo_project.root / "dist", log=lambda m: None)
    with zipfile.ZipFile(demo_project.root / "dist" / built[0].filename) as zf:
        assert zf.read("demo/core.py") == _module(demo_project).read_bytes()


def test_a_later_patch_of_the_same_file_keeps_its_change(demo_project):
    two_patches(demo_project, _swap)  # 0002 changes core.py too, lower down
    old_second = (demo_project.patch_dir / "0002-second.patch").read_bytes()
    greet = b'    return "hello, " + name\n'
    _edit(_module(demo_project), greet, b"    name = name.strip()\n" + greet)
    refresh.refresh(demo_project.load(), "demo", "1.0.0", "0001", log=lambda m: None)
    new_second = (demo_project.patch_dir / "0002-second.patch").read_bytes()
    assert new_second != old_second, "its index line and line numbers move with the edit"
    assert refresh._change(new_second) == refresh._change(old_second)
    assert vendored.overlay_problems(demo_project.load()) == []
    _regenerates(demo_project.load().line("demo"))


def test_refresh_refuses_an_edit_of_lines_another_patch_wrote(demo_project):
    two_patches(demo_project, _swap)
    before = _patch_files(demo_project.root)
    _edit(_module(demo_project), b"return b + a", b"return (b + a)")
    with pytest.raises(PatchwheelError, match=r"demo/core.py line 9 \(0002-second.patch\)") as err:
        refresh.refresh(demo_project.load(), "demo", "1.0.0", "greet-comma", log=lambda m: None)
    assert "cannot belong to 0001-greet-comma.patch" in err.value.message
    assert "nox -s refresh -- demo 1.0.0 second`" in err.value.hint
    assert _patch_files(demo_project.root) == before, "nothing written"
    assert b"(b + a)" in _module(demo_project).read_bytes(), "the edit is kept"
    refresh.refresh(demo_project.load(), "demo", "1.0.0", "second", log=lambda m: None)  # where it belongs
    assert b"+    return (b + a)" in (demo_project.patch_dir / "0002-second.patch").read_bytes()
    assert vendored.overlay_problems(demo_project.load()) == []


def test_refresh_refuses_an_edit_of_the_context_a_later_patch_needs(demo_project):
    two_patches(demo_project, _swap)
    before = _patch_files(demo_project.root)
    _edit(_module(demo_project), b"def add(a, b):", b"def add(a, b):  # sum")  # upstream's line, 0002's context
    with pytest.raises(PatchwheelError, match=r"touches lines that 0002-second.patch, later in the series, needs"):
        refresh.refresh(demo_project.load(), "demo", "1.0.0", "greet-comma", log=lambda m: None)
    assert _patch_files(demo_project.root) == before


def test_refresh_without_an_edit_and_with_bad_names(demo_project, capsys):
    before = _patch_files(demo_project.root)
    refresh.refresh(demo_project.load(), "demo", "1.0.0", "greet-comma")
    assert "nothing to refresh" in capsys.readouterr().out
    with pytest.raises(PatchwheelError, match="no patch 'nope' in the series of demo/1.0.0") as err:
        refresh.refresh(demo_project.load(), "demo", "1.0.0", "nope")
    assert "greet-comma" in err.value.hint
    _edit(_module(demo_project), b'"hello, " + name', b'"hello " + name')  # the whole change undone
    with pytest.raises(PatchwheelError, match="changes nothing"):
        refresh.refresh(demo_project.load(), "demo", "1.0.0", "greet-comma")
    assert _patch_files(demo_project.root) == before


def test_refresh_a_new_file_into_a_patch(demo_project):
    extra = _module(demo_project, "demo/extra.py")
    extra.write_bytes(b"VALUE = 1\n")
    refresh.refresh(demo_project.load(), "demo", "1.0.0", "greet-comma", log=lambda m: None)
    patches = series.parse_series(demo_project.load().line("demo"))
    assert patches[0].touched == ["src/demo/core.py", "src/demo/extra.py"]
    assert vendored.overlay_problems(demo_project.load()) == []


def test_refresh_refuses_an_insertion_into_another_patchs_lines(demo_project):
    two_patches(
        demo_project,
        lambda f: {
            **f,
            "src/demo/core.py": f["src/demo/core.py"].replace(
                b"    return a + b\n", b"    total = a + b\n    return total\n"
            ),
        },
    )
    _edit(_module(demo_project), b"    total = a + b\n", b"    total = a + b\n    total += 0\n")
    with pytest.raises(PatchwheelError, match=r"demo/core.py line 9 \(0002-second.patch\)"):
        refresh.refresh(demo_project.load(), "demo", "1.0.0", "greet-comma", log=lambda m: None)


def test_refresh_refuses_to_bring_back_a_file_another_patch_deletes(demo_project):
    two_patches(demo_project, lambda f: {**f, "src/demo/util.py": b"X = 1\n"})
    third = make_patch(
        {**FILES, "src/demo/core.py": COMMA, "src/demo/util.py": b"X = 1\n"},
        lambda f: {**f, "src/demo/util.py": None},
        "Remove util",
        TRAILERS,
    )
    demo_project.set_series(
        *[(p.name, p.read_bytes()) for p in sorted(demo_project.patch_dir.glob("*.patch"))], ("0003-rm.patch", third)
    )
    assert not _module(demo_project, "demo/util.py").exists()
    _module(demo_project, "demo/util.py").write_bytes(b"X = 2\n")
    with pytest.raises(PatchwheelError, match="which 0002-second.patch deletes|which 0003-rm.patch deletes"):
        refresh.refresh(demo_project.load(), "demo", "1.0.0", "greet-comma", log=lambda m: None)


def test_stray_files_and_pristine_copies_are_not_edits(demo_project):
    folder = demo_project.root / "overlay" / "demo" / "1.0.0" / "demo"
    (folder / "core.py~").write_bytes(b"backup")
    (folder / ".core.py.swp").write_bytes(b"swap\0")
    (folder / "__init__.py").write_bytes(INIT)  # copied from the wheel, not edited yet
    _edit(folder / "core.py", b'"hello, " + name', b'"hello, " + name.strip()')
    refresh.refresh(demo_project.load(), "demo", "1.0.0", "greet-comma", log=lambda m: None)
    patches = series.parse_series(demo_project.load().line("demo"))
    assert patches[0].touched == ["src/demo/core.py"], "only the edit"
    problems = vendored.overlay_problems(demo_project.load())
    assert len(problems) == 3 and all("is not a file the series of demo/1.0.0 makes" in p for p in problems)


def test_a_message_line_git_am_would_cut_is_refused(demo_project):
    cut = make_patch(FILES, edit_greet, "Greet with a comma", {"Note": "x"} | TRAILERS).replace(
        b"Why the change is needed.", b"Why the change is needed.\n--- a table rule, for example"
    )
    demo_project.set_series(("0001-greet-comma.patch", cut))
    line = demo_project.load().line("demo")
    assert any("git am takes for the start of the diff" in p for p in series.lint_line(line, demo_project.root))
    _edit(_module(demo_project), b'"hello, " + name', b'"hello, " + name.strip()')
    with pytest.raises(PatchwheelError, match="would be lost"):
        refresh.refresh(demo_project.load(), "demo", "1.0.0", "greet-comma", log=lambda m: None)


def test_the_build_refuses_an_overlay_file_the_series_does_not_patch(demo_project):
    _module(demo_project, "demo/extra.py").write_bytes(b"VALUE = 1\n")
    with pytest.raises(
        PatchwheelError, match=r"overlay/demo/1.0.0/ has files the series does not patch: demo/extra.py"
    ):
        build_mod.build(demo_project.load(), demo_project.root / "dist", log=lambda m: None)


# --- new -------------------------------------------------------------------------------------------------------


def test_new_makes_a_patch_with_the_template_and_a_failing_stub(demo_project, capsys):
    _edit(_module(demo_project), b"return a + b", b"return b + a")
    root = ["--root", str(demo_project.root)]
    assert cli.main(root + ["new", "demo", "1.0.0", "add-swap"]) == 0
    line = demo_project.load().line("demo")
    assert series.series_names(line) == ["0001-greet-comma.patch", "0002-add-swap.patch"]
    patch = series.parse_series(line)[1]
    assert patch.subject.startswith("TODO") and patch.trailers["Proof-Test"] == "tests/proof/test_add_swap.py"
    assert patch.trailers["Drop-When"] == "proof-passes-upstream"
    stub = (demo_project.root / "tests" / "proof" / "test_add_swap.py").read_text()
    assert "raise CouldNotObserve(" in stub and "pytest.mark.proof(" in stub
    problems = series.lint_line(line, demo_project.root)
    assert any("TODO line(s)" in p for p in problems), "a template cannot land or be published"
    (built,) = build_mod.build(demo_project.load(), demo_project.root / "dist", log=lambda m: None)
    assert "-0_draft_" in built.filename, "built for its proof, as a draft (test_draft.py)"
    assert vendored.overlay_problems(demo_project.load()) == []
    _regenerates(line)
    capsys.readouterr()
    _edit(_module(demo_project), b"return b + a", b"return b + a  # commutes")  # keep working on it
    assert cli.main(root + ["refresh", "demo", "1.0.0", "add-swap"]) == 0
    assert "refreshed patches/demo/1.0.0/0002-add-swap.patch" in capsys.readouterr().out


def test_new_refuses_bad_input(demo_project):
    project = demo_project.load()
    with pytest.raises(PatchwheelError, match="no edit to make a patch of"):
        refresh.new(project, "demo", "1.0.0", "x")
    _edit(_module(demo_project), b"return a + b", b"return b + a")
    with pytest.raises(PatchwheelError, match="already has a patch named greet-comma"):
        refresh.new(project, "demo", "1.0.0", "greet-comma")
    with pytest.raises(PatchwheelError, match="not a patch slug"):
        refresh.new(project, "demo", "1.0.0", "../x")
    # A name by which refresh would find another patch: its number or file stem (refresh then picked that one)
    for other in ("0001-greet-comma", "0001", "0002", "0001-greet-comma.patch", "0002-anything"):
        with pytest.raises(PatchwheelError, match=f"{re.escape(repr(other))} is not a patch slug|names 0001-greet"):
            refresh.new(project, "demo", "1.0.0", other)
    assert series.series_names(project.line("demo")) == ["0001-greet-comma.patch"]


# --- a real release line ---------------------------------------------------------------------------------------


@pytest.fixture
def real_root(tmp_path) -> Path:
    """A copy of this project's overlay/, patches/, proof tests and guards (the real pins; wheels from the cache)."""
    root = tmp_path / "real"
    for part in ("overlay", "patches", "tests/proof", "tests/guards"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_the_committed_overlay_is_pristine_plus_series():
    from patchwheel import config

    assert vendored.overlay_problems(config.load(ROOT)) == []


def test_refresh_on_a_real_line(real_root, capsys):
    from patchwheel import config

    newest = config.load(real_root).line("transformers").version  # the line follow moves to each new release
    module = real_root / "overlay" / "transformers" / newest / "transformers" / "trainer.py"
    old = "        # `None` goes to every replica whole, as any non-tensor argument does; each replica's share "
    new = "        # `None` goes to every replica whole (as any non-tensor argument does); each replica's share "
    old, new = old + "replaces it\n", new + "replaces it\n"
    _edit(module, old.encode(), new.encode())
    assert cli.main(["--root", str(real_root), "vendor", "--check"]) == 1, "nox (lint) fails on the edit"
    assert f"overlay/transformers/{newest}/transformers/trainer.py was edited" in capsys.readouterr().out
    before = _patch_files(real_root)
    assert cli.main(["--root", str(real_root), "refresh", "transformers", newest, "dataparallel-num-items"]) == 0
    after = _patch_files(real_root)
    changed = [k for k in after if after[k] != before[k]]
    assert changed == [f"patches/transformers/{newest}/0002-dataparallel-num-items.patch"]
    lines = after[changed[0]].decode().splitlines()
    assert "+" + new.rstrip("\n") in lines and "+" + old.rstrip("\n") not in lines
    project = config.load(real_root)
    line = project.line("transformers", newest)
    assert series.lint_line(line, real_root) == [], "message and trailers kept"
    assert vendored.overlay_problems(project) == []
    _regenerates(line)


def test_nox_lint_compares_the_overlay():
    """`nox` (its lint session) fails on a hand-edited overlay file: the session runs `patchwheel lint`, which
    compares the overlay (shown above): one lint, the command's and the suite's."""
    source = (ROOT / "noxfile.py").read_text()
    lint = source[source.index("def lint(") :].split("@nox.session", 1)[0]
    assert 'tool(session, "lint")' in lint
