"""The differential guards (tests/guards/conftest.py and guardkit.py) judged on a synthetic package, one rule each.

A small project holds the real guard plugin and an installed package "demo" (a folder on PYTHONPATH with its
dist-info): pristine 1.0.0, or a +fixed build of it whose code differs where a rule plants a difference. One guard
module holds a guard per rule; it runs with ``--guard-record`` on pristine, then with ``--guard-against`` on the
+fixed build, as `nox -s prove` runs it (its guards chain), and each test reads its guard's outcome from the JUnit
report (the runs are made once per worker). The refusals that stop a whole run (wrong builds, no hash seed) run on
their own.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import HANG

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
            # the project is the rootdir: pytest reads an option's folder (--guard-exchange DIR, outside the
            # project) as a path when it looks for the rootdir, and would find the ini of a checkout above it
            + [f"--junitxml={junit}", "--rootdir", str(self.root), *args],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG,
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


# What one build writes, the other loads: pristine pickles a Box; this +fixed build pickles a subclass that pristine
# lacks (as T3's DataParallel wrapper once did), and loads either.
EXCHANGE_PRISTINE = """
import pickle

class Box:
    def __init__(self, value):
        self.value = value

def save(path, value):
    with open(path, "wb") as f:
        pickle.dump(Box(value), f)

def load(path):
    with open(path, "rb") as f:
        return pickle.load(f).value
"""
EXCHANGE_FIXED = (
    EXCHANGE_PRISTINE
    + """
class FixedBox(Box):
    pass

def save(path, value):
    with open(path, "wb") as f:
        pickle.dump(FixedBox(value), f)
"""
)
EXCHANGE_GUARDS = (
    "import demo\n"
    + DEMO_GUARD
    + """def test_pickle(observe, exchange):
    demo.save(exchange.write("box") / "box.pkl", 3)
    observe("loaded", demo.load(exchange.read("box") / "box.pkl"))


def test_no_artifact(observe):
    observe("x", demo.load.__name__)
"""
)


def test_an_artifact_that_pristine_cannot_load_fails_the_read_back_run(tmp_path):
    """Pristine records and loads its own artifact; +fixed loads pristine's; pristine again (the read-back run, only
    the guards that take `exchange`) loads what +fixed wrote and fails where it cannot."""
    project = Project(tmp_path / "project")
    project.guard(EXCHANGE_GUARDS)
    exchange = ["--guard-exchange", str(tmp_path / "exchange")]
    project.install(EXCHANGE_PRISTINE)
    code, out, outcomes = project.run("--guard-record", *exchange)
    assert code == 0 and outcomes == {"test_pickle": "passed", "test_no_artifact": "passed"}, out
    project.install(EXCHANGE_FIXED, fixed=True)
    code, out, outcomes = project.run("--guard-against", *exchange)
    assert code == 0 and "test_pickle\n    same as pristine" in out, out
    code, out, _ = project.run("--guard-readback", *exchange)
    assert code == 4 and "loads on pristine what +fixed wrote, which is pristine; demo is a +fixed build" in out, out
    project.install(EXCHANGE_PRISTINE)
    code, out, outcomes = project.run("--guard-readback", *exchange)
    assert code == 1 and outcomes == {"test_pickle": outcomes["test_pickle"]}, out  # test_no_artifact: deselected
    assert "loads on pristine otherwise than what pristine wrote" in outcomes["test_pickle"], out
    assert 'loaded: pristine 3, pristine loading what +fixed wrote "<absent>"' in outcomes["test_pickle"], out
    assert "Can't get attribute 'FixedBox'" in out, out
    code, out, _ = project.run("--guard-readback")
    assert code == 4 and "--guard-readback loads what the +fixed run wrote: give its --guard-exchange DIR" in out


def test_a_declaration_for_the_read_back_run_only(tmp_path):
    """`readback="only"`: a difference that only what +fixed wrote carries, in force in the read-back run alone (in
    the comparing run, where it does not occur, it would fail as stale)."""
    project = Project(tmp_path / "project")
    marks = "".join(
        f'@pytest.mark.intended("{key}", reason="pristine lacks the subclass", readback="only")\n'
        for key in ("raised", "loaded")
    )
    project.guard(EXCHANGE_GUARDS.replace("def test_pickle(", marks + "def test_pickle("))
    exchange = ["--guard-exchange", str(tmp_path / "exchange")]
    project.install(EXCHANGE_PRISTINE)
    assert project.run("--guard-record", *exchange)[0] == 0
    project.install(EXCHANGE_FIXED, fixed=True)
    code, out, _ = project.run("--guard-against", *exchange)
    assert code == 0 and "test_pickle\n    same as pristine\n" in out, out
    project.install(EXCHANGE_PRISTINE)
    code, out, outcomes = project.run("--guard-readback", *exchange)
    assert code == 0 and outcomes["test_pickle"] == "passed", out
    assert "as declared: loaded, raised (pristine lacks the subclass)" in out, out


def test_without_an_exchange_folder_a_guard_loads_its_own_artifact(tmp_path):
    project = Project(tmp_path / "project")
    project.guard(EXCHANGE_GUARDS)
    project.install(EXCHANGE_FIXED, fixed=True)
    env = {**os.environ, "PYTHONPATH": str(project.site)}
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/guards", "-p", "no:cacheprovider", "-q"],
        cwd=project.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_record_made_on_other_pristine_wheels_is_refused(tmp_path):
    """The record names the sha256 of each pristine wheel it was made on (read from the file the installer's
    direct_url.json names); a +fixed build made from another upstream file (its manifest's upstream sha256) is not
    compared with it."""
    project = Project(tmp_path / "project")
    project.guard("import demo\n" + DEMO_GUARD + "def test_greet(observe):\n    observe('greet', demo.__name__)\n")
    wheel = tmp_path / "demo-1.0.0-py3-none-any.whl"
    wheel.write_bytes(b"the pristine wheel's bytes")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    project.install(PRISTINE)
    info = project.site / "demo-1.0.0.dist-info"
    (info / "direct_url.json").write_text(json.dumps({"url": wheel.as_uri(), "archive_info": {}}))
    code, out, _ = project.run("--guard-record")
    assert code == 0, out
    assert json.loads(project.reference.read_text())["upstream"] == {"demo": digest}
    project.install(PRISTINE, fixed=True)  # its manifest names upstream sha256 0...0: another file
    code, out, _ = project.run("--guard-against")
    assert code == 4, out
    assert f"was recorded on the pristine wheel of demo with sha256 {digest[:16]}" in out, out
    assert "this +fixed build was made from 0000000000000000" in out, out
    manifest = project.site / "demo-1.0.0+fixed.dist-info" / "overlay-fixes.json"
    manifest.write_text(manifest.read_text().replace("0" * 64, digest))
    code, out, _ = project.run("--guard-against")
    assert code == 0, out
