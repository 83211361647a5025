"""`patchwheel prove` (what the nox prove and suite_prove sessions run, one chain each, and follow's proving step runs
whole): its arguments, the runs it starts, and its exit status: the status check saying otherwise (exit 0 on the
pristine pins, 1 on the +fixed builds) or a failed run fails it. The environments are stand-ins: which pytest runs
start, in which environment, is what is checked here (test_setruns.py: follow's side; test_status.py: the status
check on a real environment)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from patchwheel import cli
from patchwheel.maint.proving import proofenv, setruns, torchsource
from patchwheel.wheels import distdir


class Envs:
    """Stand-ins for the environments and the runs: ``codes`` (env, kind) -> exit status, where kind is
    ``status`` or ``pytest`` (``script``: the exit status of each run in turn instead); every run started, as
    (env, kind, arguments, whether its output went to a file)."""

    def __init__(self, tmp_path: Path, monkeypatch, codes: dict | None = None, script: list[int] | None = None) -> None:
        self.pristine, self.fixed = tmp_path / "envs" / "pristine", tmp_path / "envs" / "fixed"
        self.codes = {("pristine", "status"): 1, ("fixed", "status"): 0} | (codes or {})
        self.script = script  # or: the exit status of each run in turn
        self.started: list[tuple[str, str, list[str], bool]] = []
        self.fixed_at: list[Path | None] = []
        self.threads: set[bool] = set()  # whether each run was started from the main thread
        monkeypatch.setattr(proofenv, "release_env", lambda cache, wheels: self.pristine)
        monkeypatch.setattr(proofenv, "fixed_env", self.fixed_env)
        monkeypatch.setattr(proofenv, "run_in_group", self.run_in_group)

    def fixed_env(self, cache, wheels, purpose, at=None):
        self.fixed_at.append(at)
        return self.fixed

    def run_in_group(self, cmd, cwd, env, log, timeout):
        if cmd[1:3] == ["-m", "patchwheel"]:  # the status check: the tool asks the environment's interpreter
            kind, where = "status", Path(cmd[cmd.index("--python") + 1]).parents[1].name
            assert cmd[cmd.index("--root") + 1] == str(cwd) and "PYTHONPATH" in env
        else:
            kind, where = "pytest", Path(cmd[0]).parents[1].name
        self.started.append((where, kind, cmd[3:], log is not None))
        self.threads.add(threading.current_thread() is threading.main_thread())
        code = self.script.pop(0) if self.script else self.codes.get((where, kind), 0)
        if log is not None:
            log.write_text(f"=== {'1 passed' if code == 0 else '1 failed'} in 0.1s ===\n")
        return code

    def runs(self) -> list[tuple[str, str, str]]:
        """(env, kind, the first argument that says what ran)."""
        return [(env, kind, args[0] if kind == "pytest" else "status") for env, kind, args, _ in self.started]


@pytest.fixture
def project(demo_project, monkeypatch, tmp_path):
    monkeypatch.setattr(setruns, "current_wheel", lambda line, dist, hint: dist / "demo-1.0.0+fixed-py3-none-any.whl")
    return demo_project


def prove(project, *args: str) -> int:
    return cli.main(["--root", str(project.root), "prove", "--set", "default", *args])


def test_a_set_is_proven_both_ways_with_its_guards(project, monkeypatch, tmp_path, capsys):
    envs = Envs(tmp_path, monkeypatch)
    assert prove(project) == 0
    assert sorted(envs.runs()) == sorted(
        [
            ("pristine", "status", "status"),
            ("pristine", "pytest", "tests/proof"),
            ("fixed", "status", "status"),
            ("fixed", "pytest", "tests/proof"),
            ("pristine", "pytest", "tests/guards/test_demo.py"),
            ("fixed", "pytest", "tests/guards/test_demo.py"),
            ("pristine", "pytest", "tests/guards/test_demo.py"),
        ]
    )
    assert all(to_file for *_, to_file in envs.started), "three chains side by side: a line per run, not output"
    assert envs.fixed_at == [None], "the cached +fixed environment, as follow's"
    assert capsys.readouterr().out.splitlines()[-1] == "set default: proven"


def test_one_chain_runs_its_status_check_then_its_proofs_with_the_pytest_arguments(project, monkeypatch, tmp_path):
    envs = Envs(tmp_path, monkeypatch)
    assert prove(project, "--fixed", "--fixed-env", str(tmp_path / "mine"), "--", "-k", "greet") == 0
    assert envs.runs() == [("fixed", "status", "status"), ("fixed", "pytest", "tests/proof")]
    assert envs.started[1][2][-2:] == ["-k", "greet"]
    assert not any(to_file for *_, to_file in envs.started), "one chain: its output as it comes"
    assert envs.threads == {True}, "one chain runs in the main thread, where Ctrl-C and nox's SIGTERM arrive"
    assert envs.fixed_at == [tmp_path / "mine"]


def test_the_proofs_on_the_pristine_pins_need_no_build(project, monkeypatch, tmp_path):
    monkeypatch.setattr(setruns, "current_wheel", distdir.current_wheel)  # the real one: there is no dist/ at all
    envs = Envs(tmp_path, monkeypatch)
    assert prove(project, "--pristine") == 0
    assert envs.runs() == [("pristine", "status", "status"), ("pristine", "pytest", "tests/proof")]
    assert envs.fixed_at == []


def test_a_missing_build_says_how_to_make_it(project, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(setruns, "current_wheel", distdir.current_wheel)
    Envs(tmp_path, monkeypatch)
    assert prove(project, "--fixed") == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "nox -s build" in err


def test_a_proof_failing_on_the_fixed_builds_fails_the_verb(project, monkeypatch, tmp_path, capsys):
    Envs(tmp_path, monkeypatch, {("fixed", "pytest"): 1})
    assert prove(project, "--fixed") == 1
    assert capsys.readouterr().out.splitlines()[-1] == "set default: FAILED: proofs on the +fixed builds"
    Envs(tmp_path, monkeypatch, {("fixed", "pytest"): 1})
    assert prove(project) == 1
    out = capsys.readouterr().out
    assert "proofs on the +fixed builds: FAILED (1 failed in 0.1s)" in out  # with its output's tail


def test_pristine_pins_on_which_status_sees_no_known_bug_fail_before_any_proof(project, monkeypatch, tmp_path, capsys):
    """`status` must exit 1 on the pristine pins (a known bug applies): where it exits 0, the pins are not the
    bug's, and no proof runs."""
    envs = Envs(tmp_path, monkeypatch, {("pristine", "status"): 0})
    assert prove(project, "--pristine") == 1
    assert envs.runs() == [("pristine", "status", "status")]
    assert "FAILED: status on the pristine pins: a known bug applies (exit 1)" in capsys.readouterr().out
    envs = Envs(tmp_path, monkeypatch, {("fixed", "status"): 1})  # and a known bug on the +fixed builds
    assert prove(project, "--fixed") == 1
    assert envs.runs() == [("fixed", "status", "status")]


def test_the_guards_run_in_order_and_a_selection_may_leave_the_read_back_nothing(project, monkeypatch, tmp_path):
    envs = Envs(tmp_path, monkeypatch, {("pristine", "pytest"): 5})
    assert prove(project, "--guards") == 1, "pytest's 5 (nothing ran) fails the record run"
    assert [args[1] for *_, args, _ in envs.started] == ["--guard-record"]
    envs = Envs(tmp_path, monkeypatch, script=[0, 0, 5])
    assert prove(project, "--guards") == 1, "without a selection, the read-back run must run something"
    envs = Envs(tmp_path, monkeypatch, script=[0, 0, 5])
    assert prove(project, "--guards", "--", "-k", "pickle") == 0
    modes = [args[1] for *_, args, _ in envs.started]
    assert modes == ["--guard-record", "--guard-against", "--guard-readback"]
    exchange = {args[args.index("--guard-exchange") + 1] for *_, args, _ in envs.started}
    assert len(exchange) == 1, "one exchange folder"


def test_package_selects_its_proofs_and_guards(project, monkeypatch, tmp_path):
    envs = Envs(tmp_path, monkeypatch)
    assert prove(project, "--pristine", "--package", "demo") == 0
    assert envs.started[1][2][:3] == ["tests/proof", "--proof-package", "demo"]


@pytest.mark.parametrize(
    "args,said",
    [
        (["--set", "nightly"], "unknown set 'nightly'"),
        (["--set", "default", "--package", "other"], "the set default has no package 'other'"),
    ],
)
def test_a_wrong_set_or_package_is_refused(project, monkeypatch, tmp_path, capsys, args, said):
    envs = Envs(tmp_path, monkeypatch)
    assert cli.main(["--root", str(project.root), "prove", *args]) == 2
    assert said in capsys.readouterr().err and envs.started == []


def test_one_chain_at_most_and_a_set_named(project, capsys):
    for args in (["--set", "default", "--pristine", "--fixed"], []):
        with pytest.raises(SystemExit) as exc:
            cli.main(["--root", str(project.root), "prove", *args])
        assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["requirements", "guards"])
def test_the_helper_verbs_of_the_old_sessions_are_gone(verb, capsys):
    with pytest.raises(SystemExit):
        cli.main([verb, "--set", "default"])
    assert "invalid choice" in capsys.readouterr().err


def test_the_guards_of_a_draft_series_run(project, monkeypatch, tmp_path):
    """A new fix's guards run before its message is written (its series is a draft: the template `new` wrote), as
    its proofs do (test_draft.py)."""
    core = project.root / "overlay" / "demo" / "1.0.0" / "demo" / "core.py"
    core.write_bytes(core.read_bytes().replace(b"return a + b", b"return b + a"))
    assert cli.main(["--root", str(project.root), "new", "demo", "1.0.0", "add-swap"]) == 0
    envs = Envs(tmp_path, monkeypatch)
    assert prove(project, "--guards") == 0
    for *_, args, _ in envs.started:
        assert {"tests/guards/test_add_swap.py", "tests/guards/test_demo.py"} <= set(args), args


# --- the +fixed builds' environment at --fixed-env: made, reused and replaced only where the tool made it ----------


def made_by_proofenv(monkeypatch) -> None:
    """prove's environments made by proofenv itself (the temporary folder, the marker, the lock, the swap into
    place) with a stand-in installer (an environment is its site-packages folder; torch's install writes its
    metadata, of the version its stand-in source names) and runs that pass."""
    monkeypatch.setattr(proofenv, "_create", lambda env: proofenv._site(env).mkdir(parents=True))

    def install(env: Path, *args: str, on_base: bool = False, compile: bool = True) -> None:
        if any(arg.startswith("torch @ ") for arg in args):
            info = proofenv._site(env) / f"torch-{proofenv.torch_version()}.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {proofenv.torch_version()}\n")

    monkeypatch.setattr(proofenv, "_install", install)
    source = torchsource.Source("/nowhere", False, "a test")
    torch = lambda version, _links: torchsource.TorchWheel(version, "torch.whl", "file:///torch.whl", source)  # noqa: E731
    monkeypatch.setattr(torchsource, "wheel", torch)
    monkeypatch.setattr(proofenv, "run_in_group", lambda cmd, cwd, env, log, timeout: 0)


def _fixed_wheel(project, data: bytes) -> None:
    (project.root / "dist").mkdir(exist_ok=True)
    (project.root / "dist" / "demo-1.0.0+fixed-py3-none-any.whl").write_bytes(data)


def _held(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_fixed_env_never_replaces_a_folder_it_did_not_make(project, monkeypatch, tmp_path, capsys):
    """`prove --fixed-env DIR` moved an existing DIR aside and deleted it, and made the environment in its place
    (`--fixed-env .venv`, or a home folder, would have gone the same way). A folder without the marker of an
    environment this tool made (patchwheel-env.json) is refused before anything is made, as `--dist` refuses a
    folder without its build.json."""
    made_by_proofenv(monkeypatch)
    _fixed_wheel(project, b"build 1")
    mine = tmp_path / "mine"
    (mine / "src").mkdir(parents=True)
    (mine / "notes.txt").write_text("keep me\n")
    code = prove(project, "--fixed", "--fixed-env", str(mine))
    assert _held(mine) == ["notes.txt", "src"], "the folder was replaced by an environment"
    assert (mine / "notes.txt").read_text() == "keep me\n"
    assert code == 2
    assert capsys.readouterr().err == (
        f"error: --fixed-env {mine} exists and was not made by patchwheel (no patchwheel-env.json); it holds "
        "notes.txt, src/\n"
        "  fix: prove replaces the whole --fixed-env folder when the +fixed builds change: pass a new or empty "
        "folder (it is made when missing), or leave --fixed-env out to use the cache's, or move what this one holds "
        "elsewhere\n"
    )
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".mine")] == [], "a lock or a folder beside it"
    assert not (project.cache / "envs").exists(), "refused after an environment was made"


def test_fixed_env_makes_a_new_or_empty_folder_and_replaces_only_its_own(project, monkeypatch, tmp_path, capsys):
    """What the nox sessions do with .nox/.cache/fixed-<set>: the first one makes it, the next ones reuse it while
    dist/ holds the same wheels, and a new build replaces it. The folder an installer leaves (uv's or venv's
    layout, as in a real one) is the tool's; a file added to it is not, and stops the replacement."""
    made_by_proofenv(monkeypatch)
    _fixed_wheel(project, b"build 1")
    env = tmp_path / "nox" / ".cache" / "fixed-default"
    env.mkdir(parents=True)  # an empty folder is taken, as an empty --dist is
    assert prove(project, "--fixed", "--fixed-env", str(env)) == 0
    first = (env / proofenv.MARKER).read_text()
    for name in (".gitignore", ".lock", "CACHEDIR.TAG", "pyvenv.cfg", "patchwheel-excludes.txt"):
        (env / name).write_text("")
    for name in ("bin", "include", "share"):
        (env / name).mkdir()
    (env / "lib64").symlink_to("lib")
    inode = env.stat().st_ino
    assert prove(project, "--fixed", "--fixed-env", str(env)) == 0
    assert env.stat().st_ino == inode and (env / proofenv.MARKER).read_text() == first, "reused"
    _fixed_wheel(project, b"build 2")
    assert prove(project, "--fixed", "--fixed-env", str(env)) == 0
    assert env.stat().st_ino != inode and (env / proofenv.MARKER).read_text() != first, "replaced"
    assert _held(env.parent) == [".fixed-default.lock", "fixed-default"]
    (env / "notes.txt").write_text("mine\n")
    _fixed_wheel(project, b"build 3")
    capsys.readouterr()
    assert prove(project, "--fixed", "--fixed-env", str(env)) == 2
    assert capsys.readouterr().err == (
        f"error: --fixed-env {env} holds what no environment holds: notes.txt\n"
        "  fix: prove replaces the whole --fixed-env folder when the +fixed builds change: move them elsewhere, or "
        "pass another folder\n"
    )
    assert (env / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize(
    "make,said,hint",
    [
        (
            lambda p: p.write_text("x"),
            "--fixed-env {p} is a file, not a folder",
            "pass --fixed-env a folder of its own (it is made when missing)",
        ),
        (
            lambda p: (p.mkdir(), (p / proofenv.MARKER).write_text('{"torch": ')),
            "{p}/patchwheel-env.json is damaged: not an environment's marker (a JSON object naming its torch)",
            "if {p} is an environment patchwheel made, remove it (rm -rf {p}) and run again; if not, pass "
            "--fixed-env another folder",
        ),
        (
            lambda p: (p.mkdir(), (p / proofenv.MARKER).symlink_to("/etc/hostname")),
            "--fixed-env {p} exists and was not made by patchwheel (no patchwheel-env.json); it holds "
            "patchwheel-env.json",
            None,
        ),
    ],
    ids=["file", "damaged-marker", "linked-marker"],
)
def test_fixed_env_refuses_what_is_not_an_environment_folder(project, monkeypatch, tmp_path, capsys, make, said, hint):
    made_by_proofenv(monkeypatch)
    _fixed_wheel(project, b"build 1")
    mine = tmp_path / "mine"
    make(mine)
    before = mine.read_bytes() if mine.is_file() else _held(mine)
    assert prove(project, "--fixed", "--fixed-env", str(mine)) == 2
    error, fix = capsys.readouterr().err.splitlines()
    assert error == "error: " + said.format(p=mine)
    assert hint is None or fix == "  fix: " + hint.format(p=mine)
    assert (mine.read_bytes() if mine.is_file() else _held(mine)) == before


def test_fixed_env_is_not_one_of_the_cache_s_shared_environments(project, monkeypatch, tmp_path, capsys):
    """The cache's environments are every checkout's: `--fixed-env` at the base (torch's) would have replaced it by
    an environment that reads itself for torch."""
    made_by_proofenv(monkeypatch)
    _fixed_wheel(project, b"build 1")
    base = proofenv.base_env(project.cache)
    marker = (base / proofenv.MARKER).read_text()
    assert prove(project, "--fixed", "--fixed-env", str(base)) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"error: --fixed-env {base} is inside patchwheel's cache ({project.cache}): its environments are shared"
    )
    assert (base / proofenv.MARKER).read_text() == marker
