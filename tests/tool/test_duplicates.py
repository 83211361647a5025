"""No code written twice in src/: pylint's similarity checker finds no block of six or more lines that two places
share, comments, docstrings, imports and signatures left out (a copy's comments may differ). Before issue 46 such a
scan found the Followed and Derived records' fields and rebase's and follow's imports written twice."""

from __future__ import annotations

import re
from pathlib import Path

from pylint.checkers.symilar import Symilar

SRC = Path(__file__).resolve().parents[2] / "src"
MIN_LINES = 6


def test_no_block_of_six_lines_is_written_twice(capsys):
    similar = Symilar(
        min_lines=MIN_LINES, ignore_comments=True, ignore_docstrings=True, ignore_imports=True, ignore_signatures=True
    )
    for path in sorted(SRC.rglob("*.py")):
        with path.open(encoding="utf-8") as stream:
            similar.append_stream(str(path.relative_to(SRC)), stream)
    similar.run()
    report = capsys.readouterr().out
    total = re.search(r"^TOTAL lines=(\d+) duplicates=(\d+)", report, re.MULTILINE)
    assert total and int(total[1]) > 1000, f"the scan read no code:\n{report}"
    assert total[2] == "0", f"code written twice (make it one function, or one record):\n{report}"
