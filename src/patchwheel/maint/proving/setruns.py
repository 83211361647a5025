"""A consumer set proven both ways: the one implementation of `patchwheel prove`, which the nox `prove` and
`suite_prove` sessions run one chain each, and of follow's and derive's proving step, which runs all three side by side.

- **pristine**: the `status` check on the set's pristine pins (exit 1: a known bug applies), then the proofs there:
  each fix's proof must fail with its bug, the rest pass. A proof whose bug a companion's known bug masks there (it
  fails with that bug, through the companion's code: accelerate 1.11.0's ``init_empty_weights`` under transformers 5)
  is judged again on its package's pristine release with the masking companions +fixed, where it must fail with
  its own bug;
- **fixed**: the `status` check on its +fixed builds (exit 0), then the proofs there: each must pass;
- **guards** (the Guard-Test modules of its patches): recorded on the pristine pins, compared on the +fixed builds,
  and what +fixed wrote loaded on the pristine pins, through one exchange folder; every difference must be
  declared intended.

Each in a cached environment (:mod:`proofenv`: the pinned wheels, or the +fixed wheels of a ``dist`` folder, on
the shared torch), pytest in the contract's own mode: its exit status is the verdict. Several chains run side by
side (a proof run leaves a core idle about a third of the time); a chain stops at its first failed run.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ... import series
from ...config import Project, ReleaseLine
from ...errors import ConfigError
from ...reporter import CONSOLE
from ...series import guard_modules
from ...wheels.distdir import current_wheel
from . import proofenv

TIMEOUT = 1800.0
PASSED = frozenset({0})
_SUMMARY = re.compile(r"^=+ (.+?) =+\Z")
#: The chains of a proof of a set, in the order they are reported.
CHAINS = ("pristine", "fixed", "guards")
_WHERE = {"pristine": "the pristine pins", "fixed": "the +fixed builds"}


@dataclass
class Run:
    """One run of a set's proofs or guards (pytest), or of its `status` check."""

    name: str  # e.g. "proofs on the pristine pins"
    ok: bool
    summary: str  # pytest's last line
    tail: str = ""  # the end of its output, when it failed


@dataclass(frozen=True)
class Options:
    """How :func:`prove` runs: ``packages``: only the proofs and guards of these packages' lines (all when empty);
    ``pytest``: more pytest arguments for every run (e.g. ``-k``); ``echo``: each run's output goes to this
    process's output as it comes (one chain at a time), instead of a summary line per run; ``fixed_env``: where the
    +fixed builds' environment is made (default: the cache's, shared with follow); ``seen``: proof cases observed
    earlier, per environment (follow's judge), which the proofs on the pristine pins judge instead of running
    them again (``--proof-replay``)."""

    packages: Sequence[str] = ()
    pytest: Sequence[str] = ()
    echo: bool = False
    fixed_env: Path | None = None
    seen: dict[str, list[dict]] | None = None


def members_of(project: Project, set_name: str, packages: Sequence[str] = ()) -> dict[str, ReleaseLine]:
    """The release lines of the consumer set ``set_name`` (package -> line); ``packages`` must be among them."""
    if set_name not in project.sets:
        raise ConfigError(f"unknown set {set_name!r}", f"sets in overlay/sets.toml: {', '.join(project.sets)}")
    members = project.sets[set_name]
    for pkg in packages:
        if pkg not in members:
            raise ConfigError(f"the set {set_name} has no package {pkg!r}", f"its packages: {', '.join(members)}")
    return {pkg: project.line(pkg, version) for pkg, version in members.items()}


def prove_set(
    project: Project,
    members: dict[str, ReleaseLine],
    dist: Path,
    log: Callable[[str], None] = CONSOLE,
    seen: dict[str, list[dict]] | None = None,
) -> list[Run]:
    """Follow's and derive's proving step: the set ``members`` proven both ways with its guards, the three chains
    side by side, its +fixed wheels taken from ``dist``."""
    return prove(project, members, dist, CHAINS, Options(seen=seen), log)


def prove(
    project: Project,
    members: dict[str, ReleaseLine],
    dist: Path,
    chains: Sequence[str] = CHAINS,
    options: Options = Options(),
    log: Callable[[str], None] = CONSOLE,
) -> list[Run]:
    """The ``chains`` of the set ``members`` (package -> line), its +fixed wheels taken from ``dist``: every run,
    in the order of :data:`CHAINS`."""
    lines = list(members.values())
    pristine = proofenv.release_env(project.cache, [(line.package, line.wheel) for line in lines])
    fixed = None
    if "fixed" in chains or "guards" in chains:
        wheels = [current_wheel(line, dist, "build them first (nox -s build)") for line in lines]
        fixed = proofenv.fixed_env(project.cache, wheels, purpose="follow", at=options.fixed_env)
    chosen = [line for line in lines if not options.packages or line.package in options.packages]
    guards = sorted({m for line in chosen for p in series.parse_series(line) for m in guard_modules(p)})
    envs = {"pristine": pristine, "fixed": fixed}

    def unmasked(packages: list[str]) -> Path:
        """The set's pristine pins with ``packages`` +fixed (their known bugs masked others' on the pristine pins)."""
        upstream = [(line.package, line.wheel) for line in lines if line.package not in packages]
        built = [
            current_wheel(line, dist, "build them first (nox -s build)") for line in lines if line.package in packages
        ]
        at = (
            options.fixed_env.with_name(f"{options.fixed_env.name}-unmasked-{'+'.join(packages)}")
            if options.fixed_env
            else None
        )
        return proofenv.mixed_env(project.cache, upstream, built, at=at)

    with tempfile.TemporaryDirectory(prefix="patchwheel-prove-") as tmp:
        runner = _Runner(project.root, Path(tmp), options, log, unmasked)

        def chain(which: str) -> list[Run]:
            if which == "guards":
                return runner.guards(pristine, fixed, guards) if guards else [runner.nothing("guards")]
            env = envs[which]
            assert env is not None
            return runner.proofs(env, which)

        chosen_chains = [which for which in CHAINS if which in chains]
        if options.echo or len(chosen_chains) == 1:  # in this thread: Ctrl-C (and nox's SIGTERM) stops the run
            return [run for which in chosen_chains for run in chain(which)]
        with ThreadPoolExecutor(max_workers=len(chosen_chains)) as pool:
            futures = [pool.submit(chain, which) for which in chosen_chains]
            return [run for future in futures for run in future.result()]


class _Runner:
    """The runs of one proof of a set, in one temporary folder (pytest's folders, replays, the guards' exchange)."""

    def __init__(
        self,
        root: Path,
        tmp: Path,
        options: Options,
        log: Callable[[str], None],
        unmasked: Callable[[list[str]], Path],
    ) -> None:
        self.root, self.tmp, self.options, self.log, self.unmasked_env = root, tmp, options, log, unmasked

    def proofs(self, env: Path, flavor: str) -> list[Run]:
        """The `status` check (exit 1 on the pristine pins: a known bug applies; 0 on +fixed builds), then the
        proofs; the proofs on the pristine pins judge what follow's judge observed there, where it did."""
        where = _WHERE[flavor]
        # the tool's own interpreter asks the environment's (`status --python`, as a user would)
        status = [sys.executable, "-m", "patchwheel", "--root", str(self.root), "status", "--python"]
        expect = 1 if flavor == "pristine" else 0
        said = "a known bug applies (exit 1)" if expect else "no known bug applies (exit 0)"
        cmd = [*status, str(env / "bin" / "python")]
        run = self.run(f"status on {where}: {said}", cmd, frozenset({expect}), tool=True)
        if not run.ok:
            return [run]
        earlier = (self.options.seen or {}).get(str(env), []) if flavor == "pristine" else []
        args = ["tests/proof", *(a for pkg in self.options.packages for a in ("--proof-package", pkg))]
        if earlier:
            replay = self.tmp / f"seen-{flavor}.json"
            replay.write_text(json.dumps(earlier))
            args += ["--proof-replay", str(replay)]
        masked = self.tmp / f"masked-{flavor}.json"
        if flavor == "pristine":
            args += ["--proof-masked", str(masked)]
        runs = [run, self.pytest(f"proofs on {where}", env, args)]
        if runs[-1].ok and flavor == "pristine" and masked.is_file() and (cases := json.loads(masked.read_text())):
            runs += self.unmasked(cases)
        return runs

    def unmasked(self, cases: list[dict]) -> list[Run]:
        """The proofs another package's known bug masked on the pristine pins, judged again with that package
        +fixed and their own package pristine, one run for each package whose proofs were masked: each must fail
        there with its own bug (a pass, masked again, or another error, fails). Two packages whose bugs masked each
        other's proofs are judged in two runs, never both +fixed."""
        runs = []
        for own in sorted({c["of"] for c in cases}):
            mine = [c for c in cases if c["of"] == own]
            packages = sorted({c["package"] for c in mine} - {own})
            by = ", ".join(sorted({f"{c['package']}'s {c['patch']}" for c in mine}))
            name = f"proofs of {own} masked by {by}, on the pristine pins with {' and '.join(packages)} +fixed"
            tests = [c["nodeid"] for c in mine]
            runs.append(self.pytest(name, self.unmasked_env(packages), ["--proof-expect=fail", *tests]))
            if not runs[-1].ok:
                break
        return runs

    def guards(self, pristine: Path, fixed: Path | None, modules: list[str]) -> list[Run]:
        """Recorded on pristine, compared on +fixed, and pristine loading what +fixed wrote (the guards that take
        ``exchange``), the artifacts exchanged through one folder."""
        assert fixed is not None
        runs: list[Run] = []
        record, exchange = str(self.tmp / "pristine.json"), ["--guard-exchange", str(self.tmp / "exchange")]
        steps = (
            ("guards, recorded on the pristine pins", pristine, "--guard-record"),
            ("guards, compared on the +fixed builds", fixed, "--guard-against"),
            ("guards, +fixed's artifacts loaded on the pristine pins", pristine, "--guard-readback"),
        )
        for name, env, mode in steps:
            # a selection (-k) may leave no guard that loads an artifact for the read-back run: pytest's 5
            codes = frozenset({0, 5}) if mode == "--guard-readback" and self.options.pytest else PASSED
            runs.append(self.pytest(name, env, [*modules, mode, record, *exchange], codes, seed=True))
            if not runs[-1].ok:
                break
        return runs

    def nothing(self, what: str) -> Run:
        self.log(f"  {what}: none (no patch of the set names one)")
        return Run(what, True, "none")

    def pytest(self, name: str, env: Path, args: list[str], codes: frozenset[int] = PASSED, seed: bool = False) -> Run:
        slug = re.sub(r"\W+", "-", name)
        python = [str(env / "bin" / "python"), "-m", "pytest", *args, "-p", "no:cacheprovider"]
        return self.run(name, [*python, "--basetemp", str(self.tmp / slug), *self.options.pytest], codes, seed=seed)

    def run(self, name: str, cmd: list[str], codes: frozenset[int], seed: bool = False, tool: bool = False) -> Run:
        """``cmd`` run to its end (its process group killed after), ``ok`` where it exits with one of ``codes``.
        Bytecode is written once (the ranks import the packages afresh); ``seed``: set orders alike in the guard
        runs (the proof runs leave it as the judge's runs had it, so that their observations stay comparable);
        ``tool``: this tool's own command, on this tool's path."""
        slug = re.sub(r"\W+", "-", name)
        environ = {**os.environ, **proofenv.WRITE_BYTECODE} | ({"PYTHONHASHSEED": "0"} if seed else {})
        environ.pop("PATCHWHEEL_PROOF_REPORT", None)
        if tool:
            src = str(Path(__file__).resolve().parents[2])
            environ["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
        if self.options.echo:
            self.log(f"{name}:")
            sys.stdout.flush()
        out = None if self.options.echo else self.tmp / f"{slug}.txt"
        code = proofenv.run_in_group(cmd, self.root, environ, out, TIMEOUT)
        lines = out.read_text(errors="replace").splitlines() if out else []
        summary = next((m[1] for ln in reversed(lines) if (m := _SUMMARY.match(ln.strip()))), f"exit {code}")
        if code is None:
            summary = f"timed out after {TIMEOUT:.0f} s"
        ok = code in codes
        run = Run(name, ok, summary, "" if ok else "\n".join(lines[-40:]))
        self.log(f"  {name}: {'passed' if run.ok else 'FAILED'} ({summary})")
        return run
