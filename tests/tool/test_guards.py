"""The differential guards (tests/guards/conftest.py and guardkit.py) judged on a synthetic package, one rule each.

Each test builds a small project with the real guard plugin and an installed package "demo" (a folder on
PYTHONPATH with its dist-info): pristine 1.0.0, or a +fixed build of it whose code may differ. A guard module runs
with ``--guard-record`` on pristine, then with ``--guard-against`` on the +fixed build, as `nox -s guards` runs it;
the tests read the exit status and the summary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUARDS = ROOT / "tests" / "guards"

PRISTINE = """
import logging
import warnings

def loss():
    return 4.158

def train(steps):
    return [4.158 - 0.01 * i for i in range(steps)]

def load(device_map=None):
    if device_map == "meta":
        raise ValueError("cannot load onto meta")
    return {"type": "Model", "keys": ["a.weight", "b.weight"]}

def notice():
    pass
"""


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "tests" / "guards").mkdir(parents=True)
        for name in ("conftest.py", "guardkit.py"):
            shutil.copy(GUARDS / name, root / "tests" / "guards" / name)
        (root / "src").symlink_to(ROOT / "src")
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
        head = "import pytest\n\nimport demo\n\npytestmark = pytest.mark.guard(package='demo')\n\n"
        (self.root / "tests" / "guards" / "test_demo.py").write_text(head + textwrap.dedent(body))

    def run(self, mode: str, *, seed: str | None = "0") -> tuple[int, str]:
        env = {**os.environ, "PYTHONPATH": str(self.site)}
        env.pop("PYTHONHASHSEED", None)
        if seed is not None:
            env["PYTHONHASHSEED"] = seed
        res = subprocess.run(
            [sys.executable, "-m", "pytest", "tests/guards", mode, str(self.reference), "-p", "no:cacheprovider"],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return res.returncode, res.stdout + res.stderr

    def both(self, fixed_code: str) -> tuple[int, str]:
        """Record on pristine (it must pass), then compare the +fixed build running ``fixed_code``."""
        self.install()
        code, out = self.run("--guard-record")
        assert code == 0, out
        self.install(fixed_code, fixed=True)
        return self.run("--guard-against")


@pytest.fixture
def project(tmp_path):
    return Project(tmp_path / "project")


TRAINS = """
def test_training(observe):
    observe("losses", demo.train(3))
    demo.notice()
"""


def test_the_same_code_is_the_same(project):
    project.guard(TRAINS)
    code, out = project.both(PRISTINE)
    assert code == 0, out
    assert "same as pristine" in out, out


def test_a_planted_loss_difference_fails_and_names_both_values(project):
    project.guard(TRAINS)
    code, out = project.both(PRISTINE.replace("return [4.158 - 0.01 * i", "return [8.316 - 0.02 * i"))
    assert code == 1, out
    assert "GuardDifference" in out and "losses[0]: pristine 4.158, +fixed 8.316" in out, out
    assert "DIFFERS from pristine at losses[0], losses[1], losses[2]" in out, out


def test_float_noise_below_the_tolerance_is_the_same(project):
    project.guard(TRAINS)
    code, out = project.both(PRISTINE.replace("return [4.158 - 0.01 * i", "return [4.1580000004 - 0.01 * i"))
    assert code == 0, out


def test_a_new_warning_or_log_record_fails(project):
    project.guard(TRAINS)
    new_warning = PRISTINE.replace(
        "def notice():\n    pass", 'def notice():\n    warnings.warn("each process loads a full copy")'
    )
    code, out = project.both(new_warning)
    assert code == 1 and 'warnings: pristine [], +fixed ["UserWarning: each process loads a full copy"]' in out, out
    new_log = PRISTINE.replace(
        "def notice():\n    pass", 'def notice():\n    logging.getLogger("demo").warning("full copy")'
    )
    code, out = project.both(new_log)
    assert code == 1 and 'logs: pristine [], +fixed ["WARNING demo: full copy"]' in out, out


def test_an_info_record_below_the_default_level_is_not_seen(project):
    project.guard(TRAINS)
    info = PRISTINE.replace("def notice():\n    pass", 'def notice():\n    logging.getLogger("demo").info("hidden")')
    code, out = project.both(info)
    assert code == 0, out


def test_an_exception_of_the_code_under_test_is_an_observation(project):
    project.guard(
        """
        def test_meta_load(observe):
            observe("loaded", demo.load("meta"))
        """
    )
    code, out = project.both(PRISTINE.replace('raise ValueError("cannot load onto meta")', "pass"))
    assert code == 1, out
    assert 'raised: pristine {"message": "cannot load onto meta", "type": "ValueError"}, +fixed null' in out, out


DECLARED = """
@pytest.mark.intended("losses", reason="the fix halves a doubled loss", when="demo<2")
def test_training(observe):
    observe("losses", demo.train(3))
    observe("keys", demo.load()["keys"])
"""


def test_a_declared_difference_passes_with_its_reason(project):
    project.guard(DECLARED)
    code, out = project.both(PRISTINE.replace("return [4.158 - 0.01 * i", "return [2.079 - 0.01 * i"))
    assert code == 0, out
    assert "same as pristine; intended: the fix halves a doubled loss" in out, out


def test_a_declaration_covers_only_its_key(project):
    project.guard(DECLARED)
    code, out = project.both(PRISTINE.replace('"b.weight"', '"c.weight"'))
    assert code == 1 and 'keys[1]: pristine "b.weight", +fixed "c.weight"' in out, out


def test_a_declared_difference_that_does_not_occur_fails(project):
    project.guard(DECLARED)
    code, out = project.both(PRISTINE)
    assert code == 1, out
    assert "losses: declared intended (the fix halves a doubled loss) but equal to pristine here" in out, out


def test_a_declaration_out_of_force_covers_nothing(project):
    project.guard(DECLARED.replace('when="demo<2"', 'when="demo>=2"'))
    code, out = project.both(PRISTINE.replace("return [4.158 - 0.01 * i", "return [2.079 - 0.01 * i"))
    assert code == 1 and "losses[0]: pristine 4.158, +fixed 2.079" in out, out


def test_a_declaration_on_matching_warnings_only(project):
    project.guard(
        """
        @pytest.mark.intended("warnings", match="^UserWarning: gather", reason="torch says it stacks scalars")
        def test_training(observe):
            observe("losses", demo.train(1))
            demo.notice()
        """
    )
    gather = PRISTINE.replace("def notice():\n    pass", 'def notice():\n    warnings.warn("gather of scalars")')
    code, out = project.both(gather)
    assert code == 0 and "intended: torch says it stacks scalars" in out, out
    both = gather.replace(
        'warnings.warn("gather of scalars")', 'warnings.warn("gather of scalars"); warnings.warn("new")'
    )
    code, out = project.both(both)
    assert code == 1 and 'warnings: pristine [], +fixed ["UserWarning: new"]' in out, out


@pytest.mark.parametrize(
    "body,error",
    [
        ("def test_x(observe):\n    assert demo.loss() == 5\n", "the guard's own code failed (AssertionError"),
        ("def test_x(observe):\n    demo.loss()\n", "observed nothing"),
        ("def test_x():\n    demo.loss()\n", "does not take the `observe` fixture"),
        ("def test_x(observe):\n    observe('raised', 1)\n", "the key is reserved"),
    ],
    ids=["own-assert", "nothing", "no-fixture", "reserved-key"],
)
def test_a_guard_that_cannot_observe_is_an_error_in_both_runs(project, body, error):
    project.guard(body)
    project.install()
    code, out = project.run("--guard-record")
    assert code == 1 and error in out, out


def test_a_skip_fails_unless_allowed(project):
    project.guard("def test_x(observe):\n    pytest.skip('no GPU')\n")
    project.install()
    code, out = project.run("--guard-record")
    assert code == 1 and "a guard that does not run shows nothing" in out, out
    project.guard("@pytest.mark.may_skip(reason='GPU form')\ndef test_x(observe):\n    pytest.skip('no GPU')\n")
    code, out = project.run("--guard-record")
    assert code == 0 and "guards that did not run" in out and "allowed: GPU form" in out, out


def test_the_runs_must_be_the_right_builds(project):
    project.guard(TRAINS)
    project.install(fixed=True)
    code, out = project.run("--guard-record")
    assert code == 4 and "--guard-record records the reference, which is pristine" in out, out
    project.install()
    assert project.run("--guard-record")[0] == 0
    code, out = project.run("--guard-against")
    assert code == 4 and "--guard-against compares a +fixed build with pristine; demo is pristine here" in out, out
    project.install(fixed=True, version="1.1.0")
    code, out = project.run("--guard-against")
    assert code == 4 and "was recorded on demo 1.0.0, but this is a +fixed build of 1.1.0" in out, out
    code, out = project.run("--guard-record", seed=None)
    assert code == 4 and "set PYTHONHASHSEED" in out, out


def test_a_guard_missing_from_the_reference_fails(project):
    project.guard(TRAINS)
    project.install()
    assert project.run("--guard-record")[0] == 0
    project.guard(TRAINS + "\n\ndef test_new(observe):\n    observe('x', 1)\n")
    project.install(fixed=True)
    code, out = project.run("--guard-against")
    assert code == 1 and "has no record of tests/guards/test_demo.py::test_new" in out, out


def test_the_guards_of_a_set_are_its_patches_guard_tests(demo_project, capsys):
    """`patchwheel guards --set NAME` (what `nox -s guards` runs): the Guard-Test modules of the set's lines."""
    from patchwheel import cli

    assert cli.main(["--root", str(demo_project.root), "guards", "--set", "default"]) == 0
    assert capsys.readouterr().out.split() == ["tests/guards/test_demo.py"]
    assert cli.main(["--root", str(demo_project.root), "guards", "--set", "nightly"]) == 2
    assert "unknown set 'nightly'" in capsys.readouterr().err
