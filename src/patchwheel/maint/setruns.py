"""A consumer set proven both ways outside nox: what `nox -s proof` and `nox -s guards` check, for `follow`.

- the proofs on the set's **pristine** pins: each fix's proof must fail with its bug, the rest pass;
- the proofs on its **+fixed** builds: each must pass;
- its **guards** (the Guard-Test modules of its patches): recorded on the pristine pins, compared on the +fixed
  builds, and what +fixed wrote loaded on the pristine pins (as `nox -s guards` runs them, through one exchange
  folder); every difference must be declared intended.

Each in a cached environment (:mod:`proofenv`: the pinned wheels, or the +fixed wheels of a ``dist`` folder, on
the shared torch), pytest run as the nox sessions run it, in the contract's own mode: its exit status is the
verdict. The three chains run side by side (a proof run leaves a core idle about a third of the time).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .. import patches
from ..config import Project, ReleaseLine
from ..distdir import current_wheel
from ..reporter import CONSOLE
from ..trailers import guard_modules
from . import proofenv

TIMEOUT = 1800.0
_SUMMARY = re.compile(r"^=+ (.+?) =+\Z")


@dataclass
class Run:
    """One pytest run of a set's proofs or guards."""

    name: str  # e.g. "proofs on the pristine pins"
    ok: bool
    summary: str  # pytest's last line
    tail: str = ""  # the end of its output, when it failed


def prove_set(
    project: Project,
    members: dict[str, ReleaseLine],
    dist: Path,
    log: Callable[[str], None] = CONSOLE,
    seen: dict[str, list[dict]] | None = None,
) -> list[Run]:
    """The set ``members`` (package -> line) proven both ways, its +fixed wheels taken from ``dist``. ``seen``:
    proof cases observed earlier, per environment (follow's judge on the new release): the proofs on the pristine
    pins judge those observed in their environment on the same inputs instead of running them (``--proof-replay``:
    the contract checks the inputs, and judges each observation as it judges a run)."""
    cache = project.cache
    lines = list(members.values())
    hint = "build them first (patchwheel build)"
    wheels = [current_wheel(line, dist, hint) for line in lines]
    pristine = proofenv.release_env(cache, [(line.package, line.wheel) for line in lines])
    fixed = proofenv.fixed_env(cache, wheels, purpose="follow")
    guards = sorted({m for line in lines for p in patches.load_series(line) for m in guard_modules(p)})
    with tempfile.TemporaryDirectory(prefix="patchwheel-setruns-") as tmp:
        folder = Path(tmp)

        def proofs(env: Path, flavor: str) -> list[Run]:
            earlier = (seen or {}).get(str(env), [])
            replay = folder / f"seen-{flavor.replace(' ', '-')}.json"
            replay.write_text(json.dumps(earlier))
            args = ["tests/proof", "--proof-replay", str(replay)] if earlier else ["tests/proof"]
            return [_pytest(f"proofs on the {flavor}", env, project.root, args, folder, log)]

        def guarded() -> list[Run]:
            """As `nox -s guards` runs them: recorded on pristine, compared on +fixed, and pristine loading what
            +fixed wrote (the guards that take ``exchange``), the artifacts exchanged through one folder."""
            runs: list[Run] = []
            exchange = ["--guard-exchange", str(folder / "exchange")]
            steps = (
                ("guards, recorded on the pristine pins", pristine, "--guard-record"),
                ("guards, compared on the +fixed builds", fixed, "--guard-against"),
                ("guards, +fixed's artifacts loaded on the pristine pins", pristine, "--guard-readback"),
            )
            for name, env, mode in steps if guards else ():
                args = [*guards, mode, str(folder / "pristine.json"), *exchange]
                runs.append(_pytest(name, env, project.root, args, folder, log, seed=True))
                if not runs[-1].ok:
                    break
            return runs

        with ThreadPoolExecutor(max_workers=3) as pool:
            chains = [
                pool.submit(proofs, pristine, "pristine pins"),
                pool.submit(proofs, fixed, "+fixed builds"),
                pool.submit(guarded),
            ]
            return [run for chain in chains for run in chain.result()]


def _pytest(
    name: str, env: Path, root: Path, args: list[str], tmp: Path, log: Callable[[str], None], seed: bool = False
) -> Run:
    slug = re.sub(r"\W+", "-", name)
    out = tmp / f"{slug}.txt"
    cmd = [str(env / "bin" / "python"), "-m", "pytest", *args, "-p", "no:cacheprovider", "--basetemp", str(tmp / slug)]
    # Bytecode written once (the ranks import the packages afresh); ``seed``: set orders alike in the guard runs
    # (the proof runs leave it as the judge's runs had it, so that their observations stay comparable).
    environ = {**os.environ, "PYTHONDONTWRITEBYTECODE": ""} | ({"PYTHONHASHSEED": "0"} if seed else {})
    environ.pop("PATCHWHEEL_PROOF_REPORT", None)
    code = proofenv.run_in_group(cmd, root, environ, out, TIMEOUT)
    lines = out.read_text(errors="replace").splitlines()
    summary = next((m[1] for ln in reversed(lines) if (m := _SUMMARY.match(ln.strip()))), "no summary")
    if code is None:
        summary = f"timed out after {TIMEOUT:.0f} s"
    run = Run(name, code == 0, summary, "" if code == 0 else "\n".join(lines[-40:]))
    log(f"  {name}: {'passed' if run.ok else 'FAILED'} ({summary})")
    return run
