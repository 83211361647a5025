"""The proofs' rank harness (tests/proof/harness.py) on real gloo groups: what a rank may rely on.

These run real ranks forked from the harness's fork server, so they need torch: the tests session takes it from the
shared base environment (noxfile ``shared_torch``). The first test failed on the harness before torchrun's agent
store: rank 0 hosted the store and took it down when it left first.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

# The harness under test; PATCHWHEEL_CONTRACT_UNDER_TEST points at another copy of tests/proof (an older one).
CONTRACT = Path(os.environ.get("PATCHWHEEL_CONTRACT_UNDER_TEST") or Path(__file__).resolve().parents[1] / "proof")
sys.path.insert(0, str(CONTRACT))
from harness import RankFailed, RanksLost, run_ranks  # noqa: E402

# conftest's HANG (a backstop, not a guess), written out: the ranks import this module with tests/proof first on
# their path, where `conftest` is the proofs' own.
HANG = 600.0


def _wait_until_gone(pid: int) -> None:
    """Until ``pid`` (another rank, not this process's child) has exited: its pidfd becomes readable then. No
    deadline: run_ranks's own timeout ends a run whose rank 0 never leaves."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # already gone and reaped
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def _leave_or_use_the_store_late(rank, world_size):
    from torch.distributed.distributed_c10d import _get_default_store

    store = _get_default_store()
    if rank == 0:
        store.set("rank0-pid", str(os.getpid()))
        return "left"
    _wait_until_gone(int(store.get("rank0-pid")))  # rank 0 has returned, destroyed its group and exited
    store.set("late", "still here")
    return store.get("late").decode()


def test_rank_zero_may_leave_before_the_others():
    """Under torchrun a rank may finish first and exit, and the others still reach the store (the agent's). With
    the store on rank 0, rank 1 failed with ``DistNetworkError: Broken pipe``."""
    assert run_ranks(_leave_or_use_the_store_late, 2) == ["left", "still here"]


def _environment(rank, world_size):
    import torch.distributed as dist

    keys = ("PATCHWHEEL_HARNESS_PROBE", "PATCHWHEEL_HARNESS_GIVEN", "RANK", "WORLD_SIZE", "MASTER_ADDR")
    return {
        **{k: os.environ.get(k) for k in keys},
        "agent_store": os.environ.get("TORCHELASTIC_USE_AGENT_STORE"),
        "group": dist.is_initialized(),
    }


def test_a_rank_has_the_callers_environment_at_the_call_and_torchruns(monkeypatch):
    """The fork server started at an earlier call; a variable the test process sets since must still reach the
    ranks, as it would reach a freshly spawned interpreter."""
    run_ranks(_environment, 1)  # the fork server is running from here on
    monkeypatch.setenv("PATCHWHEEL_HARNESS_PROBE", "set after the server started")
    got = run_ranks(_environment, 2, env={"PATCHWHEEL_HARNESS_GIVEN": "given"}, init_group=False)
    for rank, seen in enumerate(got):
        assert seen == {
            "PATCHWHEEL_HARNESS_PROBE": "set after the server started",
            "PATCHWHEEL_HARNESS_GIVEN": "given",
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "agent_store": "True",
            "group": False,
        }


@pytest.mark.parametrize("name", ["OMP_NUM_THREADS", "HF_HUB_OFFLINE"])
def test_a_variable_read_at_import_by_the_preloaded_modules_is_refused(name):
    """torch and the other preloaded libraries are imported in the fork server before a rank starts, so an ``env``
    they read at import would be silently ignored: refused, naming it."""
    with pytest.raises(ValueError, match=rf"sets {name}, read when torch or a library of the fork server's PRELOAD"):
        run_ranks(_environment, 1, env={name: "1"})


LONG_TMPDIR_RUN = """
import sys
sys.path.insert(0, sys.argv[1])
import harness


def rank(rank, world_size):
    return rank


if __name__ == "__main__":
    print(harness.run_ranks(rank, 2))
"""


def test_a_temporary_folder_too_long_for_a_unix_socket(tmp_path):
    """nox gives each session TMPDIR=<checkout>/.nox/<session>/tmp; in a CI runner's deep checkout that is longer
    than a Unix socket path allows for the fork server's listener (``OSError: AF_UNIX path too long``)."""
    long = tmp_path / ("d" * (120 - len(str(tmp_path))))
    long.mkdir()
    script = tmp_path / "run.py"
    script.write_text(LONG_TMPDIR_RUN)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}  # the harness starts on import
    res = subprocess.run(
        [sys.executable, str(script), str(CONTRACT)],
        env={**env, "TMPDIR": str(long)},
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert res.returncode == 0 and res.stdout.strip() == "[0, 1]", res.stdout[-2000:] + res.stderr[-3000:]


def test_ranks_that_cannot_start_are_lost_not_an_error_of_the_code_under_test(monkeypatch):
    """A fork server that is gone refuses the connection: nothing ran, so nothing was observed."""
    import multiprocessing.context

    def refused(process_obj):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(multiprocessing.context.ForkServerProcess, "_Popen", staticmethod(refused))
    with pytest.raises(RanksLost, match="could not start the ranks: ConnectionRefusedError"):
        run_ranks(_environment, 2)


def _fail(rank, world_size):
    if rank == 1:
        raise KeyError("only rank 1")
    return "ok"


def test_a_rank_error_keeps_its_type_and_message():
    with pytest.raises(RankFailed) as caught:
        run_ranks(_fail, 2)
    assert (caught.value.rank, caught.value.exc_type, caught.value.exc_message) == (1, "KeyError", "'only rank 1'")


# The fork server imports the code under test once (rankpreload); here a stand-in named as the first of its
# LIBRARIES, which reads, sets and reports what it saw of the environment at import.
FAKE_LIBRARY = """
import json
import os

IMPORTED_BY = os.getpid()
READ = os.environ.get("PATCHWHEEL_FAKE_READ")
C_ONLY = os.environ.get("PATCHWHEEL_FAKE_C_ONLY")
os.environ["PATCHWHEEL_FAKE_WROTE"] = "set at import"
OWN = os.environ["PATCHWHEEL_FAKE_WROTE"]
"""

PRELOAD_RUN = """
import json
import json
import os
import sys

# As GNU readline sets COLUMNS and LINES (imported with pdb, as pytest does): in the C library's environment, which
# a new process inherits, not in os.environ, which is this process's and its ranks'.
os.putenv("PATCHWHEEL_FAKE_C_ONLY", "c only")
sys.path.insert(0, sys.argv[1])
import harness


def rank(rank, world_size):
    import os
    import sys

    import transformers

    return {
        "imported_in_the_server": transformers.IMPORTED_BY not in (os.getpid(), int(sys.argv[2])),
        "read": transformers.READ,
        "c_only": transformers.C_ONLY,
        "wrote": os.environ.get("PATCHWHEEL_FAKE_WROTE"),
    }


def refusal(**env):
    try:
        harness.run_ranks(rank, 1, env=env)
    except ValueError as exc:
        return str(exc)
    return None


if __name__ == "__main__":
    ranks = harness.run_ranks(rank, 2, env={"PATCHWHEEL_HARNESS_GIVEN": "given"})
    print(json.dumps({"ranks": ranks, "refused": refusal(PATCHWHEEL_FAKE_READ="given too late")}))
"""


def test_the_code_under_test_is_imported_in_the_server_as_each_rank_would_import_it(tmp_path):
    """Each rank finds transformers imported in the fork server, as it would have imported it itself: with the test
    process's environment (not a variable C code set beneath os.environ), and what the import set set again. A
    variable it read that a run's ``env`` changes is refused, naming it and not its value."""
    library = tmp_path / "site" / "transformers"
    library.mkdir(parents=True)
    (library / "__init__.py").write_text(FAKE_LIBRARY)
    script = tmp_path / "run.py"
    script.write_text(PRELOAD_RUN)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}  # the harness starts on import
    env = {**env, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), *filter(None, [env.get("PYTHONPATH")])])}
    res = subprocess.run(
        [sys.executable, str(script), str(CONTRACT), str(os.getpid())],
        env={**env, "PATCHWHEEL_FAKE_READ": "at the start"},
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    seen = {"imported_in_the_server": True, "read": "at the start", "c_only": None, "wrote": "set at import"}
    assert got["ranks"] == [seen, seen]
    assert got["refused"] == (
        "rank 0 refused to run: transformers read PATCHWHEEL_FAKE_READ (another value here) at import in the fork "
        "server, before this rank's environment was set; set it in the environment of the test process before it "
        "imports the harness, not in run_ranks(env=...) or later"
    )


def _record(tmp_path, monkeypatch, **modules: str):
    """rankpreload's record of importing ``modules`` (name -> source), made in tmp_path."""
    import rankpreload

    for name, source in modules.items():
        (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in modules:
        monkeypatch.delitem(sys.modules, name, raising=False)
    return rankpreload, rankpreload.record_imports(tuple(modules))


def test_a_library_that_reads_the_whole_environment_at_import_is_refused(tmp_path, monkeypatch):
    """Iterating over os.environ reads every variable, torchrun's too: no rank could match the server's."""
    rankpreload, record = _record(tmp_path, monkeypatch, pw_fake_whole="import os\nKEYS = sorted(os.environ)\n")
    assert record.imported == ["pw_fake_whole"] and record.whole == [f"pw_fake_whole: {tmp_path}/pw_fake_whole.py:2"]
    assert rankpreload.differences(dict(os.environ), record).startswith(
        f"pw_fake_whole: {tmp_path}/pw_fake_whole.py:2 read the whole environment while importing in the fork server"
    )


def test_what_a_library_reads_back_after_setting_it_is_its_own(tmp_path, monkeypatch):
    """A default a library sets and then reads is not the environment's: a rank without it is not refused."""
    monkeypatch.delenv("PATCHWHEEL_FAKE_DEFAULT", raising=False)
    source = "import os\nos.environ['PATCHWHEEL_FAKE_DEFAULT'] = '1'\nVALUE = os.environ['PATCHWHEEL_FAKE_DEFAULT']\n"
    rankpreload, record = _record(tmp_path, monkeypatch, pw_fake_default=source)
    assert (record.read, record.wrote) == ({}, {"PATCHWHEEL_FAKE_DEFAULT": "1"})
    rank_env: dict[str, str] = {}
    assert rankpreload.differences(rank_env, record) == ""
    rankpreload.redo_writes(rank_env, record)
    assert rank_env == {"PATCHWHEEL_FAKE_DEFAULT": "1"}


def test_a_refusal_names_the_variable_and_never_its_value(tmp_path, monkeypatch):
    monkeypatch.setenv("PATCHWHEEL_FAKE_TOKEN", "hf_secret_at_the_start")
    source = "import os\nTOKEN = os.environ.get('PATCHWHEEL_FAKE_TOKEN')\nraise RuntimeError('broken')\n"
    rankpreload, record = _record(tmp_path, monkeypatch, pw_fake_token=source, pw_fake_missing_dep="import nope\n")
    assert record.imported == []  # each rank imports them itself, and meets their errors
    said = rankpreload.differences({"PATCHWHEEL_FAKE_TOKEN": "hf_secret_in_the_rank"}, record)
    assert "PATCHWHEEL_FAKE_TOKEN (another value here)" in said and "hf_secret" not in said
