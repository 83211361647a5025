"""What the docs tell a reader holds: every command names release lines that exist (a command copied from docs/ or
the README once named the retired 5.23.0 line and failed), and every link, and every doc path with its anchor that
a file of the project names, leads to an existing file and heading (docs/maintainers.md was split into chapters,
and a link to a section that moved would lead nowhere)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from patchwheel import config, gitops

ROOT = Path(__file__).resolve().parents[2]
#: A line named in a command: a path of its files, a `pkg==version` selection, or the line arguments of the
#: commands that take one (refresh, new). rebase, derive and follow name releases to make lines for, and upstream
#: and watch releases to judge lines on: not lines.
NAMED = (
    re.compile(r"(?:overlay|patches)/(?P<pkg>transformers|accelerate)/(?P<version>[0-9][0-9.]*[0-9])/"),
    re.compile(r"(?<![-\w])(?P<pkg>transformers|accelerate)==(?P<version>[0-9][0-9.]*[0-9])"),
    re.compile(r"(?:refresh|new) (?:-- )?(?P<pkg>transformers|accelerate) (?P<version>[0-9][0-9.]*[0-9])\b"),
)
NAMES_RELEASES = re.compile(r"\b(rebase|derive|follow|upstream|watch)\b")
#: A command written inline in prose: `nox -s ...`, `patchwheel ...`, `python -m patchwheel ...`.
INLINE_COMMAND = re.compile(r"`((?:nox -s|\.venv/bin/nox -s|patchwheel|python3? -m patchwheel) [^`]+)`")
FENCE = re.compile(r"^\s*(```|~~~)")
#: A Markdown link or image: [text](target) or [text](target "title").
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
#: A doc named in any file, as a path from the project root, with the anchor of a section where one is given.
DOC_PATH = re.compile(r"(?<![\w./-])(docs/[\w./-]*?\.md)(?:#([\w-]+))?")


def docs() -> list[Path]:
    """The README and every page under docs/, chapters of docs/maintainers/ and pages still to come included."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


def prose(doc: Path) -> Iterator[tuple[int, str, bool]]:
    """Each line of a Markdown file with its number and whether it is inside a fenced code block."""
    inside = False
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
            yield number, line, True
            continue
        yield number, line, inside


def commands() -> list[tuple[str, str]]:
    """Every command the docs show being run: a ``$ `` line of a console block (its comment left out), a line of a
    ``sh`` block, or a command quoted inline in the text."""
    out = []
    for doc in docs():
        name = str(doc.relative_to(ROOT))
        for _, line, code in prose(doc):
            if line.startswith("$ "):
                out.append((name, line[2:].split("  #", 1)[0]))
            elif not code:
                out.extend((name, m[1]) for m in INLINE_COMMAND.finditer(line))
    return out


def test_every_line_a_documented_command_names_exists():
    project = config.load(ROOT)
    lines = {(line.package, line.version) for line in project.all_lines()}
    missing = []
    for doc, command in commands():
        if NAMES_RELEASES.search(command):
            continue
        for pattern in NAMED:
            for m in pattern.finditer(command):
                if (m["pkg"], m["version"]) not in lines:
                    missing.append(f"{doc}: {command.strip()}")
    assert commands() and not missing, "\n".join(missing)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text as rendered (a link's text, no code marks), lower case, punctuation
    other than '-' and '_' removed, each space a '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    """The anchors of a Markdown file's headings; a repeated one gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for _, line, code in prose(doc):
        m = re.match(r"#{1,6} (.+)", line)
        if code or not m:
            continue
        base = slug(m[1])
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def project_files() -> list[Path]:
    """The project's own files, tracked or new (not ignored); not the vendored upstream modules, nor the patches
    (upstream's code and messages), nor anything that is not text."""
    listed = gitops.git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").decode()
    out = []
    for name in sorted(set(filter(None, listed.split("\0")))):
        parts = name.split("/")
        if (parts[0] == "overlay" and len(parts) > 3) or name.endswith(".patch") or parts[0] == "upstream-pr":
            continue
        path = ROOT / name
        try:
            path.read_text()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        out.append(path)
    return out


def broken(target: Path, anchor: str | None) -> str | None:
    """Why a link to this file and anchor leads nowhere; None when it leads to them."""
    if not target.exists():
        return "no such file"
    if anchor and target.suffix == ".md" and anchor not in anchors(target):
        return f"{target.relative_to(ROOT)} has no heading with the anchor #{anchor}"
    return None


def test_every_relative_link_of_a_markdown_file_leads_to_a_file_and_heading():
    markdown = [p for p in project_files() if p.suffix == ".md"]
    markdown += sorted((ROOT / "upstream-pr").glob("*.md"))
    problems = []
    checked = 0
    for doc in markdown:
        for number, line, code in prose(doc):
            if code:
                continue
            for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
                target = m[1]
                if re.match(r"[a-z][a-z0-9+.-]*:", target):
                    continue  # https:, mailto: ...: not this project's
                path, _, anchor = target.partition("#")
                why = broken((doc.parent / path).resolve() if path else doc, anchor or None)
                checked += 1
                if why:
                    problems.append(f"{doc.relative_to(ROOT)}:{number}: ({target}): {why}")
    assert checked > 50 and not problems, "\n".join(problems)


def test_every_doc_a_file_names_exists_and_has_the_section_named():
    problems = []
    checked = 0
    for path in project_files() + sorted((ROOT / "upstream-pr").glob("*.md")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for m in DOC_PATH.finditer(line):
                checked += 1
                why = broken(ROOT / m[1], m[2])
                if why:
                    problems.append(f"{path.relative_to(ROOT)}:{number}: {m[0]}: {why}")
    assert checked > 10 and not problems, "\n".join(problems)


def test_the_slugs_are_github_s():
    assert slug("Following upstream: `nox -s follow`") == "following-upstream-nox--s-follow"
    assert slug("Upstream's own tests on our builds: `nox -s upstream_suite`") == (
        "upstreams-own-tests-on-our-builds-nox--s-upstream_suite"
    )
    assert slug("The dist/ folder and downloads") == "the-dist-folder-and-downloads"
    assert slug("See [the fixes](fixes.md)") == "see-the-fixes"
    assert broken(ROOT / "README.md", "no-such-section") and broken(ROOT / "docs" / "no-such-page.md", None)
    assert broken(ROOT / "README.md", "install") is None
