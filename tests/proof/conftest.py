"""The proof-test contract, enforced.

Every test here is marked ``proof(package=..., pristine_error=<regex>)``. What it must do depends on what is
installed, read from the wheel's own manifest (``patchwheel.status``):

- the installed package is a +fixed build carrying the patch whose ``Proof-Test`` trailer names this file:
  the test must PASS;
- otherwise (the pristine pin, or a build without that patch): the test must FAIL, and with the bug's own error
  (``pristine_error`` must match the failure). A pass is reported as a failure ("XPASS(strict)"); a failure with
  another error stays a failure. A matching failure is reported as xfailed, with the error shown.

A test also marked ``regression`` must pass on every build: it guards that a fix breaks nothing that worked.

``--proof-expect=observe`` records outcomes without judging them (the upstream check runs proofs against newer
pristine releases to learn whether upstream fixed a bug); ``pass``/``fail`` force the expectation.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from patchwheel import status  # noqa: E402  (standard library only)

_outcomes: list[tuple[str, str, str]] = []
_report: list[dict] = []  # written to $PATCHWHEEL_PROOF_REPORT for the upstream check


def pytest_addoption(parser):
    parser.addoption("--proof-expect", choices=("auto", "pass", "fail", "observe"), default="auto",
                     help="what proof tests must do (auto: pass on a +fixed build carrying the fix, else fail)")


def pytest_configure(config):
    config.addinivalue_line("markers", "proof(package, pristine_error): a proof test of one patch (see conftest)")
    config.addinivalue_line("markers", "regression: must pass on pristine and +fixed builds alike")


def _expectation(item) -> tuple[str, str]:
    marker = item.get_closest_marker("proof")
    mode = item.config.getoption("--proof-expect")
    pkg = marker.kwargs["package"]
    info = status.inspect(pkg)
    if not info["installed"]:
        pytest.fail(f"{pkg} is not installed in {sys.executable}")
    rel = Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix()
    carried = [p["name"] for p in info["patches"] if (p.get("proof_test") or "").split("::")[0] == rel]
    where = f"{pkg} {info['version']}" + (f" carrying {carried[0]}" if carried else
                                         (" (+fixed, without this fix)" if info["fixed"] else " (pristine)"))
    if item.get_closest_marker("regression") is not None:
        return ("observe" if mode == "observe" else "pass"), where + ", regression guard"
    if mode != "auto":
        return mode, where
    return ("pass" if carried else "fail"), where


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("proof") is None:
            raise pytest.UsageError(f"{item.nodeid}: every test under tests/proof needs @pytest.mark.proof")
        item.stash_expect = _expectation(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if call.when != "call":
        return
    expect, where = item.stash_expect
    pattern = item.get_closest_marker("proof").kwargs["pristine_error"]
    error = "" if call.excinfo is None else f"{call.excinfo.typename}: {call.excinfo.value}"
    if expect == "fail":
        if call.excinfo is None:
            rep.outcome = "failed"
            rep.longrepr = (f"[XPASS(strict)] proof test passed on {where}: the bug is not reproduced here, "
                            "so this test proves nothing (or upstream fixed it)")
            verdict = "PASSED, but the bug was expected"
        elif re.search(pattern, error):
            rep.outcome = "skipped"
            rep.wasxfail = f"bug reproduced on {where}: {error.splitlines()[0][:300]}"
            verdict = f"failed as it must: {error.splitlines()[0][:160]}"
        else:
            verdict = f"FAILED with another error than the bug's ({pattern!r})"
    else:
        verdict = "passed" if call.excinfo is None else f"FAILED: {error.splitlines()[0][:160] if error else ''}"
    _outcomes.append((item.nodeid, where, verdict))
    _report.append({"test": item.name, "outcome": "passed" if call.excinfo is None else "failed",
                    "bug": bool(call.excinfo is not None and re.search(pattern, error)),
                    "error": error.splitlines()[0][:300] if error else ""})


def pytest_sessionfinish(session):
    if os.environ.get("PATCHWHEEL_PROOF_REPORT"):
        Path(os.environ["PATCHWHEEL_PROOF_REPORT"]).write_text(json.dumps(_report, indent=1))


def pytest_terminal_summary(terminalreporter):
    if not _outcomes:
        return
    terminalreporter.section("proof tests: installed build and verdict")
    for nodeid, where, verdict in _outcomes:
        terminalreporter.write_line(f"{nodeid}\n    on {where}: {verdict}")
