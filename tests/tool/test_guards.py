"""The differential guards (tests/guards/conftest.py and guardkit.py) judged on a synthetic package, one rule each.

A small project holds the real guard plugin and an installed package "demo" (a folder on PYTHONPATH with its
dist-info): pristine 1.0.0, or a +fixed build of it whose code differs where a rule plants a difference. One guard
module holds a guard per rule; it runs with ``--guard-record`` on pristine, then with ``--guard-against`` on the
+fixed build, as `nox -s guards` runs it, and each test reads its guard's outcome from the JUnit report (the runs
are made once per worker). The refusals that stop a whole run (wrong builds, no hash seed) run on their own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUARDS = ROOT / "tests" / "guards"

# Each function serves one guard; the +fixed build (FIXED) changes some of them.
PRISTINE = """
import logging
import warnings

def train(steps, start=4.158):
    return [start - 0.01 * i for i in range(steps)]

def keys():
    return ["a.weight", "b.weight"]

def load(device_map):
    if device_map == "meta":
        raise ValueError("cannot load onto meta")
    return "Model"

def quiet():
    pass

def gather():
    pass
"""
FIXED = (
    PRISTINE.replace("def train(steps, start=4.158):", "def train(steps, start=4.158, planted=0.0):")
    .replace("return [start - 0.01 * i", "return [start + planted - 0.01 * i")
    .replace('        raise ValueError("cannot load onto meta")\n', "        pass\n")
    .replace(
        '    return "Model"',
        '    if device_map == "meta-fixed-crash":\n        raise RuntimeError("new crash")\n    return "Model"',
    )
    .replace('    return ["a.weight", "b.weight"]', '    return ["a.weight", "c.weight"]')
    .replace("def gather():\n    pass", 'def gather():\n    warnings.warn("gather of scalars")')
    + """
def quiet_warning():
    warnings.warn("each process loads a full copy")

def quiet_log():
    logging.getLogger("demo").warning("full copy")

def quiet_info():
    logging.getLogger("demo").info("hidden")

def gather_and_more():
    gather()
    warnings.warn("new")
"""
)

# What pristine calls is what +fixed calls; the +fixed build's extra functions stand in for pristine's quiet().
RULES = """
import pytest

import demo

pytestmark = pytest.mark.guard(package="demo")
FIXED = hasattr(demo, "quiet_warning")


def _call(name):
    getattr(demo, name if FIXED else "quiet")()


def test_same(observe):
    observe("losses", demo.train(3))


def test_planted_loss(observe):
    observe("losses", demo.train(3, planted=4.158) if FIXED else demo.train(3))


def test_float_noise(observe):
    observe("losses", demo.train(3, planted=4e-10) if FIXED else demo.train(3))


def test_new_warning(observe):
    observe("losses", demo.train(1))
    _call("quiet_warning")


def test_new_log_record(observe):
    observe("losses", demo.train(1))
    _call("quiet_log")


def test_info_below_the_default_level(observe):
    observe("losses", demo.train(1))
    _call("quiet_info")


def test_exception_of_the_code_under_test(observe):
    observe("loaded", demo.load("meta"))


@pytest.mark.intended("losses", reason="the fix doubles a halved loss", when="demo<2")
def test_declared(observe):
    observe("losses", demo.train(3, planted=4.158) if FIXED else demo.train(3))


@pytest.mark.intended("losses", reason="the fix doubles a halved loss", when="demo<2")
def test_declared_covers_only_its_key(observe):
    observe("losses", demo.train(3, planted=4.158) if FIXED else demo.train(3))
    observe("keys", demo.keys())


@pytest.mark.intended("losses", reason="the fix doubles a halved loss", when="demo<2")
def test_declared_but_equal(observe):
    observe("losses", demo.train(3))


@pytest.mark.intended("losses", reason="the fix doubles a halved loss", when="demo>=2")
def test_declared_out_of_force(observe):
    observe("losses", demo.train(3, planted=4.158) if FIXED else demo.train(3))


@pytest.mark.intended("warnings", match="^UserWarning: gather", reason="torch says it stacks scalars")
def test_declared_matching_warnings(observe):
    observe("losses", demo.train(1))
    demo.gather()


@pytest.mark.intended("warnings", match="^UserWarning: gather", reason="torch says it stacks scalars")
def test_declared_matching_warnings_and_another(observe):
    observe("losses", demo.train(1))
    _call("gather_and_more")


@pytest.mark.intended("*", reason="pristine crashes here: the bug itself")
def test_in_the_bug(observe):
    observe("loaded", demo.load("meta"))


@pytest.mark.intended("*", reason="pristine differs here: the bug itself")
def test_in_the_bug_but_fixed_crashes(observe):
    observe("losses", demo.train(1))
    if FIXED:
        demo.load("meta-fixed-crash")


def test_not_in_the_reference(observe):
    observe("losses", demo.train(1))
"""

CANNOT_OBSERVE = """
import pytest

import demo

pytestmark = pytest.mark.guard(package="demo")


def test_own_assert(observe):
    assert demo.train(1) == [5]


def test_nothing(observe):
    demo.train(1)


def test_no_fixture():
    demo.train(1)


def test_reserved_key(observe):
    observe("raised", 1)


def test_skip(observe):
    pytest.skip("no GPU")


@pytest.mark.may_skip(reason="GPU form")
def test_allowed_skip(observe):
    pytest.skip("no GPU")
"""


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "tests" / "guards").mkdir(parents=True)
        for name in ("conftest.py", "guardkit.py"):
            shutil.copy(GUARDS / name, root / "tests" / "guards" / name)
        (root / "src").symlink_to(ROOT / "src")
        (root / "pytest.ini").write_text("[pytest]\n")  # the project is its own rootdir, wherever it lies
        self.site = root / "site"
        self.reference = root / "pristine.json"

    def install(self, code: str = PRISTINE, fixed: bool = False, version: str = "1.0.0") -> None:
        shutil.rmtree(self.site, ignore_errors=True)
        (self.site / "demo").mkdir(parents=True)
        (self.site / "demo" / "__init__.py").write_text(textwrap.dedent(code))
        full = version + ("+fixed" if fixed else "")
        info = self.site / f"demo-{full}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: demo\nVersion: {full}\n")
        if fixed:
            manifest = {"version": full, "upstream": {"version": version, "sha256": "0" * 64}, "patches": []}
            (info / "overlay-fixes.json").write_text(json.dumps(manifest))

    def guard(self, body: str) -> None:
        (self.root / "tests" / "guards" / "test_demo.py").write_text(body)

    def run(self, mode: str, *args: str, seed: str | None = "0") -> tuple[int, str, dict[str, str]]:
        """Exit status, output, and each guard's outcome: "passed", "skipped", or its failure's message."""
        env = {**os.environ, "PYTHONPATH": str(self.site)}
        env.pop("PYTHONHASHSEED", None)
        if seed is not None:
            env["PYTHONHASHSEED"] = seed
        junit = self.root / "junit.xml"
        junit.unlink(missing_ok=True)
        res = subprocess.run(
            [sys.executable, "-m", "pytest", "tests/guards", mode, str(self.reference), "-p", "no:cacheprovider"]
            + [f"--junitxml={junit}", *args],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        outcomes = {}
        if junit.is_file():
            for case in ET.parse(junit).iter("testcase"):
                bad = case.find("failure")
                bad = bad if bad is not None else case.find("error")
                skipped = case.find("skipped")
                outcomes[case.get("name", "")] = (
                    (bad.get("message") or bad.text or "")  # the exception's message, not the traceback
                    if bad is not None
                    else ("skipped" if skipped is not None else "passed")
                )
        return res.returncode, res.stdout + res.stderr, outcomes


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """The rules module recorded on pristine (without test_not_in_the_reference), compared on +fixed."""
    project = Project(tmp_path_factory.mktemp("guards") / "project")
    project.guard(RULES)
    project.install()
    code, out, outcomes = project.run(
        "--guard-record", "--deselect", "tests/guards/test_demo.py::test_not_in_the_reference"
    )
    assert code == 0 and set(outcomes.values()) == {"passed"}, out
    project.install(FIXED, fixed=True)
    return project.run("--guard-against")[1:]


def _outcome(compared, name: str) -> str:
    return compared[1][name]


def test_the_same_code_is_the_same(compared):
    assert _outcome(compared, "test_same") == "passed"
    assert "tests/guards/test_demo.py::test_same\n    same as pristine" in compared[0]


def test_a_planted_loss_difference_fails_and_names_both_values(compared):
    message = _outcome(compared, "test_planted_loss")
    assert "GuardDifference" in message and "losses[0]: pristine 4.158, +fixed 8.316" in message, message
    assert "DIFFERS from pristine at losses[0], losses[1], losses[2]" in compared[0]


def test_float_noise_below_the_tolerance_is_the_same(compared):
    assert _outcome(compared, "test_float_noise") == "passed"


def test_a_new_warning_or_log_record_fails(compared):
    message = _outcome(compared, "test_new_warning")
    assert 'warnings: pristine [], +fixed ["UserWarning: each process loads a full copy"]' in message, message
    message = _outcome(compared, "test_new_log_record")
    assert 'logs: pristine [], +fixed ["WARNING demo: full copy"]' in message, message


def test_an_info_record_below_the_default_level_is_not_seen(compared):
    assert _outcome(compared, "test_info_below_the_default_level") == "passed"


def test_an_exception_of_the_code_under_test_is_an_observation(compared):
    message = _outcome(compared, "test_exception_of_the_code_under_test")
    assert 'raised: pristine {"message": "cannot load onto meta", "type": "ValueError"}, +fixed null' in message


def test_a_declared_difference_passes_with_its_reason(compared):
    assert _outcome(compared, "test_declared") == "passed"
    verdict = "same as pristine except, as declared: losses[0], losses[1], losses[2] (the fix doubles a halved loss)"
    assert f"test_declared\n    {verdict}" in compared[0]


def test_a_declaration_covers_only_its_key(compared):
    message = _outcome(compared, "test_declared_covers_only_its_key")
    assert 'keys[1]: pristine "b.weight", +fixed "c.weight"' in message and "losses" not in message, message


def test_a_declared_difference_that_does_not_occur_fails(compared):
    message = _outcome(compared, "test_declared_but_equal")
    assert "losses: declared intended (the fix doubles a halved loss) but equal to pristine here" in message


def test_a_declaration_out_of_force_covers_nothing(compared):
    message = _outcome(compared, "test_declared_out_of_force")
    assert "losses[0]: pristine 4.158, +fixed 8.316" in message, message


def test_a_declaration_on_matching_warnings_only(compared):
    assert _outcome(compared, "test_declared_matching_warnings") == "passed"
    assert "warnings matching '^UserWarning: gather' (torch says it stacks scalars)" in compared[0]
    message = _outcome(compared, "test_declared_matching_warnings_and_another")
    assert 'warnings: pristine [], +fixed ["UserWarning: new"]' in message, message


def test_a_scenario_in_the_bug_says_it_was_not_compared(compared):
    assert _outcome(compared, "test_in_the_bug") == "passed"
    assert "test_in_the_bug\n    NOT COMPARED, in the bug here (pristine crashes here: the bug itself)" in compared[0]


def test_a_scenario_in_the_bug_still_fails_on_a_new_exception(compared):
    message = _outcome(compared, "test_in_the_bug_but_fixed_crashes")
    assert 'raised: pristine null, +fixed {"type": "RuntimeError", "message": "new crash"}' in message, message
    assert "declared intended" not in message, message


def test_a_guard_missing_from_the_reference_fails(compared):
    message = _outcome(compared, "test_not_in_the_reference")
    assert "has no record of tests/guards/test_demo.py::test_not_in_the_reference" in message, message


@pytest.fixture(scope="module")
def cannot_observe(tmp_path_factory) -> dict[str, str]:
    project = Project(tmp_path_factory.mktemp("guards") / "project")
    project.guard(CANNOT_OBSERVE)
    project.install()
    return project.run("--guard-record")[2]


@pytest.mark.parametrize(
    "name,error",
    [
        ("test_own_assert", "the guard's own code failed (AssertionError"),
        ("test_nothing", "observed nothing"),
        ("test_no_fixture", "does not take the `observe` fixture"),
        ("test_reserved_key", "the key is reserved"),
        ("test_skip", "a guard that does not run shows nothing"),
    ],
)
def test_a_guard_that_cannot_observe_is_an_error(cannot_observe, name, error):
    assert error in cannot_observe[name], cannot_observe[name]


def test_a_skip_it_allows_is_listed(cannot_observe):
    assert cannot_observe["test_allowed_skip"] == "skipped"


DEMO_GUARD = "import pytest\n\npytestmark = pytest.mark.guard(package='demo')\n\n\n"


def test_the_runs_must_be_the_right_builds(tmp_path):
    project = Project(tmp_path / "project")
    project.guard(DEMO_GUARD + "def test_x(observe):\n    pass\n")
    project.install(fixed=True)
    code, out, _ = project.run("--guard-record")
    assert code == 4 and "--guard-record records the reference, which is pristine" in out, out
    project.install()
    code, out, _ = project.run("--guard-record", seed=None)
    assert code == 4 and "set PYTHONHASHSEED" in out, out
    project.reference.write_text(json.dumps({"pristine": {"demo": "1.0.0"}, "records": {}}))
    code, out, _ = project.run("--guard-against")
    assert code == 4 and "--guard-against compares a +fixed build with pristine; demo is pristine here" in out, out
    project.install(fixed=True, version="1.1.0")
    code, out, _ = project.run("--guard-against")
    assert code == 4 and "was recorded on demo 1.0.0, but this is a +fixed build of 1.1.0" in out, out


def test_a_guard_cannot_be_xfail(tmp_path):
    project = Project(tmp_path / "project")
    project.guard(DEMO_GUARD + "@pytest.mark.xfail\ndef test_x(observe):\n    observe('x', 1)\n")
    project.install()
    code, out, _ = project.run("--guard-record")
    assert code == 4 and "a guard cannot be xfail" in out, out


def test_a_selection_compares_the_guards_it_selects(tmp_path):
    """`-k` deselects before the builds are checked: the deselected guards' packages need not be installed."""
    project = Project(tmp_path / "project")
    project.guard(
        DEMO_GUARD + "def test_x(observe):\n    observe('x', 1)\n\n\n"
        "@pytest.mark.guard(package='other')\ndef test_other(observe):\n    observe('y', 1)\n"
    )
    project.install()
    assert project.run("--guard-record", "-k", "test_x")[0] == 0
    project.install(fixed=True)
    code, out, _ = project.run("--guard-against", "-k", "test_x")
    assert code == 0, out


def test_the_guards_of_a_set_are_its_patches_guard_tests(demo_project, capsys):
    """`patchwheel guards --set NAME` (what `nox -s guards` runs): the Guard-Test modules of the set's lines."""
    from patchwheel import cli

    assert cli.main(["--root", str(demo_project.root), "guards", "--set", "default"]) == 0
    assert capsys.readouterr().out.split() == ["tests/guards/test_demo.py"]
    assert cli.main(["--root", str(demo_project.root), "guards", "--set", "nightly"]) == 2
    assert "unknown set 'nightly'" in capsys.readouterr().err
