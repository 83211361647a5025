"""docs/adding-a-fix.md, the one page for adding a fix: the README links it, and each command it shows runs as
written: its nox sessions and tags exist, and the options it passes are the tool's (test_docs.py checks the lines it
names). The page itself was walked end to end (A2, removed and added again)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from patchwheel import cli

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "adding-a-fix.md"


def _commands() -> list[str]:
    return [line[2:].split("  #", 1)[0].strip() for line in PAGE.read_text().splitlines() if line.startswith("$ ")]


def _sessions() -> set[str]:
    """The noxfile's session names (a parametrized one by its base name)."""
    return set(re.findall(r"^def (\w+)\(session", (ROOT / "noxfile.py").read_text(), re.M))


def test_the_readme_links_the_page():
    assert "](docs/adding-a-fix.md)" in (ROOT / "README.md").read_text()


def test_each_nox_command_of_the_page_names_a_session_or_a_set():
    sets = tomllib.loads((ROOT / "overlay" / "sets.toml").read_text())["set"]
    commands = _commands()
    assert len(commands) >= 10, commands
    wrong = []
    for command in commands:
        if m := re.match(r"nox -s \"?(\w+)", command):
            if m[1] not in _sessions():
                wrong.append(command)
        elif m := re.match(r"nox -t set-(\S+)\Z", command):
            if m[1] not in sets:
                wrong.append(command)
    assert wrong == []


def test_the_options_the_page_passes_are_the_tools():
    parser = cli.parser()
    for command in _commands():
        m = re.match(r"nox -s (new|refresh|mutants|export|rebase|tables) -- (.*)", command)
        if m is None:
            continue
        args = [a.strip('"') for a in re.findall(r'"[^"]*"|\S+', m[2].replace("<slug>", "a-fix"))]
        parsed = parser.parse_args([m[1], *args])  # exits (SystemExit) on an option the tool does not take
        assert parsed.func is not None, command


def test_the_page_shows_each_step_with_its_command():
    text = PAGE.read_text()
    for step in (
        "nox -s new",
        "chain='pristine'",
        "chain='fixed'",
        "nox -s refresh",
        "chain='guards'",
        "--reexport",
        "matrix -- rerender",
        "nox -s lint",
        "nox -t set-",
        "--patch",
        "nox -s export",
        "nox -s tables",
        "## One fix on several lines",
    ):
        assert step in text, step


def test_fixes_md_lists_every_declared_api_change():
    """Each ``API-Change`` trailer (an upstream signature or module-level name a patch changes on purpose, which lint
    accepts only declared) has its entry in docs/fixes.md's list "Upstream signatures the patches change": the name
    in backticks, then a link to each patch that declares it; and the list holds nothing no trailer declares."""
    from patchwheel import config, series

    text = (ROOT / "docs" / "fixes.md").read_text()
    section = text.split("\n**Upstream signatures the patches change.**", 1)[1].split("\n**", 1)[0]
    listed = set()
    for bullet in re.split(r"\n(?=- )", section)[1:]:
        name = re.match(r"- `([\w.]+)`", bullet)
        assert name is not None, bullet[:80]
        links = re.findall(r"\]\(\.\./patches/([\w.-]+/[\w.]+/\d{4}-[\w.-]+\.patch)\)", bullet)
        assert links, f"{name[1]}: no link to the patch that declares it"
        listed |= {(name[1], link) for link in links}
    project = config.load(ROOT)
    declared = {
        (name, f"{line.package}/{line.version}/{patch.name}")
        for line in project.all_lines()
        for patch in series.parse_series(line)
        for name, _ in series.api_changes(patch)
    }
    assert listed == declared
