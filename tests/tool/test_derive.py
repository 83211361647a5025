"""`patchwheel derive` on the demo package: a line for a release older than every line (backwards), one between
two lines (forwards, from the older), a conflict that stops it and a resume after the maintainer resolved it, the
fixes another line carries, and interrupts that must leave the project (and a waiting work folder) as they were.
The proof runs are faked; the judging, the rebase, the vendoring, the build, the matrix and lint are real."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import CORE, INIT, TRAILERS, Prover, edit_greet, make_patch, proofs, tree
from patchwheel import cli, config, gitops
from patchwheel.errors import PatchwheelError
from patchwheel.maint import lintall, rebase
from patchwheel.maint.follow import derive
from patchwheel.maint.follow import report as followreport
from patchwheel.maint.proving.setruns import Run
from patchwheel.maint.upstream import matrixrun as upstream_matrix

CONFLICTING = CORE.replace(b'"hello " + name', b'"hi " + name')
KEPT = {**TRAILERS, "Drop-When": "proof-passes-upstream"}


def kept_by_proof(demo) -> None:
    """The demo's patch is judged by its proof alone (its own Drop-When, demo>=1.1.0, would hold on 1.1.0+)."""
    files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
    demo.set_series(("0001-greet-comma.patch", make_patch(files, edit_greet, "Greet with a comma", KEPT)))


def work_tree(root: Path) -> dict[str, str]:
    """Every file under .rebase/ (the git objects included) with its sha256."""
    base = root / ".rebase"
    return {
        p.relative_to(base).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(base.rglob("*"))
        if p.is_file()
    }


def second_line(demo, version: str = "2.0.0", core: bytes = CORE) -> None:
    """A newer line of demo, made as a maintainer makes one (rebase), that the set ``latest`` names."""
    demo.add_release(version, core)
    assert rebase.start(demo.load(), "demo", version, behaviour=False, log=lambda m: None)
    (demo.root / "overlay" / "sets.toml").write_text(
        f'[set.default]\ndemo = "1.0.0"\n\n[set.latest]\ndemo = "{version}"\n'
    )


def test_a_derive_backwards_makes_the_line_its_set_and_its_matrix(demo_project, monkeypatch, tmp_path):
    kept_by_proof(demo_project)
    demo_project.add_release("0.9.0", b"# an older first line\n" + CORE)  # the patch applies with an offset
    judged = proofs(monkeypatch, tmp_path)
    prover = Prover()
    done = derive.derive(demo_project.load(), "demo==0.9.0", prover, log=print)
    assert done.stop is None, done.stop
    assert done.source == "1.0.0" and done.set_name == "v0.9"
    project = config.load(demo_project.root)
    assert [ln.version for ln in project.lines["demo"]] == ["0.9.0", "1.0.0"]
    pins = (demo_project.root / "overlay" / "demo" / "pins.toml").read_text()
    assert pins.index('[release."0.9.0"]') < pins.index('[release."1.0.0"]'), "the pins list the lines oldest first"
    assert project.sets == {"default": {"demo": "1.0.0"}, "v0.9": {"demo": "0.9.0"}}
    line = project.line("demo", "0.9.0")
    assert line.build is not None and line.build.number == 1
    series = (line.patch_dir / "series").read_text()
    assert series.startswith("# Patch series for demo 0.9.0, derived from 1.0.0 by `patchwheel derive`.")
    assert b'"hello, " + name' in (demo_project.root / "overlay" / "demo" / "0.9.0" / "demo" / "core.py").read_bytes()
    assert ("0.9.0", "tests/proof/test_demo.py") in judged, "judged by its proof on the pristine release"
    assert [v.decision for v in done.verdicts] == ["carried (offset): its proof still fails"]
    status = json.loads((demo_project.root / "patches" / "MATRIX.json").read_text())
    assert [ln["line"] for ln in status["lines"]] == ["demo/0.9.0"], "the new line judged on the newer releases"
    assert [r["version"] for r in status["lines"][0]["releases"]] == ["1.0.0"]
    assert [members for members, _ in prover.calls] == [{"demo": "0.9.0"}]
    record = config.load(demo_project.root).line("demo", "0.9.0").build
    assert record is not None
    assert f"demo-0.9.0+fixed-1_{record.inputs[:12]}-py3-none-any.whl" in prover.calls[0][1]
    assert not (demo_project.root / "dist").exists() and not (demo_project.root / ".rebase").exists()
    assert lintall.problems(project) == []
    assert "demo 0.9.0+fixed derived from the line 1.0.0" in followreport.derived(done)[0]


def test_a_derive_forwards_carries_the_nearest_line_and_keeps_the_others(demo_project, monkeypatch, tmp_path):
    kept_by_proof(demo_project)
    second_line(demo_project, "2.0.0", b"# moved\n# twice\n" + CORE)
    demo_project.add_release("1.1.0", b"# moved\n" + CORE)
    proofs(monkeypatch, tmp_path)
    prover = Prover()
    done = derive.derive(demo_project.load(), "demo==1.1.0", prover, set_name="v1", log=lambda m: None)
    assert done.stop is None, done.stop
    assert done.source == "1.0.0", "1.0.0 is one release away, 2.0.0 two"
    project = config.load(demo_project.root)
    assert [ln.version for ln in project.lines["demo"]] == ["1.0.0", "1.1.0", "2.0.0"]
    assert project.sets["v1"] == {"demo": "1.1.0"} and project.sets["latest"] == {"demo": "2.0.0"}
    assert project.line("demo").version == "2.0.0", "the newest line stays what follow carries"
    assert "derived from 1.0.0" in (project.line("demo", "1.1.0").patch_dir / "series").read_text()
    status = json.loads((demo_project.root / "patches" / "MATRIX.json").read_text())
    mine = next(ln for ln in status["lines"] if ln["line"] == "demo/1.1.0")
    assert [r["version"] for r in mine["releases"]] == ["2.0.0"]
    # From the newer line instead, when asked: the same line, carried backwards.
    (tmp_path / "again").mkdir()
    with pytest.raises(PatchwheelError, match="is a release line already"):
        derive.derive(project, "demo==1.1.0", prover, source="2.0.0")


def test_a_conflict_stops_it_then_continue_finishes_it(demo_project, monkeypatch, tmp_path, capsys):
    kept_by_proof(demo_project)
    demo_project.add_release("0.9.0", CONFLICTING)
    proofs(monkeypatch, tmp_path)
    before = tree(demo_project.root)
    prover = Prover()
    assert cli.main(["--root", str(demo_project.root), "derive", "demo==0.9.0", "--set", "old"]) == 1
    out = capsys.readouterr().out
    repo = demo_project.root / ".rebase" / "demo-0.9.0" / "repo"
    assert "CONFLICT in src/demo/core.py" in out and f"git -C {repo} add src/demo/core.py" in out, out
    assert "nox -s derive -- demo==0.9.0 --continue" in out and "patchwheel-follow-" not in out
    assert tree(demo_project.root) == before, "nothing of the project is written at a conflict"
    assert (repo.parent / "derive.json").is_file() and b"<<<<<<<" in (repo / "src/demo/core.py").read_bytes()

    waiting = work_tree(demo_project.root)
    done = derive.resume(demo_project.load(), "demo==0.9.0", prover, log=lambda m: None)
    assert done.stop is not None and "still unresolved" in done.stop.why, done.stop
    assert work_tree(demo_project.root) == waiting and tree(demo_project.root) == before

    (repo / "src/demo/core.py").write_bytes(CONFLICTING.replace(b'"hi " + name', b'"hi, " + name'))
    gitops.git(repo, "add", "src/demo/core.py")
    done = derive.resume(demo_project.load(), "demo==0.9.0", prover, log=lambda m: None)
    assert done.stop is None, done.stop
    project = config.load(demo_project.root)
    assert project.sets["old"] == {"demo": "0.9.0"}, "the set given at the start"
    patch = (project.line("demo", "0.9.0").patch_dir / "0001-greet-comma.patch").read_bytes()
    assert b'+    return "hi, " + name' in patch and b"Drop-When: proof-passes-upstream" in patch
    assert not (demo_project.root / ".rebase").exists(), "the work folder went into the line"
    assert prover.calls and prover.calls[-1][0] == {"demo": "0.9.0"}
    assert lintall.problems(project) == []


def test_review_waits_after_a_clean_carry_and_continue_takes_the_amended_commit(
    demo_project, monkeypatch, tmp_path, capsys
):
    """A patch that merges cleanly (by offset or 3-way) can still be wrong for the release, and with nothing to stop
    the derive a maintainer had no way in: the line was built and proven as merged. `--review` waits once every
    patch is carried, before anything is built; the maintainer amends the carried commit; `--continue` writes the
    line from it."""
    kept_by_proof(demo_project)
    demo_project.add_release("0.9.0", b"# an older first line\n" + CORE)  # the patch applies with an offset
    proofs(monkeypatch, tmp_path)
    before = tree(demo_project.root)
    root = ["--root", str(demo_project.root)]
    assert cli.main([*root, "derive", "demo==0.9.0", "--set", "old", "--review"]) == 1
    out = capsys.readouterr().out
    repo = demo_project.root / ".rebase" / "demo-0.9.0" / "repo"
    assert (
        "every patch carried (0001-greet-comma.patch: offset" in out and f"review each carried commit in {repo}" in out
    )
    assert f"git -C {repo} rebase -i " in out and "nox -s derive -- demo==0.9.0 --continue" in out, out
    assert tree(demo_project.root) == before, "nothing of the project is written before the review"
    assert cli.main([*root, "derive", "demo==0.9.0", "--continue", "--review"]) == 2, "--review is the start's"
    capsys.readouterr()

    core = (repo / "src/demo/core.py").read_bytes()
    (repo / "src/demo/core.py").write_bytes(core.replace(b'"hello, " + name', b'"hello, " + name.strip()'))
    gitops.git(repo, "-c", "user.name=m", "-c", "user.email=m@m", "commit", "-q", "--amend", "--no-edit", "-a")
    prover = Prover()
    done = derive.resume(demo_project.load(), "demo==0.9.0", prover, log=lambda m: None)
    assert done.stop is None, done.stop
    project = config.load(demo_project.root)
    patch = (project.line("demo", "0.9.0").patch_dir / "0001-greet-comma.patch").read_bytes()
    assert b'+    return "hello, " + name.strip()' in patch, "the line is the amended commit"
    assert not (demo_project.root / ".rebase").exists() and prover.calls
    assert lintall.problems(project) == []


def test_a_failed_proof_after_continue_keeps_the_resolution_waiting(demo_project, monkeypatch, tmp_path):
    kept_by_proof(demo_project)
    demo_project.add_release("0.9.0", CONFLICTING)
    proofs(monkeypatch, tmp_path)
    assert derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None).stop is not None
    repo = demo_project.root / ".rebase" / "demo-0.9.0" / "repo"
    (repo / "src/demo/core.py").write_bytes(CONFLICTING.replace(b'"hi " + name', b'"hi! " + name'))  # a wrong fix
    gitops.git(repo, "add", "src/demo/core.py")
    before, waiting = tree(demo_project.root), work_tree(demo_project.root)
    failed = [Run("proofs on the +fixed builds", False, "1 failed", "E   BugSymptom: no comma")]
    done = derive.resume(demo_project.load(), "demo==0.9.0", Prover(failed), log=lambda m: None)
    assert done.stop is not None and "proofs on the +fixed builds failed (1 failed)" in done.stop.why
    assert tree(demo_project.root) == before and work_tree(demo_project.root) == waiting
    # Resolved again, properly: --continue takes the resolution as it is now.
    (repo / "src/demo/core.py").write_bytes(CONFLICTING.replace(b'"hi " + name', b'"hi, " + name'))
    gitops.git(repo, "add", "src/demo/core.py")
    assert derive.resume(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None).stop is None


def test_an_interrupt_leaves_the_project_and_the_waiting_work_as_they_were(demo_project, monkeypatch, tmp_path):
    kept_by_proof(demo_project)
    demo_project.add_release("0.9.0", CORE)
    proofs(monkeypatch, tmp_path)
    before = tree(demo_project.root)

    def interrupt(project):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        derive.derive(demo_project.load(), "demo==0.9.0", Prover(action=interrupt), log=lambda m: None)
    assert tree(demo_project.root) == before and not (demo_project.root / ".rebase").exists()

    demo_project.add_release("0.8.0", CONFLICTING)
    assert derive.derive(demo_project.load(), "demo==0.8.0", Prover(), log=lambda m: None).stop is not None
    repo = demo_project.root / ".rebase" / "demo-0.8.0" / "repo"
    (repo / "src/demo/core.py").write_bytes(CONFLICTING.replace(b'"hi " + name', b'"hi, " + name'))
    gitops.git(repo, "add", "src/demo/core.py")
    before, waiting = tree(demo_project.root), work_tree(demo_project.root)
    with pytest.raises(KeyboardInterrupt):
        derive.resume(demo_project.load(), "demo==0.8.0", Prover(action=interrupt), log=lambda m: None)
    assert tree(demo_project.root) == before and work_tree(demo_project.root) == waiting
    assert derive.resume(demo_project.load(), "demo==0.8.0", Prover(), log=lambda m: None).stop is None


def _shout_line(demo) -> None:
    """A newer line, 2.0.0, that carries a second fix (shout) the 1.0.0 line does not."""
    kept_by_proof(demo)
    second_line(demo, "2.0.0")
    demo.add_fix("2.0.0", "shout", "Shout the greeting", (b'"hello, "', b'"HELLO, "'))
    demo.add_release("1.1.0", CORE)


def test_a_bug_another_line_fixes_is_fixed_by_that_lines_patch(demo_project, monkeypatch, tmp_path):
    """The newer line carries a fix the source line does not, and its bug is still in the release: a line carried
    from the source alone would ship without it (derive stopped there, and from the newer line it stopped on the
    fix that line had dropped). Its patch is adopted: carried after the source's own, from its line."""
    _shout_line(demo_project)
    proofs(monkeypatch, tmp_path)
    done = derive.derive(demo_project.load(), "demo==1.1.0", Prover(), log=lambda m: None)
    assert done.stop is None, done.stop
    assert done.source == "1.0.0"
    assert [(v.patch, v.decision) for v in done.others] == [
        ("0002-shout.patch (demo/2.0.0)", "adopted from the line 2.0.0: its bug is in demo 1.1.0")
    ]
    line = config.load(demo_project.root).line("demo", "1.1.0")
    assert (line.patch_dir / "series").read_text().splitlines()[1:] == [
        "# 0002-shout.patch: from the line 2.0.0 (its 0002-shout.patch): its bug is in 1.1.0, and 1.0.0 has no fix",
        "0001-greet-comma.patch",
        "0002-shout.patch",
    ]
    assert b'"HELLO, " + name' in (demo_project.root / "overlay" / "demo" / "1.1.0" / "demo" / "core.py").read_bytes()
    assert lintall.problems(config.load(demo_project.root)) == []


def test_a_fix_another_line_carries_is_not_adopted_where_its_bug_is_gone(demo_project, monkeypatch, tmp_path):
    _shout_line(demo_project)
    proofs(monkeypatch, tmp_path, passes_from={"tests/proof/test_shout.py": "1.1.0"})
    done = derive.derive(demo_project.load(), "demo==1.1.0", Prover(), log=lambda m: None)
    assert done.stop is None, done.stop
    assert [v.decision for v in done.others] == ["nothing to carry: its proof passes on pristine demo 1.1.0"]
    series = (config.load(demo_project.root).line("demo", "1.1.0").patch_dir / "series").read_text()
    assert "0002-shout.patch" not in series


def test_a_set_it_moves_retires_the_line_no_set_names(demo_project, monkeypatch, tmp_path):
    kept_by_proof(demo_project)
    second_line(demo_project, "2.0.0")
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    done = derive.derive(demo_project.load(), "demo==1.1.0", Prover(), set_name="default", log=lambda m: None)
    assert done.stop is None, done.stop
    assert done.set_change == "the set default: demo 1.0.0 -> 1.1.0" and done.retired == ["demo/1.0.0"]
    project = config.load(demo_project.root)
    assert [ln.version for ln in project.lines["demo"]] == ["1.1.0", "2.0.0"]
    assert not (demo_project.root / "patches" / "demo" / "1.0.0").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (["demo"], "'demo' is not <package>==<version>"),
        (["demo==1.0.0; rm -rf /"], "is not <package>==<version>"),
        (["demo==1.0.0"], "demo 1.0.0 is a release line already"),
        (["demo==0.5.0"], "demo 0.5.0 is not a final release on"),
        (["demo==0.9.0", "--set", "a b"], "'a b' is not a plain set name"),
        (["other==1.0.0"], "unknown package 'other'"),
        (["demo==0.9.0", "--from", "7.0"], "no release line demo 7.0"),
        (["demo==0.9.0", "--abort"], "no derive of demo 0.9.0 is waiting"),
        (["demo==0.9.0", "--continue"], "no derive of demo 0.9.0 is waiting"),
        (["demo==0.9.0", "--continue", "--set", "x"], "--from, --set, --with and --review are the start's"),
        (["demo==0.9.0", "--continue", "--with", "demo==1.0.0"], "--from, --set, --with and --review are the start's"),
        (["demo==0.9.0", "--with", "demo==1.0.0"], "demo is the package derive makes the line of"),
    ],
)
def test_bad_input_is_refused_with_what_to_do(demo_project, capsys, args, message):
    demo_project.add_release("0.9.0", CORE)
    before = tree(demo_project.root)
    assert cli.main(["--root", str(demo_project.root), "derive", *args]) == 2
    assert message in capsys.readouterr().err
    assert tree(demo_project.root) == before


def test_a_release_newer_than_the_newest_line_is_follow_s(demo_project, capsys):
    demo_project.add_release("1.1.0", CORE)
    assert cli.main(["--root", str(demo_project.root), "derive", "demo==1.1.0"]) == 2
    assert "`nox -s follow -- demo` carries the newest line" in capsys.readouterr().err


def test_abort_removes_only_a_derive_s_work_folder(demo_project, monkeypatch, tmp_path, capsys):
    kept_by_proof(demo_project)
    demo_project.add_release("0.9.0", CONFLICTING)
    proofs(monkeypatch, tmp_path)
    assert derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None).stop is not None
    with pytest.raises(PatchwheelError, match="is waiting in"):
        derive.derive(demo_project.load(), "demo==0.9.0", Prover())
    assert cli.main(["--root", str(demo_project.root), "derive", "demo==0.9.0", "--abort"]) == 0
    assert not (demo_project.root / ".rebase").exists()
    # A rebase's folder is the rebase's: derive neither continues nor removes it.
    demo_project.add_release("1.1.0", CONFLICTING)
    assert rebase.start(demo_project.load(), "demo", "1.1.0", behaviour=False, log=lambda m: None) is False
    assert cli.main(["--root", str(demo_project.root), "derive", "demo==1.1.0", "--abort"]) == 2
    assert "that is `nox -s rebase`'s" in capsys.readouterr().err
    assert (demo_project.root / ".rebase" / "demo-1.1.0" / "repo").is_dir()


def test_a_new_set_goes_after_the_other_sets_and_before_suite(tmp_path):
    from patchwheel.configfiles import add_set

    sets = tmp_path / "sets.toml"
    head = '# sets\n[set.latest]\ndemo = "2.0.0"\n'
    suite = '# The sets nox proves.\n[suite]\nsets = ["latest"]\n'
    sets.write_text(head + "\n" + suite)
    add_set(sets, "v1", {"demo": "1.1.0", "other": "3.0"})
    new = '# Made by `patchwheel derive` for users who pin demo 1.1.0.\n[set.v1]\ndemo = "1.1.0"\nother = "3.0"\n'
    assert sets.read_text() == head + "\n" + new + "\n" + suite
    plain = tmp_path / "plain.toml"
    plain.write_text(head)
    add_set(plain, "v1.1", {"demo": "1.1.0"})
    assert plain.read_text().endswith(
        '\n\n# Made by `patchwheel derive` for users who pin demo 1.1.0.\n[set."v1.1"]\ndemo = "1.1.0"\n'
    )


def test_a_work_folder_edited_by_hand_is_refused_not_followed(demo_project, monkeypatch, tmp_path):
    """The work folder's state names the patches to carry: a name that is a path (out of the folder) is refused,
    as is a state that is not JSON, before anything runs; nothing of the project is written."""
    kept_by_proof(demo_project)
    demo_project.add_release("0.9.0", CONFLICTING)
    proofs(monkeypatch, tmp_path)
    second = make_patch(
        edit_greet({"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}),
        lambda f: {**f, "src/demo/core.py": f["src/demo/core.py"].replace(b"a + b", b"b + a")},
        "Add the other way round",
        KEPT,
    )
    first = (demo_project.patch_dir / "0001-greet-comma.patch").read_bytes()
    demo_project.set_series(("0001-greet-comma.patch", first), ("0002-swap.patch", second))
    assert derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None).stop is not None
    work = demo_project.root / ".rebase" / "demo-0.9.0"
    (work / "repo" / "src/demo/core.py").write_bytes(CONFLICTING.replace(b'"hi " + name', b'"hi, " + name'))
    gitops.git(work / "repo", "add", "src/demo/core.py")
    state = json.loads((work / "state.json").read_text())
    outside = tmp_path / "outside.patch"
    outside.write_bytes(second)
    state["todo"][1][0] = f"../../../../{outside.relative_to(outside.anchor)}"
    (work / "state.json").write_text(json.dumps(state))
    before = tree(demo_project.root)
    with pytest.raises(PatchwheelError, match=r'state.json: "todo" is .* not a list of \[patch file name'):
        derive.resume(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None)
    assert tree(demo_project.root) == before
    (work / "state.json").write_text("{not json")
    with pytest.raises(PatchwheelError, match="cannot read .*state.json") as refused:
        derive.resume(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None)
    assert "--abort`, then derive again" in refused.value.hint
    assert tree(demo_project.root) == before and (work / "state.json").read_text() == "{not json"


def _resolved_line(demo, version: str, core: bytes, prover) -> None:
    """A line of ``version`` (its core.py ``core``, on which the 1.0.0 line's patch conflicts), made as a maintainer
    makes one: derive, the conflict resolved by hand, --continue."""
    demo.add_release(version, core)
    assert derive.derive(demo.load(), f"demo=={version}", prover, log=lambda m: None).stop is not None
    repo = demo.root / ".rebase" / f"demo-{version}" / "repo"
    (repo / "src/demo/core.py").write_bytes(core.replace(b'"hi " + name', b'"hi, " + name'))
    gitops.git(repo, "add", "src/demo/core.py")
    assert derive.resume(demo.load(), f"demo=={version}", prover, log=lambda m: None).stop is None


def test_the_line_with_the_fewest_conflicts_is_carried_not_the_nearest(demo_project, monkeypatch, tmp_path):
    """0.9.0 is one release from the 1.0.0 line and three from the 0.5.0 line, but only 0.5.0's patch applies to
    its code: the nearest line stopped on a conflict that another line had resolved already."""
    kept_by_proof(demo_project)
    proofs(monkeypatch, tmp_path)
    _resolved_line(demo_project, "0.5.0", CONFLICTING, Prover())
    for version in ("0.6.0", "0.7.0"):
        demo_project.add_release(version, CORE)
    demo_project.add_release("0.9.0", b"# one more line\n" + CONFLICTING)
    said: list[str] = []
    done = derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=said.append)
    assert done.stop is None, done.stop
    assert done.source == "0.5.0"
    assert said[0].endswith(
        "demo 0.9.0: from the line demo/0.5.0 (the fewest conflicts on 0.9.0 in all, 0: 0 of its 1 patches "
        "conflict; 3 release(s) away; demo/1.0.0: 1 of its 1 patches conflict); judging it (text, and proofs on the "
        "pristine release)"
    ), said[0]
    assert [v.decision for v in done.verdicts] == ["carried (offset): its proof still fails"]
    # --from still names the line, and says so.
    said.clear()
    demo_project.add_release("0.9.5", b"# one more line\n" + CONFLICTING)
    done = derive.derive(demo_project.load(), "demo==0.9.5", Prover(), source="1.0.0", log=said.append)
    assert done.stop is not None and done.source == "1.0.0" and "(named by --from)" in said[0], said[0]
    assert derive.abort(demo_project.load(), "demo==0.9.5")


def test_the_fixes_a_line_lacks_count_by_their_conflicts(demo_project):
    """A line that lacks a fix other lines carry gets it adopted where the release has the bug: the conflicts of
    that fix's patch count as its own would. Of two lines with one conflict each in all, the nearer; of two as near,
    the older."""
    line = demo_project.load().line("demo", "1.0.0")
    newer = replace(line, version="2.0.0")
    found = [
        derive.Candidate(newer, 1, [], ["shout"], ["shout"], (1, 1)),
        derive.Candidate(line, 2, ["0001-greet-comma.patch"], [], [], (2, 0)),
    ]
    chosen, why = derive.choose(found, "1.5.0")
    assert chosen is newer, "1 conflict each in all: the nearer"
    assert why == (
        "the fewest conflicts on 1.5.0 in all, 1: 0 of its 1 patches conflict; it lacks 1 fix(es) other lines carry "
        "(shout), to adopt where the release has the bug, 1 of them conflicting; 1 release(s) away; demo/1.0.0: 1 "
        "of its 2 patches conflict"
    )
    found[0] = derive.Candidate(newer, 1, [], ["shout", "whisper"], ["shout", "whisper"], (1, 1))
    assert derive.choose(found, "1.5.0")[0] is line, "2 conflicts in all against 1"
    same = [derive.Candidate(newer, 1, [], [], [], (1, 1)), derive.Candidate(line, 1, [], [], [], (1, 0))]
    assert derive.choose(same, "1.5.0")[0] is line
    assert derive.choose(found[:1], "1.5.0")[1].startswith("the only line of demo: demo/2.0.0: 0 of its 1 patches")


def test_an_adopted_patch_that_conflicts_waits_for_the_maintainer_like_any_other(demo_project, monkeypatch, tmp_path):
    """An adopted patch is carried by text as the source's are: where its 3-way merge conflicts, the work folder
    waits with its conflict, and --continue writes it into the series, from its line."""
    kept_by_proof(demo_project)
    second_line(demo_project, "2.0.0")
    demo_project.add_fix("2.0.0", "add-in-order", "Add in order", (b"return a + b", b"return b + a"))
    demo_project.add_release("1.1.0", CORE.replace(b"return a + b", b"return sum((a, b))"))
    proofs(monkeypatch, tmp_path)
    done = derive.derive(demo_project.load(), "demo==1.1.0", Prover(), log=lambda m: None)
    assert done.stop is not None and "0002-add-in-order.patch: CONFLICT in src/demo/core.py" in done.stop.why
    repo = demo_project.root / ".rebase" / "demo-1.1.0" / "repo"
    resolved = CORE.replace(b'"hello " + name', b'"hello, " + name').replace(b"return a + b", b"return sum((b, a))")
    (repo / "src/demo/core.py").write_bytes(resolved)
    gitops.git(repo, "add", "src/demo/core.py")
    done = derive.resume(demo_project.load(), "demo==1.1.0", Prover(), log=lambda m: None)
    assert done.stop is None, done.stop
    new = config.load(demo_project.root).line("demo", "1.1.0")
    assert (new.patch_dir / "series").read_text().splitlines()[1:] == [
        "# 0002-add-in-order.patch: from the line 2.0.0 (its 0002-add-in-order.patch): its bug is in 1.1.0, and "
        "1.0.0 has no fix",
        "0001-greet-comma.patch",
        "0002-add-in-order.patch",
    ]
    assert (demo_project.root / "overlay" / "demo" / "1.1.0" / "demo" / "core.py").read_bytes() == resolved


def test_the_matrix_of_a_new_line_reuses_the_runs_other_lines_made_on_the_same_releases(
    demo_project, monkeypatch, tmp_path
):
    """A proof's verdict on a pristine release is the release's, whichever line asks: the new line's cells on the
    releases another line's committed runs judged take those verdicts, and no environment is made for them (a
    cold derive of transformers 4.57.3 spent most of its 1,064 s making environments for newer releases)."""
    kept_by_proof(demo_project)
    demo_project.add_release("0.9.0", b"# an older first line\n" + CORE)
    judged = proofs(monkeypatch, tmp_path)
    assert derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None).stop is None
    assert ("1.0.0", "tests/proof/test_demo.py") in judged, "the line 0.9.0 judged on 1.0.0, for the matrix"
    demo_project.add_release("0.8.0", b"# an older first line\n# and another\n" + CORE)
    judged.clear()
    assert derive.derive(demo_project.load(), "demo==0.8.0", Prover(), log=lambda m: None).stop is None
    assert ("1.0.0", "tests/proof/test_demo.py") not in judged, judged
    status = json.loads((demo_project.root / "patches" / "MATRIX.json").read_text())
    mine = next(ln for ln in status["lines"] if ln["line"] == "demo/0.8.0")
    cell = mine["patches"][0]["cells"]["1.0.0"]
    assert cell["behaviour"] == "fails" and cell["behaviour_detail"].endswith("[the run for the line demo/0.9.0]")
    assert "inferred_from" not in cell, "a verdict observed on that release, not one inferred between two others"
    assert cell["observed_for"] == "demo/0.9.0"
    # A verdict taken from another line's run is not taken again: the next line's cell names the line that ran it.
    demo_project.add_release("0.7.0", b"# an older first line\n# and another\n# and a third\n" + CORE)
    judged.clear()
    assert derive.derive(demo_project.load(), "demo==0.7.0", Prover(), log=lambda m: None).stop is None
    status = json.loads((demo_project.root / "patches" / "MATRIX.json").read_text())
    cell = next(ln for ln in status["lines"] if ln["line"] == "demo/0.7.0")["patches"][0]["cells"]["1.0.0"]
    assert cell["observed_for"] == "demo/0.9.0", cell
    assert cell["behaviour_detail"].count("[the run for the line") == 1, cell


def _commit_new_fix(repo: Path, core: bytes) -> None:
    """A maintainer's own fix for the release, committed in the waiting work repository on top of the carried
    patches, with the trailers every patch has."""
    (repo / "src/demo/core.py").write_bytes(core)
    gitops.git(repo, "add", "src/demo/core.py")
    body = "\n".join(f"{k}: {v}" for k, v in {**KEPT, "Proof-Test": "tests/proof/test_order.py"}.items())
    message = f"Add in order\n\nWhy the change is needed.\n\n{body}\n"
    maintainer = ("--author", "A Maintainer <maintainer@example.org>", "--date", "2026-11-28T12:00:00+00:00")
    gitops.git(repo, "commit", "-q", *maintainer, "-m", message)


def test_a_fix_committed_on_top_of_the_carried_patches_becomes_a_patch_of_the_line(demo_project, monkeypatch, tmp_path):
    """The release has a bug next to ours that no line fixes (accelerate 1.11.0's tensor-parallel prepare with
    transformers 5): the maintainer commits its fix in the waiting work repository, and --continue --new names it;
    it was refused as "changed by hand beyond the conflict"."""
    kept_by_proof(demo_project)
    (demo_project.root / "tests" / "proof" / "test_order.py").write_text("def test_order():\n    pass\n")
    demo_project.add_release("0.9.0", CONFLICTING)
    proofs(monkeypatch, tmp_path)
    assert derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None).stop is not None
    repo = demo_project.root / ".rebase" / "demo-0.9.0" / "repo"
    resolved = CONFLICTING.replace(b'"hi " + name', b'"hi, " + name')
    (repo / "src/demo/core.py").write_bytes(resolved)
    gitops.git(repo, "add", "src/demo/core.py")
    gitops.git(repo, "-c", "core.editor=true", "cherry-pick", "--continue")
    _commit_new_fix(repo, resolved.replace(b"return a + b", b"return b + a"))
    before, waiting = tree(demo_project.root), work_tree(demo_project.root)
    done = derive.resume(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None)
    assert done.stop is not None and "1 commit(s) in" in done.stop.why, done.stop
    assert "on top of the 1 carried patches" in done.stop.why and "--continue --new <slug>" in done.stop.why
    assert tree(demo_project.root) == before and work_tree(demo_project.root) == waiting
    for bad, says in ((["0001-x.patch"], "is not a slug"), (["greet-comma"], "names a patch of the line twice")):
        done = derive.resume(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None, new=bad)
        assert done.stop is not None and says in done.stop.why, done.stop
        assert tree(demo_project.root) == before and work_tree(demo_project.root) == waiting
    # The maintainer's fix committed before the resolution would be taken for the carried patch: refused.
    resolution = gitops.git(repo, "rev-parse", "HEAD~1").decode().strip()
    fix = gitops.git(repo, "rev-parse", "HEAD").decode().strip()
    gitops.git(repo, "reset", "-q", "--hard", "HEAD~2")
    gitops.git(repo, "cherry-pick", fix)
    gitops.git(repo, "cherry-pick", resolution)
    done = derive.resume(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None, new=["add-in-order"])
    assert done.stop is not None and "is not the resolution of 0001-greet-comma.patch" in done.stop.why, done.stop
    gitops.git(repo, "reset", "-q", "--hard", "HEAD~2")
    gitops.git(repo, "cherry-pick", resolution)
    gitops.git(repo, "cherry-pick", fix)
    done = derive.resume(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None, new=["add-in-order"])
    assert done.stop is None, done.stop
    line = config.load(demo_project.root).line("demo", "0.9.0")
    assert (line.patch_dir / "series").read_text().splitlines()[1:] == [
        "# 0002-add-in-order.patch: new on this line, a maintainer's fix for demo 0.9.0",
        "0001-greet-comma.patch",
        "0002-add-in-order.patch",
    ]
    assert b"+    return b + a" in (line.patch_dir / "0002-add-in-order.patch").read_bytes()
    assert lintall.problems(config.load(demo_project.root)) == []


def test_new_is_only_for_a_derive_in_progress(demo_project, capsys):
    assert cli.main(["--root", str(demo_project.root), "derive", "demo==0.9.0", "--new", "x"]) == 2
    assert "--new names commits in the work folder of a derive in progress" in capsys.readouterr().err


def test_a_release_whose_source_patches_are_all_upstream_still_gets_the_fix_another_line_carries(
    demo_project, monkeypatch, tmp_path
):
    """Every patch of the source line passes on the release, but a fix only another line carries is still needed
    there: derive adopts it instead of stopping with "is a +fixed line still needed?"."""
    _shout_line(demo_project)
    proofs(monkeypatch, tmp_path, passes_from={"tests/proof/test_demo.py": "1.1.0"})
    done = derive.derive(demo_project.load(), "demo==1.1.0", Prover(), log=lambda m: None)
    assert len(done.verdicts) == 1 and done.verdicts[0].decision.startswith("dropped: its proof passes"), done
    assert [v.decision for v in done.others] == ["adopted from the line 2.0.0: its bug is in demo 1.1.0"]
    # The adopted patch was written on top of the comma fix, which 1.1.0 does not need: it waits for the maintainer.
    assert done.stop is not None and "0002-shout.patch: CONFLICT in src/demo/core.py" in done.stop.why, done.stop
    assert "is a +fixed line still needed" not in done.stop.why


def test_a_conflict_of_a_fix_the_matrix_shows_fixed_in_the_release_is_not_counted(demo_project, monkeypatch, tmp_path):
    """The judge drops a patch whose proof passes on the release: its conflict is no work. The committed matrix
    says so beforehand (the 0.5.0 line's run on 0.9.0), so the nearer line is chosen, not the one without it."""
    kept_by_proof(demo_project)
    for version in ("0.6.0", "0.7.0"):
        demo_project.add_release(version, CORE)
    demo_project.add_release("0.9.0", b"# one more line\n" + CONFLICTING)
    proofs(monkeypatch, tmp_path, passes_from={"tests/proof/test_demo.py": "0.9.0"})
    _resolved_line(demo_project, "0.5.0", CONFLICTING, Prover())
    status = json.loads((demo_project.root / "patches" / "MATRIX.json").read_text())
    cells = next(ln for ln in status["lines"] if ln["line"] == "demo/0.5.0")["patches"][0]["cells"]
    assert cells["0.9.0"]["behaviour"] == "passes"
    said: list[str] = []
    done = derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=said.append)
    assert done.source == "1.0.0", said[0]
    assert "from the line demo/1.0.0 (the fewest conflicts on 0.9.0 in all, 0: 0 of its 1 patches" in said[0]


@pytest.mark.parametrize(
    "change",
    [
        lambda line, cell: cell.update(inferred_from=["0.9.0", "1.1.0"]),  # inferred between two runs, not run
        lambda line, cell: cell.update(torch="1.0.0"),  # run with another torch
        lambda line, cell: line.update(companions=["other==1.0"]),  # run beside other companions
        lambda line, cell: cell.update(behaviour="error"),  # could not judge
        lambda line, cell: cell.update(observed_for="demo/0.8.0"),  # itself taken from another line's run
    ],
)
def test_only_a_verdict_run_for_its_own_line_alike_is_reused(demo_project, monkeypatch, tmp_path, change):
    kept_by_proof(demo_project)
    demo_project.add_release("0.9.0", b"# an older first line\n" + CORE)
    proofs(monkeypatch, tmp_path)
    assert derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None).stop is None
    project = config.load(demo_project.root)
    known = upstream_matrix.committed_verdicts(project, project.line("demo", "1.0.0"))
    assert known("tests/proof/test_demo.py", "1.0.0") is not None, "as committed: reused"
    status = json.loads(project.matrix_json.read_text())
    line = next(ln for ln in status["lines"] if ln["line"] == "demo/0.9.0")
    change(line, line["patches"][0]["cells"]["1.0.0"])
    project.matrix_json.write_text(json.dumps(status))
    known = upstream_matrix.committed_verdicts(project, project.line("demo", "1.0.0"))
    assert known("tests/proof/test_demo.py", "1.0.0") is None


def _other_package(demo) -> None:
    """A second package with two lines (pins and empty series): the companion a set pairs demo with."""
    pins = 'package = "other"\nimport-name = "other"\nsource-root = "src"\nlocal-label = "fixed"\n'
    for version in ("1.0.0", "2.0.0"):
        wheel = f'{{ filename = "other-{version}-py3-none-any.whl", sha256 = "{"0" * 64}" }}'
        pins += f'\n[release."{version}"]\nwheel = {wheel}\n'
        (demo.root / "patches" / "other" / version).mkdir(parents=True)
        (demo.root / "patches" / "other" / version / "series").write_text("# nothing to fix yet\n")
    (demo.root / "overlay" / "other").mkdir()
    (demo.root / "overlay" / "other" / "pins.toml").write_text(pins)
    (demo.root / "overlay" / "sets.toml").write_text('[set.default]\ndemo = "1.0.0"\nother = "2.0.0"\n')


def test_with_pairs_a_new_set_with_an_older_line_of_another_package(demo_project, monkeypatch):
    """A new set took the other packages' newest lines only: a set for teams on accelerate 1.13.0 with transformers
    4.57.6 had to be written by hand before derive could move it."""
    _other_package(demo_project)
    project = demo_project.load()
    assert derive.companions_of(project, "demo", "v0.9", ["other==1.0.0"]) == {"other": "1.0.0"}
    for specs, message in [
        (["other==3.0.0"], "--with other==3.0.0: other has no line 3.0.0"),
        (["demo==1.0.0"], "demo is the package derive makes the line of"),
        (["nope==1.0.0"], "nope is not a package of this project"),
        (["other==1.0.0", "other==2.0.0"], "--with names other twice"),
        (["other"], "is not <package>==<version>"),
    ]:
        with pytest.raises(PatchwheelError, match=message):
            derive.companions_of(project, "demo", "v0.9", specs)
    with pytest.raises(PatchwheelError, match="the set default exists: it pairs other 2.0.0"):
        derive.companions_of(project, "demo", "default", ["other==1.0.0"])
    monkeypatch.setattr(derive.lint, "set_floor", lambda project, members: "2.4.0")
    done = derive.Derived("demo", "1.0.0", "1.0.0", "v1")
    done.companions = {"other": "1.0.0"}
    changed, before = derive._name_in_set(project, done)
    assert before is None and changed.sets["v1"] == {"demo": "1.0.0", "other": "1.0.0"}
    assert done.set_change == "the set v1 (new): demo 1.0.0, other 1.0.0"
    assert config.load(demo_project.root).sets["v1"] == {"demo": "1.0.0", "other": "1.0.0"}
    done.companions = {}
    done.set_name = "v1.0"
    assert derive._name_in_set(project, done)[0].sets["v1.0"] == {"demo": "1.0.0", "other": "2.0.0"}  # the newest
