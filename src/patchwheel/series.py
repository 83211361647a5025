"""The patch format, in one module: a patch file and its name, a release line's series, and a patch's metadata
(parse ``git format-patch`` mboxes, read their trailers, lint a release line's series).

A patch is one commit exported with the pinned flags (:data:`gitops.FORMAT_PATCH_FLAGS`), paths as in upstream's
git tree, named ``NNNN-slug.patch`` (:data:`PATCH_NAME`, the rule written once). Its metadata lives in git trailers
at the end of the commit message, which survive ``git am`` and ``git format-patch`` round trips. What lint reads is
exactly what git applies: hunks by their counts, modes, and ``git apply --numstat`` must agree with the parser.

The trailers, their vocabulary and their checks:

    Upstream-Issue:  https://github.com/huggingface/transformers/issues/37663
    Upstream-Status: Pending | Submitted <url> | Backport <pr> | Fixed-In <version>
                     | Partial-Fix-In <version> <the proof test that still fails there>
                     | Fix-Proposed-In <someone else's pull request URL>: export offers the test to it
    Proof-Test:      tests/proof/test_x.py[::test_y, ...] a fix: the test(s) that prove the bug (fail without the patch)
    Feature-Test:    tests/proof/test_x.py             instead, for a capability the patch adds
    Guard-Test:      tests/guards/test_x.py[, ...]     the differential guards of the bug's neighbourhood
    Drop-When:       transformers>=4.54.0 | proof-passes-upstream (fixes only) | pr-released <url or pending>
    API-Change:      <module>.<qualified name>: <why>   an upstream signature or module-level name the patch changes
                     (one trailer per name; lint refuses any other change of what the patch touches)

Each trailer is given once, except ``API-Change`` (one per name) and ``Mutant-Survives`` (one per hunk): a key given
twice would keep one value and lose the other, so lint refuses it. :attr:`Patch.trailers` holds each key's value,
:attr:`Patch.trailer_lines` every trailer in order (:func:`api_changes` reads the repeated one).

A feature cannot be judged by behaviour on a release without it (its test has nothing to call there), so it is
dropped by release or PR, never by ``proof-passes-upstream``. ``Fixed-In`` is a claim the committed matrix can
check (the proof passes there); an upstream fix that leaves part of the bug is ``Partial-Fix-In``, naming the test
that still fails. Parsing a series (:func:`parse_series`) judges none of this; linting it does
(:func:`lint_series`, :func:`checked_series`: the build, vendor, refresh, rebase and export refuse a series that
fails it, so a patch with a malformed trailer is not built), and `patchwheel lint`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email import policy
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from . import gitops
from .config import ReleaseLine
from .draft import todo_lines
from .errors import PatchError, PatchwheelError
from .gitops import FORMAT_PATCH_FLAGS
from .names import path_problem

#: ``NNNN-slug.patch``: a four-digit place in the series, then a lower-case slug that names the fix on every line.
PATCH_NAME = re.compile(r"^(\d{4})-([a-z0-9][a-z0-9.-]*)\.patch\Z")
#: A slug as `nox -s new` takes it: not a patch's number or file name, which `refresh` would take for that patch.
SLUG = re.compile(r"^(?!\d{4}(-|\Z))(?!.*\.patch\Z)[a-z0-9][a-z0-9.-]*\Z")
#: A unified diff's hunk header: old start, old count, new start, new count (a count of 1 may be left out).
HUNK_HEADER = r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@"
HUNK = re.compile(HUNK_HEADER)


def patch_name(number: int, slug: str) -> str:
    return f"{number:04d}-{slug}.patch"


def split_patch_name(name: str) -> tuple[int, str] | None:
    """(place in the series, slug) of ``NNNN-slug.patch``; None for any other name."""
    m = PATCH_NAME.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


def slug_of(name: str) -> str:
    """The fix a patch file is of, the same on every line (``0003-dataparallel-num-items.patch`` ->
    ``dataparallel-num-items``); a name of another form is its own slug, without ``.patch``."""
    parts = split_patch_name(name)
    return parts[1] if parts else name.removesuffix(".patch")


def matches(patch: Patch, key: str) -> bool:
    """Whether ``key`` names ``patch`` as a maintainer types it: its slug, its file name (with or without
    ``.patch``, or a path ending in it) or its number (``0002``)."""
    key = key.rsplit("/", 1)[-1]
    return key in (patch.name, patch.slug, patch.name.removesuffix(".patch"), patch.name[:4])


def find(series: Iterable[Patch], key: str, where: str) -> Patch:
    """The patch of ``series`` that ``key`` names (:func:`matches`), or an error listing what there is."""
    series = list(series)
    for p in series:
        if matches(p, key):
            return p
    known = ", ".join(p.slug for p in series) or "none"
    raise PatchError(f"no patch {key!r} in {where}", f"name one of: {known} (a slug, a file name or a number)")


_TRAILER = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]*):\s*(.+)\Z")
#: The old and new lines each line of a hunk counts for, by its first character, as git counts them ("": an empty
#: context line; a backslash: "\ No newline at end of file").
_HUNK_LINE = {" ": (1, 1), "": (1, 1), "-": (1, 0), "+": (0, 1), "\\": (0, 0)}
#: The mode of every file a patch may create, change or delete: a regular file, as the wheel's files are.
REGULAR_MODE = "100644"
_MODE = re.compile(r"^(old mode|new mode|new file mode|deleted file mode) (\d+)\Z|^index \S+ (\d+)\Z")
_MODE_KINDS = {"120000": "is a symbolic link", "160000": "is a submodule", "100755": "is executable"}


@dataclass(frozen=True)
class Hunk:
    old_start: int  # where it applies in the old file
    header: str  # its @@ line


@dataclass(frozen=True)
class FileDiff:
    """One file's part of a patch: its paths before and after, its hunks, and the lines they add and remove."""

    old_path: str | None  # None for a created file
    new_path: str | None  # None for a deleted file
    hunks: tuple[Hunk, ...]
    added: int  # lines its hunks add
    deleted: int  # lines its hunks remove

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""


@dataclass(frozen=True)
class Patch:
    path: Path
    subject: str
    message: str
    trailers: dict[str, str]
    files: tuple[FileDiff, ...]
    raw: bytes = field(repr=False)
    #: Every trailer as (key, value), in the message's order: a repeated key (``API-Change``) once per line.
    trailer_lines: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def slug(self) -> str:
        return slug_of(self.name)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()

    @property
    def body(self) -> str:
        """The message without its trailer paragraph (a line such as "Fix: ..." in the text stays)."""
        paragraphs = [q for q in re.split(r"\n\s*\n", self.message.strip()) if q.strip()]
        return "\n\n".join(paragraphs[:-1] if self.trailers else paragraphs)

    @property
    def is_feature(self) -> bool:
        return "Feature-Test" in self.trailers

    @property
    def test_module(self) -> str:
        """The module of the Proof-Test or Feature-Test trailer (without ``::test``); lint requires one."""
        value = self.trailers.get("Proof-Test") or self.trailers.get("Feature-Test")
        if not value:
            raise PatchError(
                f"{self.name} has neither a Proof-Test nor a Feature-Test trailer",
                "add the one that names its test (`nox -s lint` checks)",
            )
        return test_refs(value)[0][0]

    @property
    def touched(self) -> list[str]:
        """Upstream-tree paths this patch reads or writes."""
        return sorted({p for f in self.files for p in (f.old_path, f.new_path) if p})

    def hunk_at(self, path: str, old_line: int) -> str:
        for f in self.files:
            if path in (f.old_path, f.new_path):
                for i, h in enumerate(f.hunks, 1):
                    if h.old_start == old_line:
                        return f"hunk #{i} ({h.header})"
        return f"the hunk at line {old_line}"


def _strip_prefix(p: str, prefix: str) -> str | None:
    if p == "/dev/null":
        return None
    if not p.startswith(prefix):
        raise ValueError(f"path {p!r} lacks the {prefix!r} prefix")
    return p[len(prefix) :]


def _git_line_paths(line: str) -> tuple[str, str] | None:
    """The two paths of ``diff --git a/X b/Y``; None when they cannot be told apart (a path holding " b/")."""
    rest = line[len("diff --git ") :]
    if not rest.startswith("a/") or rest.count(" b/") != 1:
        return None
    a, b = rest[2:].split(" b/")
    return a, b


def _file_diff(path: Path, block: str, first_line: int, last: bool) -> FileDiff:
    """One ``diff --git`` section (``first_line``: its line number in the patch file; ``last``: the patch's last).
    Every path in it (``diff --git``, ---/+++, rename/copy from/to) must be a plain relative path, and they must
    agree: ``git apply`` takes paths from all of them. Its hunks are read as git reads them, by the line counts of
    their headers, and nothing may follow them but the next hunk (in the last section: a ``-- `` signature):
    ``git apply`` reads on and applies any diff it finds there."""
    lines = block.split("\n")
    if lines[-1] == "":
        lines.pop()  # (the end of the last line)
    old = new = None  # "/dev/null" for a created (deleted) file's other side
    named: list[tuple[str, str]] = []  # (header, path) of the extended headers: rename/copy from/to
    modes: list[tuple[str, str]] = []  # (header, mode) of the extended headers that give one
    i = 1
    while i < len(lines) and not HUNK.match(lines[i]):
        line = lines[i]
        if line.startswith("--- ") and old is None:
            old = _strip_prefix(line[4:].rstrip("\t"), "a/")
            old = "/dev/null" if old is None else old
        elif line.startswith("+++ ") and new is None:
            new = _strip_prefix(line[4:].rstrip("\t"), "b/")
            new = "/dev/null" if new is None else new
        elif old is None and (m := re.match(r"^(rename|copy) (from|to) (.*)\Z", line)):
            named.append((f"{m.group(1)} {m.group(2)}", m.group(3)))
        elif old is None and (m := _MODE.match(line)):
            modes.append((m.group(1) or "index", m.group(2) or m.group(3)))
        i += 1
    in_git_line = _git_line_paths(lines[0])
    name = in_git_line[1] if in_git_line else lines[0]
    hunks: list[Hunk] = []
    added = deleted = 0
    while i < len(lines) and (h := HUNK.match(lines[i])) is not None:
        header = lines[i].split(" @@")[0] + " @@"
        want_old, want_new = int(h.group(2) or 1), int(h.group(4) or 1)
        left_old, left_new = want_old, want_new
        i += 1
        while i < len(lines) and (left_old or left_new or lines[i].startswith("\\")):
            takes = _HUNK_LINE.get(lines[i][:1])
            if takes is None or takes[0] > left_old or takes[1] > left_new:
                break
            left_old, left_new = left_old - takes[0], left_new - takes[1]
            added, deleted = added + (lines[i][:1] == "+"), deleted + (lines[i][:1] == "-")
            i += 1
        if left_old or left_new:
            raise ValueError(
                f"{name}: hunk #{len(hunks) + 1} ({header}) has {want_old - left_old} old and {want_new - left_new} "
                f"new lines where its header counts {want_old} and {want_new}"
            )
        hunks.append(Hunk(int(h.group(1)), header))
    rest = lines[i:]
    if last and rest[:1] == ["-- "]:  # format-patch's signature: "-- ", git's version
        rest, i = rest[2:], i + 2
    if hunks and (extra := next((n for n, line in enumerate(rest) if line.strip()), None)) is not None:
        raise ValueError(
            f"{name}: line {first_line + i + extra} ({rest[extra][:40]!r}) follows its "
            f"{'last hunk' if last else 'hunks'}: git apply reads on there and applies any diff it finds"
        )
    if problem := _mode_problem(modes):  # (before the hunks are asked for: a mode change alone has none)
        raise PatchError(
            f"{path}: {name} {problem}: a patch may only create, change or delete regular files (mode "
            f"{REGULAR_MODE}), as the wheel holds them: make it a regular file",
            "make the change in the vendored module under overlay/ (a regular file) and turn it into the patch with "
            "`nox -s refresh`",
        )
    if old is None or new is None or not hunks:
        raise ValueError(f"file section {lines[0]!r} has no ---/+++ header or no hunk")
    old_path, new_path = (None if old == "/dev/null" else old), (None if new == "/dev/null" else new)
    checked = [("---", old_path), ("+++", new_path)] + named + [("diff --git", p) for p in in_git_line or ()]
    for where, p in checked:
        if p is not None and (problem := path_problem(p)):
            raise PatchError(
                f"{path}: path {p!r} (its '{where}' line) {problem}: a patch may only name "
                "plain relative paths inside upstream's tree",
                "regenerate the patch with `git format-patch` from a checkout of upstream",
            )
    for where, p in named:
        side, side_path = ("---", old_path) if where.endswith("from") else ("+++", new_path)
        if p != side_path:
            raise ValueError(f"its '{where}' line names {p!r}, its {side} line {side_path!r}")
    expected = (old_path or new_path, new_path or old_path)
    if in_git_line != expected:
        shown = " and ".join(map(repr, in_git_line)) if in_git_line else repr(lines[0])
        raise ValueError(f"its 'diff --git' line names {shown}, its ---/+++ lines {expected[0]!r} and {expected[1]!r}")
    return FileDiff(old_path, new_path, tuple(hunks), added, deleted)


def _mode_problem(modes: list[tuple[str, str]]) -> str | None:
    """What a file section's mode lines make of its file, when that is not a regular file (mode 100644): a link
    (120000), a submodule (160000), an executable or a mode change. None when every mode given is 100644."""
    changed = [f"{header} {mode}" for header, mode in modes if header in ("old mode", "new mode")]
    if changed:
        return f"changes its mode ({', '.join(changed)})"
    for header, mode in modes:
        if mode != REGULAR_MODE:
            where = f"{header} {mode}" if header != "index" else f"mode {mode} on its index line"
            return f"{_MODE_KINDS.get(mode, f'has mode {mode}')} ({where})"
    return None


def parse_patch(path: Path) -> Patch:
    """Parse one format-patch mbox. Raises PatchwheelError naming the file when it is malformed."""
    raw = path.read_bytes()
    hint = "regenerate it with `git format-patch " + " ".join(FORMAT_PATCH_FLAGS) + " -1 <commit>`"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchError(f"{path}: not UTF-8 text ({exc})", hint) from exc
    if not text.startswith("From "):
        raise PatchError(f"{path}: not a git format-patch mbox (no leading 'From ' line)", hint)
    head, sep, rest = text.partition("\n\n")
    if not sep:
        raise PatchError(f"{path}: no blank line after the mail headers", hint)
    # git encodes a non-ASCII subject (RFC 2047) and folds a long one: the default policy decodes and unfolds.
    headers = HeaderParser(policy=policy.default).parsestr(head.split("\n", 1)[1] if "\n" in head else "")
    subject = " ".join(str(headers.get("Subject") or "").split())
    if not subject:
        raise PatchError(f"{path}: no Subject header", hint)
    # The message ends where git mailinfo ends it: an optional '---' line, then the first 'diff --git'.
    m = re.search(r"^(?:---\n)?(?=diff --git )", rest, re.M)
    if not m:
        raise PatchError(f"{path}: no 'diff --git' section", hint)
    message, diff = rest[: m.start()].rstrip("\n"), rest[m.end() :]
    paragraphs = [p for p in re.split(r"\n\s*\n", message.strip()) if p.strip()]
    trailers: dict[str, str] = {}
    trailer_lines: list[tuple[str, str]] = []
    if paragraphs:
        last = paragraphs[-1].splitlines()
        if all(_TRAILER.match(line) for line in last):
            for line in last:
                k, v = _TRAILER.match(line).groups()  # type: ignore[union-attr]
                trailers[k] = v.strip()  # (a repeated key: its last value; lint refuses all but REPEATABLE)
                trailer_lines.append((k, v.strip()))
    files: list[FileDiff] = []
    blocks = re.split(r"^(?=diff --git )", diff, flags=re.M)
    first_line = text[: len(text) - len(diff)].count("\n") + 1
    try:
        for n, block in enumerate(blocks):
            if block.startswith("diff --git "):
                files.append(_file_diff(path, block, first_line, last=n == len(blocks) - 1))
            first_line += block.count("\n")
    except ValueError as exc:
        raise PatchError(f"{path}: malformed diff: {exc}", hint) from exc
    if not files:
        raise PatchError(f"{path}: the diff is empty", "a patch must change at least one file")
    return Patch(path, subject, message, trailers, tuple(files), raw, tuple(trailer_lines))


def series_names(line: ReleaseLine) -> list[str]:
    """Entries of ``series``: one file name a line, ``#`` comments and blank lines ignored."""
    names = []
    for n, raw in enumerate((line.patch_dir / "series").read_text().splitlines(), 1):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        if "/" in entry or " " in entry:
            raise PatchError(
                f"{line.patch_dir / 'series'}:{n}: {entry!r} is not a plain patch file name",
                "list one NNNN-slug.patch name per line",
            )
        names.append(entry)
    return names


def parse_series(line: ReleaseLine) -> list[Patch]:
    """The line's patches in series order, parsed only: nothing is judged, no git runs (a reader of a series that a
    lint passed: the build's, `patchwheel lint`'s, the suite's). PatchError where a file is not a patch at all, or
    the series names a file that is not there; a series that must be refused before a command acts on it is read
    by :func:`checked_series`."""
    out = []
    for name in series_names(line):
        path = line.patch_dir / name
        if not path.is_file():
            raise PatchError(f"series entry {name} has no file {path}", "add the patch file or remove its entry")
        out.append(parse_patch(path))
    return out


def checked_series(
    line: ReleaseLine, *, messages: bool | Callable[[list[Patch]], bool] = True, numstat: bool = True
) -> list[Patch]:
    """The line's patches in series order, each parsed once by the lint (:func:`lint_series`), which refuses a bad
    series: for a command that acts on it (build, vendor, refresh, rebase, export, the upstream matrix).
    ``messages=False``: messages and trailers not judged (vendor, refresh and new change the code of a patch whose
    message is still being written), or a question put to the parsed series (the build: judged unless a draft);
    ``numstat=False``: what git reads is left to the caller (the build asks the git
    that applies the series, :func:`apply.apply_series`)."""
    problems, series = lint_series(line, messages=messages, numstat=numstat)
    if problems:
        raise PatchError(
            f"patch series {line.key} is not valid:\n  - " + "\n  - ".join(problems),
            "fix each point above; `nox -s lint` re-checks",
        )
    return series


_MAILINFO_CUT = re.compile(r"^(---|diff -|Index: )", re.M)


def mailinfo_cut(patch: Patch) -> str | None:
    """A message line where ``git am`` (git mailinfo) would end the message, dropping the rest and the trailers."""
    head, sep, _ = patch.raw.partition(b"\ndiff --git ")
    body = head.split(b"\n\n", 1)[1] if b"\n\n" in head else b""
    m = _MAILINFO_CUT.search(body.decode("utf-8", errors="replace"))
    if m is None:
        return None
    text = body.decode("utf-8", errors="replace")[m.start() :].splitlines()[0]
    return (
        f"{patch.name}: its message has a line git am takes for the start of the diff ({text[:60]!r}): the rest of "
        "the message and its trailers would be lost"
    )


def git_disagrees(patch: Patch) -> str | None:
    """Lint reads exactly what git applies: ``git apply --numstat`` must name the parser's files, in its order, with
    the lines each adds and removes. A diff where the parser does not look (the mail headers, say) differs."""

    git = gitops.numstat(patch.raw)
    if isinstance(git, str):
        return f"{patch.name}: git apply cannot read it ({git.splitlines()[0]}): regenerate it with `git format-patch`"
    ours = tuple((f.added, f.deleted, f.path) for f in patch.files)
    if git == ours:
        return None

    def said(files: tuple[tuple[int, int, str], ...]) -> str:
        return ", ".join(f"{path} (+{added} -{removed})" for added, removed, path in files) or "no file"

    return (
        f"{patch.name}: git apply reads other changes than lint: git apply changes {said(git)}; lint reads "
        f"{said(ours)}: regenerate the patch with `git format-patch` (`nox -s refresh`); a patch holds its message, "
        "then its diff, and nothing else"
    )


def lint_line(line: ReleaseLine, root: Path | None = None, *, messages: bool = True, numstat: bool = True) -> list[str]:
    """Every problem of one release line's series, as readable strings (empty: clean); flags as in checked_series."""
    return lint_series(line, root, messages=messages, numstat=numstat)[0]


def lint_series(
    line: ReleaseLine,
    root: Path | None = None,
    *,
    messages: bool | Callable[[list[Patch]], bool] = True,
    numstat: bool = True,
) -> tuple[list[str], list[Patch]]:
    """(every problem of the line's series, its patches parsed on the way: each once); flags as in checked_series.
    The lint: names and numbering, the files, where git am cuts a message, what git applies (one ``git apply
    --numstat`` a patch), the trailers and the message, the paths against the wheel, files beside the series.
    ``messages`` may be a question put to the parsed series (the build's: is it a draft?)."""
    try:
        names = series_names(line)
    except PatchwheelError as exc:
        return [exc.message], []
    found = [_parsed_entry(line, i, name, names[: i - 1]) for i, name in enumerate(names, 1)]
    series = [patch for _, patch in found if patch is not None]
    judge = messages(series) if callable(messages) else messages
    for said, patch in found:
        if patch is not None:
            said += _patch_problems(line, patch, root, messages=judge, numstat=numstat)
    problems = [why for said, _ in found for why in said]
    for stray in sorted(line.patch_dir.iterdir()):
        if stray.name != "series" and stray.name not in names:
            problems.append(
                f"{stray.name} is in {line.patch_dir} but not in its series (add it to series or delete it)"
            )
    return problems, series


def _parsed_entry(line: ReleaseLine, i: int, name: str, before: list[str]) -> tuple[list[str], Patch | None]:
    """Series entry number ``i`` (``before``: the entries above it): the problems of its name and file, and its
    patch, parsed (None where it cannot be)."""
    said: list[str] = []
    if name in before:
        said.append(f"series lists {name} twice")
    m = PATCH_NAME.match(name)
    if not m:
        said.append(f"series entry {name!r} is not named NNNN-slug.patch (lower-case slug)")
    elif int(m.group(1)) != i:
        said.append(f"series entry {name} is number {i} in the series; renumber it {i:04d}-{m.group(2)}.patch")
    path = line.patch_dir / name
    if not path.is_file():
        return [*said, f"series entry {name} has no file {path}"], None
    try:
        return said, parse_patch(path)
    except PatchwheelError as exc:
        return [*said, exc.message], None


def _patch_problems(line: ReleaseLine, patch: Patch, root: Path | None, *, messages: bool, numstat: bool) -> list[str]:
    """What the lint finds in one parsed patch of the line's series."""
    name, problems = patch.name, []
    if cut := mailinfo_cut(patch):
        problems.append(cut)
    if numstat and (disagreement := git_disagrees(patch)):
        problems.append(disagreement)
    if messages:
        problems += validate_trailers(patch, line, root or line.patch_dir.parents[2])
        if todo := todo_lines(patch.subject, patch.message):
            problems.append(
                f"{name}: its message still has {len(todo)} TODO line(s) of the template `nox -s new` wrote "
                f"(first: {todo[0].strip()[:60]!r}): write them"
            )
    for p in patch.touched:
        if line.wheel_path(p) is None:
            problems.append(
                f"{name}: touches {p}, which is not under {line.upstream_path(line.import_name)}/ "
                "and so is not in the wheel"
            )
    return problems


#: Drop-When value for a bug no upstream release is known to fix: dropped when its proof passes on a release.
DROP_BY_BEHAVIOUR = "proof-passes-upstream"
#: Drop-When prefix for a capability: dropped once upstream releases the PR that carries it.
DROP_BY_PR = "pr-released"
GUARD_TRAILER = "Guard-Test"
#: An upstream signature or module-level name a patch changes on purpose: ``API-Change: <module>.<name>: <why>``.
API_TRAILER = "API-Change"
#: The trailers a patch may give more than once: one per name changed, one per hunk a mutant of survives.
REPEATABLE = (API_TRAILER, "Mutant-Survives")
_API_CHANGE = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):\s+(\S.*)\Z")
REQUIRED_TRAILERS = ("Upstream-Issue", "Upstream-Status", "Drop-When", GUARD_TRAILER)
TEST_TRAILERS = ("Proof-Test", "Feature-Test")
_PROPOSED_IN = "Fix-Proposed-In"
_PULL = r"https://github\.com/[\w.-]+/[\w.-]+/pull/\d+"
_STATUS = re.compile(rf"Pending|Submitted \S+|Backport \S+|Fixed-In \S+|Partial-Fix-In \S+ \S+|{_PROPOSED_IN} {_PULL}")
_PR = re.compile(r"^(https://github\.com/[\w.-]+/[\w.-]+/pull/\d+|pending)\Z")
_ISSUE = re.compile(r"^(https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+|[\w.-]+/[\w.-]+#\d+)\Z")


def proposed_in(patch: Patch) -> str | None:
    """The pull request in which someone else proposed this fix upstream (``Fix-Proposed-In <url>``), if any: export
    then offers upstream's test to that pull request instead of opening a duplicate."""
    words = patch.trailers.get("Upstream-Status", "").split()
    if len(words) == 2 and words[0] == _PROPOSED_IN and re.fullmatch(_PULL, words[1]):
        return words[1]
    return None


def api_changes(patch: Patch) -> list[tuple[str, str]]:
    """The ``API-Change`` trailers of a patch as (dotted name, why), in order; a value that is not
    ``<name>: <why>`` is left out (lint says so, :func:`validate_trailers`)."""
    return [
        (m.group(1), m.group(2).strip())
        for key, value in patch.trailer_lines
        if key == API_TRAILER and (m := _API_CHANGE.match(value))
    ]


def _repeat_problems(patch: Patch) -> list[str]:
    """A trailer given twice (its first value would be lost: only :data:`REPEATABLE` ones repeat), an
    ``API-Change`` that is not ``<module>.<name>: <why>``, or that names a name twice."""
    out = []
    counts: dict[str, int] = {}
    for key, _ in patch.trailer_lines:
        counts[key] = counts.get(key, 0) + 1
    for key, n in counts.items():
        if n > 1 and key not in REPEATABLE:
            out.append(f"{patch.name}: trailer '{key}:' is given {n} times: give it once")
    seen: set[str] = set()
    for key, value in patch.trailer_lines:
        if key != API_TRAILER:
            continue
        m = _API_CHANGE.match(value)
        if m is None or "." not in m.group(1):
            out.append(
                f"{patch.name}: {API_TRAILER} {value!r} must be '<module>.<name>: <why>', the name as upstream's "
                "import path spells it (transformers.modeling_utils.caching_allocator_warmup, "
                "accelerate.accelerator.Accelerator.prepare_model), one trailer per name"
            )
        elif m.group(1) in seen:
            out.append(f"{patch.name}: {API_TRAILER} names {m.group(1)} twice: one trailer per name")
        else:
            seen.add(m.group(1))
    return out


def validate_trailers(patch: Patch, line: ReleaseLine, root: Path | None) -> list[str]:
    out = _repeat_problems(patch)
    t = patch.trailers
    for key in REQUIRED_TRAILERS:
        if key not in t:
            out.append(f"{patch.name}: missing trailer '{key}:' (add it to the last paragraph of the message)")
    tests = [k for k in TEST_TRAILERS if k in t]
    if len(tests) != 1:
        out.append(
            f"{patch.name}: needs exactly one of 'Proof-Test:' (a fix, proven by a test that fails without "
            "it) and 'Feature-Test:' (a capability the patch adds)"
        )
    status = t.get("Upstream-Status", "")
    if "Upstream-Status" in t and not _STATUS.fullmatch(status):
        out.append(
            f"{patch.name}: Upstream-Status {status!r} must be one of 'Pending', 'Submitted <url>', "
            "'Backport <pr>', 'Fixed-In <version>', 'Partial-Fix-In <version> <still-failing proof test>', "
            f"'{_PROPOSED_IN} <the pull request URL of someone else's fix>'"
        )
    elif status.startswith(("Fixed-In ", "Partial-Fix-In ")):
        words = status.split()
        try:
            Version(words[1])
        except InvalidVersion:
            out.append(f"{patch.name}: Upstream-Status {status!r}: {words[1]!r} is not a version")
        if words[0] == "Partial-Fix-In":
            out += _check_test_ref(patch, words[2], root, "Upstream-Status Partial-Fix-In")
    if "Upstream-Issue" in t:
        for ref in t["Upstream-Issue"].split(","):
            if not _ISSUE.match(ref.strip()):
                out.append(f"{patch.name}: Upstream-Issue {ref.strip()!r} is not an issue URL or owner/repo#N")
    drop = t.get("Drop-When")
    if drop == DROP_BY_BEHAVIOUR:
        if patch.is_feature:
            out.append(
                f"{patch.name}: a feature cannot be dropped by '{DROP_BY_BEHAVIOUR}' (a release without "
                f"it has nothing for its test to call): use '{line.package}>=<version>' or "
                f"'{DROP_BY_PR} <PR url or pending>'"
            )
    elif drop is not None and drop.startswith(DROP_BY_PR + " "):
        if not _PR.match(drop[len(DROP_BY_PR) + 1 :]):
            out.append(
                f"{patch.name}: Drop-When {drop!r} must be '{DROP_BY_PR} <https://github.com/o/r/pull/N>' "
                f"or '{DROP_BY_PR} pending'"
            )
    elif drop is not None:
        try:
            req = Requirement(drop)
            if canonicalize_name(req.name) != line.package or not req.specifier:
                raise InvalidRequirement("wrong package or no version")
            for spec in req.specifier:
                Version(spec.version)
        except (InvalidRequirement, InvalidVersion):
            out.append(
                f"{patch.name}: Drop-When {drop!r} must be a version condition on {line.package}, e.g. "
                f"'{line.package}>=4.54.0', '{DROP_BY_BEHAVIOUR}' or '{DROP_BY_PR} <PR url or pending>'"
            )
    for key in tests:
        out += _check_test_ref(patch, t[key], root, key)
    if GUARD_TRAILER in t:
        out += _check_guard_ref(patch, t[GUARD_TRAILER], root, line.package)
    return out


_GUARD_MARK = re.compile(r"""pytest\.mark\.guard\(\s*package\s*=\s*["']([\w.-]+)["']\s*\)""")


def guard_modules(patch: Patch) -> list[str]:
    """The modules of a patch's ``Guard-Test`` trailer (a comma-separated list of tests/guards/<file>.py)."""
    return [v.strip() for v in patch.trailers.get(GUARD_TRAILER, "").split(",") if v.strip()]


def _check_guard_ref(patch: Patch, value: str, root: Path | None, package: str) -> list[str]:
    """Each entry a guard module of this package: tests/guards/<file>.py, marked ``pytest.mark.guard(package=...)``."""
    files = [v.strip() for v in value.split(",") if v.strip()]
    if not files or any(not f.startswith("tests/guards/") or not f.endswith(".py") or "::" in f for f in files):
        return [
            f"{patch.name}: {GUARD_TRAILER} {value!r} must be tests/guards/<file>.py[, tests/guards/<file>.py ...]: "
            "the guard modules whose scenarios run on pristine and +fixed "
            "(docs/proof-contract.md#nothing-else-changed-guards)"
        ]
    out = []
    for file in files:
        if root is None:
            continue
        src = root / file
        if not src.is_file():
            out.append(f"{patch.name}: {GUARD_TRAILER} file {file} does not exist: write the guards of this fix there")
            continue
        marked = set(_GUARD_MARK.findall(src.read_text()))
        if package not in marked:
            out.append(
                f"{patch.name}: {GUARD_TRAILER} file {file} is not marked pytest.mark.guard(package={package!r})"
                + (f" (it guards {', '.join(sorted(marked))})" if marked else "")
            )
    return out


def test_refs(value: str | None) -> list[tuple[str, str]]:
    """A ``Proof-Test``/``Feature-Test`` value as (module, test) pairs; test is "" where it names the whole module:
    ``tests/proof/test_x.py`` or ``tests/proof/test_x.py::test_a, tests/proof/test_x.py::test_b``."""
    return [
        (file, func) for v in (value or "").split(",") if v.strip() for file, _, func in [v.strip().partition("::")]
    ]


def _check_test_ref(patch: Patch, value: str, root: Path | None, what: str) -> list[str]:
    """One module, whole or as a comma-separated list of its tests (those that show the bug on this line)."""
    refs = test_refs(value)
    files = {file for file, _ in refs}
    if len(files) != 1 or any(not file.startswith("tests/proof/") or not file.endswith(".py") for file in files):
        return [
            f"{patch.name}: {what} {value!r} must be tests/proof/<file>.py, or tests of one such file: "
            "tests/proof/<file>.py::<test>[, tests/proof/<file>.py::<test> ...]"
        ]
    (file,) = files
    if len(refs) > 1 and any(not func for _, func in refs):
        return [f"{patch.name}: {what} {value!r} names the whole of {file} and some of its tests: pick one"]
    if root is None:
        return []
    src = root / file
    if not src.is_file():
        return [f"{patch.name}: {what} file {file} does not exist"]
    text = src.read_text()
    return [
        f"{patch.name}: {what} {func} is not defined in {file}"
        for _, func in refs
        if func and not re.search(rf"^\s*def {re.escape(func.split('[')[0])}\(", text, re.M)
    ]
