"""Sessions are thin: each one calls the tool (python -m patchwheel) or pytest. No logic lives here.

    nox -s build          build the +fixed wheels, a PEP 503 index and consumer pins into dist/
    nox                   the test suite: lint, tool tests, proof tests (pristine and fixed), end to end

TORCH_VERSION (default 2.13.0) pins torch in every test environment; a bare `torch` would pull the newest
release with several GB of CUDA packages.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests", "proof", "e2e"]
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
TORCH = f"torch=={os.environ.get('TORCH_VERSION', '2.13.0')}"
TOOL_ENV = {"PYTHONPATH": str(ROOT / "src")}


def tool(session: nox.Session, *args: str, **kw) -> str | bool:
    """Run the tool in nox's own interpreter: it needs only `packaging`, which nox brings."""
    return session.run(sys.executable, "-m", "patchwheel", *args, env=TOOL_ENV, external=True, **kw)


@nox.session(venv_backend="none")
def build(session: nox.Session) -> None:
    """Build every release line into dist/ (args: pkg[==version] ..., --clean, --dist DIR)."""
    tool(session, "build", *session.posargs)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """Check every patch series: names, files, trailers."""
    tool(session, "lint")


@nox.session(venv_backend="none")
def status(session: nox.Session) -> None:
    """Which fixes an environment carries (args: --python PATH, --json)."""
    tool(session, "status", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Tool tests: fast and offline, on synthetic wheels; plus checks of the real dist/ build."""
    tool(session, "build")
    session.install("-e", ".[test]")
    session.run("pytest", "tests/tool", *session.posargs)


@nox.session
@nox.parametrize("flavor", ["pristine", "fixed"])
def proof(session: nox.Session, flavor: str) -> None:
    """Proof tests against the pristine pins (each must fail with its bug) or the +fixed build (each must pass)."""
    reqs = Path(session.create_tmp()) / f"{flavor}.txt"
    if flavor == "fixed":
        tool(session, "build")
    tool(session, "requirements", flavor, "-o", str(reqs))
    session.install("--extra-index-url", (ROOT / "dist" / "simple").as_uri(), "-r", str(reqs), TORCH, "pytest")
    session.run("python", "-m", "patchwheel", "status", env=TOOL_ENV)
    session.run("pytest", "tests/proof", "-p", "no:cacheprovider", *session.posargs)


@nox.session
def e2e(session: nox.Session) -> None:
    """Publish to a real pypiserver on 127.0.0.1 and pip install the +fixed set into a fresh environment."""
    tool(session, "build")
    session.install("-e", ".[e2e]")
    session.run("pytest", "tests/e2e", "-p", "no:cacheprovider", *session.posargs,
                env={"PATCHWHEEL_DIST": str(ROOT / "dist"), "TORCH_VERSION": TORCH.split("==")[1]})


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks (results in the README): wheel rewrite vs patched sdist, nox -s build cold and warm."""
    session.install("packaging", "setuptools", "wheel")
    session.run("python", "bench/bench.py", *session.posargs, env={"PATH": f"{Path(sys.executable).parent}:"
                                                                           f"{os.environ.get('PATH', '')}"})
