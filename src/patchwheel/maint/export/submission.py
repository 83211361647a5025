"""What a contributor sends upstream for one patch: ``upstream-pr/<pkg>/<slug>/``, beside the patch series.

The patch's message is the one message: upstream's commit gets its subject and its text without the trailers
(export adds ``Fixes #N`` from the ``Upstream-Issue`` trailer), so the patch message is written for upstream. The
folder holds, by the patch's slug (so it serves whichever line is the newest), only what upstream gets besides:

- a fix: ``tests/...``, upstream's own test of the fix, each file at its path in upstream's tree, written in
  upstream's conventions; ``expect.toml``, which of those tests fail on the pristine release, and with which
  exception; and, only where upstream's commit differs from the patch message, ``message.toml`` saying how
  (``subject = "..."``: upstream's subject, at most 72 characters, where the patch's is longer):

      [[fails]]
      test = "tests/utils/test_x.py::XTest::test_y"   # a pytest node id in upstream's tree
      raises = "NotImplementedError"                    # the exception type's name
      match = "Cannot copy out of meta tensor"          # a regular expression its message must match
      worker = false                                    # true: a worker process raised it (torchrun forms)

- a fix someone else already proposed upstream (``Upstream-Status: Fix-Proposed-In <their pull request>``):
  ``comment.md``, the comment that offers upstream's test to their pull request (``# <the
  test commit's subject>``, a blank line, the comment), with ``tests/...`` and ``expect.toml`` as for a fix; export
  makes a commit of the test alone, to go on top of their pull request, not a duplicate one.
- a feature: ``proposal.md``, the issue to open first (problem, evidence, proposed API), since upstream discusses a
  new capability before it reviews code for it.

Lint requires these for every patch of each package's newest line.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ...config import Project, ReleaseLine
from ...draft import STUB_MARK, stub_files
from ...errors import PatchError
from ...names import path_problem
from ...series import Patch, proposed_in

FOLDER = "upstream-pr"
_EXPECT_KEYS = ("test", "raises", "match", "worker")
#: What ``message.toml`` may say differs in upstream's commit message from the patch message.
_MESSAGE_KEYS = ("subject",)
SUBJECT_MAX = 72
_NODE = re.compile(r"^tests/[\w/.-]+\.py(::\w+)+\Z")


@dataclass(frozen=True)
class Expectation:
    """A test that must fail on the pristine release with this exception (``worker``: a worker's, read from the
    line a worker process printed for it, ``<Type>: <message>``), and pass with the patch."""

    test: str
    raises: str
    match: str
    worker: bool = False

    def describe(self) -> str:
        return f"{self.test.rsplit('::', 1)[-1]}: {self.raises} matching {self.match!r}" + (
            " (in a worker)" if self.worker else ""
        )


@dataclass(frozen=True)
class Submission:
    folder: Path
    message: str | None  # a fix's commit message
    proposal: str | None  # a feature's issue text
    comment: str | None  # a fix someone else proposed: the comment offering the test to their pull request
    tests: dict[str, bytes]  # upstream-tree path -> bytes
    expect: tuple[Expectation, ...]
    issue: str | None = None  # a fix for a bug upstream has no issue for: the issue to open with the pull request

    @property
    def subject(self) -> str:
        if self.comment:
            return self.comment.splitlines()[0].removeprefix("# ").strip()
        return (self.message or "").splitlines()[0].strip() if self.message else ""


def folder(root: Path, package: str, slug: str) -> Path:
    return root / FOLDER / package / slug


def load(root: Path, package: str, patch: Patch) -> Submission:
    """The submission of ``patch``; raises when it is missing or malformed, saying what to write."""
    where = folder(root, package, patch.slug)
    problems = folder_problems(where, patch)
    if problems:
        raise PatchError(
            f"{where.relative_to(root)} is not ready for upstream:\n  - " + "\n  - ".join(problems),
            f"write it as {FOLDER}/README.md says; `nox -s lint` checks it",
        )
    return _read(where, patch)


def _differs(where: Path) -> dict[str, object]:
    """``message.toml``: what upstream's commit message says otherwise than the patch's (empty: nothing)."""
    path = where / "message.toml"
    return tomllib.loads(path.read_text()) if path.is_file() else {}


def upstream_message(where: Path, patch: Patch) -> str:
    """The commit message upstream gets: the patch's subject (or ``message.toml``'s) and its text without the
    trailers."""
    subject = _differs(where).get("subject", patch.subject)
    return f"{subject}\n\n{patch.body}\n"


def _read(where: Path, patch: Patch) -> Submission:
    proposal = where / "proposal.md"
    comment = where / "comment.md"
    issue = where / "issue.md"
    tests = {
        p.relative_to(where).as_posix(): p.read_bytes()
        for p in sorted((where / "tests").rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }
    expect: tuple[Expectation, ...] = ()
    if (where / "expect.toml").is_file():
        expect = tuple(Expectation(**e) for e in tomllib.loads((where / "expect.toml").read_text())["fails"])
    fix = not patch.is_feature and proposed_in(patch) is None
    return Submission(
        where,
        upstream_message(where, patch) if fix else None,
        proposal.read_text() if proposal.is_file() else None,
        comment.read_text() if comment.is_file() else None,
        tests,
        expect,
        issue.read_text() if fix and issue.is_file() else None,
    )


def folder_problems(where: Path, patch: Patch) -> list[str]:
    """What is missing or wrong in a patch's submission folder (empty: ready)."""
    stubs = [
        f"{patch.name}: {where}/{rel} is still the stub `nox -s new` wrote ({STUB_MARK}): write it as "
        f"{FOLDER}/README.md says"
        for rel in stub_files(where, sorted(p.relative_to(where).as_posix() for p in where.rglob("*") if p.is_file()))
    ]
    return stubs + _check(where, patch)


def _check(where: Path, patch: Patch) -> list[str]:
    elsewhere = None if patch.is_feature else proposed_in(patch)
    if not where.is_dir():
        first = "comment.md, " if elsewhere else ""
        what = "proposal.md" if patch.is_feature else f"{first}expect.toml and tests/"
        return [f"{patch.name}: no {where.name}/ under {where.parent}: write {what} there"]
    if patch.is_feature:
        text = (where / "proposal.md").read_text() if (where / "proposal.md").is_file() else ""
        return [] if text.startswith("# ") else [f"{patch.name}: {where}/proposal.md must start with '# <title>'"]
    if elsewhere:
        return _check_comment(where, patch, elsewhere) + _check_tests(where, patch)
    return _check_message(where, patch) + _check_issue(where, patch) + _check_tests(where, patch)


def _check_issue(where: Path, patch: Patch) -> list[str]:
    """``issue.md`` (optional, a fix for a bug upstream has no issue for): the issue to open, ``# <title>`` first."""
    path = where / "issue.md"
    if not path.is_file() or path.read_text().startswith("# "):
        return []
    return [f"{patch.name}: {path} must start with '# <title>' (the issue to open upstream)"]


def _check_comment(where: Path, patch: Patch, elsewhere: str) -> list[str]:
    out = [
        f"{patch.name}: its fix is proposed in {elsewhere}: the test goes there, remove {where}/{name} "
        "(a commit message for a pull request of our own) and write comment.md"
        for name in ("message.txt", "message.toml")
        if (where / name).exists()
    ]
    path = where / "comment.md"
    if not path.is_file():
        return out + [f"{patch.name}: no {path}: write the comment that offers the test to {elsewhere}"]
    lines = path.read_text().splitlines()
    subject = lines[0].removeprefix("# ").strip() if lines else ""
    if not lines or not lines[0].startswith("# ") or not subject or len(subject) > 72:
        out.append(
            f"{patch.name}: {path}: comment.md must start with '# <the test commit's subject>' (1 to 72 characters)"
        )
    if len(lines) < 3 or lines[1].strip():
        out.append(f"{patch.name}: {path}: the title, a blank line, then the comment")
    return out


def _check_message(where: Path, patch: Patch) -> list[str]:
    """Upstream's commit message is the patch's: a second copy is refused; ``message.toml`` may say only what
    differs, and upstream's subject must fit git's 72 characters."""
    if (where / "message.txt").exists():
        return [
            f"{patch.name}: {where}/message.txt repeats the patch's message: delete it (upstream's commit gets the "
            f"patch's subject and text; {where.name}/message.toml may give upstream's subject: subject = \"...\")"
        ]
    path = where / "message.toml"
    try:
        differs = _differs(where)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return [f"{patch.name}: {path}: not TOML ({exc})"]
    out = [f"{patch.name}: {path}: unknown key {k!r} (known: {', '.join(_MESSAGE_KEYS)})" for k in differs if k not in _MESSAGE_KEYS]
    subject = differs.get("subject", patch.subject)
    if not isinstance(subject, str) or not subject.strip() or "\n" in subject:
        return out + [f"{patch.name}: {path}: subject must be one line of text"]
    if len(subject) > SUBJECT_MAX:
        where_from = path if "subject" in differs else f"the patch's subject ({len(subject)} characters)"
        out.append(
            f"{patch.name}: {where_from}: upstream's commit subject is at most {SUBJECT_MAX} characters: give a "
            f"shorter one in {path}: subject = \"...\""
        )
    if "subject" in differs and subject == patch.subject:
        out.append(f"{patch.name}: {path}: its subject is the patch's: delete the key (say only what differs)")
    return out


def _check_tests(where: Path, patch: Patch) -> list[str]:
    tests = (
        [p.relative_to(where).as_posix() for p in (where / "tests").rglob("*.py")] if (where / "tests").is_dir() else []
    )
    if not tests:
        return [f"{patch.name}: no test under {where}/tests/: add upstream's test at its path in upstream's tree"]
    out = [f"{patch.name}: {where}/{t}: {why}" for t in tests if (why := path_problem(t))]
    path = where / "expect.toml"
    if not path.is_file():
        return out + [f"{patch.name}: no {path}: name the tests that fail on the pristine release ([[fails]])"]
    try:
        fails = tomllib.loads(path.read_text()).get("fails")
    except tomllib.TOMLDecodeError as exc:
        return out + [f"{patch.name}: {path}: not TOML ({exc})"]
    if not isinstance(fails, list) or not fails:
        return out + [f"{patch.name}: {path}: needs at least one [[fails]] table"]
    for n, entry in enumerate(fails, 1):
        out += [f"{patch.name}: {path}: [[fails]] #{n}: {why}" for why in _entry_problems(entry, tests)]
    return out


def _entry_problems(entry: object, tests: list[str]) -> list[str]:
    if not isinstance(entry, dict):
        return ["not a table"]
    out = [f"unknown key {k!r} (known: {', '.join(_EXPECT_KEYS)})" for k in entry if k not in _EXPECT_KEYS]
    for key in ("test", "raises", "match"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            out.append(f"{key!r} must be a non-empty string")
    if out:
        return out
    if not _NODE.match(entry["test"]) or entry["test"].split("::")[0] not in tests:
        out.append(f"test {entry['test']!r} is not a node id (file::Class::test) of a file under tests/ here")
    try:
        re.compile(entry["match"])
    except re.error as exc:
        out.append(f"match {entry['match']!r} is not a regular expression ({exc})")
    if not isinstance(entry.get("worker", False), bool):
        out.append("worker must be true or false")
    return out


def upstream_pr_problems(root: Path, line: ReleaseLine) -> list[str]:
    """Problems of the submission folders of a line's patches (lint asks this of each package's newest line, once
    its series has passed)."""
    from ...series import parse_series

    return [why for p in parse_series(line) for why in folder_problems(folder(root, line.package, p.slug), p)]


def lint(project: Project) -> dict[str, list[str]]:
    """Problems of the submission folders of every package's newest line, by line key."""
    return {
        (line := project.lines[package][-1]).key: upstream_pr_problems(project.root, line) for package in project.packages()
    }
