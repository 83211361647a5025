"""The files `nox -s new` writes beside a new patch, so that every later step of adding a fix has its file.

Each is a stub that is obviously a draft: it carries :data:`patchwheel.draft.STUB_MARK` on a line, so `nox -s
lint` refuses it until it is written, and a stub test fails where it runs (the proof stub raises
``CouldNotObserve``, the guard stub fails as an error of the guard). A file that exists already is kept.

- ``tests/proof/test_<slug>.py``: the proof (or feature) test the patch's ``Proof-Test`` names;
- ``tests/guards/test_<slug>.py``: the guards its ``Guard-Test`` names;
- ``upstream-pr/<pkg>/<slug>/``: what export sends upstream besides the patch's message (``expect.toml`` and
  upstream's test under ``tests/``; a feature: ``proposal.md``), see upstream-pr/README.md.
"""

from __future__ import annotations

from pathlib import Path

from ..draft import STUB_MARK

PROOF = '''\
"""{kind} test for {package} patch {name} (written by `nox -s new` as a stub).

{mark}: what it {does},
and how: tiny random models from configs; real gloo process groups on 127.0.0.1 for a distributed bug.
Until it is written, the stub says that it could not observe anything, which fails the suite both ways.
"""

from __future__ import annotations

import pytest

from proofkit import CouldNotObserve

pytestmark = {marker}


def test_{func}():
    raise CouldNotObserve("not written yet: {hint}")
'''

GUARD = '''\
"""Guards for {package} patch {name} (written by `nox -s new` as a stub): the bug's neighbourhood, unchanged.

{mark}: the scenarios next to the bug that an ordinary user runs and that never hit it (a single process,
a plain model, a custom loss), each observing what a user could see (losses, types, warnings, errors). Each runs
on the pristine pins and on the +fixed build, and must observe the same
(docs/proof-contract.md#nothing-else-changed-guards). At least three come from public code that calls, wraps,
overrides, subclasses, copies or monkeypatches what the patch touches, each docstring saying "Stands for ...
(<owner>/<repository> <path>)" (docs/proof-contract.md#guards-mined-from-public-code).
Until it is written, the stub fails as an error of the guard, in both runs.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.guard(package="{package}")


def test_{func}_neighbourhood(observe):
    pytest.fail("not written yet: the guards of {name}")
'''

COMMENT = f"""\
# {STUB_MARK}: the subject of the commit that adds upstream's test

{STUB_MARK}: the comment that offers upstream's test to their pull request (Upstream-Status: Fix-Proposed-In).
"""

PROPOSAL = f"""\
# {STUB_MARK}: the title of the issue that proposes the feature

{STUB_MARK}: the problem, the evidence, the proposed API, questions for upstream's maintainers.
"""

EXPECT = f"""\
# {STUB_MARK}: the tests of tests/ that fail on the pristine release, with the exception (type, message regex)
[[fails]]
test = "tests/{{test}}::{{cls}}::test_{{func}}"
raises = "{STUB_MARK}"
match = "{STUB_MARK}"
"""

UPSTREAM_TEST = """\
# {mark}: upstream's own test of the fix, moved to its path in upstream's tree ({package}'s tests/), in
# upstream's conventions ({utils}); export runs it on the newest release, pristine (it must fail as expect.toml
# says) and patched (it must pass).
import unittest


class {cls}(unittest.TestCase):
    def test_{func}(self):
        self.fail("not written yet")
"""

TEST_UTILS = {"transformers": "transformers.testing_utils", "accelerate": "accelerate.test_utils"}


def write(
    root: Path, package: str, name: str, slug: str, *, feature: bool, proof: str, guard: str
) -> list[tuple[str, bool]]:
    """Write each stub that does not exist yet (an ``upstream-pr/<pkg>/<slug>/`` that exists is kept whole); returns
    each file (relative to ``root``) and whether it was written (False: it existed and was kept)."""
    func = slug.replace("-", "_").replace(".", "_")
    cls = "".join(part.capitalize() for part in func.split("_")) + "Test"
    marker = (
        f'pytest.mark.feature(package="{package}")'
        if feature
        else f'pytest.mark.proof(\n    package="{package}",\n    signatures=[("{STUB_MARK} ExceptionType", '
        f'r"{STUB_MARK}: the message the bug raises, from the code under test")],\n)'
    )
    files = {
        proof: PROOF.format(
            kind="Feature" if feature else "Proof",
            package=package,
            name=name,
            mark=STUB_MARK,
            does="checks" if feature else "proves (it fails on the pristine release with the bug's own exception)",
            marker=marker,
            func=func,
            hint=f"the {'feature' if feature else 'proof'} test of {name}",
        ),
        guard: GUARD.format(package=package, name=name, mark=STUB_MARK, func=func),
    }
    folder = f"upstream-pr/{package}/{slug}"
    if feature:
        files[f"{folder}/proposal.md"] = PROPOSAL
    else:
        files[f"{folder}/expect.toml"] = EXPECT.format(test=f"test_{func}.py", cls=cls, func=func)
        files[f"{folder}/tests/test_{func}.py"] = UPSTREAM_TEST.format(
            mark=STUB_MARK, package=package, utils=TEST_UTILS.get(package, "its test utilities"), cls=cls, func=func
        )
    had_folder = (root / folder).exists()  # written already (another line's patch of this slug): kept whole
    out = []
    for rel, text in files.items():
        path = root / rel
        if path.exists() or (had_folder and rel.startswith(folder + "/")):
            out.append((rel, False))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        out.append((rel, True))
    return out
