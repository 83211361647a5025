"""`patchwheel follow` on the demo package: a new release the series carries onto by itself, one that conflicts,
one where upstream fixed a bug (its patch dropped), and the stops and interrupts that must leave the project as it
was. The proof runs are faked: the text check, the rebase, the vendoring, the build and the matrix are real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import CORE, INIT, PROVEN, SUBMISSION, TRAILERS, Prover, edit_greet, make_patch, proofs, tree
from patchwheel import cli, config, gitops, lint, torchaxis
from patchwheel.configfiles import add_set, remove_release, set_floor, set_member
from patchwheel.errors import PatchwheelError
from patchwheel.maint import lintall
from patchwheel.maint.follow import follow
from patchwheel.maint.follow import report as followreport
from patchwheel.maint.proving.setruns import Run

FIX = b'"hello, " + name'
TRAILERS_KEPT = {**TRAILERS, "Drop-When": "proof-passes-upstream"}


def latest_only(demo, drop_when: str = "proof-passes-upstream") -> None:
    """The demo's one line is what the set ``latest`` names (so follow moves it, and retires the old line); its
    patch is dropped by its proof (the demo's own says demo>=1.1.0, which the new releases here meet)."""
    (demo.root / "overlay" / "sets.toml").write_text('# New users.\n[set.latest]\ndemo = "1.0.0"\n')
    files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
    demo.set_series(("0001-greet-comma.patch", make_patch(files, edit_greet, "Greet with a comma",
                                                          {**TRAILERS, "Drop-When": drop_when})))  # fmt: skip


def test_a_release_the_series_carries_onto_becomes_the_latest_line(demo_project, monkeypatch, tmp_path, capsys):
    latest_only(demo_project)
    demo_project.add_release("1.1.0", b"# a new first line\n" + CORE)  # the patch applies with an offset
    proofs(monkeypatch, tmp_path)
    prover = Prover()
    (done,) = follow.follow(demo_project.load(), None, prover, log=print)
    assert done.stop is None, done.stop
    project = config.load(demo_project.root)
    assert [ln.version for ln in project.lines["demo"]] == ["1.1.0"], "1.0.0 is retired: no set names it"
    assert project.sets["latest"] == {"demo": "1.1.0"}
    assert (demo_project.root / "overlay" / "sets.toml").read_text().startswith("# New users.\n"), "comments kept"
    new = project.line("demo")
    assert new.build is not None and new.build.number == 1
    assert (new.patch_dir / "0001-greet-comma.patch").is_file()
    assert b'"hello, " + name' in (demo_project.root / "overlay" / "demo" / "1.1.0" / "demo" / "core.py").read_bytes()
    assert not (demo_project.root / "patches" / "demo" / "1.0.0").exists()
    assert not (demo_project.root / "overlay" / "demo" / "1.0.0").exists()
    assert lintall.problems(project) == [], "what follow writes passes lint"
    status = json.loads((demo_project.root / "patches" / "MATRIX.json").read_text())
    assert [ln["line"] for ln in status["lines"]] == ["demo/1.1.0"]
    # The set was proven on a build of the new line, made in the scratch copy: the project has no dist/.
    assert [members for members, _ in prover.calls] == [{"demo": "1.1.0"}]
    record = config.load(demo_project.root).line("demo", "1.1.0").build
    assert record is not None
    assert f"demo-1.1.0+fixed-1_{record.inputs[:12]}-py3-none-any.whl" in prover.calls[0][1]
    assert not (demo_project.root / "dist").exists()
    assert done.verdicts["1.1.0"][0].decision == "carried (offset): its proof still fails"
    # The judge's proof runs on the pristine release are handed to the proving step, by their environment: the
    # set's pristine pins (demo 1.1.0) run there, and judge what the judge observed instead of running it again.
    (seen,) = prover.seen
    assert {Path(env).name: [c["nodeid"] for c in cases] for env, cases in seen.items()} == {
        "demo-1.1.0": ["tests/proof/test_demo.py::test"]
    }
    summary = "\n".join(followreport.summary(done))
    assert "the line 1.0.0 carried onto 1.1.0" in summary and "retired demo/1.0.0" in summary
    body = followreport.markdown(done)
    assert "| 0001-greet-comma.patch | offset | fails: BugSymptom | carried (offset): its proof still fails |" in body
    assert "/tmp" not in body and str(tmp_path) not in body, "the report names the project's paths, not scratch"


def test_a_line_a_set_names_stays(demo_project, monkeypatch, tmp_path):
    latest_only(demo_project)
    (demo_project.root / "overlay" / "sets.toml").write_text(
        '[set.default]\ndemo = "1.0.0"\n\n[set.latest]\ndemo = "1.0.0"\n'
    )
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    (done,) = follow.follow(demo_project.load(), None, Prover(), log=lambda m: None)
    assert done.stop is None and done.retired == []
    project = config.load(demo_project.root)
    assert [ln.version for ln in project.lines["demo"]] == ["1.0.0", "1.1.0"]
    assert project.sets == {"default": {"demo": "1.0.0"}, "latest": {"demo": "1.1.0"}}


def test_a_conflict_stops_it_with_the_commands_and_nothing_written(demo_project, monkeypatch, tmp_path):
    latest_only(demo_project)
    demo_project.add_release("1.1.0", CORE.replace(b'"hello " + name', b'"hi " + name'))
    proofs(monkeypatch, tmp_path)
    before = tree(demo_project.root)
    prover = Prover()
    (done,) = follow.follow(demo_project.load(), None, prover, log=lambda m: None)
    assert done.stop is not None and "CONFLICT in src/demo/core.py" in done.stop.why, done.stop
    assert "nox -s rebase -- demo 1.1.0" in "\n".join(done.stop.commands)
    assert tree(demo_project.root) == before and prover.calls == []
    assert not (demo_project.root / ".rebase").exists()
    assert "STOPPED on 1.1.0, nothing of it written" in followreport.summary(done)[0]


def test_a_bug_upstream_fixed_drops_its_patch_with_the_evidence(demo_project, monkeypatch, tmp_path):
    latest_only(demo_project)
    files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
    comma = make_patch(files, edit_greet, "Greet with a comma", TRAILERS_KEPT)
    shout_trailers = {**TRAILERS_KEPT, "Proof-Test": "tests/proof/test_shout.py"}
    shout = make_patch(
        edit_greet(dict(files)),
        lambda f: {**f, "src/demo/core.py": f["src/demo/core.py"].replace(b'"hello, "', b'"HELLO, "')},
        "Shout the greeting",
        shout_trailers,
    )
    (demo_project.root / "tests" / "proof" / "test_shout.py").write_text("def test_shout():\n    pass\n")
    gitops.write_files(demo_project.root / "upstream-pr" / "demo" / "shout", SUBMISSION)
    demo_project.set_series(("0001-greet-comma.patch", comma), ("0002-shout.patch", shout))
    demo_project.add_release("1.1.0", CORE.replace(b'"hello " + name', FIX))  # upstream took the comma
    proofs(monkeypatch, tmp_path, passes_from={"tests/proof/test_demo.py": "1.1.0"})
    (done,) = follow.follow(demo_project.load(), None, Prover(), log=lambda m: None)
    assert done.stop is None, done.stop
    series = (demo_project.root / "patches" / "demo" / "1.1.0" / "series").read_text()
    assert "# dropped 0001-greet-comma.patch: its proof passes on pristine demo 1.1.0" in series
    assert series.splitlines()[-1] == "0001-shout.patch"
    decisions = [v.decision for v in done.verdicts["1.1.0"]]
    assert decisions[0] == "dropped: its proof passes on pristine demo 1.1.0 (1 passed)"
    assert decisions[1].startswith("carried")


def test_an_interrupted_follow_leaves_the_project_as_it_was(demo_project, monkeypatch, tmp_path):
    latest_only(demo_project)
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    from patchwheel.wheels.build import build

    build(demo_project.load(), demo_project.root / "dist", log=lambda m: None)
    before = tree(demo_project.root)

    def interrupt(project):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        follow.follow(demo_project.load(), None, Prover(action=interrupt), log=lambda m: None)
    assert tree(demo_project.root) == before  # and the autouse fixture: no patchwheel-* temporary folder is left


def test_a_failing_proof_run_stops_it(demo_project, monkeypatch, tmp_path):
    latest_only(demo_project)
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    before = tree(demo_project.root)
    runs = [PROVEN[0], Run("proofs on the +fixed builds", False, "1 failed", "E   AssertionError: the fix is gone")]
    (done,) = follow.follow(demo_project.load(), None, Prover(runs), log=lambda m: None)
    assert done.stop is not None and "proofs on the +fixed builds failed (1 failed)" in done.stop.why
    assert "the fix is gone" in done.stop.why
    assert tree(demo_project.root) == before


def test_a_proof_that_cannot_judge_stops_it(demo_project, monkeypatch, tmp_path):
    latest_only(demo_project)
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path, verdict="error")
    before = tree(demo_project.root)
    (done,) = follow.follow(demo_project.load(), None, Prover(), log=lambda m: None)
    assert done.stop is not None and "its proof cannot judge pristine demo 1.1.0" in done.stop.why
    assert "tests/proof/test_demo.py --proof-expect=observe" in done.stop.commands[0]
    assert tree(demo_project.root) == before


def test_a_drop_when_that_holds_while_the_proof_fails_stops_it(demo_project, monkeypatch, tmp_path):
    latest_only(demo_project, drop_when="demo>=1.1.0")
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    (done,) = follow.follow(demo_project.load(), None, Prover(), log=lambda m: None)
    assert done.stop is not None and "Drop-When holds on demo 1.1.0, but its proof still fails" in done.stop.why


def test_two_new_releases_are_carried_one_after_the_other(demo_project, monkeypatch, tmp_path):
    latest_only(demo_project)
    demo_project.add_release("1.1.0", CORE)
    demo_project.add_release("1.2.0", b"# moved\n" + CORE)
    judged = proofs(monkeypatch, tmp_path)
    (done,) = follow.follow(demo_project.load(), None, Prover(), log=lambda m: None)
    assert done.stop is None and done.releases == ["1.1.0", "1.2.0"]
    assert [ln.version for ln in config.load(demo_project.root).lines["demo"]] == ["1.2.0"]
    assert ("1.1.0", "tests/proof/test_demo.py") in judged and ("1.2.0", "tests/proof/test_demo.py") in judged


def test_nothing_new_changes_nothing(demo_project, monkeypatch, tmp_path, capsys):
    latest_only(demo_project)
    before = tree(demo_project.root)
    assert cli.main(["--root", str(demo_project.root), "follow", "--pending"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert cli.main(["--root", str(demo_project.root), "follow"]) == 0
    assert "demo: nothing newer than the line 1.0.0" in capsys.readouterr().out
    assert tree(demo_project.root) == before


def test_an_edit_made_while_it_ran_is_not_overwritten(demo_project, monkeypatch, tmp_path):
    latest_only(demo_project)
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    sets = demo_project.root / "overlay" / "sets.toml"

    def edit(project):
        sets.write_text(sets.read_text() + "# an edit\n")

    (done,) = follow.follow(demo_project.load(), None, Prover(action=edit), log=lambda m: None)
    assert done.stop is not None and "changed while follow ran; nothing was written" in done.stop.why
    assert sets.read_text().endswith("# an edit\n") and (demo_project.root / "patches" / "demo" / "1.0.0").is_dir()


def test_the_cli_exits_1_when_a_package_stops_and_writes_the_report(demo_project, monkeypatch, tmp_path, capsys):
    latest_only(demo_project)
    demo_project.add_release("1.1.0", CORE.replace(b'"hello " + name', b'"hi " + name'))
    proofs(monkeypatch, tmp_path)
    report = tmp_path / "report.md"
    assert cli.main(["--root", str(demo_project.root), "follow", "demo", "--report", str(report)]) == 1
    assert "a maintainer takes it from here" in capsys.readouterr().out
    assert "stopped, a maintainer must judge" in report.read_text()
    assert cli.main(["--root", str(demo_project.root), "follow", "--pending", "--report", str(report)]) == 2


def test_set_member_and_remove_release_keep_every_other_line(tmp_path):
    sets = tmp_path / "sets.toml"
    sets.write_text('# sets\n[set."v4.53"]\ndemo = "1.0.0"  # old\n\n[set.latest]\n# newest\ndemo = "1.0.0"\n')
    set_member(sets, "latest", "demo", "1.1.0")
    want = '# sets\n[set."v4.53"]\ndemo = "1.0.0"  # old\n\n[set.latest]\n# newest\ndemo = "1.1.0"\n'
    assert sets.read_text() == want
    set_member(sets, "v4.53", "demo", "1.0.1")
    assert '[set."v4.53"]\ndemo = "1.0.1"  # old\n' in sets.read_text()
    with pytest.raises(PatchwheelError, match="has no line other"):
        set_member(sets, "latest", "other", "1.0")
    pins = tmp_path / "pins.toml"
    head = 'package = "demo"\n\n[release."1.0.0"]\nwheel = 1\n\n'
    pins.write_text(head + '[release."1.1.0"]\nwheel = 2\n\n[release."1.2.0"]\nwheel = 3\n')
    remove_release(pins, "1.1.0")
    assert pins.read_text() == head + '[release."1.2.0"]\nwheel = 3\n'
    remove_release(pins, "1.2.0")
    assert pins.read_text() == 'package = "demo"\n\n[release."1.0.0"]\nwheel = 1\n'
    with pytest.raises(PatchwheelError, match='no \\[release."9"\\] table'):
        remove_release(pins, "9")


# --- what an independent review found, each failing before its fix ------------------------------------------------


def test_a_stop_before_the_first_verdict_is_reported_for_its_release(demo_project, monkeypatch, tmp_path, capsys):
    """A series that cannot be read stopped follow before it had judged the release: the report said 'Nothing
    new upstream.' and the commands rebased onto the line it already has."""
    latest_only(demo_project)
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    (demo_project.patch_dir / "NOTES.md").write_text("a stray file\n")
    report = tmp_path / "report.md"
    assert cli.main(["--root", str(demo_project.root), "follow", "--report", str(report)]) == 1
    out = capsys.readouterr().out
    assert "demo: STOPPED on 1.1.0" in out and "nox -s rebase -- demo 1.1.0" in out, out
    assert "NOTES.md is in" in report.read_text() and "Nothing new" not in report.read_text()


def test_a_stop_names_the_project_s_files_not_the_scratch_copy_s(demo_project, monkeypatch, tmp_path):
    latest_only(demo_project)
    (demo_project.root / "overlay" / "sets.toml").write_text('set = { latest = { demo = "1.0.0" } }\n')  # no line
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    (done,) = follow.follow(demo_project.load(), None, Prover(), log=lambda m: None)
    assert done.stop is not None and f"{demo_project.root}/overlay/sets.toml" in done.stop.why, done.stop
    assert "patchwheel-follow-" not in done.stop.why + "".join(done.stop.commands)


def test_a_link_in_the_tree_stops_that_package_with_a_message(demo_project, monkeypatch, tmp_path):
    latest_only(demo_project)
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    (demo_project.root / "overlay" / "link.txt").symlink_to("/etc/hostname")
    (done,) = follow.follow(demo_project.load(), None, Prover(), log=lambda m: None)
    assert done.stop is not None and "overlay/link.txt is not a regular file" in done.stop.why


def test_a_retired_line_leaves_no_folder_behind(demo_project, monkeypatch, tmp_path):
    """Caches in a retired line's folder (Python's, from a test that imported a vendored module) kept the folder,
    and the tree follow wrote failed lint: overlay/demo/1.0.0/ belongs to no pinned line."""
    latest_only(demo_project)
    cache = demo_project.root / "overlay" / "demo" / "1.0.0" / "demo" / "__pycache__"
    cache.mkdir()
    (cache / "core.cpython-311.pyc").write_bytes(b"\x00")
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    (done,) = follow.follow(demo_project.load(), None, Prover(), log=lambda m: None)
    assert done.stop is None, done.stop
    assert not (demo_project.root / "overlay" / "demo" / "1.0.0").exists()
    assert lintall.problems(config.load(demo_project.root)) == []


def test_a_proof_that_passes_before_drop_when_stops_it(demo_project, monkeypatch, tmp_path):
    """The matrix flags this (⚠: fixed earlier than said, or the proof too weak there): a person judges it."""
    latest_only(demo_project, drop_when="demo>=2.0")
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path, verdict="passes")
    (done,) = follow.follow(demo_project.load(), None, Prover(), log=lambda m: None)
    assert done.stop is not None and "its proof passes on demo 1.1.0, before its Drop-When (demo>=2.0)" in done.stop.why


def _stage_fails_after(monkeypatch, count: int, error: BaseException):
    """The write-back stages ``count`` files, then the next one raises ``error``. Returns the real stage."""
    from patchwheel import writeback

    real = writeback.stage
    staged: list[object] = []

    def stage(data, target):
        if len(staged) == count:
            raise error
        staged.append(real(data, target))
        return staged[-1]

    monkeypatch.setattr(writeback, "stage", stage)
    return real


def test_a_write_that_fails_halfway_leaves_the_project_as_it_was(demo_project, monkeypatch, tmp_path):
    """The files are staged in the tool's own folder first (a full disk stops it there), then renamed."""
    from patchwheel import writeback

    latest_only(demo_project)
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    before = tree(demo_project.root)
    _stage_fails_after(monkeypatch, 1, OSError(28, "No space left on device"))
    (done,) = follow.follow(demo_project.load(), None, Prover(), log=lambda m: None)  # a stop, not a traceback
    assert done.stop is not None and "No space left on device" in done.stop.why, done.stop
    assert "nothing in the project was replaced" in done.stop.why
    assert tree(demo_project.root) == before
    assert not writeback.folder(demo_project.root).exists(), "no staged file is left"


def test_a_linked_package_folder_is_refused_before_anything_is_copied(demo_project, monkeypatch, tmp_path):
    """patches/<pkg> a link to a folder outside the project: follow stopped with "nothing written" while the outside
    folder's series was deleted and the new line written into it. Links are refused before the copy."""
    latest_only(demo_project)
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    outside = tmp_path / "outside"
    (demo_project.root / "patches" / "demo").rename(outside)
    (demo_project.root / "patches" / "demo").symlink_to(outside)
    before = {p.relative_to(outside).as_posix(): p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    (done,) = follow.follow(demo_project.load(), None, Prover(), log=lambda m: None)
    assert done.stop is not None and "patches/demo is a link" in done.stop.why, done.stop
    assert {p.relative_to(outside).as_posix(): p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before


def test_a_write_back_killed_halfway_is_rolled_forward_at_the_next_start(demo_project, monkeypatch, tmp_path):
    """kill -9 in the middle of the renames left `.*.follow` files and a line without its pin, after which lint,
    build and follow all failed and nothing recovered. The write-back keeps a journal of its renames, written once
    every file is staged: the next start of the tool finishes them."""
    from patchwheel import writeback

    latest_only(demo_project)
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    real = writeback._roll_forward

    def killed_after_two(root, journal):  # as kill -9 stops it: two renames done, no cleanup of anything
        real(root, {**journal, "renames": journal["renames"][:2], "removes": []})
        raise SystemExit("killed")

    monkeypatch.setattr(writeback, "_roll_forward", killed_after_two)
    with pytest.raises(SystemExit):
        follow.follow(demo_project.load(), None, Prover(), log=lambda m: None)
    monkeypatch.setattr(writeback, "_roll_forward", real)
    assert writeback.journal_file(demo_project.root).is_file(), "the kill left the journal and staged files"
    project = config.load(demo_project.root)  # the next start finishes the write-back
    assert not writeback.folder(demo_project.root).exists()
    assert [ln.key for ln in project.all_lines()] == ["demo/1.1.0"]
    assert lintall.problems(project) == []


def test_a_write_back_killed_while_staging_is_rolled_back(demo_project, monkeypatch, tmp_path):
    """Before the journal is written nothing was replaced: the staged files go, the project is as it was."""
    from patchwheel import writeback

    latest_only(demo_project)
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    before = tree(demo_project.root)
    real = _stage_fails_after(monkeypatch, 2, SystemExit("killed"))
    monkeypatch.setattr(writeback, "discard", lambda path: None)  # kill -9 runs no cleanup
    with pytest.raises(SystemExit):
        follow.follow(demo_project.load(), None, Prover(), log=lambda m: None)
    monkeypatch.setattr(writeback, "stage", real)
    monkeypatch.setattr(writeback, "discard", lambda path: path.unlink(missing_ok=True))
    assert len(list(writeback.folder(demo_project.root).iterdir())) == 2
    config.load(demo_project.root)
    assert not writeback.folder(demo_project.root).exists() and tree(demo_project.root) == before


def test_a_matrix_of_another_torch_stops_it(demo_project, monkeypatch, tmp_path):
    latest_only(demo_project)
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    (demo_project.root / "patches" / "MATRIX.json").write_text('{"schema": 1, "torch": "1.0.0", "lines": []}\n')
    (done,) = follow.follow(demo_project.load(), None, Prover(), log=lambda m: None)
    assert done.stop is not None and "judged with torch 1.0.0" in done.stop.why


def test_remove_release_keeps_each_table_s_comments_with_it(tmp_path):
    pins = tmp_path / "pins.toml"
    one, two = '# The 1.0 line\n[release."1.0.0"]\nwheel = 1\n', '# The 1.1 line\n[release."1.1.0"]\nwheel = 2\n'
    pins.write_text(f'package = "demo"\n\n{one}\n{two}')
    remove_release(pins, "1.0.0")
    assert pins.read_text() == f'package = "demo"\n\n{two}'


def test_follow_keeps_the_torch_a_set_is_proven_on_stated(demo_project, monkeypatch, tmp_path):
    """With [torch] in sets.toml, a line's wheel names the torch it is proven on: the new line, once `latest` names
    it, is proven on that set's torch, keeps its first build number, and the tree follow writes passes lint."""
    latest_only(demo_project)
    floor = torchaxis.declared_floor([])  # the demo's releases declare no torch
    sets = demo_project.root / "overlay" / "sets.toml"
    sets.write_text(
        sets.read_text() + f'\n[torch]\nsuite = "2.13.0"\nnewest = "2.14.1"\n[torch.floor]\nlatest = "{floor}"\n'
    )
    demo_project.bump()
    demo_project.add_release("1.1.0", b"# a new first line\n" + CORE)
    proofs(monkeypatch, tmp_path)
    (done,) = follow.follow(demo_project.load(), None, Prover(), log=print)
    assert done.stop is None, done.stop
    project = config.load(demo_project.root)
    new = project.line("demo")
    assert new.version == "1.1.0" and new.proven_torch == (floor, "2.13.0", "2.14.1")
    assert new.build is not None and new.build.number == 1, "a line made by this run keeps its first number"
    assert lintall.problems(project) == [] and lint.torch_problems(project) == []


def test_set_floor_and_add_set_write_the_floor_and_keep_every_other_line(tmp_path):
    sets = tmp_path / "sets.toml"
    text = '[set.latest]\ndemo = "1.0.0"\n\n[torch]\nsuite = "2.13.0"\nnewest = "2.14.1"\n\n'
    text += '[torch.floor]\nlatest = "2.6.0"  # kept\n\n[suite]\nsets = ["latest"]\n'
    sets.write_text(text)
    assert set_floor(sets, "latest", "2.7.0")
    assert 'latest = "2.7.0"  # kept\n' in sets.read_text()
    add_set(sets, "v4.53", {"demo": "0.9.0"}, "2.1.0")
    data = __import__("tomllib").loads(sets.read_text())
    assert data["torch"]["floor"] == {"latest": "2.7.0", "v4.53": "2.1.0"} and data["set"]["v4.53"] == {"demo": "0.9.0"}
    assert data["suite"] == {"sets": ["latest"]}
    plain = tmp_path / "plain.toml"
    plain.write_text('[set.latest]\ndemo = "1.0.0"\n')
    assert not set_floor(plain, "latest", "2.7.0"), "a file without [torch] states no floor"


def test_a_new_floor_goes_among_the_floors_not_under_the_next_tables_comment(tmp_path):
    """overlay/sets.toml comments [torch.unproven] just above its header: derive's new floor was written after that
    comment, which then read as if it spoke of the floor."""
    sets = tmp_path / "sets.toml"
    text = '[set.latest]\ndemo = "1.0.0"\n\n[torch]\nsuite = "2.13.0"\n\n[torch.floor]\nlatest = "2.6.0"\n\n'
    text += '# Floors the proofs cannot judge yet, and why.\n[torch.unproven]\nlatest = "why"\n'
    sets.write_text(text)
    add_set(sets, "v5.8", {"demo": "0.9.0"}, "2.4.0")
    assert '[torch.floor]\nlatest = "2.6.0"\n"v5.8" = "2.4.0"\n\n# Floors the proofs' in sets.read_text()
    set_floor(sets, "v4", "2.2.0")
    assert '"v5.8" = "2.4.0"\nv4 = "2.2.0"\n\n# Floors the proofs' in sets.read_text()
    assert __import__("tomllib").loads(sets.read_text())["torch"]["unproven"] == {"latest": "why"}


def test_the_older_lines_proofs_run_beside_the_judge_s_once(monkeypatch, tmp_path):
    """follow starts, beside the judge's run, the proofs the matrix step runs for the older lines on the new release
    and the judge does not (features have none); the matrix step then runs only what is left: counted by runs."""
    from types import SimpleNamespace

    from patchwheel.errors import EnvironmentFailed
    from patchwheel.maint.proving import proofenv
    from patchwheel.maint.upstream import matrixrun as upstream

    def patch(module, feature=False):
        return SimpleNamespace(test_module=module, is_feature=feature)

    series = {"old": [patch("a.py"), patch("b.py"), patch("f.py", feature=True)], "new": [patch("b.py")]}
    lines = [SimpleNamespace(name="old"), SimpleNamespace(name="new")]
    project: Any = SimpleNamespace(lines={"demo": lines}, line=lambda pkg: lines[-1], cache=tmp_path, root=tmp_path)
    wheel: Any = SimpleNamespace(filename="demo-1.1.0-py3-none-any.whl")
    env = tmp_path / "envs" / "demo-1.1.0"
    monkeypatch.setattr(follow.series, "parse_series", lambda line: series[line.name])
    monkeypatch.setattr(upstream, "companions", lambda project, line: [])
    monkeypatch.setattr(proofenv, "release_env", lambda cache, wheels: env)
    ran: list[list[str]] = []

    def run_proofs(env, root, files, timeout=900, first_bug=False, sink=None):
        ran.append(files)
        return {f: proofenv.ProofOutcome("passes", "1 passed") for f in files}

    monkeypatch.setattr(proofenv, "run_proofs", run_proofs)
    judged = upstream.Judged(keep=True)
    follow._ahead(project, "demo", wheel, judged)
    assert ran == [["a.py"]]
    judged.get_many(env, ["a.py", "b.py"], judged.runner(env, tmp_path))  # the matrix step's ask for "old"
    assert ran == [["a.py"], ["b.py"]]

    def no_env(cache, wheels):
        raise EnvironmentFailed("uv pip install failed", "check the network")

    monkeypatch.setattr(proofenv, "release_env", no_env)
    follow._ahead(project, "demo", wheel, upstream.Judged())
    assert len(ran) == 2, "no environment: nothing run here; the matrix step meets it and says so"
