"""The proof contract, enforced: a verdict must be right for the right reason.

Every module here is marked either ``proof`` (it proves a bug) or ``feature`` (it tests a capability a patch adds)::

    pytestmark = pytest.mark.proof(package="transformers",
                                   signatures=[("TypeError", r"'NoneType' object is not iterable"),
                                               ("BugSymptom", r"warm-up reserved .* divided by the world size")])

What a test must do depends on what is installed (the wheel's own manifest, ``patchwheel.probes.status``) and on the
patch series in ``patches/``:

- the installed build carries the patch whose ``Proof-Test``/``Feature-Test`` trailer names the module: PASS;
- a proof test on a build without that patch, where the release line's series has it (the pristine pin): FAIL
  with the bug's signature. A signature is an exception **type and message** from the code under test: the type
  name must be equal, the message must match the regex, and (except for ``BugSymptom``, which the test raises
  when it sees the bug's effect) the traceback must pass through the package under test. Exceptions from spawned
  ranks are judged on the rank's own type and message; the harness's wrapper text and tracebacks never match;
- a ``Proof-Test`` may list tests (``tests/proof/test_x.py::test_a, tests/proof/test_x.py::test_b``): on that
  release line only those must FAIL on the pristine pin; the module's other tests are regression guards there (a
  newer release fixed part of the bug, and the rest must stay fixed);
- a proof test whose patch the release line no longer carries, because an older line's series dropped it when
  upstream fixed the bug: a regression guard, it must PASS. The transition needs no version switch in the test;
- a proof test whose patch only newer release lines carry (the bug came with a later release, as accelerate
  1.15.0's ``prepare_model`` crash on a torch without distributed support): a regression guard on the older
  lines, it must PASS there;
- a feature test on a build without its patch is not run (the feature is absent), and the summary says so;
- ``@pytest.mark.regression``: must pass on every build.

A proof test expected to fail whose failure is another package's known bug (the signature of one of that
package's proof tests, its traceback through that package's code, on a build of it without that fix) is masked by
it: with ``--proof-masked FILE`` it is listed there, not judged, to be run again with that package +fixed and its
own pristine (where it must fail with its own bug); without, it fails, naming the bug that masked it.

Outcomes that prove nothing are failures: a pass where the bug was expected (``XPASS(strict)``); a failure with
another error; a ``CouldNotObserve`` (spy empty, ranks lost, an ImportError: the test could not look); a skip, in
any phase, unless the test is marked ``may_skip(reason=...)`` naming why it may (the GPU form), and then the
summary lists it under "did not run". ``--proof-expect=observe`` judges nothing and reports each outcome to
``$PATCHWHEEL_PROOF_REPORT``, where a skip or an error reads "could not judge" (the matrix check and rebase).

``--proof-replay FILE`` (a list of observe-mode report entries, e.g. what `follow` judged a new release with): a
test whose call an earlier run observed **on the same inputs** is judged on that observation instead of running
again, by the same rules as above. The inputs are those of this process, computed the same way in both runs
(:func:`inputs`): the installed distributions (each one's RECORD: every installed file's sha256), this Python, the
files of tests/proof and the environment variables; an entry with other inputs, or one that did not get as far as
the test's call (a skip, a setup error), is run.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from patchwheel.probes import status  # noqa: E402  (standard library only)

SYMPTOM = "BugSymptom"
NO_OBSERVATION = {"CouldNotObserve", "RanksLost", "ImportError", "ModuleNotFoundError"}
# Types that say nothing about a bug: a generic assertion (use BugSymptom), the harness's and pytest's own.
NOT_A_SIGNATURE = NO_OBSERVATION | {
    "AssertionError",
    "Exception",
    "BaseException",
    "RankFailed",
    "Failed",
    "Skipped",
    "XFailed",
}

_outcomes: list[tuple[str, str, str]] = []
_not_run: list[str] = []
_report: list[dict] = []  # written to $PATCHWHEEL_PROOF_REPORT in observe mode
_masked: list[dict] = []  # written to --proof-masked: tests another package's known bug masked
#: (package, module, test) -> the signatures of each proof test collected, before --proof-package drops any
_signatures: dict[tuple[str, str, str], list[tuple[str, str]]] = {}


@dataclass(frozen=True)
class Expect:
    what: str  # "pass", "fail", "observe" or "not-run"
    where: str  # the installed build, for people
    role: str = "proof"  # "proof", "feature", "regression"


@dataclass(frozen=True)
class Observed:
    type: str
    message: str
    files: tuple[str, ...]


def pytest_addoption(parser):
    parser.addoption(
        "--proof-expect",
        choices=("auto", "pass", "fail", "observe"),
        default="auto",
        help="what proof tests must do (auto: pass on a +fixed build carrying the fix, else fail)",
    )
    parser.addoption(
        "--proof-package",
        action="append",
        metavar="PACKAGE",
        help="run only the proof and feature tests of this package (repeatable): the default suite proves a release "
        "line shared by two of its sets once",
    )
    parser.addoption(
        "--proof-replay",
        metavar="FILE",
        help="judge the tests an earlier observe-mode run observed on the same inputs on that observation (a JSON "
        "list of its report's entries) instead of running them again",
    )
    parser.addoption(
        "--proof-masked",
        metavar="FILE",
        help="a proof test whose bug another package's known bug masks here (that bug's signature, raised from that "
        "package's code, on a build without its fix) is not judged in this run: it is listed in FILE (JSON), to be "
        "judged again with that package +fixed; without this option it is a failure",
    )
    parser.addoption(
        "--proof-first-bug",
        action="store_true",
        help="with --proof-expect=observe: skip the rest of a module once a test shows the bug (its verdict, fails, "
        "is decided)",
    )


def pytest_configure(config):
    inputs()  # before any test changes the environment
    replay = config.getoption("--proof-replay")
    if replay:
        seen = json.loads(Path(replay).read_text())
        _replay.update({c["nodeid"]: c for c in seen if c.get("seen") is not None and c.get("inputs") == inputs()})
    config.addinivalue_line("markers", "proof(package, signatures): a proof test of one bug (see conftest)")
    config.addinivalue_line("markers", "feature(package): a test of a capability a patch adds (see conftest)")
    config.addinivalue_line("markers", "regression: must pass on pristine and +fixed builds alike")
    config.addinivalue_line("markers", "may_skip(reason): the test may skip for this reason (e.g. needs CUDA)")


# ---------------------------------------------------------------------------------------------------------------
# Replaying what an earlier run on the same inputs observed

#: Variables that change no test's outcome: where the report goes, and whether bytecode is written.
_NOT_INPUTS = {"PATCHWHEEL_PROOF_REPORT", "PYTHONDONTWRITEBYTECODE"}
_replay: dict[str, dict] = {}  # node id -> the earlier run's report entry (--proof-replay)
_replayed: list[str] = []


@functools.cache
def inputs() -> str:
    """What an observation depends on, as one sha256: the installed distributions (name, version and the sha256 of
    the RECORD that lists every installed file with its own), this interpreter, the files of tests/proof, the
    environment variables. Computed once, at configure time."""
    dists = sorted(
        (d.metadata["Name"] or "", d.version, hashlib.sha256((d.read_text("RECORD") or "").encode()).hexdigest())
        for d in importlib.metadata.distributions()
    )
    here = Path(__file__).resolve().parent
    proofs = {
        p.relative_to(here).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(here.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }
    environ = sorted((k, v) for k, v in os.environ.items() if k not in _NOT_INPUTS)
    what = {"python": [sys.version, sys.prefix], "dists": dists, "proofs": proofs, "environ": environ}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


class Replayed(Exception):
    """The exception an earlier run of this test observed (--proof-replay), judged as if raised again."""

    def __init__(self, seen: Observed) -> None:
        super().__init__(f"{seen.type}: {seen.message}")
        self.seen = seen


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A test in the replay is reported from its observation: setup and teardown pass (the teardown also ends the
    fixtures the next test does not share, as the runner's would), the call raises what was observed, or passes."""
    seen = _replay.get(item.nodeid)
    if seen is None:
        return None
    _replayed.append(item.nodeid)

    def call():
        if seen["seen"]:
            raise Replayed(Observed(seen["seen"]["type"], seen["seen"]["message"], tuple(seen["seen"]["files"])))

    def teardown():  # the runner's own teardown step, without the hooks that expect a setup to have run
        item.session._setupstate.teardown_exact(nextitem)

    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    steps: tuple[tuple[Literal["setup", "call", "teardown"], Callable[[], None]], ...] = (
        ("setup", lambda: None),
        ("call", call),
        ("teardown", teardown),
    )
    for when, fn in steps:
        info = pytest.CallInfo.from_call(fn, when=when)
        item.ihook.pytest_runtest_logreport(report=item.ihook.pytest_runtest_makereport(item=item, call=info))
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


# ---------------------------------------------------------------------------------------------------------------
# What is expected of a test


def _module(item) -> str:
    return Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix()


def _names_module(value: str | None, module: str) -> bool:
    from patchwheel.series import test_refs

    return any(file == module for file, _ in test_refs(value))


def _names_test(value: str | None, module: str, test: str) -> bool:
    from patchwheel.series import test_refs

    return any(file == module and func in ("", test) for file, func in test_refs(value))


@functools.cache
def _series(package: str) -> tuple:
    """The release lines of ``package`` (oldest first), each with its parsed series."""
    from patchwheel import config, series

    # parsed, not linted: a draft series (a new patch whose message is the template) is proven too
    # (docs/adding-a-fix.md); the build that made the wheels under proof linted it
    return tuple((line, tuple(series.parse_series(line))) for line in config.load(ROOT).lines.get(package, []))


def _series_naming(
    package: str, version: str, module: str, test: str
) -> tuple[str | None, str | None, str | None, str | None]:
    """For the release line that applies to ``version``: (its patch naming ``test`` of ``module``, its patch naming
    only other tests of the module, a patch of an older line naming the module, a patch of a newer line naming it)."""
    from packaging.version import Version

    lines = [line for line, _ in _series(package)]
    series = dict(_series(package))
    base = Version(Version(version).base_version)
    applicable = [line for line in lines if Version(line.version) <= base] or lines[:1]
    if not applicable:
        return None, None, None, None

    def naming(line, names):
        for p in series[line]:
            if names(p.trailers.get("Proof-Test")) or names(p.trailers.get("Feature-Test")):
                return p.name
        return None

    def this_test(value):
        return _names_test(value, module, test)

    def this_module(value):
        return _names_module(value, module)

    current = applicable[-1]
    older = next(
        (f"{n} ({line.key})" for line in reversed(lines[: lines.index(current)]) if (n := naming(line, this_module))),
        None,
    )
    newer = next(
        (f"{n} ({line.key})" for line in lines[lines.index(current) + 1 :] if (n := naming(line, this_module))),
        None,
    )
    return naming(current, this_test), naming(current, this_module), older, newer


def _expectation(item) -> Expect:
    proof, feature = item.get_closest_marker("proof"), item.get_closest_marker("feature")
    marker = proof or feature
    mode = item.config.getoption("--proof-expect")
    pkg = marker.kwargs["package"]
    info = status.inspect(pkg)
    if not info["installed"]:
        raise pytest.UsageError(f"{pkg} is not installed in {sys.executable}")
    module = _module(item)
    carried = [
        p["name"]
        for p in info["patches"]
        if _names_module(p.get("proof_test"), module) or _names_module(p.get("feature_test"), module)
    ]
    where = f"{pkg} {info['version']}" + (
        f" carrying {carried[0]}" if carried else (" (+fixed, without this patch)" if info["fixed"] else " (pristine)")
    )
    if item.get_closest_marker("regression") is not None:
        return Expect("observe" if mode == "observe" else "pass", where + ", regression guard", "regression")
    if feature is not None:
        return Expect(("observe" if mode == "observe" else "pass") if carried else "not-run", where, "feature")
    if mode != "auto":
        return Expect(mode, where)
    if carried:
        return Expect("pass", where)
    upstream_version = info["upstream"]["version"] if info["fixed"] else info["version"]
    current, sibling, older, newer = _series_naming(pkg, upstream_version, module, item.originalname)
    if current is not None:
        return Expect("fail", where)
    if sibling is not None:
        return Expect(
            "pass",
            f"{where}, regression guard: {sibling} lists the tests of this module that show the bug here",
            "regression",
        )
    if older is not None:
        return Expect(
            "pass", f"{where}, regression guard: upstream fixed it, so the line dropped {older}", "regression"
        )
    if newer is not None:  # the bug came with a later release: this one never had it, and must not get it
        return Expect(
            "pass", f"{where}, regression guard: the bug is newer than this release; {newer} fixes it", "regression"
        )
    raise pytest.UsageError(f"{item.nodeid}: no patch of {pkg} names {module} in its Proof-Test or Feature-Test")


def _check_marker(item) -> None:
    proof, feature = item.get_closest_marker("proof"), item.get_closest_marker("feature")
    if (proof is None) == (feature is None):
        raise pytest.UsageError(
            f"{item.nodeid}: every test under tests/proof needs exactly one of "
            "@pytest.mark.proof(package=..., signatures=[...]) and "
            "@pytest.mark.feature(package=...)"
        )
    if proof is None:
        return
    signatures = proof.kwargs.get("signatures")
    if not signatures or not all(isinstance(s, tuple) and len(s) == 2 for s in signatures):
        raise pytest.UsageError(
            f"{item.nodeid}: proof(signatures=[(exception type name, message regex), ...]) "
            "names the bug's own exception"
        )
    for kind, regex in signatures:
        if kind in NOT_A_SIGNATURE:
            raise pytest.UsageError(
                f"{item.nodeid}: {kind} is not a bug's signature (it says the test could not "
                "look, or nothing specific); raise BugSymptom for an observed effect"
            )
        re.compile(regex)


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    packages = config.getoption("--proof-package")
    for item in items:
        _check_marker(item)
        mark = item.get_closest_marker("proof") or item.get_closest_marker("feature")
        if item.get_closest_marker("proof") is not None:
            _signatures[(mark.kwargs["package"], _module(item), item.originalname)] = mark.kwargs["signatures"]
        if packages and mark.kwargs.get("package") not in packages:
            drop.append(item)  # its package's line is proven in another session (--proof-package)
            continue
        item.stash_expect = _expectation(item)
        if item.stash_expect.what == "not-run":
            drop.append(item)
            _not_run.append(f"{item.nodeid}: feature test, and {item.stash_expect.where} lacks the feature")
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# ---------------------------------------------------------------------------------------------------------------
# What was observed, and the verdict


def observed(excinfo) -> Observed:
    """The exception the code under test raised; for a rank, the rank's own type, message and files."""
    exc = excinfo.value
    if isinstance(exc, Replayed):
        return exc.seen
    if type(exc).__name__ == "RankFailed":
        return Observed(exc.exc_type, exc.exc_message, tuple(exc.files))
    return Observed(type(exc).__name__, str(exc), tuple(str(e.path) for e in excinfo.traceback))


def package_dir(package: str) -> str | None:
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    return os.path.realpath(locations[0]) if locations else None


def classify(obs: Observed, signatures, package: str) -> str:
    """``bug`` (the signature, from the code under test), ``no-observation``, or ``other``."""
    if obs.type in NO_OBSERVATION:
        return "no-observation"
    for kind, regex in signatures:
        if obs.type != kind or not re.search(regex, obs.message):
            continue
        if kind == SYMPTOM:
            return "bug"
        where = package_dir(package)
        if where and any(os.path.realpath(f).startswith(where + os.sep) for f in obs.files):
            return "bug"
    return "other"


def masking_bug(obs: Observed, package: str) -> tuple[str, str] | None:
    """(package, patch): the known bug of another package that ``obs`` is, where it masks ``package``'s: ``obs``
    has the signature of one of that package's proof tests (an exception type and message whose traceback passes
    through that package's code; never a ``BugSymptom``, which a test raises itself), and the installed build of
    that package lacks the patch its release line carries for that test. A user of both releases hits that bug
    first; the fix of the other package removes it (``--proof-masked``)."""
    for (other, module, test), signatures in _signatures.items():
        raised = [(kind, regex) for kind, regex in signatures if kind != SYMPTOM]
        if other == package or classify(obs, raised, other) != "bug":
            continue
        info = status.inspect(other)
        if not info["installed"]:
            continue
        if any(_names_module(p.get("proof_test"), module) for p in info["patches"]):
            continue  # the installed build carries that fix
        version = info["upstream"]["version"] if info["fixed"] else info["version"]
        patch = _series_naming(other, version, module, test)[0]
        if patch is not None:
            return other, patch
    return None


def _first_line(text: str, width: int = 200) -> str:
    return (text.strip().splitlines() or [""])[0][:width]


def _skip_reason(rep) -> str:
    reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
    return reason.removeprefix("Skipped: ")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    expect: Expect = item.stash_expect
    if rep.skipped and not hasattr(rep, "wasxfail"):
        _judge_skip(item, rep, expect)
        return
    if call.when == "setup" and rep.failed:
        error = f"{call.excinfo.typename}: {call.excinfo.value}" if call.excinfo else "setup failed"
        _record(item, expect, "error", None, error, f"COULD NOT SET UP: {_first_line(error, 160)}")
        return
    if call.when != "call":
        return
    if call.excinfo is None:
        if expect.what == "fail":
            rep.outcome = "failed"
            rep.longrepr = (
                f"[XPASS(strict)] proof test passed on {expect.where}: the bug is not reproduced "
                "here, so this test proves nothing (or upstream fixed it)"
            )
            _record(item, expect, "passed", None, "", "PASSED, but the bug was expected", seen=False)
        else:
            _record(item, expect, "passed", None, "", "passed", seen=False)
        return
    marker = item.get_closest_marker("proof")
    obs = observed(call.excinfo)
    kind = classify(obs, marker.kwargs["signatures"], marker.kwargs["package"]) if marker else "other"
    error = f"{obs.type}: {_first_line(obs.message, 300)}"
    if expect.what == "fail" and kind == "bug":
        rep.outcome = "skipped"
        rep.wasxfail = f"bug reproduced on {expect.where}: {error}"
        verdict = f"failed as it must: {error[:160]}"
    elif kind == "no-observation":
        verdict = f"COULD NOT OBSERVE the behaviour it judges: {error[:160]}"
    elif expect.what == "fail" and (masking := masking_bug(obs, marker.kwargs["package"] if marker else "")):
        other, patch = masking
        by = f"{other} {status.inspect(other)['version']}'s known bug ({patch}), reached first"
        if item.config.getoption("--proof-masked"):
            rep.outcome = "skipped"
            rep.wasxfail = f"masked on {expect.where} by {by}: {error[:160]}; judged again with {other} +fixed"
            verdict = f"masked by {by}: {error[:160]}; to be judged again with {other} +fixed"
            # the test as the project root names it (pytest's node id is relative to its own rootdir)
            test = f"{_module(item)}::{item.nodeid.split('::', 1)[1]}"
            own = marker.kwargs["package"]  # the package whose proof it is: pristine in the run that judges it again
            _masked.append({"nodeid": test, "of": own, "package": other, "patch": patch, "error": error[:300]})
            _record(item, expect, "masked", kind, error, verdict, seen=obs)
            return
        verdict = (
            f"FAILED with {by}, not with its own: {error[:160]}; judge it with {other} +fixed "
            "(--proof-masked lists such tests)"
        )
    elif expect.what == "fail":
        verdict = f"FAILED with another error than the bug's: {error[:160]}"
    else:
        verdict = f"FAILED: {error[:160]}"
    _record(item, expect, "failed" if kind != "no-observation" else "error", kind, error, verdict, seen=obs)
    if kind == "bug" and expect.what == "observe" and item.config.getoption("--proof-first-bug"):
        _decided.add(_module(item))


_decided: set[str] = set()  # modules whose verdict a test showing the bug decided (--proof-first-bug)
DECIDED = "the module's verdict is decided: a test before this one showed the bug (--proof-first-bug)"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if _module(item) in _decided:
        pytest.skip(DECIDED)
    # What the process holds before the test, out of the cyclic collector's sight: with torch and transformers
    # imported, a gc.collect() walks some 350,000 objects (0.25 s), and Trainer and Accelerator call it on each train
    # (accelerate's free_memory). Objects are still freed by their reference count; a cycle an earlier test left is
    # kept to the end of the process instead of being collected during a later test.
    gc.freeze()


def _judge_skip(item, rep, expect: Expect) -> None:
    reason = _skip_reason(rep)
    if reason == DECIDED:  # not an outcome: the test was not needed
        return
    allowed = item.get_closest_marker("may_skip")
    if allowed is not None and expect.what == "observe":
        _record(item, expect, "not-run", None, reason, f"did not run (allowed): {reason}")
    elif expect.what == "observe":
        _record(item, expect, "skipped", None, reason, f"skipped: {reason}")
    elif allowed is not None:
        _not_run.append(f"{item.nodeid}: skipped ({reason}); allowed: {allowed.kwargs.get('reason', '')}")
    else:
        rep.outcome = "failed"
        rep.longrepr = (
            f"[SKIP] {item.nodeid} skipped in {rep.when} ({reason}) on {expect.where}: a test that "
            "does not run proves nothing. If this skip is legitimate, mark the test "
            "@pytest.mark.may_skip(reason=...) naming why"
        )
        _record(item, expect, "skipped", None, reason, f"SKIPPED, which proves nothing: {reason}")


def _record(
    item, expect: Expect, outcome: str, kind: str | None, error: str, verdict: str, seen: Observed | bool | None = None
) -> None:
    """One judged test phase, for the summary and the report. ``seen``: what the call observed (an exception, or
    False for none), which a later run on the same inputs may judge instead of running it (--proof-replay); None
    where the test did not get as far as its call."""
    _outcomes.append((item.nodeid, expect.where, verdict))
    observation = (
        {"type": seen.type, "message": seen.message, "files": list(seen.files)} if isinstance(seen, Observed) else seen
    )
    _report.append(
        {
            "file": str(item.path),
            "test": item.name,
            "role": expect.role,
            "outcome": outcome,
            "bug": kind == "bug",
            "kind": kind,
            "error": error[:300],
            "nodeid": item.nodeid,
            "seen": None if seen is None else observation,
            "inputs": inputs(),
        }
    )


def pytest_sessionfinish(session):
    masked = session.config.getoption("--proof-masked")
    if masked:
        Path(masked).write_text(json.dumps(_masked, indent=1))
    if os.environ.get("PATCHWHEEL_PROOF_REPORT"):
        Path(os.environ["PATCHWHEEL_PROOF_REPORT"]).write_text(json.dumps(_report, indent=1))


def pytest_terminal_summary(terminalreporter):
    if _replayed:
        terminalreporter.section("proof tests judged on an earlier run's observation (--proof-replay)")
        terminalreporter.write_line(f"{len(_replayed)} test(s) observed on the same inputs were not run again")
    if _outcomes:
        terminalreporter.section("proof tests: installed build and verdict")
        for nodeid, where, verdict in _outcomes:
            terminalreporter.write_line(f"{nodeid}\n    on {where}: {verdict}")
    if _not_run:
        terminalreporter.section("proof tests that did not run")
        for line in _not_run:
            terminalreporter.write_line(line)
