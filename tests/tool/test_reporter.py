"""The tool's one output object: lines, warnings and progress, with or without rich."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_progress_without_rich_prints_plain_lines(tmp_path):
    """The build, lint and status run in nox's own interpreter, which has no rich: progress is plain lines."""
    import sys

    code = (
        "import sys; sys.modules['rich'] = None\n"
        "from patchwheel.reporter import Progress\n"
        "with Progress('x', 2, sys.stdout) as p:\n"
        "    p.step('one')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("[1/2 ") and "ETA" in res.stdout and res.stdout.rstrip().endswith("] one")


# --- the merge trusts nothing a cell job wrote ---------------------------------------------------------------------
