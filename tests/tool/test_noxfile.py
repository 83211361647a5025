"""The noxfile's own logic: which command lines run the default suite in parallel, and which sessions may."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def noxfile():
    saved = dict(os.environ)  # importing it sets UV_FIND_LINKS
    spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.parametrize(
    "argv",
    [["nox"], ["nox", "-j", "1"], ["nox", "-R"], ["nox", "-ts"], ["nox", "-fb", "uv"], ["nox", "--", "-k", "x"]],
)
def test_a_bare_suite_runs_in_parallel(noxfile, argv, monkeypatch):
    monkeypatch.delenv("NOXSESSION", raising=False)
    assert noxfile._runs_the_suite(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["nox", "-s", "build"],
        ["nox", "-sbuild"],
        ["nox", "--session=build"],
        ["nox", "-e", "lint"],
        ["nox", "-k", "proof"],
        ["nox", "-t", "x"],
        ["nox", "-Rs", "tests"],
        ["nox", "-xs", "tests"],
    ],
)
def test_a_chosen_session_runs_as_nox_runs_it(noxfile, argv, monkeypatch):
    """Else `nox -s build` warns that no chosen session allows parallel execution, and a chosen session that does
    runs in a child process with its output held back."""
    monkeypatch.delenv("NOXSESSION", raising=False)
    assert not noxfile._runs_the_suite(argv)


def test_noxsession_chooses_too(noxfile, monkeypatch):
    monkeypatch.setenv("NOXSESSION", "lint")
    assert not noxfile._runs_the_suite(["nox"])


def test_sessions_that_read_dist_require_the_build_and_do_not_build_themselves(noxfile):
    """Two sessions building dist/ at once would each rewrite it while the other reads it."""
    import nox.registry

    sessions = nox.registry.get()
    for name in ("tests", "proof", "guards", "e2e", "mutants", "upstream_suite"):
        assert sessions[name].requires == ["dist"], name
    assert not sessions["dist"].allow_parallel  # runs alone
    suite = list(nox.options.sessions or [])
    assert suite, "the noxfile names the default sessions"
    for name in suite:
        assert sessions[name].allow_parallel, name
    text = (ROOT / "noxfile.py").read_text()
    assert text.count('tool(session, "build")') == 1  # the dist session's (the build session passes its args)
