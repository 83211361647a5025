"""A patch's metadata: the git trailers at the end of its message, their vocabulary, and their checks.

    Upstream-Issue:  https://github.com/huggingface/transformers/issues/37663
    Upstream-Status: Pending | Submitted <url> | Backport <pr> | Fixed-In <version>
                     | Partial-Fix-In <version> <the proof test that still fails there>
                     | Fix-Proposed-In <someone else's pull request URL>: export offers the test to it
    Proof-Test:      tests/proof/test_x.py[::test_y, ...] a fix: the test(s) that prove the bug (fail without the patch)
    Feature-Test:    tests/proof/test_x.py             instead, for a capability the patch adds
    Guard-Test:      tests/guards/test_x.py[, ...]     the differential guards of the bug's neighbourhood
    Drop-When:       transformers>=4.54.0 | proof-passes-upstream (fixes only) | pr-released <url or pending>

A feature cannot be judged by behaviour on a release without it (its test has nothing to call there), so it is
dropped by release or PR, never by ``proof-passes-upstream``. ``Fixed-In`` is a claim the committed matrix can
check (the proof passes there); an upstream fix that leaves part of the bug is ``Partial-Fix-In``, naming the test
that still fails. Checked whenever a series is loaded (a patch with a malformed trailer is not built), and by lint.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

if TYPE_CHECKING:
    from .config import ReleaseLine
    from .patches import Patch

#: Drop-When value for a bug no upstream release is known to fix: dropped when its proof passes on a release.
DROP_BY_BEHAVIOUR = "proof-passes-upstream"
#: Drop-When prefix for a capability: dropped once upstream releases the PR that carries it.
DROP_BY_PR = "pr-released"
GUARD_TRAILER = "Guard-Test"
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


def validate_trailers(patch: Patch, line: ReleaseLine, root: Path | None) -> list[str]:
    out = []
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
