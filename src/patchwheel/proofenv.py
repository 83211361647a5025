"""Run proof tests against pristine upstream releases, each in its own cached virtual environment.

A base environment holds torch (pinned: TORCH_VERSION, default 2.13.0) and pytest. Each release environment is a
small venv whose ``.pth`` file appends the base environment's site-packages: pip sees torch as installed and
installs only the release's own wheel (sha256-verified from the cache) and its light dependencies, which take
precedence over the base's. Environments live under ``<cache>/envs/`` and are reused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import venv
from dataclasses import dataclass
from pathlib import Path

from . import fetch
from .config import Artifact
from .errors import PatchwheelError


def torch_version() -> str:
    return os.environ.get("TORCH_VERSION", "2.13.0")


def _site(env: Path) -> Path:
    rel = Path(sysconfig.get_path("purelib")).relative_to(sys.prefix)
    return env / rel


def _pip(env: Path, *args: str) -> None:
    res = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          "--no-input", *args], capture_output=True, text=True)
    if res.returncode != 0:
        raise PatchwheelError(f"pip install {' '.join(args)} failed in {env}:\n{res.stderr[-2000:]}",
                              "check the network and the package index")


def _make(env: Path, marker: str, build) -> Path:
    """Create ``env`` with ``build(tmp_env)`` unless it exists with the same marker; atomic by rename."""
    if (env / "patchwheel-env.json").is_file() and (env / "patchwheel-env.json").read_text() == marker:
        return env
    env.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{env.name}-", dir=env.parent))
    try:
        venv.create(tmp, with_pip=True, symlinks=True)
        build(tmp)
        (tmp / "patchwheel-env.json").write_text(marker)
        shutil.rmtree(env, ignore_errors=True)
        os.replace(tmp, env)
        # venv scripts hold absolute paths: we only ever run `<env>/bin/python -m ...`, which is safe after a move
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return env


def base_env(cache: Path) -> Path:
    torch = torch_version()
    return _make(cache / "envs" / f"base-torch-{torch}", json.dumps({"torch": torch}),
                 lambda env: _pip(env, f"torch=={torch}", "pytest"))


def release_env(cache: Path, wheels: list[tuple[str, Artifact]]) -> Path:
    """An environment with exactly these upstream wheels (package, artifact) on top of the base."""
    base = base_env(cache)
    name = "+".join(f"{pkg}-{art.filename.split('-')[1]}" for pkg, art in wheels)
    marker = json.dumps({"torch": torch_version(), "wheels": [a.sha256 for _, a in wheels]})

    def build(env: Path) -> None:
        (_site(env) / "patchwheel-base.pth").write_text(str(_site(base)) + "\n")
        _pip(env, *[str(fetch.fetch(pkg, art)) for pkg, art in wheels])

    return _make(cache / "envs" / name, marker, build)


@dataclass
class ProofOutcome:
    verdict: str  # "passes" (bug absent), "fails" (bug present), "error" (could not judge)
    detail: str


def run_proof(env: Path, root: Path, proof_file: str, timeout: float = 900) -> ProofOutcome:
    """Run one proof module in ``env`` with --proof-expect=observe (regression guards left out).

    ``passes``: every test passed (the bug is gone). ``fails``: a test failed with the bug's own error (the
    module's ``pristine_error`` pattern). ``error``: tests failed otherwise (the test could not reach the bug on
    this release, e.g. an API it uses changed), or nothing ran: the behaviour could not be judged."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        try:
            res = subprocess.run([str(env / "bin" / "python"), "-m", "pytest", proof_file, "-q", "-p",
                                  "no:cacheprovider", "--proof-expect=observe", "-m", "not regression"],
                                 cwd=root, capture_output=True, text=True, timeout=timeout,
                                 env={**os.environ, "PATCHWHEEL_PROOF_REPORT": str(report)})
        except subprocess.TimeoutExpired:
            return ProofOutcome("error", f"timed out after {timeout:.0f} s")
        if not report.is_file():
            tail = (res.stdout + res.stderr).strip().splitlines()
            return ProofOutcome("error", tail[-1][:200] if tail else f"pytest exited {res.returncode}")
        cases = json.loads(report.read_text())

    def first(items):
        msg = re.sub(r"\s+", " ", items[0]["error"])[:160]
        return f"{items[0]['test']}: {msg}" + (f" (+{len(items) - 1} more)" if len(items) > 1 else "")

    bug = [c for c in cases if c["outcome"] == "failed" and c["bug"]]
    other = [c for c in cases if c["outcome"] == "failed" and not c["bug"]]
    if bug:
        return ProofOutcome("fails", first(bug))
    if other:
        return ProofOutcome("error", "failed otherwise: " + first(other))
    if cases:
        return ProofOutcome("passes", f"{len(cases)} passed")
    return ProofOutcome("error", "no test ran")
