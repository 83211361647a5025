"""Upstream's own test of a fix (``upstream-pr/<pkg>/<slug>/tests/``), run by the export on the newest release.

The test files are laid out as in upstream's tree in a temporary folder and run with pytest in the export's
environment (the release, its companion, torch; nothing of this project but a small outcome plugin,
``upstream_outcomes.py``), once on the pristine release and once with the patch's files installed over it:

- pristine: each test ``expect.toml`` names must fail with its exception (type name equal, message matching; for a
  ``worker`` expectation, the line ``<Type>: <message>`` a worker process printed, as torchrun shows it), and no
  other test may fail or error: that is the bug, shown by upstream's test, for the bug's reason;
- patched: every test that ran passes, the expected ones included.

Skips are upstream's (``require_torch_multi_accelerator`` and the like: the GPU forms on a CPU machine); they are
listed in the outcome, never counted as a verdict. No hub is reached (``HF_HUB_OFFLINE=1``): the tests build tiny
models from configs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from ... import gitops
from ...config import Artifact, Project, ReleaseLine
from ...wheels import fetch
from ..proving import proofenv
from ..upstream.matrixrun import companions
from .submission import Expectation, Submission

TIMEOUT = 900.0
_PLUGIN = Path(__file__).with_name("upstream_outcomes.py")
_WORKER_LINE = r"^(?:\[rank\d+\]:\s*)?(?:[\w.]+\.)?{type}: (.*)$"


def export_env(project: Project, line: ReleaseLine, newest: Artifact) -> Path:
    """The cached environment of exports for this release (with its companion, on the shared torch), with a
    ``torchrun`` of its own: upstream's distributed tests start ``torchrun``, whose workers must import this
    environment's packages, not those of the environment torch was installed in."""
    wheels = [(line.package, newest)] + companions(project, line)
    name = proofenv.env_name([(pkg, proofenv.wheel_version(a.filename)) for pkg, a in wheels], "export")
    env = proofenv.env_on_base(
        project.cache,
        name,
        {"wheels": [a.sha256 for _, a in wheels]},
        lambda: [str(fetch.fetch(p, a)) for p, a in wheels],
    )
    torchrun = env / "bin" / "torchrun"
    script = f"#!{env / 'bin' / 'python'}\nimport sys\n\nfrom torch.distributed.run import main\n\nsys.exit(main())\n"
    if not torchrun.is_file() or torchrun.read_text() != script:
        torchrun.write_text(script)
        torchrun.chmod(0o755)
    return env


def run(python: Path, tests: dict[str, bytes], timeout: float = TIMEOUT) -> list[dict] | str:
    """Run upstream's test files, laid out as in upstream's tree, with ``python``'s pytest; each test's outcome
    (see upstream_outcomes.py), or why there is none."""
    with tempfile.TemporaryDirectory(prefix="patchwheel-upstream-test-") as tmp:
        tree, plugin = Path(tmp) / "tree", Path(tmp) / "plugin"
        gitops.write_files(tree, tests)
        # Its own rootdir: upstream's pytest options (doctests of its docs, log_cli) are for its whole suite.
        (tree / "pytest.ini").write_text("[pytest]\n")
        plugin.mkdir()
        shutil.copy(_PLUGIN, plugin / _PLUGIN.name)
        report, log = Path(tmp) / "report.json", Path(tmp) / "output.txt"
        env = {
            **os.environ,
            **proofenv.WRITE_BYTECODE,
            "PYTHONPATH": str(plugin),
            "PATCHWHEEL_UPSTREAM_REPORT": str(report),
            "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
            "HF_HUB_OFFLINE": "1",
        }
        files = sorted(p for p in tests if p.rsplit("/", 1)[-1].startswith("test_") and p.endswith(".py"))
        cmd = [str(python), "-m", "pytest", *files, "-q", "-p", "upstream_outcomes", "-p", "no:cacheprovider"]
        returncode = proofenv.run_in_group(cmd, tree, env, log, timeout)
        if returncode is None:
            return f"timed out after {timeout:.0f} s"
        try:
            return json.loads(report.read_text())
        except (OSError, ValueError):
            tail = log.read_text(errors="replace").strip().splitlines()
            return tail[-1][:200] if tail else f"pytest exited {returncode}"


def _worker_line(expect: Expectation, case: dict) -> str | None:
    """The message of the line ``<Type>: <message>`` a worker printed that matches the expectation, if any."""
    lines = re.finditer(_WORKER_LINE.format(type=re.escape(expect.raises)), case["message"], re.M)
    return next((m.group(1) for m in lines if re.search(expect.match, m.group(1))), None)


def shows(expect: Expectation, case: dict) -> bool:
    """Whether a failed test failed with the expected exception (its own, or a worker's line)."""
    if case["outcome"] != "failed":
        return False
    if expect.worker:
        return _worker_line(expect, case) is not None
    return case["raises"] == expect.raises and re.search(expect.match, case["message"]) is not None


def _short(case: dict, expect: Expectation | None = None) -> str:
    name = case["test"].rsplit("::", 1)[-1]
    if case["outcome"] == "skipped":
        return f"{name}: skipped ({case['message'][:120]})"
    if expect is not None and expect.worker and (line := _worker_line(expect, case)):
        return f"{name}: {expect.raises}: {line.strip()[:160]} (in a worker)"
    text = re.sub(r"\s+", " ", case["message"]).strip()
    return f"{name}: {case['raises'] + ': ' if case['raises'] else ''}{text[:160]}"


def _tally(cases: list[dict]) -> str:
    counts = {o: sum(c["outcome"] == o for c in cases) for o in ("passed", "failed", "skipped", "error")}
    skipped = [_short(c) for c in cases if c["outcome"] == "skipped"]
    return ", ".join(f"{n} {o}" for o, n in counts.items() if n) + (f"; {'; '.join(skipped)}" if skipped else "")


def judge_pristine(expect: tuple[Expectation, ...], cases: list[dict] | str) -> proofenv.ProofOutcome:
    """``fails``: every expected test failed with its exception and nothing else failed; ``passes``: every test
    that ran passed (the bug is not there); ``error``: anything else (the test cannot judge this release)."""
    if isinstance(cases, str) or not cases:
        return proofenv.ProofOutcome("error", cases if isinstance(cases, str) else "no test ran")
    by_id = {c["test"]: c for c in cases}
    expected = {e.test for e in expect}
    missing = [e.test for e in expect if e.test not in by_id]
    if missing:
        return proofenv.ProofOutcome("error", f"did not run: {', '.join(missing)} ({_tally(cases)})")
    wrong = [c for c in cases if c["outcome"] in ("failed", "error") and c["test"] not in expected]
    wrong += [by_id[e.test] for e in expect if by_id[e.test]["outcome"] != "passed" and not shows(e, by_id[e.test])]
    shown = [e for e in expect if shows(e, by_id[e.test])]
    if wrong:
        return proofenv.ProofOutcome("error", "failed otherwise: " + "; ".join(_short(c) for c in wrong))
    if len(shown) == len(expect):
        return proofenv.ProofOutcome(
            "fails", "; ".join(_short(by_id[e.test], e) for e in shown) + f" ({_tally(cases)})"
        )
    if not shown and all(c["outcome"] in ("passed", "skipped") for c in cases):
        return proofenv.ProofOutcome("passes", _tally(cases))
    fine = [by_id[e.test] for e in expect if not shows(e, by_id[e.test])]
    return proofenv.ProofOutcome("error", "passed where the bug was expected: " + "; ".join(_short(c) for c in fine))


def judge_patched(expect: tuple[Expectation, ...], cases: list[dict] | str) -> proofenv.ProofOutcome:
    """``passes``: every test that ran passed, the expected ones among them; otherwise ``fails`` (or ``error``
    when nothing could be judged)."""
    if isinstance(cases, str) or not cases:
        return proofenv.ProofOutcome("error", cases if isinstance(cases, str) else "no test ran")
    by_id = {c["test"]: c for c in cases}
    bad = [c for c in cases if c["outcome"] in ("failed", "error")]
    bad += [
        {"test": e.test, "outcome": "skipped", "raises": "", "message": "did not run"}
        for e in expect
        if e.test not in by_id
    ]
    bad += [by_id[e.test] for e in expect if e.test in by_id and by_id[e.test]["outcome"] == "skipped"]
    if bad:
        return proofenv.ProofOutcome("fails", "; ".join(_short(c) for c in bad) + f" ({_tally(cases)})")
    return proofenv.ProofOutcome("passes", _tally(cases))


def both_ways(
    project: Project, line: ReleaseLine, newest: Artifact, patched: dict, sub: Submission
) -> tuple[proofenv.ProofOutcome, proofenv.ProofOutcome]:
    """Upstream's test on the newest release as published, then with ``patched`` (wheel paths -> bytes, None:
    deleted) installed over it, in the export's own environment (no other check ever sees the patched files)."""
    env = export_env(project, line, newest)
    site = proofenv.site_packages(env)
    # An export killed while the patched files were installed left them there: put the release's own bytes back.
    proofenv.restore_from_wheel(site, fetch.fetch(line.package, newest), sorted(patched))
    before = judge_pristine(sub.expect, run(env / "bin" / "python", sub.tests))
    with proofenv.installed_over(site, patched):
        after = judge_patched(sub.expect, run(env / "bin" / "python", sub.tests))
    return before, after
