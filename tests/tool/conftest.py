"""Fixtures for the tool tests: a synthetic upstream package "demo", offline.

``demo_project`` builds, under tmp_path: an upstream wheel demo-1.0.0 (its own RECORD), a PEP 503 index on disk
serving it (PATCHWHEEL_INDEX_URL=file://...), an empty download cache, and a project root with
overlay/demo/pins.toml, patches/demo/1.0.0/ (one real format-patch made with git) and the proof file it names.
"""

from __future__ import annotations

import contextlib
import csv
import ctypes
import hashlib
import http.server
import io
import os
import shutil
import signal
import sys
import tarfile
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from patchwheel import gitops  # noqa: E402
from patchwheel.maint.proving import proofenv  # noqa: E402
from patchwheel.maint.proving.setruns import Run  # noqa: E402
from patchwheel.wheels.rewrite import record_hash  # noqa: E402

CORE = b'''"""demo core."""


def greet(name):
    return "hello " + name


def add(a, b):
    return a + b
'''
INIT = b'"""demo."""\n\n__version__ = "1.0.0"\n\nfrom .core import add, greet\n'


#: Seconds a test waits for an event that should come before it fails as hung. Only a hang gets there: it is no
#: guess of how long anything takes (the events come in seconds on a machine at load 25), it ends the wait
#: with a failure where an event that never comes would hang the suite.
HANG = 600.0

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


@contextlib.contextmanager
def adopting_orphans() -> Iterator[None]:
    """While it lasts, this process is a child subreaper (Linux's prctl PR_SET_CHILD_SUBREAPER): a process whose
    parent exits is reparented here instead of to init. A test can then wait for a grandchild (what a proof run's
    test started) with :func:`how_it_ended`: it learns the moment it ends, and how, with no poll and no guess of how
    long that may take on a loaded machine."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def how_it_ended(pid: int) -> str:
    """Wait for ``pid``, a process :func:`adopting_orphans` adopted (its parent has exited), and reap it:
    "killed by SIGKILL", or "exited 0" and so on."""
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited {os.waitstatus_to_exitcode(status)}"


@pytest.fixture(scope="session", autouse=True)
def inner_pytest_has_no_plugins() -> Iterator[None]:
    """Every pytest these tests start (the proof and guard contracts, the tool's own proof runs) runs with pytest's
    own plugins alone, as in the proof and guard environments, which install pytest and nothing around it. The dev
    environment's plugins are not part of what is tested: hypothesis's alone took 0.75 s of CPU per start, 70% of
    such a run. Session-scoped, so module fixtures that run pytest get it too; the test processes keep theirs."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
        yield


@pytest.fixture(autouse=True)
def scratch_temp(tmp_path_factory, monkeypatch) -> Iterator[Path]:
    """Every test gets its own temporary folder (``tempfile`` and TMPDIR); a ``patchwheel-*`` temporary folder the
    tool or the test leaves there fails it. Only the tool's own prefix counts, so other temporary files are fine.
    And its own XDG_STATE_HOME: where the tool keeps a write-back's journal for a project that is no git checkout
    (the demo project), never the user's."""
    folder = tmp_path_factory.mktemp("tempdir")
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    yield folder
    left = sorted(p.name for p in folder.glob("patchwheel-*"))
    if left:
        pytest.fail(f"temporary folders left behind in {folder}: {', '.join(left)}", pytrace=False)


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``patchwheel ARGV`` in this process: its exit status, what it printed and what it printed as errors."""
    from patchwheel import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def serve_locally(handler: type[http.server.BaseHTTPRequestHandler]) -> http.server.ThreadingHTTPServer:
    """A threaded HTTP server on 127.0.0.1 (a free port), serving ``handler`` from a daemon thread; its port is
    ``server.server_address[1]``; ``server.shutdown()`` stops it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


def make_wheel(path: Path, files: dict[str, bytes], name="demo", version="1.0.0") -> Path:
    distinfo = f"{name}-{version}.dist-info"
    entries = dict(files)
    entries[f"{distinfo}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    entries[f"{distinfo}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    rows = io.StringIO()
    w = csv.writer(rows, lineterminator="\n")
    for n, d in entries.items():
        w.writerow([n, record_hash(d), len(d)])
    w.writerow([f"{distinfo}/RECORD", "", ""])
    entries[f"{distinfo}/RECORD"] = rows.getvalue().encode()
    whl = path / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in entries.items():
            zi = zipfile.ZipInfo(n, (2024, 5, 6, 7, 8, 10))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = 0o644 << 16
            zf.writestr(zi, d)
    return whl


def make_sdist(path: Path, version: str, pyproject: bytes) -> Path:
    """An sdist of demo holding only its pyproject.toml (what export reads of it)."""
    sdist = path / f"demo-{version}.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        info = tarfile.TarInfo(f"demo-{version}/pyproject.toml")
        info.size = len(pyproject)
        tar.addfile(info, io.BytesIO(pyproject))
    return sdist


#: Upstream's ruff settings in the demo's sdist, as transformers and accelerate write them.
RUFF_SETTINGS = b"""[tool.ruff]
line-length = 119

[tool.ruff.lint]
select = ["E", "F", "I", "W"]

[tool.ruff.lint.isort]
lines-after-imports = 2
"""
#: The demo's submission: upstream's test and how it fails on pristine (the commit message is the patch's).
UPSTREAM_TEST = b"""from demo import greet


def test_greet():
    assert greet("you") == "hello, you", "no comma"
"""
SUBMISSION = {
    "expect.toml": b'[[fails]]\ntest = "tests/test_greet.py::test_greet"\n'
    b'raises = "AssertionError"\nmatch = "no comma"\n',
    "tests/test_greet.py": UPSTREAM_TEST,
}


def make_patch(files: dict[str, bytes], edit, subject: str, trailers: dict[str, str]) -> bytes:
    """A real format-patch: commit ``files`` (upstream-tree paths), apply ``edit``, commit, export. git makes each
    patch once a test process: the same files, edit, subject and trailers give the same bytes (dates are pinned)."""
    edited = edit(dict(files))
    key = (tuple(sorted(files.items())), tuple(sorted(edited.items())), subject, tuple(trailers.items()))
    if key not in _patches:
        _patches[key] = git_patch(files, lambda repo: gitops.write_files(repo, edited), subject, trailers)
    return _patches[key]


_patches: dict[tuple, bytes] = {}


def git_patch(files: dict[str, bytes], change, subject: str, trailers: dict[str, str]) -> bytes:
    """A real format-patch of what ``change(repo)`` does to a repository holding ``files`` (links and modes
    included): commit, change, commit, export."""
    repo = gitops.temp_repo(files)
    try:
        change(repo)
        gitops.git(repo, "add", "-A")
        body = "\n".join(f"{k}: {v}" for k, v in trailers.items())
        gitops.commit(repo, f"{subject}\n\nWhy the change is needed.\n\n{body}\n")
        return gitops.format_patch(repo)
    finally:
        shutil.rmtree(repo.parent)


TRAILERS = {
    "Upstream-Issue": "https://github.com/example/demo/issues/1",
    "Upstream-Status": "Pending",
    "Proof-Test": "tests/proof/test_demo.py::test_greet",
    "Guard-Test": "tests/guards/test_demo.py",
    "Drop-When": "demo>=1.1.0",
}
GUARD = 'import pytest\n\npytestmark = pytest.mark.guard(package="demo")\n\n\ndef test_greet(observe):\n    pass\n'


def edit_greet(files):
    files["src/demo/core.py"] = files["src/demo/core.py"].replace(b'"hello " + name', b'"hello, " + name')
    return files


@dataclass
class Demo:
    root: Path
    index: Path
    cache: Path
    upstream: Path
    sha256: str

    @property
    def patch_dir(self) -> Path:
        return self.root / "patches" / "demo" / "1.0.0"

    def write_pins(self, sha256: str | None = None) -> None:
        (self.root / "overlay" / "demo").mkdir(parents=True, exist_ok=True)
        (self.root / "overlay" / "demo" / "pins.toml").write_text(
            'package = "demo"\nimport-name = "demo"\nsource-root = "src"\nlocal-label = "fixed"\n\n'
            f'[release."1.0.0"]\nwheel = {{ filename = "{self.upstream.name}", sha256 = "{sha256 or self.sha256}" }}\n'
        )
        if (self.patch_dir / "series").is_file():
            self.bump()

    def set_series(self, *patches: tuple[str, bytes]) -> None:
        for old in self.patch_dir.glob("*.patch"):
            old.unlink()
        for name, data in patches:
            (self.patch_dir / name).write_bytes(data)
        (self.patch_dir / "series").write_text("".join(f"{n}\n" for n, _ in patches))
        self.vendor()
        self.bump()

    def bump(self) -> None:
        """Record the series' build number as the tool's own series commands do (`patchwheel bump`); a series
        that cannot be read keeps the record it had (its test gets the build's own error)."""
        from patchwheel.errors import PatchwheelError
        from patchwheel.wheels import buildno

        try:
            project = self.load()
            buildno.bump(project, project.line("demo", "1.0.0"), log=lambda m: None)
        except PatchwheelError:
            pass

    def vendor(self) -> None:
        """Write overlay/demo/1.0.0/ as `nox -s vendor` does, when the series applies (a test of a broken series
        gets it from the build's own error, before the overlay is compared)."""
        from patchwheel.errors import PatchwheelError
        from patchwheel.wheels import vendored

        cache = os.environ.get("PATCHWHEEL_CACHE")
        os.environ["PATCHWHEEL_CACHE"] = str(self.cache.parent / "vendor-cache")  # the tests' cache stays empty
        try:
            vendored.write(self.load(), force=True, log=lambda m: None)
        except PatchwheelError:
            pass
        finally:
            if cache is None:
                del os.environ["PATCHWHEEL_CACHE"]
            else:
                os.environ["PATCHWHEEL_CACHE"] = cache

    def load(self):
        from patchwheel import config

        return config.load(self.root)

    def add_fix(self, version: str, slug: str, subject: str, change: tuple[bytes, bytes]) -> None:
        """A second fix on the line ``version``, made on top of its comma fix as a maintainer adds one (its proof
        module ``tests/proof/test_<slug>.py``, its upstream folder, the build number recorded, the modules
        vendored): ``change`` replaces one text of core.py by another."""
        from patchwheel.wheels import buildno, vendored

        files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
        test = f"tests/proof/test_{slug.replace('-', '_')}.py"
        patch = make_patch(
            edit_greet(dict(files)),
            lambda f: {**f, "src/demo/core.py": f["src/demo/core.py"].replace(*change)},
            subject,
            {**TRAILERS, "Drop-When": "proof-passes-upstream", "Proof-Test": test},
        )
        (self.root / test).write_text("def test_it():\n    pass\n")
        gitops.write_files(self.root / "upstream-pr" / "demo" / slug, SUBMISSION)
        line = self.load().line("demo", version)
        (line.patch_dir / f"0002-{slug}.patch").write_bytes(patch)
        with (line.patch_dir / "series").open("a") as fh:
            fh.write(f"0002-{slug}.patch\n")
        buildno.bump(self.load(), line, log=lambda m: None)  # as `nox -s new` records a new patch
        vendored.write(self.load(), [line], log=lambda m: None)

    def add_release(self, version: str, core: bytes, pyproject: bytes | None = None) -> None:
        """Publish another upstream release of demo (its core.py as given) on the test index; with ``pyproject``,
        its sdist too, holding that pyproject.toml (upstream's ruff settings, for export)."""
        init = INIT.replace(b'"1.0.0"', f'"{version}"'.encode())
        whl = make_wheel(self.upstream.parent, {"demo/__init__.py": init, "demo/core.py": core}, version=version)
        files = [whl] + ([make_sdist(self.upstream.parent, version, pyproject)] if pyproject is not None else [])
        page = self.index / "demo" / "index.html"
        for f in files:
            sha = hashlib.sha256(f.read_bytes()).hexdigest()
            page.write_text(page.read_text() + f'<a href="../../upstream/{f.name}#sha256={sha}">{f.name}</a>\n')


@pytest.fixture
def demo_project(tmp_path, monkeypatch, demo_template) -> Demo:
    """The demo project under tmp_path: a copy of the one the test process made first (it holds no path of its
    own folder), as new for each test."""
    shutil.copytree(demo_template, tmp_path, symlinks=True, dirs_exist_ok=True)
    return _demo_in(tmp_path, monkeypatch)


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("demo-template")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("demo-template-state")))  # never the user's
        _make_demo(folder, mp)
    return folder


def _demo_in(folder: Path, monkeypatch) -> Demo:
    index, cache, whl = folder / "index", folder / "cache", folder / "upstream" / "demo-1.0.0-py3-none-any.whl"
    monkeypatch.setenv("PATCHWHEEL_INDEX_URL", index.as_uri())
    monkeypatch.setenv("PATCHWHEEL_CACHE", str(cache))
    return Demo(folder / "project", index, cache, whl, hashlib.sha256(whl.read_bytes()).hexdigest())


def _make_demo(folder: Path, monkeypatch) -> Demo:
    up = folder / "upstream"
    up.mkdir()
    whl = make_wheel(up, {"demo/__init__.py": INIT, "demo/core.py": CORE})
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    index = folder / "index"
    (index / "demo").mkdir(parents=True)
    (index / "demo" / "index.html").write_text(f'<a href="../../upstream/{whl.name}#sha256={sha}">{whl.name}</a>\n')
    demo = _demo_in(folder, monkeypatch)
    root = demo.root
    (root / "tests" / "proof").mkdir(parents=True)
    (root / "tests" / "proof" / "test_demo.py").write_text("def test_greet():\n    pass\n")
    (root / "tests" / "guards").mkdir()
    (root / "tests" / "guards" / "test_demo.py").write_text(GUARD)
    demo.write_pins()
    (root / "overlay" / "sets.toml").write_text('[set.default]\ndemo = "1.0.0"\n')
    demo.patch_dir.mkdir(parents=True)
    upstream_files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
    demo.set_series(("0001-greet-comma.patch", make_patch(upstream_files, edit_greet, "Greet with a comma", TRAILERS)))
    gitops.write_files(root / "upstream-pr" / "demo" / "greet-comma", SUBMISSION)
    return demo


def both_ways_ok(project, line, newest, patched, submission):
    """Stands in for export's real run (an environment per release): upstream's test fails, then passes."""
    from patchwheel.maint.proving import proofenv

    return proofenv.ProofOutcome("fails", "test_greet: BugSymptom: no comma"), proofenv.ProofOutcome(
        "passes", "1 passed"
    )


def other_patch_set(demo: Demo) -> None:
    """Replace the demo's series with a different one-patch series (a dist/ built before is then stale)."""
    other = make_patch(
        {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT},
        lambda f: {**f, "src/demo/core.py": f["src/demo/core.py"].replace(b"a + b", b"b + a")},
        "Add the other way round",
        TRAILERS,
    )
    demo.set_series(("0001-add-swap.patch", other))


def stub_proof_runs(monkeypatch, tmp_path: Path, run_proof) -> None:
    """The matrix check without real environments or pytest: ``release_env`` makes a folder per release (named
    as the real one), ``run_proof(env, root, proof, timeout=900, first_bug=False)`` is the caller's, and
    ``run_proofs`` runs it on each file."""
    from packaging.utils import parse_wheel_filename

    from patchwheel.maint.proving import proofenv

    def release_env(cache, wheels):
        env = tmp_path / "envs" / "+".join(f"{pkg}-{parse_wheel_filename(a.filename)[1]}" for pkg, a in wheels)
        env.mkdir(parents=True, exist_ok=True)
        return env

    monkeypatch.setattr(proofenv, "release_env", release_env)
    monkeypatch.setattr(proofenv, "run_proof", run_proof)

    def run_proofs(env, root, files, timeout=900, first_bug=False, sink=None):
        if sink is not None:  # what the real run's report keeps: a case per test, here one per module
            sink.extend({"file": str(root / f), "nodeid": f"{f}::test", "seen": False} for f in files)
        return {f: run_proof(env, root, f) for f in files}

    monkeypatch.setattr(proofenv, "run_proofs", run_proofs)


# --- follow and derive: the tree they may not change when they stop, and the proof runs they are given ------------

#: What a faked set proof returns when it went through.
PROVEN = [
    Run("proofs on the pristine pins", True, "1 xfailed"),
    Run("proofs on the +fixed builds", True, "1 passed"),
]


def tree(root: Path) -> dict[str, str]:
    """Every file of patches/, overlay/ and dist/ with its sha256: what follow may not change when it stops."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for top in ("patches", "overlay", "dist")
        for p in sorted((root / top).rglob("*"))
        if p.is_file()
    }


def proofs(monkeypatch, tmp_path, passes_from: dict[str, str] | None = None, verdict: str | None = None) -> list:
    """Each proof module fails on every demo release, or passes from the release ``passes_from`` names for it;
    ``verdict`` forces one outcome. The (release, module) pairs judged, in order."""
    judged: list = []

    def run_proof(env, root, proof, timeout=900, first_bug=False):
        release = Path(env).name.split("+")[0].split("-", 1)[1]
        judged.append((release, proof))
        if verdict is not None:
            return proofenv.ProofOutcome(verdict, f"{verdict}: forced by the test")
        fixed = (
            passes_from
            and proof in passes_from
            and tuple(map(int, release.split("."))) >= tuple(map(int, passes_from[proof].split(".")))
        )
        return proofenv.ProofOutcome("passes", "1 passed") if fixed else proofenv.ProofOutcome("fails", "BugSymptom")

    stub_proof_runs(monkeypatch, tmp_path, run_proof)
    return judged


class Prover:
    """Stands in for setruns.prove_set: records what it was asked to prove and gives ``runs``."""

    def __init__(self, runs=PROVEN, action=None) -> None:
        self.runs, self.action = runs, action
        self.calls: list[tuple[dict[str, str], list[str]]] = []
        self.seen: list[dict[str, list[dict]]] = []  # per call: the judge's proof cases it was given

    def __call__(self, project, members, dist, log, seen):
        self.calls.append(({p: line.version for p, line in members.items()}, sorted(x.name for x in dist.iterdir())))
        self.seen.append(seen)
        if self.action is not None:
            self.action(project)
        return self.runs
