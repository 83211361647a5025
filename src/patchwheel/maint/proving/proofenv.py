"""Run proof tests against pristine upstream releases, each in its own cached virtual environment.

A base environment holds torch (pinned: TORCH_VERSION, default 2.13.0) and pytest. Each environment on it is a
small venv whose ``.pth`` file appends the base's site-packages, so torch is installed once and shared; it gets only
its own wheels (sha256-verified from the cache) and their light dependencies, which take precedence over the base's.
Every environment is named here (:func:`base_env`, :func:`envs_dir`, :func:`env_name`), and reused.

They are made with uv where it is installed (the ``uv`` package, or ``uv`` on PATH; ``PATCHWHEEL_INSTALLER=pip``
turns it off). uv does not read pip's configuration, so the torch find-links folder is passed from
``PIP_FIND_LINKS`` (and an index from ``PIP_INDEX_URL``/``PIP_EXTRA_INDEX_URL``, as its own variables: no
credential goes on an installer's command line, :func:`_private_args`); it does not see packages through a ``.pth``
file, so torch is excluded from its resolution in release environments (it comes from the base).

Environments are shared: by the worker threads of one matrix check, and by processes (a rebase next to an
matrix check, two CI jobs on one cache). One environment is built by one builder at a time, under a lock per
path (a thread lock, and ``flock`` on ``<cache>/envs/.<name>.lock``), and appears by rename, complete. Only a folder
this module made (its marker, :data:`MARKER`) is ever replaced: :func:`check_replaceable`.

This module is also the one place that spawns proof runs, and kills them with everything they started.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import venv
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ...config import Artifact
from ...errors import ConfigError, EnvironmentFailed
from ...names import wheel_name_version
from ...urls import redact
from ...wheels import fetch
from ...wheels.rewrite import read_member
from . import torchsource

MARKER = "patchwheel-env.json"
#: Beside the base's marker, not in it: the sha256 of the torch wheel it was made from (:func:`base_env`). A tool from
#: before it compares the marker's text alone, so it keeps taking the base as its own instead of making it again at
#: each turn with this one on a shared cache.
TORCH_SHA256 = "patchwheel-torch-sha256.txt"
#: What an environment made here holds at its top: uv's or venv's layout (bin, lib and its lib64 link, include,
#: pyvenv.cfg, uv's .gitignore, .lock and CACHEDIR.TAG), the installed packages' data files (share) and this module's
#: files. Anything else is not the tool's, and stops the folder's replacement.
_ENV_ENTRIES = frozenset(
    {"bin", "include", "lib", "lib64", "share", "pyvenv.cfg", ".gitignore", ".lock", "CACHEDIR.TAG", MARKER}
    | {"patchwheel-excludes.txt", TORCH_SHA256}
)
_path_locks: dict[str, threading.Lock] = {}
_path_locks_guard = threading.Lock()

# sysconfig fills its variables on first use, and a thread that asks while another fills them sees them half
# filled (Python 3.11: uv's find_uv_bin read EXE as None in one of the matrix check's workers, both making their
# first environment). Filled here, on import, before any worker thread exists.
sysconfig.get_config_vars()


#: The torch of a run that names none, where no project says: the CLI sets TORCH_VERSION from the project's
#: ``[torch] suite`` (overlay/sets.toml) before any command runs, and noxfile.py does for its sessions.
FALLBACK_TORCH = "2.13.0"


def torch_version() -> str:
    return os.environ.get("TORCH_VERSION") or FALLBACK_TORCH


def wheel_version(filename: str) -> str:
    return wheel_name_version(filename)[1]


def site_packages(env: Path) -> Path:
    """The site-packages folder of an environment made here (this interpreter's Python)."""
    return _site(env)


def _site(env: Path) -> Path:
    rel = Path(sysconfig.get_path("purelib")).relative_to(sys.prefix)
    return env / rel


def uv_bin() -> str | None:
    """The uv executable to make environments with, or None for venv + pip."""
    if os.environ.get("PATCHWHEEL_INSTALLER", "uv") == "pip":
        return None
    try:
        from uv import find_uv_bin  # the uv package installed beside this tool (nox[uv] brings it)

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def pip_find_links() -> list[str]:
    """pip's find-links (where the CPU torch wheel is, on this project's machines): ``PIP_FIND_LINKS``, else pip's
    configuration files. uv reads neither, and without them ``torch==2.13.0`` resolves to PyPI's CUDA build."""
    if os.environ.get("PIP_FIND_LINKS"):
        return os.environ["PIP_FIND_LINKS"].split()
    # This interpreter's pip, or (in an environment uv made, which has none) the first pip on PATH.
    pips = [[sys.executable, "-m", "pip"]] + [[found] for name in ("pip3", "pip") if (found := shutil.which(name))]
    for pip in pips:
        res = subprocess.run([*pip, "config", "list"], capture_output=True, text=True)
        if res.returncode == 0:
            break
    else:
        return []
    for line in res.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(".find-links"):
            return value.strip().strip("'\"").split()
    return []


def _create(env: Path) -> None:
    """An empty virtual environment for this interpreter's Python (no pip in it when uv makes it)."""
    uv = uv_bin()
    if uv is None:
        venv.create(env, with_pip=True, symlinks=True)
        return
    _installer([uv, "venv", "--quiet", "--python", sys.executable, str(env)], env, "uv venv")


def _install(env: Path, *args: str, on_base: bool = False, compile: bool = True) -> None:
    """Install ``args`` (requirements, wheel paths) into ``env``. ``on_base``: torch comes from the base
    environment (see the module's docstring). No credential goes on the installer's command line, which every user
    of the machine reads (``ps``): uv is given pip's indexes by its environment, and what else holds one by a
    private requirements file (:func:`_private_args`)."""
    uv = uv_bin()
    if uv is None:
        python = [str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        with _private_args(args) as given:  # (pip reads PIP_INDEX_URL and PIP_EXTRA_INDEX_URL itself)
            _installer([*python, "--no-input", *given], env, "pip install " + " ".join(args))
        return
    # --compile-bytecode, as pip does, where the processes that use the environment write no bytecode (with
    # PYTHONDONTWRITEBYTECODE set, as on this project's machines, they would compile what they import each time).
    # Without (``compile=False``): the environment's runs write the bytecode of what they import themselves
    # (:data:`WRITE_BYTECODE`), a few hundred modules of transformers' 2,900, where compiling them all took 12 s.
    cmd = [uv, "pip", "install", "--quiet", *(["--compile-bytecode"] if compile else [])]
    cmd += ["--python", str(env / "bin" / "python")]
    links = [arg for link in pip_find_links() for arg in ("--find-links", link)]
    indexes = {}  # uv's own names of --extra-index-url and --index-url, which it reads as it reads them
    if os.environ.get("PIP_EXTRA_INDEX_URL", "").split():
        indexes["UV_EXTRA_INDEX_URL"] = " ".join(os.environ["PIP_EXTRA_INDEX_URL"].split())
    if os.environ.get("PIP_INDEX_URL"):
        indexes["UV_INDEX_URL"] = os.environ["PIP_INDEX_URL"]
    if on_base:
        excludes = env / "patchwheel-excludes.txt"
        excludes.write_text("torch\n")
        # Copies, not uv's default hardlinks into its cache: the mutation check rewrites installed files in place.
        cmd += ["--excludes", str(excludes), "--link-mode", "copy"]
    with _private_args((*links, *args)) as given:
        _installer([*cmd, *given], env, "uv pip install " + " ".join(args), indexes)


@contextmanager
def _private_args(args: tuple[str, ...]) -> Iterator[list[str]]:
    """``args`` with each index option (``--index-url``, ``--extra-index-url``: the torch source's) and each
    argument that holds what :func:`redact` hides (a ``torch @ URL`` with a user and password, a ``--find-links``
    URL with them) moved into a requirements file, named by ``-r``: mode 0600 in a private folder, removed after.
    uv and pip read both from it, the URL's ``#sha256=`` included."""
    given: list[str] = []
    lines: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg in ("--index-url", "--extra-index-url", "--find-links"):
            value = next(rest)
            if arg != "--find-links" or redact(value) != value:
                lines.append(f"{arg} {value}")
            else:
                given += [arg, value]
        elif redact(arg) != arg:
            lines.append(arg)
        else:
            given.append(arg)
    if not lines:
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="patchwheel-install-") as folder:  # mode 0700
        requirements = Path(folder) / "requirements.txt"
        with os.fdopen(os.open(requirements, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as fh:
            fh.write("\n".join(lines) + "\n")
        yield [*given, "-r", str(requirements)]


def _installer(cmd: list[str], env: Path, what: str, variables: dict[str, str] | None = None) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(variables or {})})
    if res.returncode != 0:
        raise EnvironmentFailed(
            f"{what} failed in {env}:\n{redact(res.stderr)[-2000:]}", "check the network and the package index"
        )


def _ready(env: Path, marker: str, beside: dict[str, str]) -> bool:
    try:
        return (env / MARKER).read_text() == marker and all((env / n).read_text() == t for n, t in beside.items())
    except OSError:
        return False


@contextmanager
def _env_lock(env: Path) -> Iterator[None]:
    """Hold the build lock of ``env``: a thread lock for this process's workers, then ``flock`` on a lock file
    beside it for other processes (the thread lock too, because where ``flock`` is emulated with per-process
    ``fcntl`` locks, e.g. on NFS, it would not keep two threads of one process apart). The lock file is never
    removed: removing it would let two holders lock two different files."""
    with _path_locks_guard:
        lock = _path_locks.setdefault(str(env.absolute()), threading.Lock())
    with lock:
        env.parent.mkdir(parents=True, exist_ok=True)
        with open(env.parent / f".{env.name}.lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
            yield


def check_replaceable(env: Path, option: str = "") -> None:
    """Refuse (touching nothing) to make an environment at ``env`` where that would replace what this module did not
    make: ``env`` must be missing, an empty folder, or an environment made here (a sound :data:`MARKER`, a file of
    its own, and nothing at its top that an environment does not hold, :data:`_ENV_ENTRIES`), as a build replaces
    only a dist/ it made. ``option``: the command line's name for it (`prove --fixed-env .venv` once moved the
    folder aside and deleted it). A folder made here always has its marker: it appears by rename, complete."""
    from ...wheels.distdir import listing

    named = f"{option} {env}" if option else str(env)
    replaces = "an environment is replaced whole when what it holds changes"
    if option:
        replaces = f"prove replaces the whole {option} folder when the +fixed builds change"
    if env.is_symlink() or (env.exists() and not env.is_dir()):
        raise ConfigError(
            f"{named} is {'a link' if env.is_symlink() else 'a file'}, not a folder",
            f"pass {option or 'it'} a folder of its own (it is made when missing)",
        )
    if not env.exists():
        return
    held = sorted(p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in env.iterdir())
    if not held:
        return
    marker = env / MARKER
    if marker.is_symlink() or not marker.is_file():
        leave_out = f", or leave {option} out to use the cache's" if option else ""
        raise ConfigError(
            f"{named} exists and was not made by patchwheel (no {MARKER}); it holds {listing(held)}",
            f"{replaces}: pass a new or empty folder (it is made when missing){leave_out}, or move what this one "
            "holds elsewhere",
        )
    try:
        made = json.loads(marker.read_bytes())
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        made = None
    if not isinstance(made, dict) or not isinstance(made.get("torch"), str):
        raise ConfigError(
            f"{marker} is damaged: not an environment's marker (a JSON object naming its torch)",
            f"if {env} is an environment patchwheel made, remove it (rm -rf {env}) and run again; if not, "
            + (f"pass {option} another folder" if option else "move it elsewhere"),
        )
    if foreign := [name for name in held if name.rstrip("/") not in _ENV_ENTRIES]:
        raise ConfigError(
            f"{named} holds what no environment holds: {listing(foreign)}",
            f"{replaces}: move them elsewhere, or pass another folder",
        )


def _make(env: Path, marker: str, build: Callable[[Path], None], beside: dict[str, str] | None = None) -> Path:
    """Create ``env`` with ``build(tmp_env)`` unless it exists with the same marker (and the same files ``beside``
    it: name -> text).

    Built in a private temporary folder under the lock, then renamed into place: a ready environment (right
    marker) is never touched, and whoever waited for the lock finds the environment another builder made instead
    of building it again. Only an environment made here with another marker (stale) is replaced: anything else
    at ``env`` is refused (:func:`check_replaceable`)."""
    beside = beside or {}
    if _ready(env, marker, beside):
        return env
    with _env_lock(env):
        if _ready(env, marker, beside):  # built by another thread or process while this one waited
            return env
        check_replaceable(env)
        for orphan in env.parent.iterdir():  # left by a builder that died: only a lock holder makes them
            if orphan.name.startswith((f".{env.name}.building-", f".{env.name}.stale-")):
                shutil.rmtree(orphan, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{env.name}.building-", dir=env.parent))
        old = tmp.with_name(tmp.name.replace(".building-", ".stale-"))
        try:
            _create(tmp)
            build(tmp)
            for name, text in {**beside, MARKER: marker}.items():
                (tmp / name).write_text(text)
            if env.exists():
                os.replace(env, old)
            os.replace(tmp, env)
            # venv scripts hold absolute paths: we only ever run `<env>/bin/python -m ...`, which is safe after a move
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(old, ignore_errors=True)
    return env


def env_name(members: list[tuple[str, str]], kind: str = "") -> str:
    """An environment's folder name under :func:`envs_dir`, ``[kind-]pkg-version[+pkg-version]`` (``kind``: suite,
    export, follow, mutants; none: the pinned wheels alone)."""
    return (f"{kind}-" if kind else "") + "+".join(f"{pkg}-{version}" for pkg, version in members)


#: The environment of a run in an environment made by :func:`env_on_base` (proofs, guards, the matrix, exports):
#: Python writes the bytecode of what it imports (the environment is made without it).
WRITE_BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}


def env_on_base(
    cache: Path,
    name: str,
    marker: dict,
    install: Callable[[], list[str]],
    at: Path | None = None,
    compile: bool = False,
) -> Path:
    """The environment :func:`env_name` ``name`` (or the folder ``at``) that sees the base's packages, with
    ``install()`` (pip arguments, computed only when it is built) installed on top. Its runs write the bytecode of
    what they import (:data:`WRITE_BYTECODE`); ``compile``: compiled when made, for runs that write none."""
    base = base_env(cache)

    def build(env: Path) -> None:
        (_site(env) / "patchwheel-base.pth").write_text(str(_site(base)) + "\n")
        _install(env, *install(), on_base=True, compile=compile)

    return _make(at or envs_dir(cache) / name, json.dumps({"torch": torch_version(), **marker}), build)


def base_env(cache: Path) -> Path:
    """The shared environment with torch (TORCH_VERSION, from the torch source: :mod:`torchsource`) and pytest.
    The source is asked first, so a version it lacks fails here, before anything is made. Keyed on the wheel's
    sha256 (:data:`TORCH_SHA256`; where an index lists none, its address): a file replaced under its name makes it
    again."""
    torch = torchsource.wheel(torch_version(), pip_find_links())

    def build(env: Path) -> None:
        _install(env, torch.requirement, "pytest", *torch.source.installer_args())
        _check_torch(env, torch)

    return _make(
        cache / "envs" / f"base-torch-{torch_version()}",
        json.dumps({"torch": torch_version(), "wheel": redact(torch.url.partition("#")[0])}),  # no password kept
        build,
        {TORCH_SHA256: torch.sha256 or ""},
    )


def _check_torch(env: Path, torch: torchsource.TorchWheel) -> None:
    """The torch installed in ``env`` is the version the wheel's file name says (pip installs a wheel whose
    METADATA says another; uv does too under UV_SKIP_WHEEL_FILENAME_CHECK), or EnvironmentFailed: every proof on
    the environment would name the wrong torch."""
    site = str(_site(env))
    found = sorted({d.version for d in importlib.metadata.distributions(path=[site]) if _is_torch(d)})
    try:
        if [Version(v) for v in found] == [Version(torch.version)]:
            return
    except InvalidVersion:
        pass
    raise EnvironmentFailed(
        f"the torch wheel {torch.filename} from the torch source {torch.source} installs torch "
        f"{', '.join(found) or 'nothing'}, not {torch.version} as its file name says; the environment is not made",
        f"replace it by torch {torch.version}'s own wheel, or set {torchsource.ENV} to a source that has it",
    )


def _is_torch(dist: importlib.metadata.Distribution) -> bool:
    return canonicalize_name(dist.metadata["Name"] or "") == "torch"


def envs_dir(cache: Path) -> Path:
    """Where the environments on top of the base live: a folder per torch (runs under two keep each other's)."""
    return cache / "envs" / f"torch-{torch_version()}"


def release_env_path(cache: Path, wheels: list[tuple[str, Artifact]]) -> Path:  # where release_env keeps it
    return envs_dir(cache) / env_name([(pkg, wheel_version(art.filename)) for pkg, art in wheels])


def release_env(cache: Path, wheels: list[tuple[str, Artifact]]) -> Path:
    """An environment with exactly these upstream wheels (package, artifact) on top of the base."""
    marker, install = {"wheels": [a.sha256 for _, a in wheels]}, lambda: [str(fetch.fetch(p, a)) for p, a in wheels]
    return env_on_base(cache, release_env_path(cache, wheels).name, marker, install)


def fixed_env(cache: Path, wheels: list[Path], purpose: str = "mutants", at: Path | None = None) -> Path:
    """A cached environment with these local +fixed wheels (and their dependencies) on top of the base env.
    ``purpose`` names it: the mutation check rewrites installed files in its own, so no other check shares it.
    ``at``: there instead (a checkout's own: no other checkout's dist/ replaces it under a running test)."""
    name = env_name([wheel_name_version(w.name) for w in wheels], purpose)
    marker = {"wheels": {w.name: fetch.sha256_file(w) for w in wheels}}
    return env_on_base(cache, name, marker, lambda: [str(w) for w in wheels], at=at)


def mixed_env(cache: Path, pristine: list[tuple[str, Artifact]], fixed: list[Path], at: Path | None = None) -> Path:
    """An environment with these upstream wheels (package, artifact) and these local +fixed wheels, on top of the
    base env: one package's pristine release with its companions +fixed, where a companion's known bug masks its
    bug on the pristine pins (:mod:`setruns`). ``at``: there instead (a checkout's own, as :func:`fixed_env`)."""
    members = [(pkg, wheel_version(a.filename)) for pkg, a in pristine] + [wheel_name_version(w.name) for w in fixed]
    marker = {"wheels": [a.sha256 for _, a in pristine], "fixed": {w.name: fetch.sha256_file(w) for w in fixed}}

    def install() -> list[str]:
        return [*(str(fetch.fetch(p, a)) for p, a in pristine), *(str(w) for w in fixed)]

    return env_on_base(cache, env_name(members, "unmasked"), marker, install, at=at)


@dataclass
class ProofOutcome:
    verdict: str  # "passes" (bug absent), "fails" (bug present), "error" (could not judge)
    detail: str


@dataclass(frozen=True)
class ProofRun:
    cases: list[dict] | None  # the proof report (one entry per judged test phase); None when pytest wrote none
    detail: str  # why there is no report: the output's last line, or the timeout
    seconds: float


def run_report(
    python: Path,
    root: Path,
    proof_file: str | list[str],
    *,
    timeout: float,
    guards: bool = False,
    first_bug: bool = False,
) -> ProofRun:
    """Run proof modules (one, or several in one pytest process) with ``--proof-expect=observe`` and read their
    report (each case names its ``file``). The one place that spawns proof runs (the matrix check, rebase and the
    mutation check all come here). A module that cannot be collected does not stop the others.

    ``guards``: run the regression guards too. The mutation check needs them (a mutant that breaks a guard is
    killed); the matrix check and rebase leave them out, since they judge the bug, not the guards.
    ``first_bug``: stop at the first test that shows the bug, which decides the verdict (``fails``); the upstream
    check's runs do, since the matrix needs only the verdict and the first such test.
    pytest runs through :func:`run_in_group`, the one place that spawns and kills test runs."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="patchwheel-proof-") as tmp:
        report, log = Path(tmp) / "report.json", Path(tmp) / "output.txt"
        files = [proof_file] if isinstance(proof_file, str) else list(proof_file)
        cmd = [str(python), "-m", "pytest", *files, "-q", "-p", "no:cacheprovider", "--proof-expect=observe"]
        cmd.append("--continue-on-collection-errors")
        env = {**os.environ, **WRITE_BYTECODE, "PATCHWHEEL_PROOF_REPORT": str(report)}
        cmd += ([] if guards else ["-m", "not regression"]) + (["--proof-first-bug"] if first_bug else [])
        returncode = run_in_group(cmd, root, env, log, timeout)
        seconds = time.perf_counter() - t0
        if returncode is None:
            return ProofRun(None, f"timed out after {timeout:.0f} s", seconds)
        try:
            return ProofRun(json.loads(report.read_text()), "", seconds)
        except (OSError, ValueError):
            tail = log.read_text(errors="replace").strip().splitlines()
            return ProofRun(None, tail[-1][:200] if tail else f"pytest exited {returncode}", seconds)


def run_in_group(cmd: list[str], cwd: Path, env: dict[str, str], log: Path | None, timeout: float) -> int | None:
    """Run ``cmd`` in a session of its own, its output in ``log`` (a file, or None: this process's; a pipe would
    wait for any child that inherited it), and kill its process group when it exits, times out or this process is
    interrupted: ranks or servers a test left running must not outlive the run. Its exit status (None: timed out)."""
    with log.open("wb") if log is not None else nullcontext() as out:
        stderr = subprocess.STDOUT if log is not None else None
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=stderr, start_new_session=True, env=env)
        try:
            finished = _exited(proc.pid, timeout)
        finally:
            _kill_group(proc)
    return proc.returncode if finished else None


def _exited(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` for the child to exit, without reaping it: until it is reaped its pid, which names
    its process group, cannot be taken by an unrelated process that :func:`_kill_group` would then hit."""
    deadline, delay = time.monotonic() + timeout, 0.001
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    return True


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL pytest's process group (pytest, the ranks it spawned, whatever a test left running), then reap."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_proof(env: Path, root: Path, proof_file: str, timeout: float = 900, first_bug: bool = False) -> ProofOutcome:
    """Run one proof module in ``env`` with --proof-expect=observe (regression guards left out) and judge it.

    ``passes``: every test ran and passed (the bug is gone). ``fails``: a test failed with the bug's signature (see
    tests/proof/conftest.py). ``error``: could not judge: a test failed otherwise, could not observe, was skipped
    or could not be set up, or nothing ran (e.g. an API the test uses changed on this release)."""
    ran = run_report(env / "bin" / "python", root, proof_file, timeout=timeout, first_bug=first_bug)
    return judge(ran.cases) if ran.cases is not None else ProofOutcome("error", ran.detail)


def run_proofs(
    env: Path,
    root: Path,
    proof_files: list[str],
    timeout: float = 900,
    first_bug: bool = False,
    sink: list[dict] | None = None,
) -> dict[str, ProofOutcome]:
    """Several proof modules judged in one pytest process (one interpreter start and one torch import instead of
    one per module), each judged on its own cases as :func:`run_proof` would. ``sink``: every case is appended
    there, for a later run on the same inputs to judge instead of running it again (``--proof-replay``); the run
    then goes past a module's first bug, and ``first_bug``'s verdicts come from each module's cases up to it."""
    early = first_bug and sink is None
    ran = run_report(env / "bin" / "python", root, proof_files, timeout=timeout * len(proof_files), first_bug=early)
    if ran.cases is None:
        return {f: ProofOutcome("error", ran.detail) for f in proof_files}
    if sink is not None:
        sink.extend(ran.cases)
    by_file: dict[str, list[dict]] = {}
    for case in ran.cases:
        cases = by_file.setdefault(os.path.realpath(case.get("file", "")), [])
        if not (first_bug and any(c["bug"] for c in cases)):  # what --proof-first-bug would have run
            cases.append(case)
    return {f: judge(by_file.get(os.path.realpath(root / f), [])) for f in proof_files}


def judge(cases: list[dict]) -> ProofOutcome:
    """The verdict of a module from its observe-mode report (one entry per test phase that was judged). A test
    whose marker allows it to skip (``may_skip``, the GPU form) and did not run (``not-run``) counts for nothing."""

    def first(items):
        msg = re.sub(r"\s+", " ", items[0]["error"])[:160]
        return f"{items[0]['test']}: {msg}" + (f" (+{len(items) - 1} more)" if len(items) > 1 else "")

    bug = [c for c in cases if c["outcome"] == "failed" and c["bug"]]
    other = [c for c in cases if c["outcome"] == "failed" and not c["bug"]]
    unjudged = [c for c in cases if c["outcome"] in ("skipped", "error")]
    if bug:
        return ProofOutcome("fails", first(bug))
    if other:
        return ProofOutcome("error", "failed otherwise: " + first(other))
    if unjudged:
        return ProofOutcome("error", "could not judge: " + first(unjudged))
    ran = [c for c in cases if c["outcome"] == "passed"]
    if ran:
        return ProofOutcome("passes", f"{len(ran)} passed")
    return ProofOutcome("error", "no test ran")


# --- files installed over an environment -----------------------------------------------------------------------


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def _write(site: Path, files: dict[str, bytes | None]) -> None:
    """Write (or, for None, delete) files under site-packages, dropping their cached bytecode."""
    for rel, data in files.items():
        target = site / rel
        for pyc in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
            pyc.unlink(missing_ok=True)
        if data is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


@contextmanager
def installed_over(site: Path, files: dict[str, bytes | None]) -> Iterator[None]:
    """``files`` (paths under site-packages -> bytes, None: deleted) installed over an environment for the duration of
    the block (a mutant; a patch over upstream's release); the original files come back always."""
    originals = {rel: _read(site / rel) for rel in files}
    try:
        _write(site, files)
        yield
    finally:
        _write(site, originals)


def restore_from_wheel(site: Path, wheel: Path, paths: list[str]) -> list[str]:
    """Put back the wheel's own bytes for ``paths`` (wheel paths) where site-packages differs, e.g. after a run
    killed mid-mutant. Returns the paths it repaired."""
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        installed = {p: read_member(zf, p) if p in names else None for p in paths}
    stale = {p: d for p, d in installed.items() if _read(site / p) != d}
    _write(site, stale)
    return sorted(stale)
