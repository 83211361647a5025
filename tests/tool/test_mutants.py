"""The hunk-level mutation check on the synthetic demo package: splitting, mutants, verdicts, and one whole run
whose "environment" is a folder on this interpreter's path (no virtual environment is made)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import CORE, INIT, TRAILERS, adopting_orphans, how_it_ended, make_patch, make_wheel
from patchwheel import series
from patchwheel.errors import PatchwheelError
from patchwheel.maint.proving import mutants, proofenv
from patchwheel.maint.proving.mutants import HunkRef, Outcome, Result
from patchwheel.wheels import build as build_mod
from patchwheel.wheels.apply import ApplyTree, git_env

LONG = CORE + b"".join(f"\n\ndef f{i}(x):\n    return x + {i}\n".encode() for i in range(12))
UP = {"src/demo/core.py": LONG, "src/demo/__init__.py": INIT}
EXTRA = b'"""a module the patch adds."""\n\nANSWER = 42\n'


def edit_two_far_hunks_and_a_file(files):
    core = files["src/demo/core.py"]
    core = core.replace(b'"hello " + name', b'"hello, " + name').replace(b"return x + 10\n", b"return x + 100\n")
    return {**files, "src/demo/core.py": core, "src/demo/extra.py": EXTRA}


def edit_f5(files):
    return {**files, "src/demo/core.py": files["src/demo/core.py"].replace(b"return x + 5\n", b"return x - 5\n")}


def edit_greet_again(files):
    return {**files, "src/demo/core.py": files["src/demo/core.py"].replace(b'"hello, "', b'"hi, "')}


def _use_long_core(demo) -> None:
    """Republish demo 1.0.0 with a core.py long enough for hunks far apart."""
    whl = make_wheel(demo.upstream.parent, {"demo/__init__.py": INIT, "demo/core.py": LONG})
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    (demo.index / "demo" / "index.html").write_text(
        f'<a href="../../upstream/{whl.name}#sha256={sha}">{whl.name}</a>\n'
    )
    demo.write_pins(sha)


def _series(demo, second_edit, first_trailers=None, second_trailers=None):
    """0001: two far hunks in core.py and a new file; 0002: ``second_edit`` on top of it."""
    _use_long_core(demo)
    p1 = make_patch(UP, edit_two_far_hunks_and_a_file, "Two hunks and a file", first_trailers or TRAILERS)
    p2 = make_patch(edit_two_far_hunks_and_a_file(dict(UP)), second_edit, "On top", second_trailers or TRAILERS)
    demo.set_series(("0001-two-hunks.patch", p1), ("0002-on-top.patch", p2))
    line = demo.load().line("demo")
    return line, series.parse_series(line)


def _apply(tree: ApplyTree, diff: bytes, *extra: str) -> subprocess.CompletedProcess:
    path = tree.root.parent / "one.diff"
    path.write_bytes(diff)
    return subprocess.run(
        ["git", "apply", *extra, str(path)], cwd=tree.root, env=git_env(tree.root), capture_output=True, text=True
    )


def test_hunks_split_a_multi_hunk_multi_file_patch(tmp_path):
    path = tmp_path / "0001-two-hunks.patch"
    path.write_bytes(make_patch(UP, edit_two_far_hunks_and_a_file, "Two hunks and a file", TRAILERS))
    patch = series.parse_patch(path)
    hs = mutants.hunks(patch)
    assert [(h.index, h.path) for h in hs] == [
        (1, "src/demo/core.py"),
        (2, "src/demo/core.py"),
        (3, "src/demo/extra.py"),
    ]
    assert hs[1].header.startswith("@@ -") and hs[1].header.endswith("def f9(x):")  # function context kept
    assert hs[2].header == "@@ -0,0 +1,3 @@" and b"\nnew file mode 100644\n" in hs[2].diff
    for h in hs:
        assert h.diff.startswith(b"diff --git ") and h.diff.count(b"\n@@ ") == 1
        with ApplyTree(UP) as tree:  # each applies alone to the pristine files
            assert _apply(tree, h.diff, "--check").returncode == 0, h
    rebuilt, last_head = b"", None
    for h in hs:  # together they are the patch: file headers once, then the hunks
        head, body = h.diff.split(b"\n@@ ", 1)
        rebuilt += (head + b"\n" if head != last_head else b"") + b"@@ " + body
        last_head = head
    assert rebuilt == patch.raw[patch.raw.index(b"diff --git ") :]
    with ApplyTree(UP) as tree:  # and applied one by one, they make the patched files
        for h in hs:
            assert _apply(tree, h.diff).returncode == 0
        assert tree.read(sorted({*UP, "src/demo/extra.py"})) == edit_two_far_hunks_and_a_file(dict(UP))


def test_mutant_files_revert_exactly_one_hunk(demo_project):
    line, series = _series(demo_project, edit_f5)
    full = edit_f5(edit_two_far_hunks_and_a_file(dict(UP)))["src/demo/core.py"]
    greet, f10, extra = mutants.hunks(series[0])
    assert mutants.mutant_files(line, series, 0, greet) == {
        "demo/core.py": full.replace(b'"hello, " + name', b'"hello " + name')
    }
    patched = mutants.patched_files(line, series)
    assert mutants.mutant_files(line, series, 0, f10, patched) == {
        "demo/core.py": full.replace(b"return x + 100\n", b"return x + 10\n")
    }
    assert mutants.mutant_files(line, series, 0, extra, patched) == {"demo/extra.py": None}  # created: absent
    (f5,) = mutants.hunks(series[1])
    assert mutants.mutant_files(line, series, 1, f5, patched) == {
        "demo/core.py": full.replace(b"return x - 5\n", b"return x + 5\n")
    }


def test_a_hunk_a_later_patch_rewrote_is_entangled(demo_project):
    line, series = _series(demo_project, edit_greet_again)
    greet, f10, _ = mutants.hunks(series[0])
    with pytest.raises(mutants.Entangled, match=r"src/demo/core.py \(later patch 0002-on-top.patch rewrote it\)"):
        mutants.mutant_files(line, series, 0, greet)
    assert b"return x + 10\n" in (mutants.mutant_files(line, series, 0, f10)["demo/core.py"] or b"")
    # judged instead on the file as the series up to its own patch makes it: the later rewrite left out
    before_later = edit_two_far_hunks_and_a_file(dict(UP))["src/demo/core.py"]
    assert mutants.mutant_files_upto(line, series, 0, greet) == {
        "demo/core.py": before_later.replace(b'"hello, " + name', b'"hello " + name')
    }


def _case(test, outcome, error=""):
    return {"test": test, "outcome": outcome, "bug": False, "error": error}


@pytest.mark.parametrize(
    "cases,detail,verdict,by",
    [
        (
            [_case("test_a", "passed"), _case("test_b", "failed", "AssertionError: assert 1 == 2\nmore")],
            "",
            "killed",
            "test_b (AssertionError: assert 1 == 2)",
        ),
        ([_case("test_a", "passed"), _case("test_b", "passed")], "", "survived", "2 passed"),
        ([_case("test_a", "passed"), _case("test_gpu", "skipped")], "", "survived", "1 passed, 1 skipped"),
        (
            [_case("test_a", "passed"), _case("test_b", "error", "OSError: no port")],
            "",
            "could-not-judge",
            "1 passed, 1 error: test_b OSError: no port",
        ),
        ([_case("test_gpu", "skipped")], "", "could-not-judge", "1 skipped"),
        ([], "", "could-not-judge", "no test ran"),
        (None, "timed out after 600 s", "could-not-judge", "timed out after 600 s"),
    ],
)
def test_judge(cases, detail, verdict, by):
    assert mutants.judge(cases, detail) == Outcome(verdict, by)


def _patch(message: str, name="0001-x.patch") -> series.Patch:
    return series.Patch(Path(name), "subject", message, {}, (), b"")


def _result(index: int, verdict: str, by: str = "", patch="0001-x.patch") -> Result:
    hunk = HunkRef(index, "src/demo/core.py", f"@@ -{index},3 +{index},3 @@ def f(a|b):", b"")
    return Result("demo/1.0.0", patch, hunk, Outcome(verdict, by), 1.25)


def test_survival_notes_justify_and_stale_notes():
    patch = _patch(
        "Subject body.\n\nProof-Test: tests/proof/test_demo.py\nMutant-Survives: #2 only a log message\n"
        "Mutant-Survives: #4  a guard for torch<2.5, which the suite does not install\n"
        "Mutant-Survives: #7 gone"
    )
    notes = mutants.survival_notes(patch)
    assert notes == {2: "only a log message", 4: "a guard for torch<2.5, which the suite does not install", 7: "gone"}
    assert mutants.justify(Outcome("survived", "3 passed"), notes.get(2)) == Outcome("justified", "only a log message")
    assert mutants.justify(Outcome("survived", "3 passed"), notes.get(1)) == Outcome("survived", "3 passed")
    assert mutants.justify(Outcome("killed", "test_a"), notes.get(4)) == Outcome("killed", "test_a")
    results = [_result(1, "survived"), _result(2, "justified"), _result(3, "entangled"), _result(4, "killed", "test_a")]
    warnings = mutants.stale_notes(patch, notes, results)
    assert len(warnings) == 2
    assert "hunk #4 is killed by test_a" in warnings[0] and "remove the stale note" in warnings[0]
    assert "hunk #7, which the patch does not have (it has 4)" in warnings[1]
    with pytest.raises(PatchwheelError, match="is not 'Mutant-Survives: #<n> <reason>'"):
        mutants.survival_notes(_patch("Body.\n\nMutant-Survives: 2 no hash sign"))


def test_exit_code_table_and_summary():
    ok = [_result(1, "killed", "test_a (AssertionError: x)"), _result(2, "justified", "a log message")]
    assert mutants.exit_code(ok) == 0
    for verdict in ("survived", "entangled", "could-not-judge"):
        assert mutants.exit_code(ok + [_result(3, verdict)]) == 1
    results = ok + [
        _result(3, "survived", "2 passed"),
        _result(4, "entangled", "x"),
        _result(5, "could-not-judge", "E" * 300),
    ]
    table = mutants.markdown(results).splitlines()
    assert table[0] == "| line | patch | hunk | file | verdict | by | seconds |"
    assert table[2] == (
        "| demo/1.0.0 | 0001-x.patch | #1 @@ -1,3 +1,3 @@ def f(a\\|b): | src/demo/core.py | killed "
        "| test_a (AssertionError: x) | 1.2 |"
    )
    assert len(table) == 7 and "E" * 99 + "…" in table[6] and "E" * 100 not in table[6]
    assert mutants.summary(results, 12.4) == (
        "5 hunks: 1 killed, 1 justified, 1 survived, 2 entangled/could-not-judge in 12 s"
    )


def test_mutated_always_restores(tmp_path):
    site = tmp_path / "site"
    (site / "demo" / "__pycache__").mkdir(parents=True)
    (site / "demo" / "core.py").write_bytes(b"original\n")
    (site / "demo" / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"stale")
    with pytest.raises(RuntimeError):
        with proofenv.installed_over(
            site, {"demo/core.py": b"mutant\n", "demo/new.py": b"x = 1\n", "demo/gone.py": None}
        ):
            assert (site / "demo" / "core.py").read_bytes() == b"mutant\n" and (site / "demo" / "new.py").is_file()
            assert not (site / "demo" / "__pycache__" / "core.cpython-311.pyc").exists()
            raise RuntimeError("the proof run broke")
    assert (site / "demo" / "core.py").read_bytes() == b"original\n"
    assert sorted(p.name for p in (site / "demo").iterdir()) == ["__pycache__", "core.py"]


def test_reset_puts_back_the_wheels_bytes(tmp_path):
    whl = make_wheel(tmp_path, {"demo/__init__.py": INIT, "demo/core.py": CORE})
    site = tmp_path / "site"
    (site / "demo").mkdir(parents=True)
    (site / "demo" / "__init__.py").write_bytes(INIT)
    (site / "demo" / "core.py").write_bytes(b"left mutated\n")
    (site / "demo" / "extra.py").write_bytes(b"not in the wheel\n")
    assert proofenv.restore_from_wheel(site, whl, ["demo/__init__.py", "demo/core.py", "demo/extra.py"]) == [
        "demo/core.py",
        "demo/extra.py",
    ]
    assert (site / "demo" / "core.py").read_bytes() == CORE and not (site / "demo" / "extra.py").exists()
    assert proofenv.restore_from_wheel(site, whl, ["demo/core.py"]) == []


def test_dist_wheel_must_be_built_from_the_current_series(demo_project):
    project = demo_project.load()
    line = project.line("demo")
    with pytest.raises(PatchwheelError, match="nox -s build"):
        mutants.dist_wheel(project, line)
    build_mod.build(project, demo_project.root / "dist", log=lambda m: None)
    first = f"demo-1.0.0+fixed-1_{line.build.inputs[:12]}-py3-none-any.whl"
    assert mutants.dist_wheel(project, line) == demo_project.root / "dist" / first
    _series(demo_project, edit_f5)
    with pytest.raises(PatchwheelError, match=r"demo-1.0.0\+fixed-2_[0-9a-f]{12}-py3-none-any.whl does not exist"):
        mutants.dist_wheel(demo_project.load(), demo_project.load().line("demo"))


REPORTING_CONFTEST = """
import json, os
from pathlib import Path

_report = []


def pytest_addoption(parser):
    parser.addoption("--proof-expect", default="auto")


def pytest_runtest_logreport(report):
    if report.when == "call":
        error = report.longrepr.reprcrash.message if report.failed else ""
        _report.append({"test": report.nodeid.split("::")[-1], "outcome": report.outcome, "error": error})


def pytest_sessionfinish(session):
    Path(os.environ["PATCHWHEEL_PROOF_REPORT"]).write_text(json.dumps(_report))
"""


class TimeoutOnEvent:
    """proofenv's clock for a timeout test: it stands still until ``event`` (a file) exists, then each reading is
    ``step`` seconds on, so a run given ``step`` seconds times out right after the event, however long a loaded
    machine took to get there."""

    def __init__(self, event: Path, step: float) -> None:
        self.event, self.step, self.now = event, step, 0.0

    def __call__(self) -> float:
        if self.event.exists():
            self.now += self.step
        return self.now


def test_proof_runs_kill_the_whole_process_group_on_timeout(tmp_path, monkeypatch):
    """The mutation check's proof runs (proofenv.run_report, guards included, as check_line runs them): on a timeout
    the whole process group dies, pytest and the process its test started. The timeout runs out once the test has
    started that process (given 3 s of the real clock, a loaded machine's pytest had not reached the test yet), and
    the process is waited for as this process's adopted child: killed, not ended by itself."""
    (tmp_path / "conftest.py").write_text(REPORTING_CONFTEST)
    pid_file = tmp_path / "child.pid"
    (tmp_path / "test_slow.py").write_text(
        "import os, subprocess, time\n\ndef test_slow():\n"
        "    child = subprocess.Popen(['sleep', '120'])\n"
        f"    open({str(pid_file)!r} + '.part', 'w').write(str(child.pid))\n"
        f"    os.replace({str(pid_file)!r} + '.part', {str(pid_file)!r})\n"
        "    time.sleep(130)  # not child.wait(): killed in it, pytest would reap the child first\n"
    )
    clock = TimeoutOnEvent(pid_file, 3)
    monkeypatch.setattr(
        proofenv, "time", SimpleNamespace(monotonic=clock, sleep=time.sleep, perf_counter=time.perf_counter)
    )
    with adopting_orphans():  # pytest's child is reparented here when pytest dies
        ran = proofenv.run_report(Path(sys.executable), tmp_path, "test_slow.py", timeout=3, guards=True)
        assert ran.cases is None and ran.detail == "timed out after 3 s", ran
        assert how_it_ended(int(pid_file.read_text())) == "killed by SIGKILL", "the proof's child outlived the timeout"


def _fake_fixed_env(site_root: Path):
    """Stand-in for proofenv.fixed_env: the wheels unpacked into a folder, run by this interpreter via PYTHONPATH."""

    def make(cache: Path, wheels: list[Path]) -> Path:
        env = site_root / "env"
        if (env / "bin" / "python").exists():  # cached, as the real one is
            return env
        site = proofenv._site(env)
        site.mkdir(parents=True)
        (env / "bin").mkdir()
        (env / "bin" / "python").symlink_to(sys.executable)
        for w in wheels:
            with zipfile.ZipFile(w) as zf:
                zf.extractall(site)
        return env

    return make


def _greet_and_f5_proofs(demo_project) -> Path:
    """The demo's proofs of greet and f5, reporting each case; their folder."""
    proof = demo_project.root / "tests" / "proof"
    (proof / "conftest.py").write_text(REPORTING_CONFTEST)
    (proof / "test_demo.py").write_text(
        "from demo.core import f5, greet\n\n\ndef test_greet():\n"
        "    assert greet('x') == 'hello, x'\n\n\ndef test_f5():\n"
        "    assert f5(1) == -4\n"
    )
    return proof


def test_run_judges_every_hunk(demo_project, monkeypatch, tmp_path, capsys):
    proof = _greet_and_f5_proofs(demo_project)
    _series(
        demo_project,
        edit_f5,
        {**TRAILERS, "Mutant-Survives": "#2 f10 is not the fix, only kept in step"},
        {**TRAILERS, "Mutant-Survives": "#1 a stale note"},
    )
    project = demo_project.load()
    build_mod.build(project, demo_project.root / "dist", log=lambda m: None)
    monkeypatch.setattr(proofenv, "fixed_env", _fake_fixed_env(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(proofenv._site(tmp_path / "env")))
    core = proofenv._site(tmp_path / "env") / "demo" / "core.py"
    log: list[str] = []
    out = tmp_path / "mutants.md"
    assert (
        mutants.exit_code(mutants.run(project, ["demo"], out, log=log.append)) == 1
    )  # hunk #3 (the new file) survives
    text = capsys.readouterr().out
    assert out.read_text() == text
    rows = [r.split(" | ") for r in text.splitlines() if r.startswith("| demo/1.0.0")]
    assert [(r[1], r[2].split()[0], r[3], r[4]) for r in rows] == [
        ("0001-two-hunks.patch", "#1", "src/demo/core.py", "killed"),
        ("0001-two-hunks.patch", "#2", "src/demo/core.py", "justified"),
        ("0001-two-hunks.patch", "#3", "src/demo/extra.py", "survived"),
        ("0002-on-top.patch", "#1", "src/demo/core.py", "killed"),
    ]
    assert rows[0][5].startswith("test_greet (AssertionError: assert 'hello x' == 'hello, x'")
    assert "4 hunks: 2 killed, 1 justified, 1 survived, 0 entangled/could-not-judge in" in text
    assert "warning: 0002-on-top.patch: hunk #1 is killed by test_f5" in text
    assert any(m.startswith("demo/1.0.0: baseline tests/proof/test_demo.py: survived (2 passed") for m in log)
    assert any(
        m.startswith("[1/4 ")
        and "0001-two-hunks.patch hunk #1 (src/demo/core.py @@ " in m
        and "killed by test_greet" in m
        for m in log
    )
    assert core.read_bytes() == edit_f5(edit_two_far_hunks_and_a_file(dict(UP)))["src/demo/core.py"]  # restored
    assert (core.parent / "extra.py").read_bytes() == EXTRA

    core.write_bytes(b"left mutated by a killed run\n")  # the next run repairs it before judging
    (proof / "test_demo.py").write_text("def test_greet():\n    assert False, 'broken proof'\n")
    assert mutants.exit_code(mutants.run(project, ["demo==1.0.0"], None, log=log.append)) == 1
    assert any("restored demo/core.py" in m for m in log)
    assert "4 hunks: 0 killed, 0 justified, 0 survived, 4 entangled/could-not-judge" in capsys.readouterr().out
    assert any("could-not-judge (baseline fails: killed: test_greet (AssertionError: broken proof" in m for m in log)


def test_run_checks_one_patch_when_asked(demo_project, monkeypatch, tmp_path, capsys):
    """`--patch`: only the hunks of the patch it names (a new patch's, without judging every other hunk)."""
    _greet_and_f5_proofs(demo_project)
    _series(demo_project, edit_f5, TRAILERS, {**TRAILERS, "Mutant-Survives": "#1 a stale note"})
    project = demo_project.load()
    build_mod.build(project, demo_project.root / "dist", log=lambda m: None)
    monkeypatch.setattr(proofenv, "fixed_env", _fake_fixed_env(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(proofenv._site(tmp_path / "env")))
    log: list[str] = []
    assert mutants.exit_code(mutants.run(project, ["demo"], None, log=log.append, patch="on-top")) == 0
    rows = [r.split(" | ") for r in capsys.readouterr().out.splitlines() if r.startswith("| demo/1.0.0")]
    assert [(r[1], r[2].split()[0], r[4]) for r in rows] == [("0002-on-top.patch", "#1", "killed")]
    assert any(m.startswith("[1/1 ") for m in log), log
    with pytest.raises(PatchwheelError, match="no patch 'nothing' in the lines selected"):
        mutants.run(project, ["demo"], None, log=log.append, patch="nothing")
