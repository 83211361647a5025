"""Export on the synthetic demo package: the contributor's commit (author, date, message, upstream's test), upstream's
style (real ruff, the demo release's own settings), features as proposals, and nothing written when a step fails.
The run of upstream's test in an environment per release is stubbed (``verify``); its judging and its pytest plugin
are tested on their own, with this interpreter's pytest."""

from __future__ import annotations

import json
import math
import re
import shutil
import sys
from pathlib import Path

import pytest

from conftest import CORE, INIT, RUFF_SETTINGS, TRAILERS, both_ways_ok, make_patch
from patchwheel import gitops
from patchwheel.errors import PatchwheelError
from patchwheel.maint.export import commit as export_commit
from patchwheel.maint.export import exportfolder as export
from patchwheel.maint.export import submission, upstream_test
from patchwheel.maint.proving import proofenv

JANE = "Jane Doe <jane@example.org>"
FIX = b'"hello, " + name'
DATE = "2026-12-01T09:30:00+00:00"


def _release(demo, core: bytes = b"# moved\n" + CORE, settings: bytes = RUFF_SETTINGS) -> None:
    demo.add_release("1.1.0", core, pyproject=settings)


def _export(demo, tmp_path, **kw) -> Path:
    kw.setdefault("author", JANE)
    kw.setdefault("verify", both_ways_ok)
    return export.export(demo.load(), "greet-comma", tmp_path, log=lambda m: None, date=DATE, **kw)


def _sub(demo) -> Path:
    return demo.root / "upstream-pr" / "demo" / "greet-comma"


def _message(mbox: bytes) -> str:
    head = mbox.decode().split("\ndiff --git ", 1)[0]
    return head.split("\n\n", 1)[1].rstrip("\n") + "\n"


# --- the contributor's commit --------------------------------------------------------------------------------------


def test_export_is_the_contributors_commit_with_upstreams_test(demo_project, tmp_path):
    _release(demo_project)
    out = _export(demo_project, tmp_path)
    assert sorted(p.name for p in out.iterdir()) == ["0001-greet-comma.patch", "PR.md"]
    mbox = (out / "0001-greet-comma.patch").read_bytes()
    head = mbox.decode().split("\n\n", 1)[0]
    assert "From: Jane Doe <jane@example.org>" in head and "Date: Tue, 1 Dec 2026 09:30:00 +0000" in head, head
    assert "Subject: Greet with a comma" in head  # the patch's message, without its trailers: no second copy
    assert _message(mbox) == "Why the change is needed.\n\nFixes #1\n"
    assert b"diff --git a/tests/test_greet.py b/tests/test_greet.py\nnew file mode 100644" in mbox
    for ours in (b"Proof-Test", b"Drop-When", b"Guard-Test", b"Upstream-Status", b"tests/proof/", b"patchwheel"):
        assert ours not in mbox
    repo = gitops.temp_repo({"src/demo/core.py": b"# moved\n" + CORE})  # an independent git am
    try:
        gitops.am(repo, out / "0001-greet-comma.patch")
        assert FIX in (repo / "src" / "demo" / "core.py").read_bytes()
        assert (repo / "tests" / "test_greet.py").read_bytes() == (
            _sub(demo_project) / "tests/test_greet.py"
        ).read_bytes()
    finally:
        shutil.rmtree(repo.parent)


def test_a_bug_upstream_has_no_issue_for_exports_the_issue_to_open_beside_the_pull_request(demo_project, tmp_path):
    _release(demo_project)
    issue = "# greet() drops the comma\n\nReproduction: `greet('you')` gives 'hello you'.\n"
    (_sub(demo_project) / "issue.md").write_text(issue)
    out = _export(demo_project, tmp_path)
    assert sorted(p.name for p in out.iterdir()) == ["0001-greet-comma.patch", "ISSUE.md", "PR.md"]
    assert (out / "ISSUE.md").read_text() == issue
    (_sub(demo_project) / "issue.md").write_text("greet() drops the comma\n")  # no title
    problems = submission.lint(demo_project.load())["demo/1.0.0"]
    assert any("issue.md must start with '# <title>'" in p for p in problems), problems


def test_pr_md_records_upstreams_test_both_ways_and_ruff(demo_project, tmp_path):
    _release(demo_project)
    seen: dict[str, object] = {}

    def verify(project, line, newest, patched, sub):
        seen.update(release=newest.filename, patched=patched, tests=sorted(sub.tests))
        return both_ways_ok(project, line, newest, patched, sub)

    pr = (_export(demo_project, tmp_path, verify=verify) / "PR.md").read_text()
    assert seen == {
        "release": "demo-1.1.0-py3-none-any.whl",
        "patched": {"demo/core.py": b"# moved\n" + CORE.replace(b'"hello " + name', FIX)},
        "tests": ["tests/test_greet.py"],
    }
    assert pr.startswith("# Greet with a comma\n\nWhy the change is needed.\n\nFixes #1\n"), pr
    assert "## In detail" not in pr and pr.count("Why the change is needed.") == 1  # the message, once
    assert "This PR adds `tests/test_greet.py`. Run on demo 1.1.0 (CPU, torch" in pr
    assert "- pristine 1.1.0: fails as the issue describes (test_greet: BugSymptom: no comma)\n" in pr, pr
    assert "- 1.1.0 with this PR: passes (1 passed)\n" in pr, pr
    assert "ruff check and ruff format --check with demo 1.1.0's settings (line-length 119" in pr, pr
    assert "- the bug shows on: 1.0.0, 1.1.0\n" in pr, pr  # the line's pin and the release just run
    assert "Proof-Test" not in pr and "tests/proof" not in pr


def test_the_author_defaults_to_the_checkouts_git_identity(demo_project, tmp_path, monkeypatch):
    _release(demo_project)
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[user]\n\tname = Ada Lovelace\n\temail = ada@example.org\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    out = _export(demo_project, tmp_path / "out", author=None)
    assert b"\nFrom: Ada Lovelace <ada@example.org>\n" in (out / "0001-greet-comma.patch").read_bytes()


@pytest.mark.parametrize(
    "config, missing",
    [({}, "git config user.name and user.email are not set"), ({"user.name": "Ada"}, "user.email is not set")],
)
def test_no_identity_is_an_error_naming_both_ways(demo_project, tmp_path, config, missing):
    _release(demo_project)
    with pytest.raises(PatchwheelError, match=missing) as err:
        _export(demo_project, tmp_path, author=None, git_config=lambda root, key: config.get(key))
    assert "--author" in err.value.hint and 'git config user.name "Your Name"' in err.value.hint
    assert not (tmp_path / "greet-comma").exists()


def test_a_malformed_author_is_refused(demo_project, tmp_path):
    with pytest.raises(PatchwheelError, match="--author 'Jane Doe' is not 'Name <email>'"):
        _export(demo_project, tmp_path, author="Jane Doe")


@pytest.mark.parametrize(
    "author", ["Jane\rDoe <jane@example.org>", "Jane Doe <jane@example.org>\r", "Jane\x1b[2J <j@e.org>"]
)
def test_an_author_with_control_characters_is_refused(demo_project, tmp_path, author):
    """A carriage return passed the pattern and landed in the mbox's `From:` line."""
    _release(demo_project)
    with pytest.raises(PatchwheelError, match="is not 'Name <email>'"):
        _export(demo_project, tmp_path, author=author)
    assert not (tmp_path / "greet-comma").exists()


@pytest.mark.parametrize(
    "text, found",
    [
        ("Greet with a comma\n\nSee tests/proof/test_demo.py.", "tests/proof/"),
        ("Greet with a comma\n\nAdd it.\n\nDrop-When: demo>=1.1.0", "Drop-When:"),
        ("Greet with a comma\n\nFound by patchwheel.", "patchwheel"),
    ],
)
def test_our_trailers_paths_and_name_never_reach_upstream(demo_project, tmp_path, text, found):
    """The patch message is what upstream gets: a path, a trailer or a name of ours in its text is refused."""
    _release(demo_project)
    files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
    demo_project.set_series(("0001-greet-comma.patch", make_patch(files, _comma, text, TRAILERS)))
    with pytest.raises(PatchwheelError, match=f"the exported commit names this project: {re.escape(found)}"):
        _export(demo_project, tmp_path)
    assert not (tmp_path / "greet-comma").exists()


def _comma(files):
    return {**files, "src/demo/core.py": CORE.replace(b'"hello " + name', FIX)}


def test_message_toml_gives_upstreams_subject_and_nothing_else(demo_project, tmp_path):
    """The one file that says what differs: upstream's subject where the patch's is too long for git's 72."""
    _release(demo_project)
    (_sub(demo_project) / "message.toml").write_text('subject = "Add the comma greet() lacks"\n')
    out = _export(demo_project, tmp_path)
    mbox = (out / "0001-greet-comma.patch").read_bytes().decode()
    assert "\nSubject: Add the comma greet() lacks\n" in mbox
    assert _message(mbox.encode()) == "Why the change is needed.\n\nFixes #1\n"
    assert (out / "PR.md").read_text().startswith("# Add the comma greet() lacks\n\nWhy the change is needed.\n")


def test_issue_references(demo_project):
    patch = demo_project.load().line("demo").patch_dir / "0001-greet-comma.patch"
    from patchwheel.series import parse_patch

    p = parse_patch(patch)
    p.trailers["Upstream-Issue"] = (
        "https://github.com/example/demo/issues/7, example/other#3, https://github.com/example/demo/pull/9"
    )
    assert export_commit.fixes(p, "demo") == ["Fixes #7", "Fixes example/other#3", "Refs #9"]
    # No issue upstream: a downstream project's pull request is referred to, never taken for upstream's own #44
    p.trailers["Upstream-Issue"] = "https://github.com/someone/tool/pull/44"
    assert export_commit.fixes(p, "demo") == ["Refs someone/tool#44"]
    assert export_commit.message("S\n\nBody.", ["Fixes #7"], feature=True) == "S\n\nBody.\n\nRefs #7\n"


# --- the submission --------------------------------------------------------------------------------------------------


def test_a_fix_without_upstreams_test_is_not_exported(demo_project, tmp_path):
    _release(demo_project)
    shutil.rmtree(_sub(demo_project) / "tests")
    with pytest.raises(PatchwheelError, match="no test under .*/tests/: add upstream's test") as err:
        _export(demo_project, tmp_path)
    assert "nox -s lint" in err.value.hint
    assert not (tmp_path / "greet-comma").exists()


def test_lint_checks_the_submissions_of_the_newest_lines(demo_project):
    sub = _sub(demo_project)
    assert submission.lint(demo_project.load()) == {"demo/1.0.0": []}
    (sub / "expect.toml").write_text('[[fails]]\ntest = "tests/test_other.py::test_x"\nraises = "E"\nmatch = "("\n')
    (sub / "message.toml").write_text(
        'subject = "A subject that goes on and on and on, far longer than any subject should be"\nbody = "x"\n'
    )
    problems = submission.lint(demo_project.load())["demo/1.0.0"]
    assert any("message.toml: upstream's commit subject is at most 72 characters" in p for p in problems), problems
    assert any("message.toml: unknown key 'body' (known: subject)" in p for p in problems), problems
    assert any("'tests/test_other.py::test_x' is not a node id" in p for p in problems), problems
    assert any("match '(' is not a regular expression" in p for p in problems), problems


# --- upstream's style ------------------------------------------------------------------------------------------------


def test_a_badly_styled_test_is_refused_with_ruffs_findings(demo_project, tmp_path):
    _release(demo_project)
    (_sub(demo_project) / "tests/test_greet.py").write_text(
        "import os\nfrom demo import greet\n\ndef test_greet():\n    assert greet('you') == 'hello, you', 'no comma'\n"
    )
    with pytest.raises(PatchwheelError, match="the exported diff is not in demo 1.1.0's style") as err:
        _export(demo_project, tmp_path)
    assert "tests/test_greet.py:1: F401 `os` imported but unused" in err.value.message, err.value.message
    assert "tests/test_greet.py:3: ruff format would change it" in err.value.message, err.value.message
    assert not (tmp_path / "greet-comma").exists()


def test_a_badly_styled_fix_is_refused_and_upstreams_own_style_is_not_ours_to_judge(demo_project, tmp_path):
    """A line the patch writes must be in upstream's style; upstream's own lines are judged by nobody here (the
    release's core.py has an overlong line and an unused import elsewhere)."""
    messy = b"import os\n\n\n" + CORE.replace(b"return a + b", b"return a+b  " + b"#" * 130)
    _release(demo_project, core=messy)
    out = _export(demo_project, tmp_path)  # upstream's own lines: fine
    assert (out / "PR.md").is_file()
    files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
    badly = make_patch(
        files,
        lambda f: {**f, "src/demo/core.py": CORE.replace(b'"hello " + name', b"'hello, '+name")},
        "Greet with a comma",
        TRAILERS,
    )
    demo_project.set_series(("0001-greet-comma.patch", badly))
    with pytest.raises(PatchwheelError, match=r"src/demo/core\.py:8: ruff format would change it"):
        _export(demo_project, tmp_path / "again")
    assert not (tmp_path / "again").exists()


def test_style_without_upstreams_settings_is_an_error(demo_project, tmp_path):
    demo_project.add_release("1.1.0", b"# moved\n" + CORE)  # no sdist on the index
    with pytest.raises(PatchwheelError, match="no sdist of demo 1.1.0 is known, so upstream's ruff settings"):
        _export(demo_project, tmp_path)


# --- features ask first --------------------------------------------------------------------------------------------


def test_a_feature_exports_as_a_proposal_with_the_patch_for_reference(demo_project, tmp_path):
    feature = {**TRAILERS, "Drop-When": "pr-released pending"}
    del feature["Proof-Test"]
    feature["Feature-Test"] = "tests/proof/test_demo.py"
    files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
    edit = lambda f: {**f, "src/demo/core.py": CORE.replace(b'"hello " + name', FIX)}  # noqa: E731
    demo_project.set_series(("0001-greet-comma.patch", make_patch(files, edit, "Greet with a comma", feature)))
    shutil.rmtree(_sub(demo_project))
    _sub(demo_project).mkdir(parents=True)
    (_sub(demo_project) / "proposal.md").write_text("# Greetings with a comma\n\nProblem, evidence, proposed API.\n")
    _release(demo_project)

    def verify(*args):
        raise AssertionError("a feature's test is not run by the export")

    out = _export(demo_project, tmp_path, verify=verify)
    assert sorted(p.name for p in out.iterdir()) == ["0001-greet-comma.patch", "ISSUE.md"]
    issue = (out / "ISSUE.md").read_text()
    assert issue.startswith(
        "# Greetings with a comma\n\nProblem, evidence, proposed API.\n\n## The patch, for reference"
    )
    assert "not sent as a pull request" in issue
    mbox = (out / "0001-greet-comma.patch").read_bytes()
    assert b"From: Jane Doe <jane@example.org>" in mbox and b"\nRefs #1\n" in mbox and b"Fixes" not in mbox
    assert b"tests/test_greet.py" not in mbox and b"Feature-Test" not in mbox


# --- nothing written when a run goes wrong ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "before, after, says",
    [
        ("passes", "passes", "upstream's test does not fail on pristine demo 1.1.0 as the bug does (passes"),
        ("error", "passes", "upstream's test does not fail on pristine demo 1.1.0 as the bug does (error"),
        ("fails", "fails", "upstream's test does not pass on demo 1.1.0 with the exported patch applied (fails"),
    ],
)
def test_export_refuses_a_test_that_does_not_show_the_fix(demo_project, tmp_path, before, after, says):
    _release(demo_project)
    out = tmp_path / "out"
    (out / "greet-comma").mkdir(parents=True)
    (out / "greet-comma" / "PR.md").write_text("the last good export")

    def verify(project, line, newest, patched, sub):
        return proofenv.ProofOutcome(before, "detail"), proofenv.ProofOutcome(after, "detail")

    with pytest.raises(PatchwheelError, match=re.escape(says)):
        _export(demo_project, out, verify=verify)
    assert [p.name for p in out.iterdir()] == ["greet-comma"], "no temporary folder is left"
    assert (out / "greet-comma" / "PR.md").read_text() == "the last good export", "the last export is kept"


def test_export_refuses_a_conflicting_patch(demo_project, tmp_path):
    _release(demo_project, core=CORE.replace(b'"hello " + name', b'"hi " + name'))
    with pytest.raises(PatchwheelError, match="does not carry onto demo 1.1.0") as err:
        _export(demo_project, tmp_path)
    assert "rebase the line first" in err.value.hint


def test_export_sorts_versions_with_packaging(demo_project, tmp_path):
    _release(demo_project)
    cells = {
        v: {"text": "clean", "behaviour": b} for v, b in [("1.10.0", "fails"), ("1.2.0", "fails"), ("1.9.0", "passes")]
    }
    cells["1.3.0rc1"] = {"text": "clean", "behaviour": "error"}
    (demo_project.root / "patches" / "MATRIX.json").write_text(
        json.dumps({"lines": [{"line": "demo/1.0.0", "patches": [{"name": "0001-greet-comma.patch", "cells": cells}]}]})
    )
    pr = (_export(demo_project, tmp_path) / "PR.md").read_text()
    assert "- the bug shows on: 1.0.0, 1.1.0, 1.2.0, 1.10.0\n" in pr, pr
    assert "- fixed on: 1.9.0\n" in pr, pr


# --- upstream's test: its run and its verdict ----------------------------------------------------------------------

BUGGY = b"""import subprocess
import sys

import pytest


def test_shows_the_bug():
    raise NotImplementedError("Cannot copy out of meta tensor; no data!")


def test_in_a_worker():
    script = "raise RuntimeError('aten.cat.default got mixed torch.Tensor and DTensor')"
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"'torchrun' failed with returncode 1\\n\\nstderr:\\n[rank0]: " + res.stderr)


def test_other():
    pass


@pytest.mark.skip(reason="test requires multiple accelerators")
def test_gpu_form():
    pass
"""


def _expect(*items: tuple[str, str, str, bool]) -> tuple[submission.Expectation, ...]:
    return tuple(submission.Expectation(f"tests/utils/test_x.py::{t}", r, m, w) for t, r, m, w in items)


def test_upstreams_test_runs_and_is_judged_by_its_exceptions():
    cases = upstream_test.run(Path(sys.executable), {"tests/utils/test_x.py": BUGGY}, timeout=math.inf)
    assert isinstance(cases, list), cases
    assert {c["test"].rsplit("::", 1)[-1]: c["outcome"] for c in cases} == {
        "test_shows_the_bug": "failed",
        "test_in_a_worker": "failed",
        "test_other": "passed",
        "test_gpu_form": "skipped",
    }
    both = _expect(
        ("test_shows_the_bug", "NotImplementedError", "^Cannot copy out of meta tensor", False),
        ("test_in_a_worker", "RuntimeError", "got mixed torch.Tensor and DTensor", True),
    )
    verdict = upstream_test.judge_pristine(both, cases)
    assert verdict.verdict == "fails", verdict
    assert "test_shows_the_bug: NotImplementedError: Cannot copy out of meta tensor; no data!" in verdict.detail
    assert (
        "test_in_a_worker: RuntimeError: aten.cat.default got mixed torch.Tensor and DTensor (in a worker)"
        in verdict.detail
    )
    assert (
        "(1 passed, 2 failed, 1 skipped; test_gpu_form: skipped (test requires multiple accelerators))"
        in verdict.detail
    )
    # the wrapper's own exception is not the worker's: "'torchrun' failed" never matches a worker expectation
    wrapper = _expect(("test_in_a_worker", "RuntimeError", "failed with returncode", True))
    assert not upstream_test.shows(wrapper[0], next(c for c in cases if "worker" in c["test"]))
    # the right test failing for another reason cannot judge; so can a test left out of expect.toml that fails
    other = _expect(("test_shows_the_bug", "NotImplementedError", "something else", False))
    assert upstream_test.judge_pristine(other, cases).verdict == "error"
    assert upstream_test.judge_pristine(both[:1], cases).detail.startswith("failed otherwise: test_in_a_worker")
    assert upstream_test.judge_patched(both, cases).verdict == "fails"


def test_patched_must_pass_every_test_that_ran():
    ok = [
        {"test": "tests/utils/test_x.py::test_shows_the_bug", "outcome": "passed", "raises": "", "message": ""},
        {"test": "tests/utils/test_x.py::test_gpu", "outcome": "skipped", "raises": "", "message": "needs GPUs"},
    ]
    one = _expect(("test_shows_the_bug", "NotImplementedError", "x", False))
    assert upstream_test.judge_patched(one, ok) == proofenv.ProofOutcome(
        "passes", "1 passed, 1 skipped; test_gpu: skipped (needs GPUs)"
    )
    gpu = _expect(("test_gpu", "NotImplementedError", "x", False))
    assert upstream_test.judge_patched(gpu, ok).verdict == "fails", "an expected test that skipped proves nothing"
    assert upstream_test.judge_pristine(one, "timed out after 900 s").verdict == "error"


def test_a_test_file_that_cannot_be_imported_is_an_error():
    broken = {"tests/test_y.py": b"import no_such_module_here\n"}
    cases = upstream_test.run(Path(sys.executable), broken, timeout=math.inf)
    verdict = upstream_test.judge_pristine(_expect(("test_a", "E", "x", False)), cases)
    assert verdict.verdict == "error" and "did not run" in verdict.detail, verdict


# --- lint, the command line, the pins ------------------------------------------------------------------------------


def test_lint_fails_a_newest_line_without_its_submission(demo_project, capsys):
    from patchwheel import cli

    assert cli.main(["--root", str(demo_project.root), "lint"]) == 0
    shutil.rmtree(_sub(demo_project))
    assert cli.main(["--root", str(demo_project.root), "lint"]) == 1
    out = capsys.readouterr().out
    assert "demo/1.0.0: FAILED" in out and "no greet-comma/ under" in out and "write expect.toml and tests/" in out


def test_the_repositorys_newest_lines_have_their_submissions():
    from patchwheel import config

    problems = submission.lint(config.load(Path(__file__).resolve().parents[2]))
    assert set(problems) >= {"accelerate/1.15.0"} and not any(problems.values()), problems


def test_the_command_line_takes_an_author():
    from patchwheel import cli

    args = cli.parser().parse_args(["export", "dataparallel-num-items", "--author", JANE])
    assert (args.patch, args.author) == ("dataparallel-num-items", JANE)


def test_export_checks_with_the_ruff_that_lint_pins():
    import tomllib

    extras = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    pins = {
        extra: [r for r in reqs if r.startswith("ruff==")] for extra, reqs in extras["optional-dependencies"].items()
    }
    assert pins["export"] == pins["lint"] == ["ruff==0.17.5"]


# --- a fix someone else proposed: the test goes to their pull request -----------------------------------------------

THEIR_PR = "https://github.com/example/demo/pull/7"
COMMENT = "# Test greet() with a comma\n\nA test for this change: it fails on the release and passes with it.\n"


def _proposed_elsewhere(demo) -> None:
    """The demo fix, with its Upstream-Status naming someone else's pull request, and a comment for it."""
    trailers = {**TRAILERS, "Upstream-Status": f"Fix-Proposed-In {THEIR_PR}"}
    files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
    edit = lambda f: {**f, "src/demo/core.py": CORE.replace(b'"hello " + name', FIX)}  # noqa: E731
    demo.set_series(("0001-greet-comma.patch", make_patch(files, edit, "Greet with a comma", trailers)))
    (_sub(demo) / "comment.md").write_text(COMMENT)


def test_a_fix_proposed_elsewhere_exports_the_test_for_their_pull_request(demo_project, tmp_path):
    """No duplicate pull request: a commit with upstream's test alone, to go on top of theirs, and the comment that
    offers it, with the test's runs both ways (the release as published, and with the proposed change)."""
    _proposed_elsewhere(demo_project)
    _release(demo_project)
    seen: dict[str, object] = {}

    def verify(project, line, newest, patched, sub):
        seen.update(patched=patched, tests=sorted(sub.tests))
        return both_ways_ok(project, line, newest, patched, sub)

    out = _export(demo_project, tmp_path, verify=verify)
    assert sorted(p.name for p in out.iterdir()) == ["0001-greet-comma.patch", "COMMENT.md"]
    assert seen == {
        "patched": {"demo/core.py": b"# moved\n" + CORE.replace(b'"hello " + name', FIX)},
        "tests": ["tests/test_greet.py"],
    }
    mbox = (out / "0001-greet-comma.patch").read_bytes()
    assert b"Subject: Test greet() with a comma" in mbox and b"From: Jane Doe <jane@example.org>" in mbox
    assert b"diff --git a/tests/test_greet.py" in mbox and b"src/demo/core.py" not in mbox  # their fix is theirs
    assert b"\nRefs #1\n" in mbox and b"Fixes" not in mbox  # their pull request closes the issue, not this commit
    fixed = {"src/demo/core.py": b"# moved\n" + CORE.replace(b'"hello " + name', FIX)}
    repo = gitops.temp_repo(fixed)  # their branch: git am takes the test on top of it
    try:
        gitops.am(repo, out / "0001-greet-comma.patch")
        assert (repo / "tests" / "test_greet.py").is_file()
    finally:
        shutil.rmtree(repo.parent)
    comment = (out / "COMMENT.md").read_text()
    assert comment.startswith("A test for this change: it fails on the release and passes with it.\n"), comment
    assert "`0001-greet-comma.patch` adds `tests/test_greet.py` as a commit on top of this pull request" in comment
    assert "- pristine 1.1.0: fails as the issue describes (test_greet: BugSymptom: no comma)\n" in comment
    assert "- 1.1.0 with this pull request's change: passes (1 passed)\n" in comment
    assert "Proof-Test" not in comment and "patchwheel" not in comment


def test_a_fix_proposed_elsewhere_needs_a_comment_not_a_commit_message(demo_project):
    _proposed_elsewhere(demo_project)
    assert submission.lint(demo_project.load()) == {"demo/1.0.0": []}
    (_sub(demo_project) / "message.txt").write_text("Greet with a comma\n\nA duplicate pull request.\n")
    (_sub(demo_project) / "comment.md").write_text("no title\n")
    problems = submission.lint(demo_project.load())["demo/1.0.0"]
    assert any(f"its fix is proposed in {THEIR_PR}: the test goes there, remove" in p for p in problems), problems
    assert any("comment.md must start with '# <the test commit's subject>'" in p for p in problems), problems
    (_sub(demo_project) / "message.txt").unlink()
    (_sub(demo_project) / "comment.md").unlink()
    problems = submission.lint(demo_project.load())["demo/1.0.0"]
    assert any("no " in p and "comment.md: write the comment that offers the test" in p for p in problems), problems


# --- the message, written once ---------------------------------------------------------------------------------------


def test_a_second_copy_of_the_message_is_refused(demo_project):
    """The patch message is the one message: a message.txt beside it (the copy upstream-pr/ held before) is refused,
    saying what replaces it."""
    (_sub(demo_project) / "message.txt").write_text("Greet with a comma\n\nAdd the comma.\n")
    (problem,) = submission.lint(demo_project.load())["demo/1.0.0"]
    assert "message.txt repeats the patch's message: delete it" in problem and "message.toml" in problem, problem


def test_a_patch_subject_too_long_for_upstream_asks_for_message_toml(demo_project):
    long = "Greet with a comma, as every other greeting of the package does, and say so in the docstring too"
    files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
    demo_project.set_series(("0001-greet-comma.patch", make_patch(files, _comma, long, TRAILERS)))
    (problem,) = submission.lint(demo_project.load())["demo/1.0.0"]
    assert f"the patch's subject ({len(long)} characters): upstream's commit subject is at most 72" in problem
    assert 'message.toml: subject = "..."' in problem
    (_sub(demo_project) / "message.toml").write_text('subject = "Greet with a comma"\n')
    assert submission.lint(demo_project.load()) == {"demo/1.0.0": []}


def test_message_toml_says_only_what_differs(demo_project):
    (_sub(demo_project) / "message.toml").write_text('subject = "Greet with a comma"\n')
    (problem,) = submission.lint(demo_project.load())["demo/1.0.0"]
    assert "its subject is the patch's: delete the key (say only what differs)" in problem, problem
