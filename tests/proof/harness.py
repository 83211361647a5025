"""Run a function on N real processes joined in a gloo process group on 127.0.0.1.

The ranks start as torchrun starts them: the parent (torchrun's agent) owns the TCP store on 127.0.0.1 and each
rank gets torchrun's environment with ``TORCHELASTIC_USE_AGENT_STORE=True``, so every rank, rank 0 included, is
a client of that store and may exit before the others without taking the store with it. Each rank then joins
``init_process_group("gloo", tcp://127.0.0.1:<store port>)`` (unless ``init_group=False``: the code under test
makes the group), runs ``fn(rank, world_size, *args)`` and sends back its result or its exception: type name,
message, the source files its traceback passed through, and the traceback text. The proof contract (conftest)
judges the type and the message and checks the files for the code under test; the traceback text is for people
and never takes part in a verdict.

Each rank is a new process forked from multiprocessing's fork server, which the first run of a test process starts
(every guard run imports this module, and some run no rank), with the environment the process had when it imported
this module, and which imports torch and the libraries around it (PRELOAD) and holds none of the test process's
state. Last, it imports the code under test (rankpreload: transformers' and accelerate's common modules), recording
every variable of the environment that import reads; a rank, once its environment is set, refuses to run where one
of those differs from the server's, since its own import would have gone otherwise (the rest of the code under test
it imports itself, after its environment is set, as in a fresh interpreter). torch starts no thread pool at import;
numpy's OpenBLAS may, and it stops and restarts its threads around a fork (pthread_atfork), so forking from the
server is safe. The rank's environment is the caller's at the call (as a spawned interpreter's would be) plus
torchrun's. Every run is bounded in time; ranks still alive at the end are killed, so no process is left behind. A
rank that dies without reporting, or does not report in time, raises :class:`RanksLost`: nothing was observed.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import pickle
import queue
import sys
import tempfile
import time
import traceback

from proofkit import CouldNotObserve


class RankFailed(Exception):
    """A rank raised. ``exc_type``/``exc_message`` are the rank's exception, ``files`` its traceback's files."""

    def __init__(self, rank: int, exc_type: str, exc_message: str, files: list[str], tb: str) -> None:
        super().__init__(f"rank {rank} raised {exc_type}: {exc_message}\n--- rank {rank} traceback ---\n{tb}")
        self.rank, self.exc_type, self.exc_message, self.files = rank, exc_type, exc_message, files


class RanksLost(CouldNotObserve):
    """Ranks died or hung without reporting a result or an exception."""


# Modules the fork server imports once, before it forks ranks: torch, the parts of it that transformers and
# accelerate import (with numpy and sympy), and their other dependencies that are not under test; pytest, which every
# test module imports (a rank imports the test module of its function when it unpickles it, before its environment is
# set: 0.07 s a rank, a sixth of the guards' CPU); then the code under test's common modules (rankpreload, which
# records what their import reads from the environment, for each rank to check). A module missing from an environment
# is skipped. The modules before rankpreload read some variables at import (IMPORT_TIME_ENV), which a run's ``env``
# therefore may not set: the server would not see them. (Nor does it see such a variable the test process sets after
# the server started: no proof does.)
PRELOAD = [
    "torch",
    "torch._dynamo",
    "torch._functorch.aot_autograd",  # torch.compile's, which accelerate's prepare reaches in a rank
    "torch.distributed.tensor",
    "torch.distributed.tensor.experimental",
    "torch.distributed.fsdp",
    "huggingface_hub",
    "safetensors.torch",
    "tokenizers",
    "regex",
    "yaml",
    "tqdm",
    "jinja2",
    "psutil",
    "fsspec",  # reads every FSSPEC_* variable at import (it iterates over the environment), as tqdm does TQDM_*
    "pytest",  # reads no variable at import
    "rankpreload",
]
IMPORT_TIME_ENV = (
    "HOME",
    "XDG_",
    "TORCH",
    "PYTORCH",
    "OMP_",
    "MKL_",
    "KMP_",
    "OPENBLAS",
    "NPY_",
    "SYMPY",
    "HF_",
    "HUGGINGFACE",
    "TOKENIZERS",
    "TQDM",
    "FSSPEC",
)


def _context(env: dict[str, str]):
    late = sorted(k for k in env if k.upper().startswith(IMPORT_TIME_ENV))
    if late:
        raise ValueError(
            f"run_ranks(env=...) sets {', '.join(late)}, read when torch or a library of the fork server's PRELOAD "
            "is imported, before the rank starts; set it in the environment of the test process instead"
        )
    _short_socket_folder()
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


#: multiprocessing keeps the fork server's Unix socket at <its folder>/listener-XXXXXXXX, its folder being
#: <temporary folder>/pymp-XXXXXXXX, and a socket path has at most 107 bytes.
SOCKET_FOLDER_ROOM = 70


def _short_socket_folder() -> None:
    """Where the temporary folder's path is too long for the socket (nox's per-session TMPDIR in a deep checkout,
    such as a CI runner's /home/runner/work/<repo>/<repo>), multiprocessing's folder is made under /tmp instead;
    it keeps the first folder it makes for the life of the process."""
    from multiprocessing import util

    if len(tempfile.gettempdir()) <= SOCKET_FOLDER_ROOM or not os.path.isdir("/tmp"):
        return
    saved, tempfile.tempdir = tempfile.tempdir, "/tmp"
    try:
        util.get_temp_dir()
    finally:
        tempfile.tempdir = saved


#: ``os.environ`` when the test process imported this module: the fork server's, whenever its first run starts it (a
#: test that sets a variable before that run changes its ranks' environment, not the server's).
SERVER_ENVIRON = dict(os.environb)


def _ensure_server() -> None:
    """The fork server running, started with :data:`SERVER_ENVIRON`, and where it finds rankpreload."""
    from multiprocessing import forkserver

    here = os.path.dirname(os.path.abspath(__file__))
    # Python 3.11's server does not take this process's sys.path (it is given it, and drops it): this folder goes
    # first on its PYTHONPATH.
    given = SERVER_ENVIRON.get(b"PYTHONPATH")
    path = {b"PYTHONPATH": os.pathsep.encode().join([os.fsencode(here), *filter(None, [given])])}
    with _c_environment({**SERVER_ENVIRON, **path}):
        forkserver.ensure_running()


@contextlib.contextmanager
def _c_environment(wanted: dict[bytes, bytes]):
    """The C library's environment, which a new process inherits, equal to ``wanted`` while inside, and as it was
    after. It differs from ``os.environ`` where C code sets a variable: GNU readline (imported with pdb, as pytest
    does) sets COLUMNS and LINES there, and the preloaded libraries read them at import."""
    saved = _c_environ()
    for key in saved.keys() - wanted.keys():
        os.unsetenv(key)
    for key, value in wanted.items():
        if saved.get(key) != value:
            os.putenv(key, value)
    try:
        yield
    finally:
        for key in wanted.keys() - saved.keys():
            os.unsetenv(key)
        for key, value in saved.items():
            if wanted.get(key) != value:
                os.putenv(key, value)


def _c_environ() -> dict[bytes, bytes]:
    """The C library's ``environ``, read as it is now (``os.environ`` is a copy made when Python started)."""
    entries = ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
    found: dict[bytes, bytes] = {}
    i = 0
    while (entry := entries[i]) is not None:
        key, _, value = entry.partition(b"=")
        found[key] = value
        i += 1
    return found


def _agent_store(world_size: int):
    """torchrun's agent store on 127.0.0.1; port 0 lets the OS pick a free port, so no other process can take it
    in between. Without torch (the proof contract's own tests) there is no group to join: a placeholder port."""
    try:
        from torch.distributed import TCPStore
    except ImportError:
        return _NoStore()
    return TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False)


class _NoStore:
    port = 0


def _child(fn, rank, world_size, port, args, env, results, init_group):
    os.environ.clear()
    os.environ.update(env)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        TORCHELASTIC_USE_AGENT_STORE="True",
    )
    preloaded = sys.modules.get("rankpreload")  # absent where the rank is not forked from the server
    if preloaded is not None:
        refused = preloaded.differences(os.environ, preloaded.RECORD)
        if refused:
            results.put((rank, "refused", refused))
            return
        preloaded.redo_writes(os.environ, preloaded.RECORD)
    try:
        if init_group:
            import torch.distributed as dist

            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
            # gloo's init has no barrier: a rank whose code returns at once destroys the group while another rank is
            # still connecting, and that rank's init fails ("Connection closed by peer"; seen under a loaded suite).
            dist.barrier()
        try:
            # Plain pickle copies tensors by value; the queue's own pickler would pass shared-memory file
            # descriptors, which die with this process.
            results.put((rank, "ok", pickle.dumps(fn(rank, world_size, *args))))
        finally:
            dist = sys.modules.get("torch.distributed")  # the code under test may have made a group itself
            if dist is not None and dist.is_initialized():
                dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        files = [frame.f_code.co_filename for frame, _ in traceback.walk_tb(exc.__traceback__)]
        results.put((rank, "error", (type(exc).__name__, str(exc), files, traceback.format_exc())))


def run_ranks(
    fn, world_size: int, *args, env: dict[str, str] | None = None, timeout: float = 240.0, init_group: bool = True
) -> list:
    """Results of ``fn`` on each rank, in rank order; raises RankFailed with the first rank's error, RanksLost
    when a rank exits without a word or the run exceeds ``timeout``.

    With ``init_group=False`` the ranks start like torchrun's: the environment (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT, ...) is set but no process group exists until the code under test creates one.
    """
    ctx = _context(env or {})
    _ensure_server()
    rank_env = {**os.environ, **(env or {})}
    results = ctx.Queue()
    store = _agent_store(world_size)
    procs = [
        ctx.Process(
            target=_child, args=(fn, r, world_size, store.port, args, rank_env, results, init_group), daemon=True
        )
        for r in range(world_size)
    ]
    got: dict[int, tuple] = {}
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            try:
                p.start()
            except (OSError, EOFError) as exc:  # the fork server is gone or refused: no rank ran
                raise RanksLost(f"could not start the ranks: {type(exc).__name__}: {exc}") from exc
        while len(got) < world_size:
            try:
                rank, kind, payload = results.get(timeout=1.0)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if r not in got and not p.is_alive()]
                if dead:  # a rank that exits without reporting (crash, os._exit, failed import) fails the run now
                    codes = {r: procs[r].exitcode for r in dead}
                    raise RanksLost(f"ranks {dead} exited without a result (exit codes {codes})") from None
                if time.monotonic() > deadline:
                    raise RanksLost(
                        f"ranks {sorted(set(range(world_size)) - set(got))} gave no result in {timeout} s"
                    ) from None
                continue
            got[rank] = (kind, payload)
            if kind == "refused":
                raise ValueError(f"rank {rank} refused to run: {payload}")
            if kind == "error":
                name, msg, files, tb = payload
                raise RankFailed(rank, name, msg, files, tb)
    finally:
        for p in procs:
            if p.pid is None:  # never started
                continue
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        del store  # the agent's store outlives every rank
    return [pickle.loads(got[r][1]) for r in range(world_size)]
