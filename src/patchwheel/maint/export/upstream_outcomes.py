"""A pytest plugin, loaded by name (``-p upstream_outcomes``) in the export's environment, which has no patchwheel:
it imports only pytest and the stdlib. It writes each test's outcome to ``$PATCHWHEEL_UPSTREAM_REPORT`` as JSON:
node id, outcome (passed, failed, skipped, error: a failure outside the test's call), and for a failure the
exception's type name and message as the exception holds them (not pytest's rendering), for a skip its reason."""

from __future__ import annotations

import json
import os

import pytest

_cases: list[dict] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.excinfo is not None and report.outcome == "failed":
        report.user_properties.append(("raises", call.excinfo.typename))
        report.user_properties.append(("message", str(call.excinfo.value)))
    return report


def pytest_runtest_logreport(report):
    if report.when != "call" and report.outcome == "passed":
        return  # setup and teardown that went well
    props = dict(report.user_properties)
    outcome = "error" if report.outcome == "failed" and report.when != "call" else report.outcome
    reason = str(report.longrepr[2]) if outcome == "skipped" and isinstance(report.longrepr, tuple) else ""
    reason = reason.removeprefix("Skipped: ")
    _cases.append(
        {
            "test": report.nodeid,
            "outcome": outcome,
            "raises": props.get("raises", ""),
            "message": props.get("message", reason),
        }
    )


def pytest_collectreport(report):
    if report.failed:  # a test file that cannot be imported: an error, with the end of pytest's report
        _cases.append({"test": report.nodeid, "outcome": "error", "raises": "", "message": str(report.longrepr)[-600:]})


def pytest_sessionfinish(session):
    path = os.environ.get("PATCHWHEEL_UPSTREAM_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(_cases, fh)
