"""Differential guards: proven harmless, not only proven fixed.

A proof shows that a patch fixes its bug; a guard shows that it leaves the bug's neighbourhood alone. Each guard is
a scenario that never hits the bug (a custom ``compute_loss`` that does not pass the count, a single process, a DDP
model whose DTensor buffer is not broadcast). It runs twice, on the same consumer set's pristine pins and +fixed
builds, and what a user could observe must be equal::

    pytest tests/guards --guard-record pristine.json     # pristine environment: the reference
    pytest tests/guards --guard-against pristine.json    # +fixed environment: every difference fails

What is compared, per test (guardkit.py): the values the test passes to ``observe(key, value)`` (losses, gradient
norms, returned types, ``state_dict`` keys; floats to 1e-6), what the scenario raised (type and message), and
every warning and log record at the default level. Temporary paths and memory addresses are normalised away. A
guard needs no knowledge of the right answer: pristine is the reference.

What one build writes must load on the other (checkpoints, pickles, saved states): a guard that takes the
``exchange`` fixture writes an artifact into ``exchange.write(name)`` and loads the one in ``exchange.read(name)``.
With ``--guard-exchange DIR``, the pristine run loads what it wrote itself, the +fixed run loads what pristine wrote,
and a third, short run on pristine loads what +fixed wrote and compares with the reference too (only the guards that
take ``exchange`` run; pristine's own artifacts are the reference, and only the declarations marked
``readback=True`` (or ``readback="only"``), a difference that the artifact itself carries, are in force there)::

    pytest tests/guards --guard-record pristine.json --guard-exchange DIR      # pristine: writes DIR/pristine
    pytest tests/guards --guard-against pristine.json --guard-exchange DIR     # +fixed: loads it, writes DIR/fixed
    pytest tests/guards --guard-readback pristine.json --guard-exchange DIR    # pristine again: loads DIR/fixed

Without ``--guard-exchange`` a guard loads what it wrote itself, in a temporary folder.

A difference fails unless the guard declares it intended, with the reason, for the releases where it occurs::

    @pytest.mark.intended("losses", reason="...", when="transformers<4.51")
    @pytest.mark.intended("warnings", reason="...", match=r"^UserWarning: Was asked to gather")

``when`` (optional) is a condition on a package's upstream release; ``match`` (optional) narrows a declaration on
a list (warnings, logs) to its entries that match, and ``"*"`` covers the whole record (a scenario that is in the
bug on some releases, not next to it). A declaration that is in force but whose
difference did not occur fails too: it would hide the next, unintended difference at that key.

What counts as an observation: an exception the code under test raised (it went through library code, and its
innermost frame is not in the guard's own code), a rank's exception likewise. An exception from the guard's own
code (a failed ``assert``, a typo, an object that does not pickle), a rank that died, a guard that observed
nothing, and a skip not marked ``may_skip(reason=...)`` are errors of the guard, in both runs: a guard that cannot
fail proves nothing.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "proof"))  # the proofs' tiny models, rank harness and DataParallel stand-in
sys.path.insert(0, str(HERE))

import guardkit  # noqa: E402
from patchwheel.probes import status  # noqa: E402  (standard library only)

#: The guards' own code, and the test helpers they use (tiny models, the rank harness, the DataParallel stand-in).
GUARDS, HELPERS = str(HERE) + os.sep, str(ROOT / "tests" / "proof") + os.sep
RESERVED = ("raised", "warnings", "logs")


class GuardDifference(AssertionError):
    """The +fixed build differs from pristine where the guard declares no difference."""


class GuardError(Exception):
    """The guard could not observe: its own code failed, a rank died, or it recorded nothing."""


@dataclass
class Observation:
    """What one guard test observed; the test calls it: ``observe("losses", trainer.losses)``."""

    values: dict[str, Any] = field(default_factory=dict)

    def __call__(self, key: str, value: Any) -> None:
        if key in RESERVED or key in self.values:
            raise GuardError(f"observe({key!r}, ...): the key is {'reserved' if key in RESERVED else 'already used'}")
        self.values[key] = guardkit.plain(value)


def pytest_addoption(parser):
    group = parser.getgroup("guards")
    group.addoption("--guard-record", metavar="FILE", help="pristine run: record what each guard observes to FILE")
    group.addoption(
        "--guard-against", metavar="FILE", help="+fixed run: compare what each guard observes with FILE (pristine)"
    )
    group.addoption(
        "--guard-readback",
        metavar="FILE",
        help="pristine run after the +fixed one: the guards that take `exchange` load what +fixed wrote; compare "
        "with FILE",
    )
    group.addoption(
        "--guard-exchange",
        metavar="DIR",
        help="the folder where each run writes its artifacts and loads the other build's (the `exchange` fixture)",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "guard(package): a differential guard of package's patches (see conftest)")
    config.addinivalue_line(
        "markers",
        "intended(key, reason, when=None, match=None, readback=False): a difference from pristine that the fix "
        "means (readback=True: also when pristine loads what +fixed wrote; readback='only': only then)",
    )
    config.addinivalue_line("markers", "may_skip(reason): the guard may skip for this reason (e.g. needs CUDA)")
    record, against = config.getoption("--guard-record"), config.getoption("--guard-against")
    readback, exchange = config.getoption("--guard-readback"), config.getoption("--guard-exchange")
    if (record or against or readback) and os.environ.get("PYTHONHASHSEED") in (None, "", "random"):
        raise pytest.UsageError(
            "guards compare two runs: set PYTHONHASHSEED (e.g. PYTHONHASHSEED=0) so that both order sets of strings "
            "alike (a library message may list one); `nox -s prove` sets it"
        )
    if sum(bool(x) for x in (record, against, readback)) > 1:
        raise pytest.UsageError(
            "--guard-record (pristine), --guard-against (+fixed) and --guard-readback (pristine) are three runs: "
            "give one"
        )
    if readback and not exchange:
        raise pytest.UsageError("--guard-readback loads what the +fixed run wrote: give its --guard-exchange DIR")
    config.guard_state = State(record=record, against=against or readback, readback=bool(readback), exchange=exchange)


@dataclass
class State:
    record: str | None
    against: str | None
    records: dict[str, Any] = field(default_factory=dict)
    reference: dict[str, Any] | None = None
    verdicts: list[tuple[str, str]] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    #: The third run: pristine loads what +fixed wrote (``against`` is then the reference it compares with).
    readback: bool = False
    exchange: str | None = None


# ---------------------------------------------------------------------------------------------------------------
# Which builds are installed


def _installed(package: str) -> dict:
    info = status.inspect(package)
    if not info["installed"]:
        raise pytest.UsageError(f"{package} is not installed in {sys.executable}")
    return info


def _pristine_wheel(package: str) -> str | None:
    """The sha256 of the wheel a pristine package was installed from: the file its installer's direct_url.json
    names (the tool's verified cache, for the guards session); None where there is none to read."""
    try:
        direct = json.loads(importlib.metadata.distribution(package).read_text("direct_url.json") or "null")
        path = Path(urllib.request.url2pathname(urllib.parse.urlparse(direct["url"]).path))
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (TypeError, KeyError, ValueError, OSError, importlib.metadata.PackageNotFoundError):
        return None


def _upstream_version(package: str) -> str:
    info = _installed(package)
    return info["upstream"]["version"] if info["fixed"] else info["version"]


@pytest.hookimpl(trylast=True)  # after -k and -m deselect: only the guards that run are checked
def pytest_collection_modifyitems(config, items):
    state: State = config.guard_state
    if state.readback:  # only the guards that load an artifact: the others ran on pristine already
        kept = [item for item in items if "exchange" in getattr(item, "fixturenames", ())]
        deselected = [item for item in items if item not in kept]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = kept
    packages = set()
    for item in items:
        marker = item.get_closest_marker("guard")
        if marker is None or "package" not in marker.kwargs:
            raise pytest.UsageError(
                f"{item.nodeid}: every test under tests/guards needs @pytest.mark.guard(package=...)"
            )
        packages.add(marker.kwargs["package"])
        if item.get_closest_marker("xfail") is not None:
            raise pytest.UsageError(
                f"{item.nodeid}: a guard cannot be xfail (it would swallow a difference): declare the difference "
                "with @pytest.mark.intended(key, reason=...)"
            )
        for intended in item.iter_markers("intended"):
            if len(intended.args) != 1 or not intended.kwargs.get("reason"):
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.intended(key, reason=..., when=...) names why")
            if intended.kwargs.get("readback", False) not in (False, True, "only"):
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.intended(readback=...) is False, True or 'only'")
    builds = {p: _installed(p) for p in sorted(packages)}
    if state.record or state.readback:
        fixed = [p for p, info in builds.items() if info["fixed"]]
        if fixed:
            what = "records the reference" if state.record else "loads on pristine what +fixed wrote"
            raise pytest.UsageError(
                f"--guard-{'record' if state.record else 'readback'} {what}, which is pristine; "
                f"{', '.join(fixed)} is a +fixed build here"
            )
    if state.against:
        path = Path(state.against)
        if not path.is_file():
            raise pytest.UsageError(f"--guard-against {path}: no such file; record it first with --guard-record")
        state.reference = json.loads(path.read_text())
        pristine = state.reference["pristine"]
        for p, info in builds.items():
            if not info["fixed"] and not state.readback:
                raise pytest.UsageError(f"--guard-against compares a +fixed build with pristine; {p} is pristine here")
            version = info["upstream"]["version"] if info["fixed"] else info["version"]
            if pristine.get(p) != version:
                raise pytest.UsageError(
                    f"{path} was recorded on {p} {pristine.get(p)}, but this is {'a +fixed build of ' * info['fixed']}"
                    f"{version}: record the same set's pristine pins"
                )
            wheel = state.reference.get("upstream", {}).get(p)
            made_from = info["upstream"].get("sha256") if info["fixed"] else _pristine_wheel(p)
            if wheel and made_from and wheel != made_from:
                raise pytest.UsageError(
                    f"{path} was recorded on the pristine wheel of {p} with sha256 {wheel[:16]}…, but this "
                    f"{'+fixed build was made from' if info['fixed'] else 'pristine install is'} {made_from[:16]}…: "
                    "another file of the same version; record the pristine run again on the wheels the build pins"
                )


# ---------------------------------------------------------------------------------------------------------------
# Running a guard: what it observed, raised, warned and logged


@pytest.fixture
def observe(request) -> Observation:
    obs = Observation()
    request.node.guard_observation = obs
    return obs


class Exchange:
    """Where a guard writes an artifact for the other build, and where it finds the one it loads: ``write(name)``
    and ``read(name)`` are folders, one per guard and name. The pristine run (``--guard-record``) loads what it
    wrote itself; the +fixed run (``--guard-against``) what pristine wrote; the read-back run (``--guard-readback``,
    pristine) what +fixed wrote. Without ``--guard-exchange``, a temporary folder of this run."""

    def __init__(self, root: Path, nodeid: str, writes: str, reads: str) -> None:
        self.root, self._writes, self._reads = root, writes, reads
        self._folder = re.sub(r"[^\w.-]+", "_", nodeid)

    def write(self, name: str) -> Path:
        path = self.root / self._writes / self._folder / name
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def read(self, name: str) -> Path:
        path = self.root / self._reads / self._folder / name
        if not path.is_dir():
            raise GuardError(
                f"no artifact {name!r} at {path}: the {self._reads} run writes it (run it first, with the same "
                "--guard-exchange and selection)"
            )
        return path


@pytest.fixture
def exchange(request, tmp_path) -> Exchange:
    state: State = request.config.guard_state
    if state.exchange is None:
        return Exchange(tmp_path / "exchange", request.node.nodeid, "own", "own")
    if state.readback:
        writes, reads = "readback", "fixed"
    else:
        writes, reads = ("fixed", "pristine") if state.against else ("pristine", "pristine")
    return Exchange(Path(state.exchange).resolve(), request.node.nodeid, writes, reads)


def _own(files: list[str]) -> bool:
    """An exception raised by the guard's own code (its innermost frame is in tests/guards), or one that never went
    through library code (only the guards and their helpers are on its traceback): the guard's error. An exception
    from a helper that stands in for library code (the simulated CUDA scatter) went through the library first."""
    paths = [os.path.realpath(f) for f in files]
    return not paths or paths[-1].startswith(GUARDS) or all(p.startswith((GUARDS, HELPERS)) for p in paths)


def _raised(exc: BaseException) -> dict:
    """An exception as an observation: the code under test's (or a rank's) type and message."""
    if type(exc).__name__ == "RankFailed":
        files, kind, message = list(exc.files), exc.exc_type, exc.exc_message  # type: ignore[attr-defined]
    else:
        tb = exc.__traceback__
        files = []
        while tb is not None:
            files.append(tb.tb_frame.f_code.co_filename)
            tb = tb.tb_next
        kind, message = type(exc).__name__, str(exc)
    if type(exc).__name__ in ("RanksLost", "CouldNotObserve", "GuardError") or _own(files):
        raise GuardError(
            f"the guard's own code failed ({kind}: {message.strip().splitlines()[0] if message.strip() else ''}): "
            "an error of the guard, not an observation; fix the guard"
        ) from exc
    return {"type": kind, "message": message}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    gc.freeze()  # as the proofs' conftest does, and why: a gc.collect() walks only what the test made


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    raised = None
    with guardkit.capture() as seen:
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - what the code under test raised is the observation
            raised = _raised(exc)
    obs: Observation | None = getattr(pyfuncitem, "guard_observation", None)
    if obs is None:
        raise GuardError(f"{pyfuncitem.nodeid} does not take the `observe` fixture: it records nothing")
    if not obs.values and raised is None:
        raise GuardError(f"{pyfuncitem.nodeid} observed nothing: a guard that records nothing cannot differ")
    tmp = str(pyfuncitem.config._tmp_path_factory.getbasetemp())
    paths = {tmp: "<tmp>", os.path.realpath(tmp): "<tmp>"}
    exchange = pyfuncitem.funcargs.get("exchange")
    if isinstance(exchange, Exchange):  # the folders of the build that wrote, and of the one that reads, are one
        for side in ("pristine", "fixed", "readback", "own"):
            paths[str(exchange.root / side)] = "<exchange>"
    record = guardkit.normalize(
        {**obs.values, "raised": raised, "warnings": seen.warnings, "logs": seen.logs},
        paths,
    )
    _judge(pyfuncitem, record)
    return True


def _in_force(item, intended) -> bool:
    from packaging.requirements import Requirement

    when = intended.kwargs.get("when")
    if not when:
        return True
    req = Requirement(when)
    return req.specifier.contains(_upstream_version(req.name), prereleases=True)


def _judge(item, record: dict) -> None:
    state: State = item.config.guard_state
    if state.reference is None:
        state.records[item.nodeid] = record
        done = "recorded" if state.record else "ran (nothing to compare with)"
        if record["raised"]:
            done += f", raised {record['raised']['type']}: {_show(record['raised']['message'], 160)}"
        state.verdicts.append((item.nodeid, done))
        return
    reference = state.reference["records"].get(item.nodeid)
    if reference is None:
        raise GuardError(f"{state.against} has no record of {item.nodeid}: record the pristine run again")
    # Reading back, pristine runs the scenario and loads what +fixed wrote: only a difference that the artifact
    # itself carries can be intended there, and the guard says so (``readback=True``: in both runs that load the
    # other build's artifacts; ``"only"``: only there).
    runs = {False: (False,), True: (False, True), "only": (True,)}
    declared = [
        m
        for m in item.iter_markers("intended")
        if _in_force(item, m) and state.readback in runs[m.kwargs.get("readback", False)]
    ]
    reference, record, occurred = _set_aside(declared, reference, record)
    found = guardkit.differences(reference, record)
    by_key = [m for m in declared if "match" not in m.kwargs]
    unexplained = [d for d in found if not any(guardkit.covers(m.args[0], d) for m in by_key)]
    stale = [m for m in by_key if not any(guardkit.covers(m.args[0], d) or m.args[0] == "*" for d in found)]
    stale += [m for m, seen in zip([m for m in declared if "match" in m.kwargs], occurred, strict=True) if not seen]
    if unexplained or stale:
        other = "pristine loading what +fixed wrote" if state.readback else "+fixed"
        lines = [f"  {path}: pristine {_show(a)}, {other} {_show(b)}" for path, a, b in unexplained]
        lines += [
            f"  {m.args[0]}: declared intended ({m.kwargs['reason']}) but equal to pristine here: remove the "
            "declaration or narrow its `when`"
            for m in stale
        ]
        where = [p for p, _, _ in unexplained] + [f"{m.args[0]} (declared, did not differ)" for m in stale]
        state.verdicts.append((item.nodeid, f"DIFFERS from pristine at {', '.join(where)}"))
        raise GuardDifference(
            (
                "what the +fixed build wrote loads on pristine otherwise than what pristine wrote:\n"
                if state.readback
                else "the +fixed build differs from pristine where the guard declares no difference:\n"
            )
            + "\n".join(lines)
        )
    state.verdicts.append((item.nodeid, _verdict(declared, found, occurred)))


def _verdict(declared, found, occurred) -> str:
    """What a passing guard says: equal, or which differences its declarations accepted, and why; a scenario in the
    bug (``*``) says that it was not compared, only that the +fixed build raised nothing new."""
    if any(m.args[0] == "*" for m in declared):
        reasons = "; ".join(m.kwargs["reason"] for m in declared if m.args[0] == "*")
        return f"NOT COMPARED, in the bug here ({reasons}); +fixed raised nothing pristine did not"
    if not declared:
        return "same as pristine"
    accepted: dict[str, list[str]] = {}  # reason -> the differences it accepted
    matching = [m for m in declared if "match" in m.kwargs]
    for m in declared:
        if "match" in m.kwargs:
            if occurred[matching.index(m)]:
                accepted.setdefault(m.kwargs["reason"], []).append(f"{m.args[0]} matching {m.kwargs['match']!r}")
        else:
            paths = [d[0] for d in found if guardkit.covers(m.args[0], d)]
            accepted.setdefault(m.kwargs["reason"], []).extend(paths)
    accepted_text = "; ".join(f"{', '.join(paths)} ({reason})" for reason, paths in accepted.items())
    return "same as pristine except, as declared: " + accepted_text


def _set_aside(declared, reference: dict, record: dict) -> tuple[dict, dict, list[bool]]:
    """A declaration with ``match=<regex>`` covers only the entries of a list (warnings, logs) that match: they are
    set aside on both sides before comparing; it occurred if the set-aside entries differ (one flag per such
    declaration, in order)."""
    occurred = []
    for m in declared:
        if "match" not in m.kwargs:
            continue
        key, pattern = m.args[0], re.compile(m.kwargs["match"])
        if not isinstance(reference.get(key), list) or not isinstance(record.get(key), list):
            raise GuardError(f"@pytest.mark.intended({key!r}, match=...) needs a recorded list at {key!r}")

        def split(side: dict, key: str = key, pattern: re.Pattern = pattern) -> tuple[list, list]:
            hit = [isinstance(x, str) and bool(pattern.search(x)) for x in side[key]]
            ours = [x for x, h in zip(side[key], hit, strict=True) if h]
            return ours, [x for x, h in zip(side[key], hit, strict=True) if not h]

        (ours_ref, rest_ref), (ours_got, rest_got) = split(reference), split(record)
        occurred.append(ours_ref != ours_got)
        reference, record = {**reference, key: rest_ref}, {**record, key: rest_got}
    return reference, record, occurred


def _show(value: Any, width: int = 300) -> str:
    text = json.dumps(value)
    return text if len(text) <= width else text[:width] + "…"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    if rep.skipped and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        allowed = item.get_closest_marker("may_skip")
        if allowed is None:
            rep.outcome = "failed"
            rep.longrepr = (
                f"[SKIP] {item.nodeid} skipped ({reason}): a guard that does not run shows nothing. If the skip is "
                "legitimate, mark it @pytest.mark.may_skip(reason=...)"
            )
        elif call.when != "teardown":
            item.config.guard_state.not_run.append(f"{item.nodeid}: {reason} (allowed: {allowed.kwargs['reason']})")
    return rep


def pytest_sessionfinish(session):
    state: State = session.config.guard_state
    if state.record and state.records:
        builds, wheels = {}, {}
        for item in session.items:
            package = item.get_closest_marker("guard").kwargs["package"]
            builds[package] = _installed(package)["version"]
            wheels[package] = _pristine_wheel(package)
        path = Path(state.record)
        part = path.with_name(path.name + ".part")
        record = {"pristine": builds, "upstream": wheels, "records": state.records}
        part.write_text(json.dumps(record, indent=1, sort_keys=True))
        os.replace(part, path)


def pytest_terminal_summary(terminalreporter):
    state: State = terminalreporter.config.guard_state
    if state.verdicts:
        title = (
            "guards: pristine loading what +fixed wrote, compared with pristine"
            if state.readback
            else "guards: +fixed compared with pristine"
            if state.against
            else "guards: pristine recorded"
        )
        terminalreporter.section(title)
        for nodeid, verdict in state.verdicts:
            terminalreporter.write_line(f"{nodeid}\n    {verdict}")
    if state.not_run:
        terminalreporter.section("guards that did not run")
        for line in state.not_run:
            terminalreporter.write_line(line)
    if state.record and state.records:
        terminalreporter.write_line(f"recorded {len(state.records)} guard(s) to {state.record}")
