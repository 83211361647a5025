"""Upstream's own test suite on pristine and +fixed builds: junit parsing, the comparison, safe extraction.

Offline and fast: synthetic junit XML (as pytest writes it with ``-o junit_family=xunit1``) and synthetic sdists.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from conftest import ROOT
from patchwheel.errors import PatchwheelError
from patchwheel.maint.proving import suite as us


def case(name: str, cls: str = "AcceleratorTester", file: str = "tests/test_accelerator.py", body: str = "") -> str:
    module = file[: -len(".py")].replace("/", ".")
    classname = f"{module}.{cls}" if cls else module
    return f'<testcase classname="{classname}" name="{name}" file="{file}" line="10" time="0.1">{body}</testcase>'


def junit(*cases: str) -> str:
    return (
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="0" '
        f'skipped="0" tests="{len(cases)}" time="1.0">{"".join(cases)}</testsuite></testsuites>'
    )


FAIL = '<failure message="AssertionError">Traceback...</failure>'
ERROR = '<error message="error at setup">Traceback...</error>'
SKIP = '<skipped type="pytest.skip" message="test requires a GPU">skip</skipped>'


def test_parse_junit_outcomes_and_node_ids() -> None:
    got = us.parse_junit(
        junit(
            case("test_pass"),
            case("test_fail", body=FAIL),
            case("test_error", body=ERROR),
            case("test_skip", body=SKIP),
            case("test_param[cpu-1]", cls="", file="tests/test_utils.py"),
            case("test_nested", cls="Outer.Inner", file="tests/test_hooks.py"),
        )
    )
    assert got == {
        "tests/test_accelerator.py::AcceleratorTester::test_pass": "passed",
        "tests/test_accelerator.py::AcceleratorTester::test_fail": "failed",
        "tests/test_accelerator.py::AcceleratorTester::test_error": "error",
        "tests/test_accelerator.py::AcceleratorTester::test_skip": "skipped",
        "tests/test_utils.py::test_param[cpu-1]": "passed",
        "tests/test_hooks.py::Outer::Inner::test_nested": "passed",
    }


def test_parse_junit_collection_error_and_teardown_error() -> None:
    # A module that fails to import: pytest names the module, with an empty classname.
    collect = (
        '<testcase classname="" name="tests.test_cli" file="tests/test_cli.py" time="0.0">' + ERROR + "</testcase>"
    )
    # A test that passed and then failed in teardown: one testcase with an <error>, the worse outcome counts.
    teardown = case("test_teardown", body=ERROR)
    assert us.parse_junit(junit(collect, teardown)) == {
        "tests/test_cli.py": "error",
        "tests/test_accelerator.py::AcceleratorTester::test_teardown": "error",
    }


def test_parse_junit_refuses_what_is_not_a_report() -> None:
    with pytest.raises(PatchwheelError, match="not a junit XML report"):
        us.parse_junit("<html>no</html")
    with pytest.raises(PatchwheelError, match="no 'file' attribute"):
        us.parse_junit(junit('<testcase classname="tests.test_x.T" name="test_a" time="0"/>'))


def test_counts() -> None:
    assert us.counts({"a": "passed", "b": "passed", "c": "failed", "d": "skipped", "e": "error"}) == {
        "collected": 5,
        "passed": 2,
        "failed": 1,
        "error": 1,
        "skipped": 1,
    }


def test_differing_includes_tests_missing_on_one_side() -> None:
    pristine = {"a": "passed", "b": "failed", "c": "skipped", "gone": "passed"}
    fixed = {"a": "passed", "b": "passed", "c": "skipped", "new": "passed"}
    assert us.differing(pristine, fixed) == ["b", "gone", "new"]


def test_identical_outcomes_need_no_rerun_and_pass() -> None:
    side = {"a": "passed", "b": "failed", "c": "skipped", "d": "error"}
    result = us.judge(side, dict(side), {})
    assert result.ok and not result.regressions and not result.flaky and not result.changed
    assert result.pristine == result.fixed == us.counts(side)


def test_flaky_difference_fixed_by_the_rerun_is_listed_not_failed() -> None:
    name = "tests/test_memory_utils.py::MemoryTest::test_free_memory_dereferences_prepared_components"
    pristine = {name: "passed", "b": "passed"}
    fixed = {name: "failed", "b": "passed"}
    result = us.judge(pristine, fixed, {name: ("passed", "passed")})
    assert result.ok
    assert result.flaky == [us.Difference(name, ("passed", "failed"), ("passed", "passed"))]
    assert not result.regressions and not result.changed


def test_flaky_on_the_pristine_side_too() -> None:
    result = us.judge({"t": "failed"}, {"t": "passed"}, {"t": ("passed", "passed")})
    assert result.ok and [d.test for d in result.flaky] == ["t"]


def test_real_regression_confirmed_by_the_rerun_fails() -> None:
    pristine = {"t": "passed", "u": "passed", "v": "passed"}
    fixed = {"t": "failed", "u": "error", "v": "passed"}
    result = us.judge(pristine, fixed, {"t": ("passed", "failed"), "u": ("passed", "error")})
    assert not result.ok
    assert [d.test for d in result.regressions] == ["t", "u"]
    assert result.regressions[0] == us.Difference("t", ("passed", "failed"), ("passed", "failed"))


def test_a_test_that_passes_on_pristine_and_is_missing_on_fixed_is_a_regression() -> None:
    result = us.judge({"t": "passed"}, {}, {"t": ("passed", "missing")})
    assert not result.ok and [d.test for d in result.regressions] == ["t"]


def test_the_rerun_decides_not_the_first_run() -> None:
    # Same on the first run's sides would never be re-run; a difference the re-run turns into pass -> fail counts.
    result = us.judge({"t": "failed"}, {"t": "passed"}, {"t": ("passed", "failed")})
    assert not result.ok and [d.test for d in result.regressions] == ["t"]


def test_other_lasting_differences_are_listed_but_do_not_fail() -> None:
    pristine = {"fixed_by_patch": "failed", "now_skips": "passed", "new": "missing"}
    fixed = {"fixed_by_patch": "passed", "now_skips": "skipped", "new": "passed"}
    pristine.pop("new")
    reruns = {
        "fixed_by_patch": ("failed", "passed"),
        "now_skips": ("passed", "skipped"),
        "new": ("missing", "passed"),
    }
    result = us.judge(pristine, fixed, reruns)
    assert result.ok and not result.regressions and not result.flaky
    assert [d.test for d in result.changed] == ["fixed_by_patch", "new", "now_skips"]


def test_a_difference_without_a_rerun_counts_as_first_seen() -> None:
    result = us.judge({"t": "passed"}, {"t": "failed"}, {})
    assert not result.ok and result.regressions == [us.Difference("t", ("passed", "failed"), None)]


def test_render_names_every_difference_and_the_verdict() -> None:
    result = us.judge(
        {"flaky": "passed", "reg": "passed", "ok": "passed"},
        {"flaky": "failed", "reg": "failed", "ok": "passed"},
        {"flaky": ("passed", "passed"), "reg": ("passed", "failed")},
    )
    text = us.render("accelerate 1.15.0", result)
    assert "pristine: 3 collected, 3 passed" in text
    assert "+fixed: 3 collected, 1 passed, 2 failed" in text
    assert "REGRESSION reg: passed on pristine, failed on +fixed (first run: passed / failed)" in text
    assert "flaky flaky: first run passed / failed, alone passed / passed" in text
    assert text.rstrip().endswith("FAILED: 1 test(s) pass on pristine and fail on +fixed")
    same = us.render("accelerate 1.15.0", us.judge({"a": "passed"}, {"a": "passed"}, {}))
    assert same.rstrip().endswith("identical outcomes on both sides")
    assert "not judged" not in same


def test_tests_failing_on_both_sides_are_named_as_not_judged() -> None:
    side = {"cfg1": "failed", "cfg2": "error", "hub": "failed", "fine": "passed", "x": "failed"}
    result = us.judge(side, {**side, "x": "passed"}, {"x": ("failed", "passed")})
    assert result.ok and result.both_failed == ["cfg1", "cfg2", "hub"]
    text = us.render("accelerate 1.15.0", result)
    assert "not judged: 3 test(s) fail on both sides (cfg1, cfg2, hub)" in text


# --- the suite's files from the sdist ------------------------------------------------------------------------------


def _sdist(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tf.addfile(info)
    return path


def test_extract_takes_only_the_tests_and_the_pytest_configuration(tmp_path: Path) -> None:
    sdist = _sdist(
        tmp_path / "demo-1.0.tar.gz",
        {
            "demo-1.0/pyproject.toml": b"[tool.pytest.ini_options]\n",
            "demo-1.0/setup.py": b"setup()\n",
            "demo-1.0/src/demo/__init__.py": b"",
            "demo-1.0/tests/test_a.py": b"def test_a(): pass\n",
            "demo-1.0/tests/data/x.json": b"{}",
        },
    )
    out = tmp_path / "out"
    files = us.extract_suite(sdist, out)
    assert files == ["pyproject.toml", "tests/data/x.json", "tests/test_a.py"]
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == files
    assert not (out / "src").exists()


@pytest.mark.parametrize(
    ("members", "links"),
    [
        ({"demo-1.0/tests/../../evil.py": b"x"}, None),
        ({"/abs/tests/evil.py": b"x"}, None),
        ({"demo-1.0/tests/test_a.py": b""}, {"demo-1.0/tests/link": "/etc/passwd"}),
    ],
    ids=["dotdot", "absolute", "symlink-out"],
)
def test_extract_refuses_members_leaving_the_folder(tmp_path: Path, members, links) -> None:
    sdist = _sdist(tmp_path / "demo-1.0.tar.gz", members, links)
    with pytest.raises(PatchwheelError, match="refused"):
        us.extract_suite(sdist, tmp_path / "out")
    assert not (tmp_path / "evil.py").exists()


def test_extract_says_when_the_sdist_has_no_tests(tmp_path: Path) -> None:
    sdist = _sdist(tmp_path / "demo-1.0.tar.gz", {"demo-1.0/setup.py": b""})
    with pytest.raises(PatchwheelError, match="ships no tests/"):
        us.extract_suite(sdist, tmp_path / "out")


def test_transformers_skip_reason_names_what_the_sdist_lacks(tmp_path: Path) -> None:
    sdist = _sdist(
        tmp_path / "transformers-4.53.3.tar.gz",
        {
            "transformers-4.53.3/tests/test_modeling_common.py": b"",
            "transformers-4.53.3/tests/test_training_args.py": b"",
            "transformers-4.53.3/src/transformers/trainer.py": b"",
        },
    )
    reason = us.skip_reason(sdist)
    assert reason is not None
    assert "2 file(s) under tests/" in reason and "no tests/models/ or tests/trainer/" in reason
    full = _sdist(tmp_path / "t2.tar.gz", {"t/tests/trainer/test_trainer.py": b"", "t/tests/models/x.py": b""})
    assert us.skip_reason(full) is None


def test_the_session_is_on_demand_and_calls_the_tool() -> None:
    text = (ROOT / "noxfile.py").read_text()
    assert "def upstream_suite(session: nox.Session)" in text
    assert '"upstream-suite"' in text
    head = next(line for line in text.splitlines() if line.startswith("nox.options.sessions"))
    assert "upstream_suite" not in head


def test_check_line_reruns_each_difference_alone_on_both_sides(tmp_path: Path, monkeypatch) -> None:
    """The orchestration with pytest replaced: the whole runs differ in two tests, each is re-run alone on both
    sides, and the re-runs decide (one flaky, one regression)."""
    from patchwheel import config

    full = {
        "pristine": {"flaky": "passed", "reg": "passed", "same": "passed"},
        "fixed": {"flaky": "failed", "reg": "failed", "same": "passed"},
    }
    alone = {("pristine", "flaky"): "passed", ("fixed", "flaky"): "passed", ("pristine", "reg"): "passed"}
    calls: list[tuple[str, list[str]]] = []

    def fake_run(env: Path, suite: Path, targets: list[str], work: Path, label: str, ignore: list[str]) -> us.Run:
        side = env.name
        calls.append((side, targets))
        if targets == ["tests"]:
            return us.Run(full[side], 1.0)
        return us.Run({targets[0]: alone.get((side, targets[0]), "failed")}, 0.5)

    wheel, sdist = config.Artifact("demo-1.0-py3-none-any.whl", "0" * 64), config.Artifact("demo-1.0.tar.gz", "1" * 64)
    line = config.ReleaseLine("demo", "1.0", wheel, sdist, tmp_path, "fixed", "demo", "src")
    monkeypatch.setattr(us, "fixed_wheel", lambda line, dist: dist / "demo.whl")
    monkeypatch.setattr(us, "environments", lambda project, line, wheel: (tmp_path / "pristine", tmp_path / "fixed"))
    monkeypatch.setattr(us.fetch, "fetch", lambda pkg, art, log=None: tmp_path / art.filename)
    monkeypatch.setattr(us, "extract_suite", lambda sdist, out: ["tests/test_a.py"])
    monkeypatch.setattr(us, "run_pytest", fake_run)
    result = us.check_line(None, line, tmp_path, tmp_path / "work")  # type: ignore[arg-type]
    assert calls == [
        ("pristine", ["tests"]),
        ("fixed", ["tests"]),
        ("pristine", ["flaky"]),
        ("fixed", ["flaky"]),
        ("pristine", ["reg"]),
        ("fixed", ["reg"]),
    ]
    assert [d.test for d in result.flaky] == ["flaky"] and [d.test for d in result.regressions] == ["reg"]
