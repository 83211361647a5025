"""Upstream's own test suite, run on the pristine release and on the +fixed build: no test may pass on pristine and
fail on +fixed.

accelerate's sdist ships its test suite (``tests/``); the sdist is pinned by sha256 like the wheel. For each release
line this module extracts only ``tests/`` (and the pytest configuration files beside it) from the verified sdist,
makes two cached environments on the shared torch base (``proofenv``): the pristine wheel, and the +fixed wheel from
dist/, each with the same pristine companions (transformers' newest line) and the few test requirements, and runs
pytest with a junit XML report on each side. Outcomes are compared per test; a test whose outcome differs is run
again alone on both sides before it counts (some of upstream's tests read system-wide state, e.g. free RAM, and
flip under load). Only a test that passes on pristine and fails (or errors, or is missing) on +fixed fails the
check; flaky tests and other differences are listed.

transformers' sdists ship only the common test mixins, no tests/models/ or tests/trainer/, so nothing of theirs
exercises the patched code: :func:`skip_reason` says so from the sdist's own listing.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...config import Project, ReleaseLine
from ...errors import ConfigError, EnvironmentFailed
from ...names import path_problem
from ...reporter import CONSOLE
from ...wheels import fetch
from ...wheels.distdir import current_wheel
from . import proofenv

#: What upstream's tests need beyond the package, its companions and the base (torch, pytest): the minimum of
#: accelerate's "testing" extra that makes every module collect. Tests needing the rest (datasets, deepspeed,
#: trackers, bitsandbytes, ...) skip themselves through accelerate's own ``require_*`` decorators.
TEST_REQUIREMENTS = ("parameterized==0.9.0", "pytest-timeout==2.4.0")
#: Packages whose sdist tests are run; the others are reported as skipped with :func:`skip_reason`.
SUITE_PACKAGES = ("accelerate",)
#: Files next to tests/ that configure pytest (rootdir, markers, conftest).
CONFIG_FILES = ("pyproject.toml", "setup.cfg", "pytest.ini", "tox.ini", "conftest.py")
#: Offline and isolated: tests that would download from the Hub fail fast, the same way on both sides.
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
TEST_TIMEOUT = 600  # seconds per test (pytest-timeout)
RUN_TIMEOUT = 3 * 3600.0  # seconds per whole run
MAX_RERUNS = 25  # more differing tests than this: the environment is broken, re-running each alone would take hours
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
_TAGS = (("error", "error"), ("failure", "failed"), ("skipped", "skipped"))  # junit child -> outcome, worst first


# --- pure: reports and their comparison --------------------------------------------------------------------------


def parse_junit(text: str) -> dict[str, str]:
    """pytest node id -> outcome (passed, failed, error, skipped) from a junit XML report written with
    ``-o junit_family=xunit1`` (whose testcases carry the ``file`` attribute). An xfail counts as skipped; a test
    reported twice (a teardown error after a pass) keeps the worse outcome."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise EnvironmentFailed(f"not a junit XML report ({exc})", "the pytest run died before writing it") from exc
    out: dict[str, str] = {}
    for tc in root.iter("testcase"):
        test = _node_id(tc)
        tags = {child.tag for child in tc}
        outcome = next((o for tag, o in _TAGS if tag in tags), "passed")
        if test not in out or _RANK[outcome] > _RANK[out[test]]:
            out[test] = outcome
    return out


def _node_id(tc: ET.Element) -> str:
    file, classname, name = tc.get("file"), tc.get("classname", ""), tc.get("name", "")
    if not file:
        raise EnvironmentFailed(
            f"junit testcase {classname}::{name} has no 'file' attribute",
            "run pytest with -o junit_family=xunit1, which records each test's file",
        )
    module = file.removesuffix(".py").replace("/", ".")
    if not classname and name == module:  # a module that failed to collect
        return file
    if classname == module:
        return f"{file}::{name}"
    if classname.startswith(module + "."):
        return "::".join([file, *classname[len(module) + 1 :].split("."), name])
    return f"{file}::{name}"


def counts(results: dict[str, str]) -> dict[str, int]:
    out = {"collected": len(results), "passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for outcome in results.values():
        out[outcome] += 1
    return out


def differing(pristine: dict[str, str], fixed: dict[str, str]) -> list[str]:
    """Tests whose outcome differs, a test present on one side only included."""
    return sorted(t for t in pristine.keys() | fixed.keys() if pristine.get(t, "missing") != fixed.get(t, "missing"))


@dataclass(frozen=True)
class Difference:
    test: str
    first: tuple[str, str]  # (pristine, +fixed) outcomes in the whole run; "missing" where it did not run
    rerun: tuple[str, str] | None  # the same, run alone; None when it was not re-run

    @property
    def final(self) -> tuple[str, str]:
        return self.rerun or self.first


@dataclass
class Comparison:
    pristine: dict[str, int]
    fixed: dict[str, int]
    regressions: list[Difference] = field(default_factory=list)  # pass on pristine, fail/error/missing on +fixed
    flaky: list[Difference] = field(default_factory=list)  # differed in the whole run, the same when run alone
    changed: list[Difference] = field(default_factory=list)  # lasting differences that are not regressions
    #: failed or errored on both sides: judged by nothing (in accelerate's sdist: fixtures it does not ship, such as
    #: tests/test_configs/ and examples/, and the Hub, which the runs keep offline)
    both_failed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.regressions


def judge(pristine: dict[str, str], fixed: dict[str, str], reruns: dict[str, tuple[str, str]]) -> Comparison:
    """Compare two runs. ``reruns`` holds the (pristine, +fixed) outcomes of the differing tests run alone: those
    decide. A difference without a re-run counts as first seen."""
    result = Comparison(counts(pristine), counts(fixed))
    bad = ("failed", "error")
    result.both_failed = sorted(t for t, o in pristine.items() if o in bad and fixed.get(t) in bad)
    for test in differing(pristine, fixed):
        diff = Difference(test, (pristine.get(test, "missing"), fixed.get(test, "missing")), reruns.get(test))
        before, after = diff.final
        if before == after:
            result.flaky.append(diff)
        elif before == "passed" and after in ("failed", "error", "missing"):
            result.regressions.append(diff)
        else:
            result.changed.append(diff)
    return result


def _counts_text(c: dict[str, int]) -> str:
    return f"{c['collected']} collected, {c['passed']} passed, {c['failed']} failed, {c['error']} error(s), " + (
        f"{c['skipped']} skipped"
    )


def render(title: str, result: Comparison) -> str:
    lines = [
        f"{title}: upstream's own tests, pristine vs +fixed",
        f"  pristine: {_counts_text(result.pristine)}",
        f"  +fixed: {_counts_text(result.fixed)}",
    ]
    if result.both_failed:
        shown = ", ".join(result.both_failed[:3]) + (", ..." if len(result.both_failed) > 3 else "")
        lines.append(f"  not judged: {len(result.both_failed)} test(s) fail on both sides ({shown})")
    for d in result.regressions:
        before, after = d.final
        how = f"first run: {d.first[0]} / {d.first[1]}" if d.rerun else "not re-run"
        lines.append(f"  REGRESSION {d.test}: {before} on pristine, {after} on +fixed ({how})")
    for d in result.flaky:
        lines.append(f"  flaky {d.test}: first run {d.first[0]} / {d.first[1]}, alone {d.final[0]} / {d.final[1]}")
    for d in result.changed:
        how = f"alone; first run {d.first[0]} / {d.first[1]}" if d.rerun else "not re-run"
        lines.append(f"  changed {d.test}: {d.final[0]} on pristine, {d.final[1]} on +fixed ({how})")
    if result.regressions:
        lines.append(f"  FAILED: {len(result.regressions)} test(s) pass on pristine and fail on +fixed")
    elif result.flaky or result.changed:
        lines.append(
            f"  ok: no test passes on pristine and fails on +fixed ({len(result.flaky)} flaky, "
            f"{len(result.changed)} changed, listed above)"
        )
    else:
        lines.append("  ok: identical outcomes on both sides")
    return "\n".join(lines) + "\n"


# --- the suite's files ------------------------------------------------------------------------------------------


def extract_suite(sdist: Path, out: Path) -> list[str]:
    """Extract ``tests/`` and the pytest configuration files beside it (not the package's source) from ``sdist``
    into ``out``; returns the files, relative to ``out``. Every member of the archive is checked first: one that is
    absolute, climbs out with '..' or is a link refuses the whole sdist (and ``filter="data"`` checks again)."""
    wanted: list[tarfile.TarInfo] = []
    try:
        with tarfile.open(sdist, "r:*") as tf:
            for member in tf.getmembers():
                if problem := path_problem(member.name.rstrip("/")):
                    raise EnvironmentFailed(
                        f"refused {sdist.name}: its member {member.name!r} {problem}",
                        "an sdist never needs that: check the pin, the file is not what upstream released",
                    )
                if not (member.isfile() or member.isdir()):
                    raise EnvironmentFailed(
                        f"refused {sdist.name}: its member {member.name!r} is a link or a device",
                        "upstream's tests are plain files: check the pin",
                    )
                _, _, rel = member.name.rstrip("/").partition("/")
                if rel == "tests" or rel.startswith("tests/") or (rel in CONFIG_FILES and member.isfile()):
                    wanted.append(member.replace(name=rel, deep=False))
            if not any(m.name.startswith("tests/") and m.isfile() for m in wanted):
                raise EnvironmentFailed(f"{sdist.name} ships no tests/", "this package's sdist has no suite to run")
            out.mkdir(parents=True, exist_ok=True)
            tf.extractall(out, members=wanted, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise EnvironmentFailed(f"cannot extract {sdist}: {exc}", "check the pin; delete the cached file") from exc
    return sorted(m.name for m in wanted if m.isfile())


def skip_reason(sdist: Path) -> str | None:
    """Why this sdist's tests cannot check the fixes (None when it ships model and trainer tests): transformers'
    sdists carry tests/*_common.py mixins and a couple of modules, not tests/models/ or tests/trainer/."""
    with tarfile.open(sdist, "r:*") as tf:
        files = [rel for m in tf.getmembers() if m.isfile() and (rel := m.name.partition("/")[2]).startswith("tests/")]
    if any(f.startswith(("tests/models/", "tests/trainer/")) for f in files):
        return None
    shown = ", ".join(f.removeprefix("tests/") for f in sorted(files)[:4]) + (", ..." if len(files) > 4 else "")
    return (
        f"its sdist {sdist.name} ships {len(files)} file(s) under tests/ ({shown}) and no tests/models/ or "
        "tests/trainer/: nothing there exercises the patched code (modeling_utils, the Trainer), so it is not covered"
    )


# --- running -----------------------------------------------------------------------------------------------------


def fixed_wheel(line: ReleaseLine, dist: Path) -> Path:
    """The line's +fixed wheel in ``dist``, checked to carry the line's current patches."""
    hint = f"build it first: `nox -s upstream_suite` does, or `nox -s build -- {line.package}`"
    return current_wheel(line, dist, hint)


def environments(project: Project, line: ReleaseLine, wheel: Path) -> tuple[Path, Path]:
    """(pristine, +fixed) environments on the torch base: the release's wheel or ``wheel``, the same pristine
    companions (every other package's newest line) and :data:`TEST_REQUIREMENTS`. Cached; the +fixed one is
    rebuilt when the wheel changes."""
    cache = project.cache
    others = [(pkg, project.lines[pkg][-1].wheel) for pkg in project.packages() if pkg != line.package]
    companions = [(pkg, proofenv.wheel_version(a.filename)) for pkg, a in others]
    extra = {"companions": [a.sha256 for _, a in others], "tests": list(TEST_REQUIREMENTS)}

    def install(own: Path) -> Callable[[], list[str]]:
        return lambda: [str(own), *(str(fetch.fetch(pkg, a)) for pkg, a in others), *TEST_REQUIREMENTS]

    pristine = proofenv.env_on_base(
        cache,
        proofenv.env_name([(line.package, line.version), *companions], "suite"),
        {"wheel": line.wheel.sha256, **extra},
        install(fetch.fetch(line.package, line.wheel, log=CONSOLE.warn)),
        compile=True,  # upstream's suite runs write no bytecode (PYTHONDONTWRITEBYTECODE below)
    )
    fixed = proofenv.env_on_base(
        cache,
        proofenv.env_name([(line.package, line.fixed_version), *companions], "suite"),
        {"wheel": fetch.sha256_file(wheel), **extra},
        install(wheel),
        compile=True,
    )
    return pristine, fixed


@dataclass(frozen=True)
class Run:
    results: dict[str, str]
    seconds: float


def run_pytest(env: Path, suite: Path, targets: list[str], work: Path, label: str, ignore: list[str]) -> Run:
    """Run pytest from ``suite`` in ``env`` with the environment's bin first on PATH (upstream's tests launch
    ``accelerate`` and ``torchrun``), offline, with a private HF_HOME, and read its junit report. pytest runs in a
    session of its own, killed with whatever it started when it ends or times out."""
    work.mkdir(parents=True, exist_ok=True)
    junit, log, home = work / f"{label}.xml", work / f"{label}.log", work / f"{label}-hf-home"
    home.mkdir(exist_ok=True)
    cmd = [str(env / "bin" / "python"), "-m", "pytest", *targets, "-q", "-p", "no:cacheprovider"]
    cmd += ["-o", "junit_family=xunit1", f"--junitxml={junit}", f"--timeout={TEST_TIMEOUT}", "--rootdir", str(suite)]
    cmd += [f"--ignore={i}" for i in ignore]
    env_vars = {
        **os.environ,
        **OFFLINE,
        "PATH": f"{env / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(env),
        "HF_HOME": str(home),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env_vars.pop("PYTHONPATH", None)  # the tool's own src/ must not reach upstream's tests
    t0 = time.perf_counter()
    junit.unlink(missing_ok=True)
    returncode = proofenv.run_in_group(cmd, suite, env_vars, log, RUN_TIMEOUT)
    seconds = time.perf_counter() - t0
    if returncode is None:
        raise EnvironmentFailed(f"{label}: pytest ran past {RUN_TIMEOUT:.0f} s (log: {log})", "see the log")
    if not junit.is_file():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise EnvironmentFailed(
            f"{label}: pytest exited {returncode} without a junit report:\n{tail}", f"see the log {log}"
        )
    return Run(parse_junit(junit.read_text()), seconds)


def check_line(project: Project, line: ReleaseLine, dist: Path, work: Path) -> Comparison:
    """Run upstream's suite of one release line on both sides, re-run the differences alone, and compare."""
    wheel = fixed_wheel(line, dist)
    sdist = fetch.fetch(line.package, line.sdist, log=CONSOLE.warn) if line.sdist else None
    if sdist is None:
        raise ConfigError(f"{line.key} pins no sdist", f"add sdist = {{ ... }} to overlay/{line.package}/pins.toml")
    t0 = time.perf_counter()
    CONSOLE.warn(f"{line.key}: environments (pristine, +fixed) ...")
    envs = dict(zip(("pristine", "fixed"), environments(project, line, wheel), strict=True))
    CONSOLE.warn(f"{line.key}: environments ready ({time.perf_counter() - t0:.0f} s)")
    runs: dict[str, Run] = {}
    suites: dict[str, Path] = {}
    for side, env in envs.items():
        suites[side] = work / f"suite-{side}"  # one copy per side: tests may write next to themselves
        shutil.rmtree(suites[side], ignore_errors=True)  # what an earlier run into the same --out left
        files = extract_suite(sdist, suites[side])
        modules = sum(1 for f in files if f.rsplit("/", 1)[-1].startswith("test_") and f.endswith(".py"))
        CONSOLE.warn(f"{line.key}: {side}: running upstream's tests ({modules} modules from {sdist.name}) ...")
        runs[side] = run_pytest(env, suites[side], ["tests"], work, f"{side}-full", [])
        c = counts(runs[side].results)
        CONSOLE.warn(f"{line.key}: {side}: {_counts_text(c)} in {runs[side].seconds:.0f} s")
    diffs = differing(runs["pristine"].results, runs["fixed"].results)
    reruns: dict[str, tuple[str, str]] = {}
    if len(diffs) > MAX_RERUNS:
        CONSOLE.warn(f"{line.key}: {len(diffs)} tests differ, more than {MAX_RERUNS}: not re-run, the first run counts")
    else:
        for i, test in enumerate(diffs, 1):
            CONSOLE.warn(f"{line.key}: re-running alone ({i}/{len(diffs)}): {test}")
            again = [
                run_pytest(envs[side], suites[side], [test], work, f"{side}-rerun-{i}", []).results.get(test, "missing")
                for side in ("pristine", "fixed")
            ]
            reruns[test] = (again[0], again[1])
    result = judge(runs["pristine"].results, runs["fixed"].results, reruns)
    CONSOLE.warn(f"{line.key}: done in {time.perf_counter() - t0:.0f} s")
    return result


def run(project: Project, select: list[str], dist: Path, out: Path | None = None, report=CONSOLE) -> bool:
    """The command: every selected accelerate line (default: all), transformers reported as skipped. False when a
    test passes on pristine and fails on +fixed. ``out`` keeps the junit reports and logs."""
    lines = project.select(select)
    for line in [ln for ln in lines if ln.package not in SUITE_PACKAGES]:
        reason = (
            skip_reason(fetch.fetch(line.package, line.sdist, log=CONSOLE.warn)) if line.sdist else "it pins no sdist"
        )
        report(f"{line.key}: skipped: {reason or 'its suite is not wired into this check'}")
    failed, summary = 0, {}
    for line in [ln for ln in lines if ln.package in SUITE_PACKAGES]:
        tmp = Path(tempfile.mkdtemp(prefix="patchwheel-suite-"))
        try:
            work = out / line.key.replace("/", "-") if out else tmp
            result = check_line(project, line, dist, work)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        report(render(line.key.replace("/", " "), result).rstrip("\n"))
        failed += not result.ok
        summary[line.key] = {"pristine": result.pristine, "fixed": result.fixed, "ok": result.ok}
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return not failed
