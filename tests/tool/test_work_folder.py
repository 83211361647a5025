"""The work folder a conflict leaves (`.rebase/<pkg>-<version>/`), as `derive ... --continue/--abort` and
`rebase ... --continue` read it: nothing in it is trusted as the tool's own state (issue 45, items 3 and 4). Its
state files are checked field by field against the command's own arguments (the package and version typed) and
their types; `--abort` works on any folder derive made, whatever its state file holds; a socket or a named pipe in
it is never opened (git's fsmonitor socket inside `repo/.git/` is left out of the copy, any other is refused by
name). Each test failed before its fix: a file outside the project deleted or written, a traceback, a hang."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from conftest import HANG, Prover, proofs, run_cli, tree
from patchwheel import cli, gitops
from patchwheel.maint import rebase
from patchwheel.maint.carry import workfolder
from patchwheel.maint.follow import derive
from test_derive import CONFLICTING, kept_by_proof
from test_derive_safety import _spawn

RESOLVED = CONFLICTING.replace(b'"hi " + name', b'"hi, " + name')


_run = run_cli


def _resolve(work: Path) -> None:
    repo = work / "repo"
    (repo / "src/demo/core.py").write_bytes(RESOLVED)
    gitops.git(repo, "add", "src/demo/core.py")


def derive_waiting(demo, monkeypatch, tmp_path) -> Path:
    """A derive of demo 0.9.0 stopped at its conflict, resolved by hand: the work folder, ready for --continue."""
    kept_by_proof(demo)
    demo.add_release("0.9.0", CONFLICTING)
    proofs(monkeypatch, tmp_path)
    monkeypatch.setattr("patchwheel.maint.proving.setruns.prove_set", Prover())
    assert derive.derive(demo.load(), "demo==0.9.0", Prover(), log=lambda m: None).stop is not None
    work = demo.root / ".rebase" / "demo-0.9.0"
    _resolve(work)
    return work


def rebase_waiting(demo) -> Path:
    """A rebase of demo onto 1.1.0 stopped at its conflict, resolved by hand."""
    demo.add_release("1.1.0", CONFLICTING)
    assert rebase.start(demo.load(), "demo", "1.1.0", behaviour=False, log=lambda m: None) is False
    work = demo.root / ".rebase" / "demo-1.1.0"
    _resolve(work)
    return work


CONTINUE = {
    "derive": ("derive", "demo==0.9.0", "--continue"),
    "rebase": ("rebase", "demo", "1.1.0", "--continue"),
}


def waiting_for(command: str, demo, monkeypatch, tmp_path) -> Path:
    return derive_waiting(demo, monkeypatch, tmp_path) if command == "derive" else rebase_waiting(demo)


def edit_json(file: Path, change: Callable[[dict], object]) -> None:
    state = json.loads(file.read_text())
    new = change(state)
    file.write_text(json.dumps(state if new is None else new))


def everything(folder: Path) -> dict[str, str]:
    """Every entry under ``folder``: files with their bytes, links with their targets, folders: what a command
    may not change where it must not write."""
    out: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = p.relative_to(folder).as_posix()
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            elif p.is_file():
                out[rel] = p.read_bytes().hex()
            else:
                out[rel] = "special"
    return out


def _clear(err: str) -> None:
    """One `error:` line and its `fix:` line, no traceback."""
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) >= 2 and lines[0].startswith("error: ") and lines[-1].startswith("  fix: "), err


# --- item 3: the state files, checked against the command's own arguments ------------------------------------------


@pytest.mark.parametrize("command", ["derive", "rebase"])
def test_a_package_in_the_state_that_climbs_out_writes_and_deletes_nothing_there(
    demo_project, monkeypatch, tmp_path, scratch_temp, command
):
    """state.json's "package" named the folder the new line is written to: `../../victim` made --continue remove
    `victim/.<version>.partial/` and write the series and the patch into `victim/<version>/` (rebase writes the
    project itself, derive a scratch copy in the temporary folder, one level deeper), then rewrite
    `victim/pins.toml`. The package is the one typed: a state naming another is refused."""
    work = waiting_for(command, demo_project, monkeypatch, tmp_path)
    version = "0.9.0" if command == "derive" else "1.1.0"
    # rebase: <project>/patches/../../victim is tmp_path/victim; derive: <scratch>/patches/../../../victim is
    # $TMPDIR/victim (the scratch copy is $TMPDIR/patchwheel-follow-*/project).
    victim = (scratch_temp if command == "derive" else tmp_path) / "victim"
    climb = "../../../victim" if command == "derive" else "../../victim"
    (victim / f".{version}.partial").mkdir(parents=True)
    (victim / f".{version}.partial" / "thesis.tex").write_text("a user's file\n")
    (victim / "pins.toml").write_text('package = "victim"\n')
    before_victim, before_work, before = everything(victim), everything(work), tree(demo_project.root)
    edit_json(work / "state.json", lambda s: s.update(package=climb))
    rc, out, err = _run("--root", str(demo_project.root), *CONTINUE[command])
    assert everything(victim) == before_victim, "--continue wrote or deleted outside the project"
    assert rc == 2, (rc, out, err)
    _clear(err)
    assert repr(climb) in err and "demo" in err, err
    assert tree(demo_project.root) == before
    assert {k: v for k, v in everything(work).items() if k != "state.json"} == {
        k: v for k, v in before_work.items() if k != "state.json"
    }


@pytest.mark.parametrize(
    "command,file,change,message",
    [
        ("derive", workfolder.STATE, lambda s: s.update(verdicts=[1]), "verdicts"),
        ("derive", workfolder.STATE, lambda s: s.update(others={"a": 1}), "others"),
        ("derive", workfolder.STATE, lambda s: s.update(set=7), "set"),
        ("derive", workfolder.STATE, lambda s: s.update(source_series=[]), "source_series"),
        ("derive", workfolder.STATE, lambda s: s.update(source=None), "source"),
        ("derive", workfolder.STATE, lambda s: s.update(**{"with": ["transformers==4.57.6"]}), '"with"'),
        ("derive", workfolder.STATE, lambda s: s.update(**{"with": {"demo": 1}}), '"with"'),
        # written at the stop (a KeyError here otherwise), and checked again against the project on --continue
        ("derive", workfolder.STATE, lambda s: s["with"].update(other="1.0.0"), "other is not a package"),
        ("derive", "state.json", lambda s: {}, "state.json"),
        ("derive", "state.json", lambda s: s.update(to="0.8.0"), "'0.8.0'"),
        ("derive", "state.json", lambda s: s.update(by="rebase"), "rebase"),
        ("derive", "state.json", lambda s: s.update(**{"from": "2.0.0"}), "'2.0.0'"),
        ("rebase", "state.json", lambda s: {}, "state.json"),
        ("rebase", "state.json", lambda s: s.update(todo=[1]), "todo"),
        ("rebase", "state.json", lambda s: s.update(done=[]), "done"),
        ("rebase", "state.json", lambda s: s.update(dropped={"0002-x.patch": 3}), "dropped"),
        ("derive", "state.json", lambda s: s.update(adopted={"0001-greet-comma.patch": "../2"}), "adopted"),
        ("derive", "state.json", lambda s: s.update(adopted={"0009-not-there.patch": "2.0.0"}), "adopted"),
        ("rebase", "state.json", lambda s: s.update(wheel="demo.whl"), "wheel"),
        ("rebase", "state.json", lambda s: s.update(sdist=["demo-1.1.0.tar.gz", "00"]), "sdist"),
        ("rebase", "state.json", lambda s: s.update(onto="--output=/tmp/x"), "onto"),
        ("rebase", "state.json", lambda s: s.update(to="9.9.9"), "'9.9.9'"),
        ("rebase", "state.json", lambda s: s.update(by="derive"), "derive"),
    ],
)
def test_a_state_field_of_the_wrong_kind_is_one_clear_error(
    demo_project, monkeypatch, tmp_path, command, file, change, message
):
    """`verdicts: [1]` was `TypeError: ... argument after ** must be a mapping`, a state.json of `{}` a `KeyError`;
    a rebase's state naming another release, or the other command, was carried on as if it were this one's."""
    work = waiting_for(command, demo_project, monkeypatch, tmp_path)
    edit_json(work / file, change)
    before, before_work = tree(demo_project.root), everything(work)
    rc, out, err = _run("--root", str(demo_project.root), *CONTINUE[command])
    assert rc == 2, (rc, out, err)
    _clear(err)
    assert message in err, err
    assert tree(demo_project.root) == before and everything(work) == before_work


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", "", '{"source": 1}', "[" * 100_000])
def test_abort_removes_the_folder_whatever_its_state_file_holds(demo_project, monkeypatch, tmp_path, content):
    """A derive.json that was not JSON made --abort refuse, while the refusal's `fix:` line said to run --abort
    (100000 nested brackets: a `RecursionError` traceback from --continue)."""
    work = derive_waiting(demo_project, monkeypatch, tmp_path)
    (work / workfolder.STATE).write_text(content)
    rc, out, err = _run("--root", str(demo_project.root), "derive", "demo==0.9.0", "--continue")
    assert rc == 2 and "--abort" in err, (rc, out, err)
    before = tree(demo_project.root)
    rc, out, err = _run("--root", str(demo_project.root), "derive", "demo==0.9.0", "--abort")
    assert rc == 0, (rc, out, err)
    assert not work.exists() and not work.parent.exists() and tree(demo_project.root) == before


def test_abort_still_leaves_a_folder_derive_did_not_make(demo_project, capsys):
    """--abort works on the tool's own folder only: one without derive.json (a rebase's, a maintainer's notes) is
    left, and so is one whose derive.json is not a regular file (a folder here; a named pipe below)."""
    rebase_waiting(demo_project)
    mine = demo_project.root / ".rebase" / "demo-0.9.0"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    (mine / workfolder.STATE).mkdir()
    for spec in ("demo==1.1.0", "demo==0.9.0"):
        assert cli.main(["--root", str(demo_project.root), "derive", spec, "--abort"]) == 2
    assert (demo_project.root / ".rebase" / "demo-1.1.0" / "state.json").is_file()
    assert sorted(p.name for p in mine.iterdir()) == [workfolder.STATE, "notes.txt"]


def test_rebase_abort_leaves_a_folder_rebase_did_not_make(demo_project, monkeypatch, tmp_path):
    """rebase --abort (issue 46) works on a rebase's folder only: a derive's is named and left, and so is one with
    no state.json (a maintainer's notes) or whose state.json is not a regular file."""
    work = derive_waiting(demo_project, monkeypatch, tmp_path)
    before = everything(work)
    assert cli.main(["--root", str(demo_project.root), "rebase", "demo", "0.9.0", "--abort"]) == 2
    assert everything(work) == before
    mine = demo_project.root / ".rebase" / "demo-1.1.0"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    assert cli.main(["--root", str(demo_project.root), "rebase", "demo", "1.1.0", "--abort"]) == 2
    (mine / "state.json").mkdir()
    assert cli.main(["--root", str(demo_project.root), "rebase", "demo", "1.1.0", "--abort"]) == 2
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt", "state.json"]


def test_a_source_line_that_no_longer_exists_is_refused(demo_project, monkeypatch, tmp_path):
    """derive.json naming a line the project no longer has skipped the "source changed" check: --continue wrote a
    line "derived from" a series it could not compare with anything."""
    work = derive_waiting(demo_project, monkeypatch, tmp_path)
    edit_json(work / workfolder.STATE, lambda s: s.update(source="0.5.0"))
    edit_json(work / "state.json", lambda s: s.update({"from": "0.5.0"}))  # the two agree
    before, before_work = tree(demo_project.root), everything(work)
    rc, out, err = _run("--root", str(demo_project.root), *CONTINUE["derive"])
    assert rc == 2, (rc, out, err)
    _clear(err)
    assert "demo/0.5.0" in err and "--abort" in err, err
    assert tree(demo_project.root) == before and everything(work) == before_work


def test_a_state_file_that_is_a_link_is_not_read_through(demo_project, monkeypatch, tmp_path):
    """state.json as a link out of the folder: read, and at the next conflict written, through the link."""
    work = rebase_waiting(demo_project)
    outside = tmp_path / "outside.json"
    outside.write_text((work / "state.json").read_text())
    (work / "state.json").unlink()
    (work / "state.json").symlink_to(outside)
    before = outside.read_text()
    rc, out, err = _run("--root", str(demo_project.root), *CONTINUE["rebase"])
    assert rc == 2, (rc, out, err)
    _clear(err)
    assert "state.json is a link" in err and outside.read_text() == before


# --- item 4: no special file is opened ------------------------------------------------------------------------


@contextlib.contextmanager
def unix_socket(path: Path) -> Iterator[None]:
    """A listening Unix socket at ``path``, as git's fsmonitor daemon makes (bound by a relative name: a socket's
    path is limited to 107 bytes, pytest's folders are longer)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cwd = os.getcwd()
    try:
        os.chdir(path.parent)
        sock.bind(path.name)
        sock.listen(1)
        os.chdir(cwd)
        yield
    finally:
        os.chdir(cwd)
        sock.close()


def test_git_s_fsmonitor_socket_is_left_out_of_the_copy(demo_project, monkeypatch, tmp_path):
    """A maintainer with `core.fsmonitor=true` resolves the conflict: git's daemon leaves
    `.git/fsmonitor--daemon.ipc`, and --continue ended in `OSError: [Errno 6] No such device or address`."""
    work = derive_waiting(demo_project, monkeypatch, tmp_path)
    with unix_socket(work / "repo" / ".git" / "fsmonitor--daemon.ipc"):
        rc, out, err = _run("--root", str(demo_project.root), *CONTINUE["derive"])
    assert rc == 0, (rc, out, err)
    assert (demo_project.root / "patches" / "demo" / "0.9.0" / "series").is_file() and not work.exists()


def test_a_socket_in_the_work_tree_is_refused_by_name(demo_project, monkeypatch, tmp_path):
    work = derive_waiting(demo_project, monkeypatch, tmp_path)
    before = tree(demo_project.root)
    with unix_socket(work / "repo" / "src" / "agent.sock"):
        rc, out, err = _run("--root", str(demo_project.root), *CONTINUE["derive"])
        assert (work / "repo" / "src" / "agent.sock").exists()
    assert rc == 2, (rc, out, err)
    _clear(err)
    assert "repo/src/agent.sock is a socket" in err, err
    assert tree(demo_project.root) == before


def rebase_continue(demo_project) -> subprocess.Popen:
    """``rebase ... --continue`` of the demo project in a child process, its output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "patchwheel", "--root", str(demo_project.root), *CONTINUE["rebase"]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def a_pipe(pipe: Path, tmp_path: Path) -> Path:
    """Make ``pipe`` a named pipe; returns a second name of it outside the work folder (which a command may
    remove), for :func:`holding_a_pipe`."""
    pipe.unlink(missing_ok=True)
    os.mkfifo(pipe)
    release = tmp_path / "the-pipe"
    os.link(pipe, release)
    return release


def holding_a_pipe(release: Path, start) -> tuple[list[str], subprocess.Popen, str, str]:
    """Run ``start()`` (a child process) while this test holds the other end of the named pipe ``release`` (see
    :func:`a_pipe`) open for writing, which returns only once a reader opened it: if the command opens the pipe, the
    test learns it (and the command is not left hanging); once the command has ended without opening it, the test
    releases its own writer itself. Returns who opened the pipe ("the command" or "the test"), the process, its
    stdout and stderr."""
    ended = threading.Event()
    opened_by: list[str] = []

    def writer() -> None:
        fd = os.open(release, os.O_WRONLY)  # returns when a reader opens the pipe (by either name)
        opened_by.append("the test" if ended.is_set() else "the command")
        os.close(fd)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    proc = start()
    out, err = proc.communicate(timeout=HANG)
    ended.set()
    reader = os.open(release, os.O_RDONLY | os.O_NONBLOCK)  # the test's own reader: the writer returns, now or later
    thread.join(timeout=HANG)
    os.close(reader)
    return opened_by, proc, out, err


@pytest.mark.parametrize(
    "command,where",
    [
        ("derive", "repo/src/demo/pipe"),  # the maintainer's work tree
        ("derive", "repo/.git/pipe"),  # inside git's folder: left out, as git's socket is
        ("derive", workfolder.STATE),
        ("derive", "state.json"),
        ("abort", workfolder.STATE),  # not derive's state: the folder is not derive's to remove
        ("rebase", "state.json"),
    ],
)
def test_a_named_pipe_in_the_work_folder_is_never_opened(
    demo_project, monkeypatch, tmp_path, scratch_temp, command, where
):
    """A named pipe in the work folder hung --continue: it read the pipe, and a pipe's reader waits for a writer.
    The command runs in a child process; this test holds the pipe's other end open for writing, which returns only
    once a reader opened it: if the command opens the pipe, the test learns it (and the command is not left
    hanging); once the command has ended without opening it, the test releases its own writer itself (through a
    second name of the pipe outside the work folder, which the command may have removed)."""
    work = waiting_for("rebase" if command == "rebase" else "derive", demo_project, monkeypatch, tmp_path)
    pipe = work / where
    release = a_pipe(pipe, tmp_path)
    before = tree(demo_project.root)
    if command != "rebase":
        argv = ("demo==0.9.0", "--abort" if command == "abort" else "--continue")
        start = lambda: _spawn(demo_project, tmp_path, "", *argv)[0]  # noqa: E731
    else:
        start = lambda: rebase_continue(demo_project)  # noqa: E731
    opened_by, proc, out, err = holding_a_pipe(release, start)
    assert opened_by == ["the test"], f"the command opened the named pipe {where} (alone, it would hang): {err}"
    if where == "repo/.git/pipe":
        assert proc.returncode == 0, (proc.returncode, out, err)
        return
    assert proc.returncode == 2, (proc.returncode, out, err)
    _clear(err)
    assert f"{where} is a named pipe" in err, err
    assert tree(demo_project.root) == before and stat.S_ISFIFO(pipe.lstat().st_mode)


def test_a_work_repository_s_fsmonitor_setting_runs_nothing(demo_project, tmp_path):
    """The work repository's own git config is the work folder's too: `core.fsmonitor` set there to a command had
    --continue run it (git runs it as a hook whenever it refreshes the index); set to `true`, git would start its
    daemon, whose socket is the one above."""
    work = rebase_waiting(demo_project)
    ran, hook = tmp_path / "ran", tmp_path / "hook.sh"
    hook.write_text(f'#!/bin/sh\necho "$@" >> "{ran}"\nexit 1\n')
    hook.chmod(0o755)
    gitops.git(work / "repo", "config", "core.fsmonitor", str(hook))
    rc, out, err = _run("--root", str(demo_project.root), *CONTINUE["rebase"])
    assert rc == 0, (rc, out, err)
    assert not ran.exists(), f"git ran the work repository's fsmonitor hook: {ran.read_text()!r}"


# --- generated: any JSON value in any field -------------------------------------------------------------------

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
VICTIM = "@victim@"  # replaced by the absolute path of a folder outside the project
HOSTILE = st.sampled_from(
    [VICTIM, "../../victim", "../../../victim", "demo", "0.9.0", "1.1.0", "1.0.0", "", ".", "..", "-x", "a\nb"]
    + ["derive", "rebase", "latest", "0" * 40, "source/../../x", "0001-greet-comma.patch"]
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12) | HOSTILE,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8) | HOSTILE, inner, max_size=3),
    max_leaves=6,
)
#: Where a value goes: a field, or a field's element (a path of keys and indexes).
FIELDS = {
    "state.json": [
        ("package",),
        ("from",),
        ("to",),
        ("by",),
        ("onto",),
        ("wheel",),
        ("wheel", 0),
        ("wheel", 1),
        ("sdist",),
        ("todo",),
        ("todo", 0),
        ("todo", 0, 0),
        ("todo", 0, 1),
        ("todo", 0, 2),
        ("done",),
        ("dropped",),
        ("adopted",),
        ("extra",),
        (),
    ],
    workfolder.STATE: [
        ("source",),
        ("set",),
        ("verdicts",),
        ("verdicts", 0),
        ("verdicts", 0, "decision"),
        ("others",),
        ("source_series",),
        ("source_series", "series"),
        ("with",),
        ("extra",),
        (),
    ],
}


def _put(state, where: tuple, value):
    if not where:
        return value
    *parents, last = where
    holder = state
    for key in parents:
        holder = holder[key]
    holder[last] = value
    return state


def _victim(value):
    if isinstance(value, str):
        return value.replace(VICTIM, os.environ["VICTIM"])
    if isinstance(value, list):
        return [_victim(v) for v in value]
    if isinstance(value, dict):
        return {_victim(k): _victim(v) for k, v in value.items()}
    return value


@pytest.fixture
def templates(demo_project, monkeypatch, tmp_path) -> dict[str, Path]:
    """A project waiting at a resolved conflict, per command: each example works on a fresh copy."""
    derive_waiting(demo_project, monkeypatch, tmp_path)
    rebase_waiting(demo_project)  # the same project: both folders wait side by side
    return {"project": demo_project.root}


@SETTINGS
@given(command=st.sampled_from(["derive", "rebase"]), data=st.data())
def test_any_value_in_any_field_is_a_clear_error_or_a_success(templates, scratch_temp, command, data):
    """Whatever a state file holds, --continue either goes through (the value happened to be valid) or stops with
    one clear error, the project and the work folder as they were; nothing outside the project is touched."""
    file = data.draw(st.sampled_from(["state.json", workfolder.STATE] if command == "derive" else ["state.json"]))
    where = data.draw(st.sampled_from(FIELDS[file]))
    value = data.draw(JSON)
    note(f"{command}: {file}{list(where)} = {value!r}")
    with tempfile.TemporaryDirectory(prefix="work-folder-") as tmp:
        root, victim = Path(tmp) / "project", Path(tmp) / "victim"
        shutil.copytree(templates["project"], root, symlinks=True)
        (victim / ".0.9.0.partial").mkdir(parents=True)
        (victim / ".1.1.0.partial").mkdir()
        (victim / "pins.toml").write_text('package = "victim"\n')
        os.environ["VICTIM"] = str(victim)
        work = root / ".rebase" / ("demo-0.9.0" if command == "derive" else "demo-1.1.0")
        try:
            edit_json(work / file, lambda s: _put(s, where, _victim(value)))
        except (KeyError, IndexError, TypeError):
            return  # the field holds no such element
        outside = {p.name for p in scratch_temp.iterdir()}
        before_victim, before_all = everything(victim), everything(root)
        rc, out, err = _run("--root", str(root), *CONTINUE[command])
        note(f"rc={rc}\nstdout: {out}\nstderr: {err}")
        event(f"{command}: exit status {rc}")
        assert "Traceback" not in out + err
        assert everything(victim) == before_victim, "written or deleted outside the project"
        assert {p.name for p in scratch_temp.iterdir()} == outside
        if rc == 0:
            version = "0.9.0" if command == "derive" else "1.1.0"
            assert (root / "patches" / "demo" / version / "series").is_file() and not work.exists()
            return
        assert rc == 2, (rc, out, err)
        _clear(err)
        assert everything(root) == before_all, "a refused --continue changed the project or its work folder"
