"""`patchwheel status` names the known bugs of a pristine environment, from the project's own evidence only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from uv import find_uv_bin

from conftest import CORE, INIT, TRAILERS, edit_greet, make_patch
from patchwheel import knownbugs
from patchwheel.matrix.table import Matrix

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}


def _matrix(cells: dict[str, dict]) -> Matrix:
    return Matrix.from_json(_lines(cells))


def _lines(cells: dict[str, dict]) -> dict:
    cells = {v: {"text": "clean", **c} for v, c in cells.items()}
    return {
        "lines": [
            {
                "line": "demo/1.0.0",
                "patches": [
                    {"name": "0001-greet-comma.patch", "subject": "Greet with a comma", "cells": cells},
                    {"name": "0002-a-feature.patch", "subject": "A feature", "cells": {}},
                ],
            }
        ]
    }


def _report(version: str, fixed: bool = False) -> dict:
    return {"python": "py", "packages": [{"package": "demo", "installed": True, "version": version, "fixed": fixed}]}


def test_a_release_line_of_the_project_has_the_bugs_its_proofs_show(demo_project):
    feature = {**TRAILERS, "Feature-Test": "tests/proof/test_demo.py"}
    del feature["Proof-Test"]
    demo_project.set_series(
        ("0001-greet-comma.patch", make_patch(UPSTREAM, edit_greet, "Greet with a comma", TRAILERS)),
        (
            "0002-a-feature.patch",
            make_patch(
                UPSTREAM, lambda f: {**f, "src/demo/__init__.py": INIT + b"FEATURE = 1\n"}, "A feature", feature
            ),
        ),
    )
    rep = knownbugs.annotate(demo_project.load(), None, _report("1.0.0"))
    known = rep["packages"][0]["known"]
    assert [b["fix"] for b in known["bugs"]] == ["greet-comma"]  # the feature is not a bug
    assert known["install"] == "demo==1.0.0+fixed" and knownbugs.affected(rep) and known["derive"] is None
    assert known["bugs"][0]["upstream_issue"] == TRAILERS["Upstream-Issue"]
    text = knownbugs.render(rep)
    assert "greet-comma: Greet with a comma" in text and "pip install 'demo==1.0.0+fixed'" in text


def test_other_releases_are_judged_by_the_committed_matrix_only(demo_project):
    project = demo_project.load()
    matrix = _matrix(
        {
            "1.1.0": {"behaviour": "fails", "behaviour_detail": "test_greet: BugSymptom: no comma"},
            "1.2.0": {"behaviour": "passes"},
            "1.3.0": {"behaviour": None, "text": "clean"},  # text only: no proof ran there
        }
    )
    rep = knownbugs.annotate(project, matrix, _report("1.1.0"))
    (bug,) = rep["packages"][0]["known"]["bugs"]
    assert bug["fix"] == "greet-comma" and "BugSymptom: no comma" in bug["evidence"]
    assert bug["upstream_issue"] == TRAILERS["Upstream-Issue"]  # from the series that carries the fix
    assert "no +fixed build of 1.1.0; +fixed builds: 1.0.0+fixed" in knownbugs.render(rep)
    assert "its maintainers make one for 1.1.0 with: nox -s derive -- demo==1.1.0" in knownbugs.render(rep)
    assert rep["packages"][0]["known"]["derive"] == "nox -s derive -- demo==1.1.0"
    fixed = knownbugs.annotate(project, matrix, _report("1.2.0"))
    assert not knownbugs.affected(fixed) and "no known bug" in knownbugs.render(fixed)
    unmeasured = knownbugs.annotate(project, matrix, _report("1.3.0"))
    assert not knownbugs.affected(unmeasured) and "not measured by this project" in knownbugs.render(unmeasured)
    assert "is made with: nox -s derive -- demo==1.3.0" in knownbugs.render(unmeasured)


def test_the_newest_line_s_verdict_stands(demo_project):
    """Two lines judged the same fix on one release: the newer line's proof (the fix's newest form) decides."""
    older = _lines({"1.1.0": {"behaviour": "fails"}})["lines"][0]
    newer = {
        **older,
        "line": "demo/1.0.5",
        "patches": [{**older["patches"][0], "cells": {"1.1.0": {"text": "clean", "behaviour": "passes"}}}],
    }
    rep = knownbugs.annotate(demo_project.load(), Matrix.from_json({"lines": [older, newer]}), _report("1.1.0"))
    assert rep["packages"][0]["known"]["bugs"] == [] and rep["packages"][0]["known"]["measured"]


def test_a_fixed_build_is_left_to_its_manifest(demo_project):
    rep = knownbugs.annotate(demo_project.load(), None, _report("1.0.0+fixed", fixed=True))
    assert "known" not in rep["packages"][0] and knownbugs.render(rep) == ""


def test_status_exit_code_and_json_say_whether_a_known_bug_applies(demo_project, tmp_path):
    """The real command on a real environment: demo 1.0.0 installed pristine, so its known bug applies."""
    site = tmp_path / "site"
    # uv (the test extra has it): an environment made by uv has no pip
    installer = [find_uv_bin(), "pip", "install", "--python", sys.executable]
    subprocess.run([*installer, "-q", "--no-deps", "--target", str(site), str(demo_project.upstream)], check=True)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{site}"}
    cmd = [sys.executable, "-m", "patchwheel", "--root", str(demo_project.root), "status"]
    ran = subprocess.run(cmd + ["--json"], capture_output=True, text=True, env=env)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    demo = next(p for p in json.loads(ran.stdout)["packages"] if p["package"] == "demo")
    assert [b["fix"] for b in demo["known"]["bugs"]] == ["greet-comma"]


def test_a_proof_listing_several_tests_is_named_by_its_module(demo_project):
    listed = ", ".join(f"tests/proof/test_demo.py::test_{n}" for n in ("greet", "greet", "greet"))
    patch = make_patch(UPSTREAM, edit_greet, "Greet with a comma", {**TRAILERS, "Proof-Test": listed})
    demo_project.set_series(("0001-greet-comma.patch", patch))
    (bug,) = knownbugs.annotate(demo_project.load(), None, _report("1.0.0"))["packages"][0]["known"]["bugs"]
    assert bug["evidence"].startswith("its proof (tests/proof/test_demo.py, 3 of its tests) fails"), bug
