"""The matrix check's machinery under load and under bad input: shared environments built once however many
threads or processes ask, verdicts judged once per run, wheel names and versions read with ``packaging``, user
errors instead of tracebacks, and one place that spawns (and kills) proof runs. Nothing here makes a real
virtual environment: ``proofenv._create`` and ``proofenv._install`` are faked."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import CORE, adopting_orphans, how_it_ended, stub_proof_runs
from patchwheel import cli
from patchwheel.config import Artifact
from patchwheel.errors import PatchwheelError
from patchwheel.maint.proving import mutants, proofenv, torchsource
from patchwheel.maint.upstream import matrixrun as upstream
from patchwheel.maint.upstream.selection import Selection
from patchwheel.reporter import silent
from patchwheel.wheels import fetch, index

# --- 1. shared environments and the verdict cache ------------------------------------------------------------------


class FakeBuilds:
    """``_create`` makes only the site-packages folder; ``_install`` sleeps (so builds overlap) and counts."""

    def __init__(self, monkeypatch, seconds: float = 0.3) -> None:
        self.lock, self.seconds = threading.Lock(), seconds
        self.installs: list[str] = []
        monkeypatch.setattr(proofenv, "_create", lambda path: proofenv._site(Path(path)).mkdir(parents=True))
        monkeypatch.setattr(proofenv, "_install", self.install)
        # The torch source is asked before the base is made: a stand-in that has every version.
        source = torchsource.Source("/nowhere", False, "a test")
        monkeypatch.setattr(
            torchsource, "wheel", lambda v, _links: torchsource.TorchWheel(v, "torch.whl", "file:///torch.whl", source)
        )

    def install(self, env: Path, *args: str, on_base: bool = False, compile: bool = True) -> None:
        time.sleep(self.seconds)
        base = any(a.startswith("torch @ ") for a in args)
        if base:  # what the base's check reads: the torch installed, of the version asked for
            info = proofenv._site(env) / f"torch-{proofenv.torch_version()}.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {proofenv.torch_version()}\n")
        with self.lock:
            self.installs.append("base" if base else "release")

    def count(self, kind: str) -> int:
        return self.installs.count(kind)


def _ino(path: Path) -> int:
    return os.stat(path).st_ino


def _in_threads(target, n: int) -> list[str]:
    """Run ``target`` in ``n`` threads at once and wait for them; the reprs of what they raised."""
    errors: list[str] = []

    def guarded() -> None:
        try:
            target()
        except Exception as exc:  # noqa: BLE001 - returned to the test
            errors.append(repr(exc))

    threads = [threading.Thread(target=guarded) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


FIRST_ENVIRONMENTS_AT_ONCE = """
import sys, sysconfig, threading
sys.path.insert(0, sys.argv[1])
from patchwheel.maint.proving import proofenv  # noqa: F401

barrier, seen = threading.Barrier(16), []


def ask():  # what uv's find_uv_bin asks, in each worker making its first environment
    barrier.wait()
    seen.append(sysconfig.get_config_var("EXE"))


threads = [threading.Thread(target=ask) for _ in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(sum(value is None for value in seen))
"""


def test_workers_never_see_sysconfig_half_filled(tmp_path):
    """A cold matrix check failed: both workers made their first environment at once, sysconfig filled its
    variables in one while the other read EXE as None (TypeError in uv's find_uv_bin). In a fresh interpreter,
    without the fill on proofenv's import, 16 threads see None in every run."""
    script = tmp_path / "first_environments.py"
    script.write_text(FIRST_ENVIRONMENTS_AT_ONCE)
    for _ in range(3):
        res = subprocess.run(
            [sys.executable, str(script), str(Path(proofenv.__file__).parents[2])], capture_output=True, text=True
        )
        assert res.returncode == 0 and res.stdout.strip() == "0", res.stdout + res.stderr


def test_release_env_is_built_once_for_concurrent_threads(demo_project, monkeypatch):
    builds = FakeBuilds(monkeypatch)
    wheels = [("demo", demo_project.load().line("demo").wheel)]
    start, seen = threading.Barrier(4), []

    def worker() -> None:
        start.wait()
        env = proofenv.release_env(demo_project.cache, wheels)
        base = demo_project.cache / "envs" / f"base-torch-{proofenv.torch_version()}"
        seen.append((_ino(env), _ino(base)))
        time.sleep(0.5)  # "run proofs" while the others finish: nobody may replace what this thread uses
        seen.append((_ino(env), _ino(base)))

    assert _in_threads(worker, 4) == []
    assert (builds.count("base"), builds.count("release")) == (1, 1), builds.installs
    assert len(set(seen)) == 1, "a thread's environment was deleted and replaced under it"
    env = proofenv.envs_dir(demo_project.cache) / "demo-1.0.0"
    assert (proofenv._site(env) / "patchwheel-base.pth").is_file()
    leftovers = [p.name for p in env.parent.iterdir() if p.is_dir() and p.name.startswith(".")]
    assert leftovers == [], leftovers


def test_make_waits_for_a_build_in_another_process(tmp_path, monkeypatch):
    """Another process holds the environment's lock file while it builds: this one waits, then uses its work."""
    builds = FakeBuilds(monkeypatch, seconds=0)
    env, marker = tmp_path / "envs" / "shared", '{"torch": "x"}'
    env.parent.mkdir(parents=True)
    other = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import fcntl, os, sys, time\n"
                f"env = {str(env)!r}\n"
                f"lock = open({str(env.parent / '.shared.lock')!r}, 'a')\n"
                "fcntl.flock(lock, fcntl.LOCK_EX)\n"
                "print('locked', flush=True)\n"
                "time.sleep(1.0)\n"
                "os.makedirs(env)\n"
                "open(os.path.join(env, 'built-by'), 'w').write('the other process')\n"
                f"open(os.path.join(env, 'patchwheel-env.json'), 'w').write({marker!r})\n"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "locked"
        got = proofenv._make(env, marker, lambda e: proofenv._install(e, "torch==0"))
    finally:
        other.wait()  # it ends by itself once it has written the environment
    assert got == env and (env / "built-by").read_text() == "the other process"
    assert builds.installs == []


def test_make_removes_what_a_dead_builder_left(tmp_path, monkeypatch):
    FakeBuilds(monkeypatch, seconds=0)
    envs = tmp_path / "envs"
    for name in (".shared.building-dead1", ".shared.stale-dead1", ".shared-other.building-alive", "shared-keep"):
        (envs / name).mkdir(parents=True)
    proofenv._make(envs / "shared", "{}", lambda e: proofenv._install(e, "x"))
    assert sorted(p.name for p in envs.iterdir()) == [
        ".shared-other.building-alive",
        ".shared.lock",
        "shared",
        "shared-keep",
    ]


def _fake_proofs(monkeypatch, tmp_path) -> dict[tuple[str, str], int]:
    """release_env: a folder per release; run_proof: slow, counted per (env, proof)."""
    runs: dict[tuple[str, str], int] = {}
    lock = threading.Lock()

    def run_proof(env, root, proof, timeout=900, first_bug=False):
        time.sleep(0.2)
        with lock:
            runs[(Path(env).name, proof)] = runs.get((Path(env).name, proof), 0) + 1
        return proofenv.ProofOutcome("fails", "test_greet: the bug")

    stub_proof_runs(monkeypatch, tmp_path, run_proof)
    return runs


def test_judged_cache_runs_each_proof_once_across_concurrent_lines(demo_project, monkeypatch, tmp_path):
    demo_project.add_release("1.1.0", b"# moved\n" + CORE)
    demo_project.add_release("1.2.0", b"# moved again\n" + CORE)
    runs = _fake_proofs(monkeypatch, tmp_path)
    project = demo_project.load()
    line, sel = project.line("demo"), Selection.parse([])
    judged = upstream.Judged()
    results = []

    def check() -> None:
        results.append(upstream.check_line(project, line, sel, sel, workers=2, judged=judged))

    assert _in_threads(check, 3) == []
    assert runs == {("demo-1.1.0", "tests/proof/test_demo.py"): 1, ("demo-1.2.0", "tests/proof/test_demo.py"): 1}
    for r in results:
        assert {v: c.behaviour for v, c in r.patches[0].cells.items()} == {"1.1.0": "fails", "1.2.0": "fails"}
    assert not hasattr(upstream, "_judged"), "the verdict cache must belong to a run, not to the module"


def test_each_run_judges_afresh(demo_project, monkeypatch, tmp_path):
    """A second run in the same process (a test suite, a long-lived caller) must not reuse the first's verdicts."""
    demo_project.add_release("1.1.0", b"# moved\n" + CORE)
    runs = _fake_proofs(monkeypatch, tmp_path)
    project, sel = demo_project.load(), Selection.parse([])
    upstream.record(
        project, upstream.check_lines(project, sel, sel, workers=2, bisect=False, report=silent()), silent()
    )
    assert upstream.check(project, sel, sel, workers=2, report=silent()) == ([], 1)
    assert runs == {("demo-1.1.0", "tests/proof/test_demo.py"): 2}


# --- 2. wheel names and versions through packaging -----------------------------------------------------------------


def test_index_groups_by_the_wheels_project_and_refuses_bad_names(tmp_path):
    wheels = {
        "Foo_Bar-1.0.post1-py3-none-any.whl": "a" * 64,
        "foo.bar-2.0-py3-none-any.whl": "b" * 64,
        "demo-1.0.0+fixed-py3-none-any.whl": "c" * 64,
    }
    index.write_simple(tmp_path, wheels)
    assert sorted(p.name for p in (tmp_path / "simple").iterdir()) == ["demo", "foo-bar", "index.html"]
    page = (tmp_path / "simple" / "foo-bar" / "index.html").read_text()
    assert "Foo_Bar-1.0.post1-py3-none-any.whl" in page and "foo.bar-2.0-py3-none-any.whl" in page
    (tmp_path / "again").mkdir()
    with pytest.raises(PatchwheelError, match=r"'foo-bar-1\.0-py3-none-any\.whl' is not a valid wheel file name"):
        index.write_simple(tmp_path / "again", {"foo-bar-1.0-py3-none-any.whl": "d" * 64})  # would land under foo/
    assert not (tmp_path / "again" / "simple" / "foo").exists()
    import zipfile

    (tmp_path / "bare").mkdir()
    with zipfile.ZipFile(tmp_path / "bare" / "demo-1.0-py3-none-any.whl", "w") as zf:  # no METADATA to publish
        zf.writestr("demo/__init__.py", "")
    with pytest.raises(PatchwheelError, match=r"demo-1\.0-py3-none-any\.whl has no demo-1\.0\.dist-info/METADATA"):
        index.core_metadata(tmp_path / "bare", ["demo-1.0-py3-none-any.whl"])


def test_rebase_finds_the_wheel_of_a_hyphenated_project_and_a_post_release(monkeypatch):
    links = {
        name: (f"https://example.invalid/{name}", sha)
        for name, sha in [
            ("foo_bar-1.0.post1-py3-none-any.whl", "a" * 64),
            ("foo_bar-1.0.post1.tar.gz", "b" * 64),
            ("foo_bar-1.0-py3-none-any.whl", "c" * 64),
            ("foo_bar-1.0.post1-cp311-cp311-linux_x86_64.whl", "d" * 64),
        ]
    }
    monkeypatch.setattr(fetch, "project_links", lambda package, index=None: links)
    wheel, sdist = fetch.release_artifacts("foo-bar", "1.0.post1")
    assert wheel == Artifact("foo_bar-1.0.post1-py3-none-any.whl", "a" * 64)
    assert sdist == Artifact("foo_bar-1.0.post1.tar.gz", "b" * 64)


def test_environment_names_come_from_parsed_wheel_names(tmp_path, monkeypatch):
    FakeBuilds(monkeypatch, seconds=0)
    monkeypatch.setattr(fetch, "fetch", lambda package, artifact, **kw: tmp_path / artifact.filename)
    env = proofenv.release_env(
        tmp_path,
        [
            ("foo-bar", Artifact("Foo_Bar-1.0.POST1-1-py3-none-any.whl", "a" * 64)),
            ("demo", Artifact("demo-2.0-py3-none-any.whl", "b" * 64)),
        ],
    )
    assert env.name == "foo-bar-1.0.post1+demo-2.0"
    with pytest.raises(PatchwheelError, match="'demo.whl' is not a valid wheel file name"):
        proofenv.release_env(tmp_path, [("demo", Artifact("demo.whl", "c" * 64))])
    (tmp_path / "foo_bar-1.0+fixed-py3-none-any.whl").write_bytes(b"x")
    env = proofenv.fixed_env(tmp_path, [tmp_path / "foo_bar-1.0+fixed-py3-none-any.whl"])
    assert env.name == "mutants-foo-bar-1.0+fixed"


# --- 3. bad input: a user error, never a traceback ----------------------------------------------------------------


def _main(capsys, root: Path, *args: str) -> tuple[int, str]:
    code = cli.main(["--root", str(root), *args])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return code, captured.err


@pytest.mark.parametrize("extra", [[], ["--continue"], ["--reexport"]])
def test_rebase_onto_not_a_version(demo_project, capsys, extra):
    code, err = _main(capsys, demo_project.root, "rebase", "demo", "notaversion", *extra)
    assert code == 2
    assert err.startswith("error: 'notaversion' is not a version\n  fix: ") and "e.g. 5.24.0" in err, err
    assert not (demo_project.root / ".rebase").exists()


@pytest.mark.parametrize(
    "args,message,hint",
    [
        (["--behaviour", "bogus"], "error: unknown package 'bogus' in --behaviour", "known packages: demo"),
        (["nosuchpkg==1.0"], "error: unknown package 'nosuchpkg' in the release selection", "known packages: demo"),
        (
            ["--behaviour", "demo==1.1.0", "--behaviour", "1.1.0"],
            "error: '1.1.0' in --behaviour names no package",
            "e.g. demo==1.1.0",
        ),
        (["demo>=1.1", "1.2.0"], "error: '1.2.0' in the release selection names no package", "e.g. demo==1.2.0"),
    ],
)
def test_upstream_selection_of_an_unknown_package(demo_project, capsys, args, message, hint):
    code, err = _main(capsys, demo_project.root, "matrix", "run", *args)
    assert code == 2 and err.startswith(message + "\n  fix: ") and hint in err, err
    assert not (demo_project.root / "patches" / "MATRIX.json").exists()


def test_upstream_behaviour_with_text_only_is_refused(demo_project, capsys):
    """``--text-only`` runs no proof, so a ``--behaviour`` selection beside it was dropped unread (even a bogus one)."""
    code, err = _main(capsys, demo_project.root, "matrix", "run", "--text-only", "--behaviour", "bogus")
    assert code == 2 and err.startswith(
        "error: --behaviour selects releases for proof runs, and --text-only runs none\n  fix: "
    ), err
    assert not (demo_project.root / "patches" / "MATRIX.json").exists()


def test_upstream_behaviour_outside_the_release_selection(demo_project):
    """``upstream demo==1.1.0 --behaviour other==1`` would judge nothing: said, not silently skipped."""
    project = demo_project.load()
    project = dataclasses.replace(project, lines={**project.lines, "other": project.lines["demo"]})
    with pytest.raises(PatchwheelError, match="--behaviour names other, which the release selection leaves out"):
        upstream.check_lines(
            project, Selection.parse(["demo==1.1.0"]), Selection.parse(["other==1"]), workers=1, bisect=False
        )


REPORTING_CONFTEST = """
import json, os
from pathlib import Path

_report = []


def pytest_addoption(parser):
    parser.addoption("--proof-expect", default="auto")


def pytest_configure(config):
    config.addinivalue_line("markers", "regression: a guard")


def pytest_runtest_logreport(report):
    if report.when == "call":
        error = report.longrepr.reprcrash.message if report.failed else ""
        _report.append({"test": report.nodeid.split("::")[-1], "outcome": report.outcome, "bug": False,
                        "error": error})


def pytest_sessionfinish(session):
    Path(os.environ["PATCHWHEEL_PROOF_REPORT"]).write_text(json.dumps(_report))
"""


def _fake_env(tmp_path: Path) -> Path:
    """An "environment" whose python is this interpreter (a wrapper script: a symlink would lose the venv)."""
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text(f'#!/bin/sh\nexec {sys.executable!r} "$@"\n')
    (env / "bin" / "python").chmod(0o755)
    return env


def test_run_proof_leaves_no_process_behind(tmp_path):
    """A passing proof whose test started a process (a rank, a server) and left it running: the verdict comes
    at once, and the process dies with the run. No timeout (a loaded machine's pytest may take long to start); the
    process is waited for as this process's adopted child: killed, not ended by itself, and only then does the
    verdict come."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "conftest.py").write_text(REPORTING_CONFTEST)
    pid_file = tmp_path / "child.pid"
    (root / "test_leaves.py").write_text(
        "import subprocess\n\ndef test_leaves_a_child():\n"
        f"    child = subprocess.Popen(['sleep', '120'])\n    open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
    )
    with adopting_orphans():  # pytest's child is reparented here when pytest exits
        outcome = proofenv.run_proof(_fake_env(tmp_path), root, "test_leaves.py", timeout=math.inf)
        assert outcome == proofenv.ProofOutcome("passes", "1 passed")
        assert how_it_ended(int(pid_file.read_text())) == "killed by SIGKILL", "the proof's child outlived the run"


def test_run_report_runs_regression_guards_only_when_asked(tmp_path):
    (tmp_path / "conftest.py").write_text(REPORTING_CONFTEST)
    (tmp_path / "test_guard.py").write_text(
        "import pytest\n\ndef test_proof():\n    pass\n\n@pytest.mark.regression\ndef test_guard():\n    pass\n"
    )
    python = Path(sys.executable)
    observe = proofenv.run_report(python, tmp_path, "test_guard.py", timeout=math.inf)
    guarded = proofenv.run_report(python, tmp_path, "test_guard.py", timeout=math.inf, guards=True)
    assert observe.cases is not None and guarded.cases is not None
    assert [c["test"] for c in observe.cases] == ["test_proof"]
    assert [c["test"] for c in guarded.cases] == ["test_proof", "test_guard"]
    assert guarded.detail == "" and guarded.seconds > 0


def test_mutants_spawns_proofs_only_through_proofenv():
    source = Path(mutants.__file__).read_text()
    assert not hasattr(mutants, "run_proof") and not hasattr(mutants, "fixed_env")
    assert "Popen" not in source and "killpg" not in source and "proofenv.run_report(" in source


def test_upstream_suite_spawns_pytest_only_through_proofenv():
    """upstream_suite had its own copy of the spawn-and-kill-the-group code: one implementation, in proofenv."""
    from patchwheel.maint.proving import suite as upstream_suite

    source = Path(upstream_suite.__file__).read_text()
    assert "Popen" not in source and "killpg" not in source and "proofenv.run_in_group(" in source
    assert "proofenv._" not in source, "upstream_suite uses proofenv's private helpers"
