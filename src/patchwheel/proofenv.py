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
import signal
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

    ``passes``: every test ran and passed (the bug is gone). ``fails``: a test failed with the bug's signature (see
    tests/proof/conftest.py). ``error``: could not judge: a test failed otherwise, could not observe, was skipped
    or could not be set up, or nothing ran (e.g. an API the test uses changed on this release)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [str(env / "bin" / "python"), "-m", "pytest", proof_file, "-q", "-p", "no:cacheprovider",
               "--proof-expect=observe", "-m", "not regression"]
        proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PATCHWHEEL_PROOF_REPORT": str(report)}, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # pytest and the ranks it spawned
            proc.communicate()
            return ProofOutcome("error", f"timed out after {timeout:.0f} s")
        if not report.is_file():
            tail = output.strip().splitlines()
            return ProofOutcome("error", tail[-1][:200] if tail else f"pytest exited {proc.returncode}")
        cases = json.loads(report.read_text())
    return judge(cases)


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
