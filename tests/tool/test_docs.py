"""What the docs tell a reader to run names release lines that exist: a command copied from docs/ or the README
once named the retired 5.23.0 line and failed."""

from __future__ import annotations

import re
from pathlib import Path

from patchwheel import config

ROOT = Path(__file__).resolve().parents[2]
#: A line named in a command: a path of its files, a `pkg==version` selection, or the line arguments of the
#: commands that take one (refresh, new). rebase, derive and follow name releases to make lines for, not lines.
NAMED = (
    re.compile(r"(?:overlay|patches)/(?P<pkg>transformers|accelerate)/(?P<version>[0-9][0-9.]*[0-9])/"),
    re.compile(r"(?<![-\w])(?P<pkg>transformers|accelerate)==(?P<version>[0-9][0-9.]*[0-9])"),
    re.compile(r"(?:refresh|new) (?:-- )?(?P<pkg>transformers|accelerate) (?P<version>[0-9][0-9.]*[0-9])\b"),
)
MAKES_A_LINE = re.compile(r"\b(rebase|derive|follow)\b")


def commands() -> list[tuple[str, str]]:
    """Every command the docs show being run (a ``$ `` line of a console block, its comment left out)."""
    out = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in doc.read_text().splitlines():
            if line.startswith("$ "):
                out.append((doc.name, line[2:].split("  #", 1)[0]))
    return out


def test_every_line_a_documented_command_names_exists():
    project = config.load(ROOT)
    lines = {(line.package, line.version) for line in project.all_lines()}
    missing = []
    for doc, command in commands():
        if MAKES_A_LINE.search(command):
            continue
        for pattern in NAMED:
            for m in pattern.finditer(command):
                if (m["pkg"], m["version"]) not in lines:
                    missing.append(f"{doc}: {command.strip()}")
    assert commands() and not missing, "\n".join(missing)
