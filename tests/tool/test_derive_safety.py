"""`patchwheel derive` where a maintainer, a colleague or a CI runner does something unexpected: each test failed
before its fix. A line made again for a release whose line was retired; the sets it may move, add to [suite] or
retire; the work folder it leaves at a conflict (only derive's is read, replaced or removed; links and files there
are refused; edits made while --continue runs are kept); the source line changing meanwhile; interrupts and real
signals (the project, the waiting folder and the temporary folder as they were)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CORE, HANG, INIT, TRAILERS, Prover, edit_greet, make_patch, make_wheel, proofs, tree
from patchwheel import cli, config, gitops
from patchwheel.errors import PatchwheelError
from patchwheel.maint import rebase
from patchwheel.maint.carry import workfolder
from patchwheel.maint.follow import derive
from patchwheel.maint.proving.setruns import Run
from patchwheel.wheels import buildno
from test_derive import CONFLICTING, KEPT, kept_by_proof, second_line, work_tree


def add_package(demo, name: str = "extra") -> None:
    """A second package of the project, with its own wheel on the test index, pin and one-patch line 1.0."""

    core = b"def f():\n    return 1\n"
    files = {f"{name}/__init__.py": b"", f"{name}/core.py": core}
    whl = make_wheel(demo.upstream.parent, files, name=name, version="1.0")
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    (demo.index / name).mkdir()
    (demo.index / name / "index.html").write_text(f'<a href="../../upstream/{whl.name}#sha256={sha}">{whl.name}</a>\n')
    (demo.root / "overlay" / name).mkdir()
    (demo.root / "overlay" / name / "pins.toml").write_text(
        f'package = "{name}"\nimport-name = "{name}"\nsource-root = "src"\nlocal-label = "fixed"\n\n'
        f'[release."1.0"]\nwheel = {{ filename = "{whl.name}", sha256 = "{sha}" }}\n'
    )
    files = {f"src/{name}/core.py": core, f"src/{name}/__init__.py": b""}
    patch = make_patch(
        files,
        lambda f: {**f, f"src/{name}/core.py": core.replace(b"1", b"2")},
        "Return two",
        {**TRAILERS, "Proof-Test": "tests/proof/test_demo.py::test_greet", "Drop-When": "proof-passes-upstream"},
    )
    d = demo.root / "patches" / name / "1.0"
    d.mkdir(parents=True)
    (d / "0001-return-two.patch").write_bytes(patch)
    (d / "series").write_text("0001-return-two.patch\n")


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "patchwheel", "--root", str(root), *args], capture_output=True, text=True
    )


DRIVER = r"""
import os, signal, sys, time
# Ctrl-C as a terminal's foreground job has it, whatever this test inherited: started by `nohup ... &` (or a
# shell's background job), the whole run ignored SIGINT, and so did the driver and its child.
signal.signal(signal.SIGINT, signal.default_int_handler)
from pathlib import Path
sys.path.insert(0, os.environ["TOOL_TESTS"])
import conftest  # noqa: F401  (puts src/ on the path)
from patchwheel import cli
from patchwheel.maint.proving import proofenv, setruns
from packaging.utils import parse_wheel_filename

block, marker = os.environ.get("BLOCK_AT", ""), Path(os.environ["MARKER"])

def wait(where):
    if block == where:
        import subprocess
        # a proof run: a child in the same process group, as pytest is; it writes the marker once it runs, so the
        # signal comes while the run waits in it
        subprocess.run(["sh", "-c", 'echo "$1" > "$2" && exec sleep 600', "sh", where, str(marker)])

def release_env(cache, wheels):
    env = Path(os.environ["ENVS"]) / "+".join(f"{p}-{parse_wheel_filename(a.filename)[1]}" for p, a in wheels)
    env.mkdir(parents=True, exist_ok=True)
    return env

def run_proof(env, root, proof, timeout=900, first_bug=False):
    wait("judge")
    return proofenv.ProofOutcome("fails", "BugSymptom")

proofenv.release_env = release_env
proofenv.run_proof = run_proof
proofenv.run_proofs = lambda env, root, files, timeout=900, first_bug=False, sink=None: {
    f: run_proof(env, root, f) for f in files
}

def prove_set(project, members, dist, log, seen):
    wait("prove")
    return conftest.PROVEN

setruns.prove_set = prove_set
sys.exit(cli.main(sys.argv[1:]))
"""


def _spawn(demo, tmp_path, block, *args):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    marker = tmp_path / f"marker-{block}"
    marker.unlink(missing_ok=True)
    env = {
        **os.environ,
        "TOOL_TESTS": str(Path(__file__).parent),
        "BLOCK_AT": block,
        "MARKER": str(marker),
        "ENVS": str(tmp_path / "envs"),
    }
    proc = subprocess.Popen(
        [sys.executable, str(driver), "--root", str(demo.root), "derive", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return proc, marker


def _wait_for(proc, marker):
    """Until the run waits in its child (the marker), however long it takes to get there; it may not end first."""
    import time

    t0 = time.monotonic()
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < HANG, "the run hung before it reached its child"
        time.sleep(0.02)


def _conflict(demo, monkeypatch, tmp_path, version="0.9.0"):
    kept_by_proof(demo)
    demo.add_release(version, CONFLICTING)
    proofs(monkeypatch, tmp_path)


def _resolved(demo, monkeypatch, tmp_path):
    _conflict(demo, monkeypatch, tmp_path)
    assert derive.derive(demo.load(), "demo==0.9.0", Prover(), log=lambda m: None).stop is not None
    repo = demo.root / ".rebase" / "demo-0.9.0" / "repo"
    (repo / "src/demo/core.py").write_bytes(CONFLICTING.replace(b'"hi " + name', b'"hi, " + name'))
    gitops.git(repo, "add", "src/demo/core.py")
    return repo


class WheelProver(Prover):
    """Records the +fixed wheels it was given: file name -> sha256."""

    def __init__(self):
        super().__init__()
        self.wheels: dict[str, str] = {}

    def __call__(self, project, members, dist, log, seen):

        for w in dist.glob("*+fixed*.whl"):
            self.wheels[w.name] = hashlib.sha256(w.read_bytes()).hexdigest()
        return super().__call__(project, members, dist, log, seen)


def test_a_line_made_again_after_it_was_retired_gets_a_new_wheel_name(demo_project, monkeypatch, tmp_path):
    """A retired line's wheels may be published: a line made again for that release started at build 1 again, and
    its wheel took the published name with other bytes. The retired line's number is kept ([retired]) and the new
    line starts above it."""
    kept_by_proof(demo_project)
    demo_project.add_release("0.9.0", CORE)
    demo_project.add_release("0.9.1", CORE)
    proofs(monkeypatch, tmp_path)
    first = WheelProver()
    assert derive.derive(demo_project.load(), "demo==0.9.0", first, log=lambda m: None).stop is None  # set v0.9
    done = derive.derive(demo_project.load(), "demo==0.9.1", Prover(), log=lambda m: None)
    assert done.stop is None and done.retired == ["demo/0.9.0"], (done.stop, done.retired)
    assert '[retired]\n"0.9.0" = 1\n' in (demo_project.root / "overlay/demo/pins.toml").read_text()
    files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
    reworded = make_patch(files, edit_greet, "Greet with a comma, reworded", KEPT)
    demo_project.set_series(("0001-greet-comma.patch", reworded))
    again = WheelProver()
    done = derive.derive(demo_project.load(), "demo==0.9.0", again, source="1.0.0", set_name="team", log=print)
    assert done.stop is None, done.stop
    record = config.load(demo_project.root).line("demo", "0.9.0").build
    assert record is not None and record.number == 2
    assert f"demo-0.9.0+fixed-2_{record.inputs[:12]}-py3-none-any.whl" in again.wheels
    assert any(n.startswith("demo-0.9.0+fixed-1_") for n in first.wheels)
    assert not {n for n in first.wheels if n.startswith("demo-0.9.0")} & set(again.wheels)


def test_a_build_number_at_or_below_a_retired_line_s_is_refused_by_lint(demo_project):
    pins = demo_project.root / "overlay/demo/pins.toml"
    pins.write_text(pins.read_text() + '\n[retired]\n"1.0.0" = 1\n')
    (problem,) = [p for p in [buildno.problem(demo_project.load().line("demo"))] if p]
    assert "a retired line of 1.0.0 recorded build 1" in problem and "number = 2" in problem


def test_latest_is_not_derive_s_to_move(demo_project, monkeypatch, tmp_path):
    kept_by_proof(demo_project)
    second_line(demo_project, "2.0.0")
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    before = tree(demo_project.root)
    with pytest.raises(PatchwheelError, match="the set latest is what new users install"):
        derive.derive(demo_project.load(), "demo==1.1.0", Prover(), set_name="latest", log=lambda m: None)
    assert tree(demo_project.root) == before


def test_a_new_set_retires_nothing(demo_project, monkeypatch, tmp_path):
    """Lines 1.0.0 (default), 2.0.0 (no set names it yet), 3.0.0 (latest): a derive into a new set retired 2.0.0,
    a line it never touched."""
    kept_by_proof(demo_project)
    demo_project.add_release("2.0.0", CORE)
    assert rebase.start(demo_project.load(), "demo", "2.0.0", behaviour=False, log=lambda m: None)
    demo_project.add_release("3.0.0", CORE)
    assert rebase.start(demo_project.load(), "demo", "3.0.0", behaviour=False, log=lambda m: None)
    sets = '[set.default]\ndemo = "1.0.0"\n\n[set.latest]\ndemo = "3.0.0"\n'
    (demo_project.root / "overlay" / "sets.toml").write_text(sets)
    demo_project.add_release("0.9.0", CORE)
    proofs(monkeypatch, tmp_path)
    done = derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None)
    assert done.stop is None and done.retired == [], (done.stop, done.retired)
    assert (demo_project.root / "patches" / "demo" / "2.0.0").is_dir()


def test_a_set_without_the_package_is_refused_before_anything_runs(demo_project, monkeypatch, tmp_path):
    """It was checked at the end, after the maintainer had resolved a conflict by hand, and --continue cannot be
    given another set."""
    kept_by_proof(demo_project)
    add_package(demo_project)
    (demo_project.root / "overlay/sets.toml").write_text(
        '[set.default]\ndemo = "1.0.0"\n\n[set.other]\nextra = "1.0"\n'
    )
    demo_project.add_release("0.9.0", CONFLICTING)
    proofs(monkeypatch, tmp_path)
    with pytest.raises(PatchwheelError, match="the set other does not name demo"):
        derive.derive(demo_project.load(), "demo==0.9.0", Prover(), set_name="other", log=lambda m: None)
    assert not (demo_project.root / ".rebase").exists()


@pytest.mark.parametrize("spec", ["demo==0.9.0", "demo==1.1.0"])
def test_a_new_newest_line_of_a_major_version_joins_the_suite(demo_project, monkeypatch, tmp_path, spec):
    """With a [suite] (lint: it proves the newest line of each major version), a derive whose line became the newest
    of its major version, into a new set, stopped at lint, and no [suite] can name a set that does not exist yet."""
    kept_by_proof(demo_project)
    second_line(demo_project, "2.0.0")
    sets = demo_project.root / "overlay" / "sets.toml"
    sets.write_text(sets.read_text() + '\n[suite]\nsets = ["latest", "default"]  # the default suite\n')
    demo_project.add_release("0.9.0", CORE)
    demo_project.add_release("1.1.0", CORE)
    proofs(monkeypatch, tmp_path)
    done = derive.derive(demo_project.load(), spec, Prover(), log=lambda m: None)
    assert done.stop is None, done.stop
    name = derive.default_set(spec.split("==")[1])
    assert config.load(demo_project.root).suite == ("latest", "default", name)
    assert sets.read_text().endswith(f'sets = ["latest", "default", "{name}"]  # the default suite\n')


@pytest.mark.parametrize(
    "sets_text",
    [
        '[set."old"]\ndemo = "1.0.0"\n',
        "[set.old]\ndemo = '1.0.0'  # pinned by team X\n",
        '[set.old]\n"demo" = "1.0.0"\n',
        '[ set . old ]\ndemo="1.0.0"\n',
    ],
)
def test_a_set_written_in_any_of_toml_s_spellings_is_moved(demo_project, monkeypatch, tmp_path, sets_text):
    kept_by_proof(demo_project)
    (demo_project.root / "overlay" / "sets.toml").write_text(sets_text)
    demo_project.add_release("0.9.0", CORE)
    proofs(monkeypatch, tmp_path)
    done = derive.derive(demo_project.load(), "demo==0.9.0", Prover(), set_name="old", log=lambda m: None)
    assert done.stop is None, done.stop
    assert config.load(demo_project.root).sets["old"] == {"demo": "0.9.0"}


def test_an_empty_set_name_is_refused(demo_project, capsys):
    """`--set "$SET"` with SET unset took the default set instead."""
    demo_project.add_release("0.9.0", CORE)
    assert cli.main(["--root", str(demo_project.root), "derive", "demo==0.9.0", "--set", ""]) == 2
    assert "'' is not a plain set name" in capsys.readouterr().err


# --- the work folder -------------------------------------------------------------------------------------------


def test_a_folder_derive_did_not_make_is_left_alone(demo_project, monkeypatch, tmp_path):
    """.rebase/<pkg>-<version>/ without a derive's state (a maintainer's notes) was replaced at the conflict."""
    _conflict(demo_project, monkeypatch, tmp_path)
    mine = demo_project.root / ".rebase" / "demo-0.9.0"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("how I resolved it last time\n")
    with pytest.raises(PatchwheelError, match="exists and is not a derive's work folder"):
        derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_a_rebase_s_folder_is_named_with_the_rebase_s_command(demo_project, capsys):
    kept_by_proof(demo_project)
    demo_project.add_release("1.1.0", CONFLICTING)
    assert rebase.start(demo_project.load(), "demo", "1.1.0", behaviour=False, log=lambda m: None) is False
    demo_project.add_release("2.0.0", CORE)
    assert rebase.start(demo_project.load(), "demo", "2.0.0", behaviour=False, log=lambda m: None)
    assert cli.main(["--root", str(demo_project.root), "derive", "demo==1.1.0"]) == 2
    err = capsys.readouterr().err
    assert "nox -s rebase -- demo 1.1.0 --continue" in err and "derive -- demo==1.1.0 --continue" not in err


@pytest.mark.parametrize("what", ["a file", "a link out", "a waiting link"])
def test_links_and_files_in_rebase_are_refused_not_followed(demo_project, monkeypatch, tmp_path, capsys, what):
    """`.rebase` as a file ended in a traceback after the judging; as a link out of the project, the work repository
    was written (and --abort removed) out there; a waiting folder that is a link made --continue write the project,
    then fail."""
    _conflict(demo_project, monkeypatch, tmp_path)
    monkeypatch.setattr("patchwheel.maint.proving.setruns.prove_set", Prover())
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the project's\n")
    rebase_dir = demo_project.root / ".rebase"
    if what == "a file":
        rebase_dir.write_text("not a folder\n")
    elif what == "a link out":
        rebase_dir.symlink_to(outside)
    else:
        assert derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None).stop is not None
        real = rebase_dir / "demo-0.9.0"
        gitops.git(real / "repo", "add", "-A")
        shutil.move(real, outside / "demo-0.9.0")
        real.symlink_to(outside / "demo-0.9.0")
    before = tree(demo_project.root)
    for args in (["demo==0.9.0"], ["demo==0.9.0", "--continue"], ["demo==0.9.0", "--abort"]):
        assert cli.main(["--root", str(demo_project.root), "derive", *args]) == 2, args
    err = capsys.readouterr().err
    assert "is a link" in err or "is not a folder" in err, err
    assert tree(demo_project.root) == before
    assert sorted(p.name for p in outside.iterdir()) == (
        ["demo-0.9.0", "keep.txt"] if what == "a waiting link" else ["keep.txt"]
    )


def test_a_damaged_derive_state_is_refused_with_what_to_do(demo_project, monkeypatch, tmp_path, capsys):
    _conflict(demo_project, monkeypatch, tmp_path)
    assert derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None).stop is not None
    state = demo_project.root / ".rebase" / "demo-0.9.0" / workfolder.STATE
    state.write_text(state.read_text()[:-10])  # an editor's half-saved file
    assert cli.main(["--root", str(demo_project.root), "derive", "demo==0.9.0", "--continue"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_a_stop_after_continue_names_continue_and_the_waiting_resolution(demo_project, monkeypatch, tmp_path, capsys):
    """After --continue stopped at a failed proof, its first command was a fresh derive, refused since the folder
    waits; the report said nothing of the waiting resolution; a change of the tree was 'while follow ran'."""
    repo = _resolved(demo_project, monkeypatch, tmp_path)
    failed = [Run("proofs on the +fixed builds", False, "1 failed", "E   BugSymptom: no comma")]
    done = derive.resume(demo_project.load(), "demo==0.9.0", Prover(failed), log=lambda m: None)
    assert done.stop is not None and done.waiting == str(repo)
    assert done.stop.commands[0].startswith("nox -s derive -- demo==0.9.0 --continue")
    waiting = work_tree(demo_project.root)

    def edit(project):
        sets = demo_project.root / "overlay" / "sets.toml"
        sets.write_text(sets.read_text() + "# a colleague's comment\n")

    done = derive.resume(demo_project.load(), "demo==0.9.0", Prover(action=edit), log=lambda m: None)
    assert done.stop is not None and "changed while derive ran" in done.stop.why, done.stop
    assert work_tree(demo_project.root) == waiting
    monkeypatch.setattr("patchwheel.maint.proving.setruns.prove_set", Prover())
    assert cli.main(["--root", str(demo_project.root), "derive", "demo==0.9.0", "--continue"]) == 0


def test_edits_made_to_the_waiting_folder_while_continue_runs_are_kept(demo_project, monkeypatch, tmp_path):
    """--continue works on a copy; at its end it removed the maintainer's folder, with what was done there meanwhile
    (the real run proves for minutes)."""
    repo = _resolved(demo_project, monkeypatch, tmp_path)
    before = tree(demo_project.root)

    def meanwhile(project):
        (repo / "NOTES.md").write_text("what I found while the proofs ran\n")

    done = derive.resume(demo_project.load(), "demo==0.9.0", Prover(action=meanwhile), log=lambda m: None)
    assert done.stop is not None and "changed while derive ran" in done.stop.why, done.stop
    assert (repo / "NOTES.md").is_file() and tree(demo_project.root) == before


def test_a_source_line_changed_meanwhile_is_refused(demo_project, monkeypatch, tmp_path):
    """The source line gained a fix while the conflict waited; --continue wrote the line without it, 'derived from'
    that line."""
    _conflict(demo_project, monkeypatch, tmp_path)
    assert derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None).stop is not None
    demo_project.add_fix("1.0.0", "add-other-way", "Add the other way", (b"a + b", b"b + a"))
    with pytest.raises(PatchwheelError, match="the line demo/1.0.0 changed since this derive started"):
        derive.resume(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None)


def test_continue_when_the_line_appeared_meanwhile_is_refused(demo_project, monkeypatch, tmp_path):
    """The same line arrived another way (a colleague's commit): --continue ended in an OSError naming the scratch."""
    repo = _resolved(demo_project, monkeypatch, tmp_path)
    other = tmp_path / "colleague"
    shutil.copytree(demo_project.root, other, symlinks=True)
    assert derive.resume(config.load(other), "demo==0.9.0", Prover(), log=lambda m: None).stop is None
    for top in ("patches", "overlay"):
        shutil.rmtree(demo_project.root / top)
        shutil.copytree(other / top, demo_project.root / top)
    with pytest.raises(PatchwheelError, match="demo 0.9.0 is a release line already"):
        derive.resume(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None)
    assert repo.is_dir()


def test_an_interrupt_while_the_conflict_is_moved_out_leaves_nothing(demo_project, monkeypatch, tmp_path):
    """Ctrl-C while the work folder was copied into .rebase/ left .rebase/.demo-0.9.0.partial (and a .rebase/)."""
    _conflict(demo_project, monkeypatch, tmp_path)
    real_copytree = shutil.copytree

    def copytree(src, dst, *a, **kw):
        real_copytree(src, dst, *a, **kw)
        if str(dst).endswith(".partial"):
            raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "copytree", copytree)
    with pytest.raises(KeyboardInterrupt):
        derive.derive(demo_project.load(), "demo==0.9.0", Prover(), log=lambda m: None)
    assert not (demo_project.root / ".rebase").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("block", ["judge", "prove"])
def test_a_real_signal_leaves_the_project_and_no_scratch(demo_project, tmp_path, scratch_temp, sig, block):
    """SIGTERM (a CI runner's cancel) left the scratch copy in the temporary folder: it ended the process without
    the cleanup Ctrl-C runs. The run waits in a child process, as a proof run does, when it is signalled."""
    kept_by_proof(demo_project)
    demo_project.add_release("0.9.0", CORE)
    before = tree(demo_project.root)
    proc, marker = _spawn(demo_project, tmp_path, block, "demo==0.9.0")
    _wait_for(proc, marker)
    os.killpg(proc.pid, sig)  # as a terminal's Ctrl-C, or a CI runner's cancel, signals the whole group
    _, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 130, err[-500:]
    assert tree(demo_project.root) == before and not (demo_project.root / ".rebase").exists()
    assert not list(scratch_temp.glob("patchwheel-*")), err[-500:]


@pytest.mark.parametrize("value", ['"1.0.0" = 0', '"1.0.0" = true', '"1.0.0" = "2"', '"one" = 1'])
def test_a_retired_table_of_anything_but_versions_and_numbers_is_refused(demo_project, value):
    pins = demo_project.root / "overlay/demo/pins.toml"
    pins.write_text(pins.read_text() + f"\n[retired]\n{value}\n")
    with pytest.raises(PatchwheelError, match=r"\[retired\]"):
        demo_project.load()


def test_retiring_keeps_the_highest_number_and_every_other_line(tmp_path):
    from patchwheel.configfiles import record_retired

    pins = tmp_path / "pins.toml"
    head = 'package = "demo"\n\n[release."2.0"]\nwheel = 1\n'
    pins.write_text(head)
    record_retired(pins, "1.0", 3)
    record_retired(pins, "1.5", 1)
    record_retired(pins, "1.0", 2)  # lower than what is there: the highest stays
    assert pins.read_text().startswith(head) and pins.read_text().endswith('[retired]\n"1.0" = 3\n"1.5" = 1\n')
