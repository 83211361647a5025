"""The fix tables of README.md ("The fixes") and docs/fixes.md (its first table), generated from the series and
their trailers (`patchwheel tables`; lint fails while a committed table differs from what it would write).

A fix is a slug, carried by one or more release lines of a package. Every column but the first is a fact of the
series: the lines that carry the fix, the patch on each line, ``Upstream-Issue``, ``Upstream-Status``,
``Drop-When``, ``Proof-Test``/``Feature-Test`` and ``Guard-Test`` (of the newest line that carries it; a test
module only some lines name says which). The first column is the doc's own words for the fix, kept as written,
row by row (found by the slug its patch link names); a fix with no row yet gets one, its patch's subject as the
first words to reword, after the rows of its package; the row of a fix that no line carries any more goes.

Each table is the one that follows the line :data:`MARKER` in its file. A new line changes what the tables say
(the lines that carry each fix): `derive` and `rebase` write them when they write the line (:func:`pending`,
:func:`write_pending`); after `follow`, the upstream watch's pull request writes them; by hand, `nox -s tables`."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..atomic import replace_text
from ..config import Project, ReleaseLine
from ..errors import ConfigError
from ..series import Patch, parse_series, split_patch_name, test_refs
from .export.commit import issue_refs

MARKER = (
    "<!-- the fix table: `nox -s tables` writes it from the series and their trailers; edit only the first column -->"
)
_LINK = re.compile(r"\]\([^)]*/([^/)]+\.patch)\)")  # a link to a patch file


@dataclass(frozen=True)
class Fix:
    """One fix: its package and each line that carries it, oldest first, with the line's patch."""

    package: str
    carried: tuple[tuple[ReleaseLine, Patch], ...]

    @property
    def slug(self) -> str:
        return self.carried[-1][1].slug

    @property
    def newest(self) -> Patch:
        return self.carried[-1][1]


@dataclass(frozen=True)
class Table:
    """A generated table: its file (relative to the root), its header, the link prefix of its file to the root, and
    the columns after the first."""

    path: str
    header: tuple[str, ...]
    up: str  # "" in README.md, "../" in docs/

    def row(self, fix: Fix, first: str) -> str:
        every = self.up != ""  # docs/fixes.md: every line's patch, the test a partial fix still fails
        cells = [first, _lines(fix), _patches(fix, self.up, every), _issues(fix), _status(fix, every)]
        if self.up:
            cells += [f"`{fix.newest.trailers.get('Drop-When', '')}`", _tests(fix, self.up), _guards(fix, self.up)]
        return "| " + " | ".join(cells) + " |"


README = Table("README.md", ("fix", "release lines", "patch (newest line)", "upstream", "status"), "")
FIXES_MD = Table(
    "docs/fixes.md",
    ("fix", "release lines", "patch", "upstream", "status", "drop when", "proof / feature test", "guards"),
    "../",
)
TABLES = (README, FIXES_MD)


def fixes(project: Project) -> list[Fix]:
    """Every fix of the project, by package (in the project's order), then by first appearance in the lines."""
    out: dict[tuple[str, str], list[tuple[ReleaseLine, Patch]]] = {}
    for package in project.packages():
        for line in project.lines[package]:
            for patch in parse_series(line):
                out.setdefault((package, patch.slug), []).append((line, patch))
    return [Fix(package, tuple(carried)) for (package, _), carried in out.items()]


def _lines(fix: Fix) -> str:
    return f"{fix.package} " + ", ".join(line.version for line, _ in fix.carried)


def _link(line: ReleaseLine, patch: Patch, up: str, text: str) -> str:
    return f"[{text}]({up}patches/{line.package}/{line.version}/{patch.name})"


def _patches(fix: Fix, up: str, every: bool) -> str:
    """The newest line's patch; with ``every``, then each older line's, newest first."""
    line, patch = fix.carried[-1]
    newest = _link(line, patch, up, patch.name.removesuffix(".patch"))
    older = [_link(ln, p, up, ln.version) for ln, p in reversed(fix.carried[:-1])]
    return newest + (f" ({', '.join(older)})" if every and older else "")


def _ref(value: str, package: str) -> str:
    """An issue or pull request as a link: ``#N`` in the package's own repository, ``repo#N`` elsewhere."""
    refs = issue_refs(value)
    if not refs:
        return value
    repo, kind, n = refs[0]
    name = "" if repo == f"huggingface/{package}" else repo.split("/")[1]
    return f"[{name}#{n}](https://github.com/{repo}/{kind}/{n})"


def _issues(fix: Fix) -> str:
    refs = [r.strip() for r in fix.newest.trailers.get("Upstream-Issue", "").split(",") if r.strip()]
    return ", ".join(_ref(r, fix.package) for r in refs)


def _status(fix: Fix, detail: bool) -> str:
    """``Upstream-Status``, its pull request as a link; with ``detail``, the test a partial fix still fails."""
    words = fix.newest.trailers.get("Upstream-Status", "").split()
    if len(words) >= 2 and words[0] in ("Submitted", "Backport", "Fix-Proposed-In"):
        return f"{words[0]} {_ref(words[1], fix.package)}"
    still = f" (`{words[2].rsplit('::', 1)[-1]}` still fails)" if detail and len(words) > 2 else ""
    return " ".join(words[:2]) + still


def _modules(patch: Patch, key: str) -> list[str]:
    return list(dict.fromkeys(path for path, _ in test_refs(patch.trailers[key]))) if key in patch.trailers else []


def _files(fix: Fix, key: str, up: str) -> list[str]:
    """Each test module the lines' ``key`` trailers name, once, in order; one only some lines name says which."""
    by_line = [(line, _modules(patch, key)) for line, patch in fix.carried]
    order = list(dict.fromkeys(m for _, modules in by_line for m in modules))
    out = []
    for module in order:
        on = [line.version for line, modules in by_line if module in modules]
        where = f" ({', '.join(on)})" if len(on) < len(fix.carried) else ""
        out.append(f"[{module.rsplit('/', 1)[-1]}]({up}{module}){where}")
    return out


def _tests(fix: Fix, up: str) -> str:
    key = "Feature-Test" if fix.newest.is_feature else "Proof-Test"
    return ("feature: " if fix.newest.is_feature else "") + ", ".join(_files(fix, key, up))


def _guards(fix: Fix, up: str) -> str:
    return ", ".join(_files(fix, "Guard-Test", up))


def _span(lines: list[str], path: str) -> tuple[int, int]:
    """Where the table after the marker is: its first row's index and the index after its last row."""
    if lines.count(MARKER) != 1:
        raise ConfigError(
            f"{path} has {lines.count(MARKER)} fix-table markers, not one",
            f"put the line {MARKER!r} once, right before the table's header",
        )
    marker = lines.index(MARKER)
    header = lines[marker + 1 : marker + 3]
    if len(header) < 2 or not header[0].startswith("|") or not header[1].startswith("|---"):
        raise ConfigError(
            f"{path}: the line after the fix-table marker is not a table's header and rule (line {marker + 2})",
            "put the marker right before the table's header (`| fix | ...`) and its rule (`|---|...`); for a new "
            "table, write those two lines and run `nox -s tables`",
        )
    start = marker + 3
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return start, end


def _first_cells(rows: list[str]) -> dict[str, str]:
    """The first column of each row, by the slug its patch link names."""
    out: dict[str, str] = {}
    for row in rows:
        if (m := _LINK.search(row)) and (name := split_patch_name(m.group(1))):
            out.setdefault(name[1], row[1:].split(" | ", 1)[0].strip())
    return out


def _ordered(found: list[Fix], kept: list[str], package_of: dict[str, str]) -> Iterator[Fix]:
    """The fixes in the doc's order of its rows; a new one after the last row of its package."""
    by_slug = {f.slug: f for f in found}
    order = [s for s in kept if s in by_slug]
    for fix in found:
        if fix.slug in order:
            continue
        same = [i for i, s in enumerate(order) if package_of[s] == fix.package]
        order.insert(same[-1] + 1 if same else len(order), fix.slug)
    return (by_slug[s] for s in order)


def render(text: str, table: Table, found: list[Fix]) -> str:
    """``text`` with its table generated from ``found``, the first column of each row kept."""
    lines = text.split("\n")
    start, end = _span(lines, table.path)
    first = _first_cells(lines[start:end])
    package_of = {f.slug: f.package for f in found}
    rows = [table.row(f, first.get(f.slug, f.newest.subject)) for f in _ordered(found, list(first), package_of)]
    header = ["| " + " | ".join(table.header) + " |", "|" + "---|" * len(table.header)]
    return "\n".join(lines[: start - 2] + header + rows + lines[end:])


def _stale(project: Project, table: Table, found: list[Fix], root: Path | None = None) -> tuple[str, str] | None:
    """The file's text now and as `tables` writes it, where they differ (None: up to date, or no such file: follow's
    and derive's scratch copy of overlay/ and patches/, a test's project, has no table to check). ``root``: the
    files of another tree than the project's (the project a scratch copy is written back to)."""
    path = (root or project.root) / table.path
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    new = render(text, table, found)
    return (text, new) if new != text else None


def stale(project: Project) -> list[tuple[Path, str]]:
    """Each file whose table differs from the series, with its text as `tables` writes it."""
    found = fixes(project)
    return [(project.root / t.path, both[1]) for t in TABLES if (both := _stale(project, t, found)) is not None]


def problems(project: Project) -> list[str]:
    """Lint's part: each committed table that is not what the series and trailers give."""
    found, out = fixes(project), []
    for table in TABLES:
        try:
            if _stale(project, table, found) is not None:
                out.append(f"{table.path}: its fix table is not the series' (run `nox -s tables` and commit it)")
        except ConfigError as exc:
            out.append(f"{exc.message} (fix: {exc.hint})")
    return out


def write(project: Project) -> list[Path]:
    """Write each stale table (the file replaced whole); the files written."""
    found = stale(project)
    for path, text in found:
        replace_text(path, text)
    return [path for path, _ in found]


def pending(
    project: Project, root: Path | None = None, log: Callable[[str], None] = lambda m: None
) -> list[tuple[Path, str, str]]:
    """The tables of the files under ``root`` (default: the project's own) as ``project``'s series give them: (file,
    its text now, its text with the tables), where they differ. A scratch copy's project renders the tables of the
    project it is written back to. A table that cannot be rendered is left as it is, and ``log`` says why."""
    found, out = fixes(project), []
    for table in TABLES:
        try:
            both = _stale(project, table, found, root)
        except ConfigError as exc:
            log(f"{table.path}: its fix table is not written ({exc.message}; fix: {exc.hint})")
            continue
        if both is not None:
            out.append(((root or project.root) / table.path, *both))
    return out


def write_pending(found: list[tuple[Path, str, str]], root: Path, log: Callable[[str], None]) -> None:
    """After a maintainer's command wrote a line (derive, rebase): the tables :func:`pending` rendered, each written
    where its file still holds the text it was rendered from (else it says to run `nox -s tables`)."""
    written = []
    for path, text, new in found:
        if path.read_text(encoding="utf-8") != text:
            log(f"{path.relative_to(root).as_posix()} changed meanwhile: its fix table is stale; run `nox -s tables`")
            continue
        replace_text(path, new)
        written.append(path.relative_to(root).as_posix())
    if written:
        log(f"wrote the fix tables of {', '.join(written)}")
