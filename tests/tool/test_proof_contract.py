"""The proof contract (tests/proof/conftest.py and harness.py) judged on a synthetic package, one finding each.

Each test builds a small project with the real conftest, harness and proofkit, a patch series for the package
"demo", and an installed "demo" (a folder on PYTHONPATH with its dist-info), then runs pytest on a proof module
in a subprocess and reads the exit status, the summary and the observe-mode report. The modules carry both the old
marker argument (``pristine_error``) and the new one (``signatures``), so each test also ran against the conftest
as it was before these rules, and failed there.
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

from conftest import CORE, GUARD, HANG, INIT, edit_greet, make_patch
from patchwheel import config, series
from patchwheel.maint.proving import proofenv

ROOT = Path(__file__).resolve().parents[2]
# The contract under test; point it at another copy of tests/proof to judge an older conftest and harness.
CONTRACT = Path(os.environ.get("PATCHWHEEL_CONTRACT_UNDER_TEST") or ROOT / "tests" / "proof")
SHA = "0" * 64

# The installed package under test: `buggy()` raises like the bug, `harmless()` does not.
DEMO = """
def buggy():
    raise TypeError("'NoneType' object is not iterable")


def set_device(device):
    raise RuntimeError("No CUDA GPUs are available")  # torch._C._cuda_setDevice(device)


def harmless():
    return 1
"""


class Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "tests" / "proof").mkdir(parents=True)
        for name in ("conftest.py", "harness.py", "proofkit.py", "rankpreload.py"):
            shutil.copy(CONTRACT / name, root / "tests" / "proof" / name)
        (root / "tests" / "guards").mkdir()
        (root / "tests" / "guards" / "test_demo.py").write_text(GUARD)
        (root / "src").symlink_to(ROOT / "src")
        (root / "overlay" / "demo").mkdir(parents=True)
        self.site = root / "site"

    def line(
        self, version: str, proof: str | None, trailers: dict[str, str] | None = None, package: str = "demo"
    ) -> None:
        """A release line of ``package`` whose one patch names ``proof`` (or an empty series)."""
        pins = self.root / "overlay" / package / "pins.toml"
        if not pins.exists():
            pins.parent.mkdir(parents=True, exist_ok=True)
            pins.write_text(f'package = "{package}"\n')
        pins.write_text(
            pins.read_text() + f'\n[release."{version}"]\nwheel = {{ filename = '
            f'"{package}-{version}-py3-none-any.whl", sha256 = "{SHA}" }}\n'
        )
        pdir = self.root / "patches" / package / version
        pdir.mkdir(parents=True)
        if proof is None and not trailers:
            (pdir / "series").write_text("# nothing left: upstream fixed it\n")
            return
        given = {
            "Upstream-Issue": "https://github.com/example/demo/issues/1",
            "Upstream-Status": "Pending",
            "Proof-Test": proof,
            "Guard-Test": "tests/guards/test_demo.py",
            "Drop-When": "proof-passes-upstream",
            **(trailers or {}),
        }
        t = {k: v for k, v in given.items() if v}
        files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
        (pdir / "0001-greet-comma.patch").write_bytes(make_patch(files, edit_greet, "Greet with a comma", t))
        (pdir / "series").write_text("0001-greet-comma.patch\n")

    def install(self, version: str, carries: str | None = None, package: str = "demo", code: str = DEMO) -> None:
        """An installed ``package`` (replacing the one there): pristine, or a +fixed build whose manifest carries a
        patch naming ``carries``."""
        shutil.rmtree(self.site / package, ignore_errors=True)
        for old in self.site.glob(f"{package}-*.dist-info"):
            shutil.rmtree(old)
        (self.site / package).mkdir(parents=True)
        (self.site / package / "__init__.py").write_text(code)
        full = version + ("+fixed" if carries else "")
        info = self.site / f"{package}-{full}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {full}\n")
        if carries:
            (info / "overlay-fixes.json").write_text(
                json.dumps(
                    {
                        "version": full,
                        "upstream": {"version": version, "wheel": "w", "sha256": SHA},
                        "patches": [{"name": "0001-greet-comma.patch", "proof_test": carries}],
                        "patched_files": {},
                    }
                )
            )

    def module(self, name: str, body: str) -> str:
        (self.root / "tests" / "proof" / name).write_text(textwrap.dedent(body))
        return f"tests/proof/{name}"

    def pytest(self, module: str, *args: str) -> tuple[int, str, list[dict]]:
        report = self.root / "report.json"
        report.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": str(self.site), "PATCHWHEEL_PROOF_REPORT": str(report)}
        res = subprocess.run(
            [sys.executable, "-m", "pytest", module, "-p", "no:cacheprovider", "-rA", *args],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG,
        )
        cases = json.loads(report.read_text()) if report.is_file() else []
        return res.returncode, res.stdout + res.stderr, cases


@pytest.fixture
def project(tmp_path):
    return Project(tmp_path / "project")


@pytest.fixture
def other_project(tmp_path):
    return Project(tmp_path / "other")


def _marked(signatures: str, pristine_error: str, body: str) -> str:
    return (
        f"import pytest\n\npytestmark = pytest.mark.proof(package='demo', pristine_error={pristine_error!r}, "
        f"signatures={signatures})\n\n" + textwrap.dedent(body)
    )


def test_a_skip_is_a_failure_unless_the_marker_names_why(project):
    """A skip in the body or in setup passed on pristine and on +fixed; observe mode read 'passes'."""
    module = project.module(
        "test_skips.py",
        _marked(
            "[('TypeError', 'not iterable')]",
            "TypeError",
            """
        import sys

        def test_body_skip():
            pytest.skip("could not set up the model")

        @pytest.mark.skipif(sys.platform != "nonexistent", reason="needs a GPU")
        def test_setup_skip():
            pass

        @pytest.mark.may_skip(reason="the GPU form needs CUDA")
        @pytest.mark.skipif(True, reason="no CUDA here")
        def test_gpu_form():
            pass
        """,
        ),
    )
    project.line("1.0.0", module)
    for carries in (None, module):
        project.install("1.0.0", carries)
        code, out, _ = project.pytest(module)
        assert code == 1, out
        assert "test_body_skip skipped in call (could not set up the model)" in out, out
        assert "test_setup_skip skipped in setup (needs a GPU)" in out, out
        assert "did not run" in out and "test_gpu_form: skipped (no CUDA here); allowed: the GPU form needs CUDA" in out
    code, out, cases = project.pytest(module, "--proof-expect=observe", "-k", "not setup_skip")
    assert [c["outcome"] for c in cases] == ["skipped", "not-run"], cases  # an allowed skip counts for nothing
    assert proofenv.judge(cases).verdict == "error"
    assert proofenv.judge(cases).detail.startswith("could not judge: test_body_skip")


def test_signature_is_the_ranks_type_and_message_not_its_traceback(project):
    """A rank's traceback text matched the signature (`_cuda_setDevice` on a source line)."""
    module = project.module(
        "test_ranks.py",
        _marked(
            "[('RuntimeError', '_cuda_setDevice'), ('TypeError', 'not iterable')]",
            "_cuda_setDevice|not iterable",
            """
        from harness import run_ranks

        def _set_device(rank, world_size):
            import demo
            demo.set_device(rank)

        def _buggy(rank, world_size):
            import demo
            demo.buggy()

        def test_message_only():
            run_ranks(_set_device, 1, init_group=False)

        def test_the_bug():
            run_ranks(_buggy, 1, init_group=False)

        def test_not_from_the_package():
            raise TypeError("'NoneType' object is not iterable")  # the test's own error, not the package's
        """,
        ),
    )
    project.line("1.0.0", module)
    project.install("1.0.0")
    code, out, _ = project.pytest(module)
    assert code == 1, out
    assert (
        "test_message_only\n    on demo 1.0.0 (pristine): FAILED with another error than the bug's: RuntimeError: "
        "No CUDA GPUs are available" in out
    ), out
    assert (
        "test_the_bug\n    on demo 1.0.0 (pristine): failed as it must: TypeError: 'NoneType' object is not "
        "iterable" in out
    ), out
    assert "test_not_from_the_package\n    on demo 1.0.0 (pristine): FAILED with another error" in out, out


def test_could_not_observe_is_never_the_bug(project):
    """The signature `warm-up reserved` also matched the test's own 'saw nothing' message."""
    module = project.module(
        "test_spy.py",
        _marked(
            "[('BugSymptom', 'warm-up reserved \\\\d+ bytes')]",
            "warm-up reserved",
            """
        from proofkit import CouldNotObserve

        def test_spy_saw_nothing():
            reserved = []
            if not reserved:
                raise CouldNotObserve(f"warm-up reserved {reserved} bytes: the spy recorded no allocation")
        """,
        ),
    )
    project.line("1.0.0", module)
    project.install("1.0.0")
    code, out, _ = project.pytest(module)
    assert code == 1 and "COULD NOT OBSERVE the behaviour it judges: CouldNotObserve: warm-up reserved []" in out, out
    _, _, cases = project.pytest(module, "--proof-expect=observe")
    assert cases[0]["kind"] == "no-observation" and proofenv.judge(cases).verdict == "error", cases
    generic = project.module(
        "test_generic.py",
        _marked(
            "[('AssertionError', 'loss differs')]",
            "loss differs",
            """
        def test_drift():
            assert 1.37 == 1.0, "loss differs from one device"
        """,
        ),
    )
    code, out, _ = project.pytest(generic)
    assert code == 4 and "AssertionError is not a bug's signature" in out, out


def test_an_import_error_is_not_a_bug_and_features_are_not_proofs(project, other_project):
    """D1's pristine 'failure' was the ImportError of the module its own patch adds."""
    module = project.module(
        "test_diagnose.py",
        _marked(
            "[('ModuleNotFoundError', 'demo.diagnose')]",
            "No module named 'demo\\.diagnose'",
            """
        def test_diagnosis():
            import demo.diagnose  # noqa: F401
        """,
        ),
    )
    project.line("1.0.0", module)
    project.install("1.0.0")
    code, out, _ = project.pytest(module)
    assert code == 4 and "ModuleNotFoundError is not a bug's signature" in out, out

    feature = other_project.module(
        "test_feature.py",
        """
        import pytest

        pytestmark = pytest.mark.feature(package="demo")

        def test_diagnosis():
            import demo.diagnose  # noqa: F401
        """,
    )
    other_project.line("1.0.0", None, {"Proof-Test": "", "Feature-Test": feature})
    line = config.load(other_project.root).line("demo", "1.0.0")
    assert any("a feature cannot be dropped by 'proof-passes-upstream'" in p for p in series.lint_line(line)), (
        series.lint_line(line)
    )
    other_project.install("1.0.0")
    code, out, _ = other_project.pytest(feature)
    assert code == 5 and "test_diagnosis: feature test, and demo 1.0.0 (pristine) lacks the feature" in out, out
    other_project.install("1.0.0", carries=feature)
    code, out, _ = other_project.pytest(feature)
    assert code == 1 and "FAILED: ModuleNotFoundError" in out, out  # on a build that carries it, it must pass


def test_a_fix_upstream_turns_its_proof_into_a_regression_guard(project):
    """Once upstream fixed a bug, its proof XPASSed on both flavours without a hand-written switch."""
    module = project.module(
        "test_fixed_later.py",
        _marked(
            "[('TypeError', 'not iterable')]",
            "not iterable",
            """
        def test_no_crash():
            import demo
            assert demo.harmless() == 1
        """,
        ),
    )
    project.line("1.0.0", module)
    project.line("1.1.0", None)  # the rebase dropped the patch: upstream 1.1.0 fixed it
    project.install("1.1.0")
    code, out, _ = project.pytest(module)
    assert code == 0, out
    assert "regression guard: upstream fixed it, so the line dropped 0001-greet-comma.patch (demo/1.0.0)" in out
    project.install("1.0.0")  # on the release line that still carries the patch, the same pass is an XPASS
    code, out, _ = project.pytest(module)
    assert code == 1 and "XPASS(strict)" in out, out


def test_a_line_lists_the_tests_that_still_show_the_bug(project):
    """A newer release fixed part of a bug: its line lists the tests that still fail there, and the module's other
    tests become regression guards on it. Before, a line named the whole module, and a test that passes on the new
    release was an XPASS(strict) of its pristine pin."""
    module = project.module(
        "test_partly_fixed.py",
        _marked(
            "[('TypeError', 'not iterable')]",
            "not iterable",
            """
        def test_still_broken():
            import demo
            demo.buggy()

        def test_fixed_upstream():
            import demo
            assert demo.harmless() == 1
        """,
        ),
    )
    project.line("1.0.0", module)
    project.line("1.1.0", f"{module}::test_still_broken")
    project.install("1.1.0")
    code, out, _ = project.pytest(module)
    assert code == 0, out
    assert "test_still_broken - bug reproduced on demo 1.1.0 (pristine)" in out, out
    assert "0001-greet-comma.patch lists the tests of this module that show the bug here" in out, out
    project.install("1.0.0")  # the older line names the whole module: every test must show the bug there
    code, out, _ = project.pytest(module)
    assert code == 1 and "XPASS(strict)" in out and "test_fixed_upstream" in out, out


def test_first_bug_stops_a_module_at_the_first_test_that_shows_the_bug_and_not_before(project):
    """The matrix check's runs skip the rest of a module once a test shows the bug (its verdict, fails, is
    decided); a pass or a failure of another kind before it does not, another module in the same run goes on, and
    the verdict is the one the whole module gives."""
    module = project.module(
        "test_many.py",
        _marked(
            "[('TypeError', 'NoneType')]",
            "NoneType",
            """
        import demo

        def test_a_passes():
            demo.harmless()

        def test_b_other_failure():
            raise KeyError("not the bug")

        def test_c_bug():
            demo.buggy()

        def test_d_bug_again():
            demo.buggy()

        def test_e_would_pass():
            demo.harmless()
        """,
        ),
    )
    other = project.module(
        "test_other.py",
        _marked(
            "[('TypeError', 'NoneType')]",
            "NoneType",
            """
        import demo

        def test_other_passes():
            demo.harmless()
        """,
        ),
    )
    project.line("1.0.0", module)
    project.install("1.0.0")
    _, _, whole = project.pytest(module, "--proof-expect=observe")
    _, _, both = project.pytest(module, other, "--proof-expect=observe", "--proof-first-bug")
    first = [c for c in both if c["file"].endswith("test_many.py")]
    assert [c["test"] for c in both if c["file"].endswith("test_other.py")] == ["test_other_passes"]
    assert [c["test"] for c in whole] == [
        "test_a_passes",
        "test_b_other_failure",
        "test_c_bug",
        "test_d_bug_again",
        "test_e_would_pass",
    ]
    assert [c["test"] for c in first] == ["test_a_passes", "test_b_other_failure", "test_c_bug"]
    assert proofenv.judge(first).verdict == proofenv.judge(whole).verdict == "fails"
    assert proofenv.judge(first).detail.startswith("test_c_bug: TypeError")


def test_run_proofs_judges_each_module_on_its_own_cases(tmp_path, monkeypatch):
    root = tmp_path
    cases = [
        {"file": str(root / "tests/proof/a.py"), "test": "t", "outcome": "failed", "bug": True, "error": "E: bug"},
        {"file": str(root / "tests/proof/b.py"), "test": "u", "outcome": "passed", "bug": False, "error": ""},
    ]
    monkeypatch.setattr(proofenv, "run_report", lambda *a, **k: proofenv.ProofRun(cases, "", 1.0))
    got = proofenv.run_proofs(root, root, ["tests/proof/a.py", "tests/proof/b.py", "tests/proof/c.py"])
    assert {f: o.verdict for f, o in got.items()} == {
        "tests/proof/a.py": "fails",
        "tests/proof/b.py": "passes",
        "tests/proof/c.py": "error",  # nothing of it ran (it could not be collected)
    }
    monkeypatch.setattr(proofenv, "run_report", lambda *a, **k: proofenv.ProofRun(None, "timed out after 9 s", 9.0))
    assert {o.detail for o in proofenv.run_proofs(root, root, ["tests/proof/a.py"]).values()} == {"timed out after 9 s"}


def test_a_bug_a_later_release_brought_is_a_regression_guard_on_older_lines(project):
    """A patch only a newer line carries (the bug came with a later release, as accelerate 1.15.0's crash on a torch
    without distributed support, which 1.6.0's prepare never reaches): on the older line its proof must pass, as a
    regression guard; before, collection stopped with "no patch of demo names ...". On the newer line it must still
    fail with its signature."""
    module = project.module(
        "test_newer_bug.py",
        _marked(
            "[('TypeError', 'not iterable')]",
            "not iterable",
            """
        def test_no_crash():
            import demo
            assert demo.harmless() == 1
        """,
        ),
    )
    project.line("1.0.0", None)  # the older line: its series never carried the patch
    project.line("1.1.0", module)
    project.install("1.0.0")
    code, out, _ = project.pytest(module)
    assert code == 0, out
    assert "regression guard: the bug is newer than this release; 0001-greet-comma.patch (demo/1.1.0) fixes it" in out
    project.install("1.1.0")  # the line that carries it: the same pass is an XPASS
    code, out, _ = project.pytest(module)
    assert code == 1 and "XPASS(strict)" in out, out


def test_a_package_selection_leaves_the_other_packages_tests_out(project):
    """`--proof-package` (the default suite proves a line shared by two sets once): a module of another package is
    deselected, not run, not judged; one of the package runs as ever."""
    module = project.module(
        "test_fixed_later.py",
        _marked(
            "[('TypeError', 'not iterable')]",
            "not iterable",
            """
        def test_no_crash():
            import demo
            assert demo.harmless() == 1
        """,
        ),
    )
    project.line("1.0.0", module)
    project.line("1.1.0", None)
    project.install("1.1.0")
    code, out, _ = project.pytest(module, "--proof-package", "other")
    assert code == 5 and "1 deselected" in out, out  # pytest's "no tests ran"
    code, out, _ = project.pytest(module, "--proof-package", "demo")
    assert code == 0 and "1 passed" in out, out


def test_a_replayed_observation_is_judged_and_a_changed_input_runs_the_test_again(project, monkeypatch):
    """--proof-replay (follow's proving step, after the judge ran the same proofs on the same release): a test an
    observe run saw on the same inputs is judged on that observation, by the contract's own rules, and not run
    again (counted by the tests themselves); a changed proof file, environment variable or installed build makes
    the observation stale, and the test runs."""
    module = project.module(
        "test_counted.py",
        _marked(
            "[('TypeError', 'not iterable')]",
            "not iterable",
            """
        from pathlib import Path

        import pytest
        import demo

        RAN = Path(__file__).resolve().parents[2] / "ran.txt"

        @pytest.fixture(scope="module")
        def counted():
            with RAN.open("a") as fh:
                fh.write("fixture\\n")

        def test_bug(counted):
            with RAN.open("a") as fh:
                fh.write("bug\\n")
            demo.buggy()

        def test_ok(counted):
            with RAN.open("a") as fh:
                fh.write("ok\\n")
            demo.harmless()
        """,
        ),
    )
    ran = project.root / "ran.txt"
    project.line("1.0.0", module, {"Proof-Test": f"{module}::test_bug"})
    project.install("1.0.0")
    code, out, seen = project.pytest(module, "--proof-expect=observe")
    assert ran.read_text().split() == ["fixture", "bug", "ok"], out
    replay = project.root / "replay.json"
    replay.write_text(json.dumps(seen))

    code, out, _ = project.pytest(module, "--proof-replay", str(replay))
    assert code == 0 and "1 passed" in out and "1 xfailed" in out, out
    assert "bug reproduced on demo 1.0.0 (pristine): TypeError" in out
    assert "2 test(s) observed on the same inputs were not run again" in out
    assert ran.read_text().split() == ["fixture", "bug", "ok"]  # nothing ran, not even the fixture

    # The observation is judged by the contract: a pass where the series now expects the bug is an XPASS.
    series = project.root / "patches" / "demo" / "1.0.0" / "0001-greet-comma.patch"
    series.write_bytes(series.read_bytes().replace(b"::test_bug", b""))
    code, out, _ = project.pytest(module, "--proof-replay", str(replay))
    assert code == 1 and "XPASS(strict)" in out and ran.read_text().split() == ["fixture", "bug", "ok"], out
    series.write_bytes(series.read_bytes().replace(b"test_counted.py", b"test_counted.py::test_bug"))

    helper = project.root / "tests" / "proof" / "proofkit.py"
    helper.write_text(helper.read_text() + "\n# edited\n")  # a proof file changed: its digest differs
    code, out, _ = project.pytest(module, "--proof-replay", str(replay))
    assert code == 0 and "not run again" not in out and ran.read_text().split().count("bug") == 2, out
    _, _, seen = project.pytest(module, "--proof-expect=observe")  # observed anew, on the new inputs
    replay.write_text(json.dumps(seen))
    before = ran.read_text()
    monkeypatch.setenv("PATCHWHEEL_TEST_SOMETHING", "1")  # another environment
    code, out, _ = project.pytest(module, "--proof-replay", str(replay))
    monkeypatch.delenv("PATCHWHEEL_TEST_SOMETHING")
    assert code == 0 and ran.read_text().split() == before.split() + ["fixture", "bug", "ok"], out
    project.install("1.0.1")  # another installed build of demo
    project.line("1.0.1", module, {"Proof-Test": f"{module}::test_bug"})
    code, out, _ = project.pytest(module, "--proof-replay", str(replay))
    assert code == 0 and ran.read_text().split().count("bug") == 5, out


# A companion package whose own known bug is reached before demo's (accelerate 1.11.0's init_empty_weights under
# transformers 5, before transformers' meta-tensor bug), and its fixed form.
COMPANION = """
def init_empty():
    raise TypeError("Parameter.__new__() got an unexpected keyword argument '_is_hf_initialized'")
"""
COMPANION_FIXED = """
def init_empty():
    return None
"""


def test_a_companion_s_known_bug_masks_a_proof_only_where_its_fix_is_missing(project, tmp_path):
    """Accelerate 1.11.0's init_empty_weights raised its own TypeError under transformers 5 before T2's bug: the
    proof failed "with another error than the bug's" on the pristine pins, and nothing said which bug, or where
    T2's proof could be judged. It is masked only by that package's proof signature raised from that package's
    code, on a build without that fix; it is then judged with the companion +fixed, where it must show its own bug."""
    comp = project.module(
        "test_comp.py",
        """
        import pytest

        pytestmark = pytest.mark.proof(
            package="comp", signatures=[("TypeError", "unexpected keyword argument '_is_hf_initialized'")]
        )

        def test_init_empty():
            import comp
            comp.init_empty()
        """,
    )
    module = project.module(
        "test_meta.py",
        _marked(
            "[('TypeError', 'not iterable')]",
            "not iterable",
            """
        def test_load_on_meta():
            import comp
            import demo
            comp.init_empty()
            demo.buggy()

        def test_the_test_raises_it_itself():
            raise TypeError("Parameter.__new__() got an unexpected keyword argument '_is_hf_initialized'")
        """,
        ),
    )
    project.line("1.0.0", f"{module}::test_load_on_meta, {module}::test_the_test_raises_it_itself")
    project.line("2.0.0", comp, package="comp")
    project.install("1.0.0")
    project.install("2.0.0", package="comp", code=COMPANION)
    code, out, cases = project.pytest(module, comp)
    assert code == 1, out
    assert (
        "test_load_on_meta\n    on demo 1.0.0 (pristine): FAILED with comp 2.0.0's known bug (0001-greet-comma.patch), "
        "reached first, not with its own: TypeError: Parameter.__new__()" in out
    ), out
    assert "judge it with comp +fixed (--proof-masked lists such tests)" in out, out
    # the same TypeError raised by the test itself, not through comp's code, is no package's bug: another error
    assert (
        "test_the_test_raises_it_itself\n    on demo 1.0.0 (pristine): FAILED with another error than the bug's: "
        "TypeError: Parameter.__new__()" in out
    ), out
    masked = tmp_path / "masked.json"
    code, out, cases = project.pytest(module, comp, "--proof-masked", str(masked))
    assert code == 1 and "test_the_test_raises_it_itself\n    on demo 1.0.0 (pristine): FAILED with another" in out, out
    assert "masked by comp 2.0.0's known bug (0001-greet-comma.patch), reached first" in out, out
    assert [(c["nodeid"], c["of"], c["package"], c["patch"]) for c in json.loads(masked.read_text())] == [
        (f"{module}::test_load_on_meta", "demo", "comp", "0001-greet-comma.patch")
    ]
    assert [c["outcome"] for c in cases if c["test"] == "test_load_on_meta"] == ["masked"]
    # the companion +fixed: the proof is judged, and shows its own bug
    project.install("2.0.0", carries=comp, package="comp", code=COMPANION_FIXED)
    code, out, _ = project.pytest(f"{module}::test_load_on_meta", "--proof-masked", str(masked))
    assert code == 0 and "failed as it must: TypeError: 'NoneType' object is not iterable" in out, out
    assert json.loads(masked.read_text()) == []
    # a +fixed companion that still raises its bug's error masks nothing: that is another error
    project.install("2.0.0", carries=comp, package="comp", code=COMPANION)
    code, out, _ = project.pytest(module, comp, "--proof-masked", str(masked), "-k", "load_on_meta")
    assert code == 1 and "FAILED with another error than the bug's: TypeError: Parameter.__new__()" in out, out
