"""Export one patch as what a contributor sends upstream: ``patchwheel export <slug>`` -> ``export/<slug>/``.

The steps, each of which stops the export with its reason (and nothing written) when it goes wrong:

1. the author (``--author``, else the checkout's ``git config user.name`` / ``user.email``) and the submission
   (``upstream-pr/<pkg>/<slug>/``, see submission.py: upstream's own test; the message upstream gets is the
   patch's, with what ``message.toml`` says differs);
2. carry the patch alone onto the newest upstream release (3-way if needed);
3. one commit by that author, dated today, with the patch's message (``Fixes #N`` from ``Upstream-Issue``),
   the fix and upstream's test at its path in upstream's tree; exported with the pinned flags and taken by
   ``git am`` on a fresh repository of the release's files; none of this project's trailers, paths or name in it;
4. upstream's style: ruff with the release's own settings, on what the commit writes (upstream_style.py);
5. a fix: upstream's test on the newest release, pristine (it must fail with the bug's exception) and with the
   patch (it must pass) (upstream_test.py);
6. write ``0001-<slug>.patch`` and ``PR.md`` (a fix), or ``ISSUE.md`` and the patch for reference (a feature:
   upstream discusses a new capability before it reviews code for it).

A fix someone else has proposed upstream (``Upstream-Status: Fix-Proposed-In <their pull request>``) gets no
duplicate pull request: the commit holds upstream's test alone, made on the release with the fix (their branch),
and ``COMMENT.md`` offers it to their pull request with the test's runs both ways.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from ...config import Artifact, Project, ReleaseLine
from ...errors import PatchError
from ...matrix.table import Matrix
from ...reporter import CONSOLE
from ...series import Patch, checked_series, matches, parse_series, proposed_in
from ...wheels import fetch
from ..proving import proofenv
from ..upstream.textcheck import carry
from ..workrepo import WorkRepo, release_files
from . import commit as export_commit
from . import style as upstream_style
from . import submission, upstream_test
from .commit import GitConfig, user_git_config

#: ``verify(project, line, newest, patched, submission) -> (pristine, patched)``: upstream's test on the newest
#: release as published and with the patch's files (wheel paths -> bytes, None: deleted) installed.
Verify = Callable[..., tuple[proofenv.ProofOutcome, proofenv.ProofOutcome]]


@dataclass(frozen=True)
class Carried:
    version: str  # the newest release
    status: str  # how the patch carried onto it (clean, offset, 3-way)
    base: dict[str, bytes | None]  # the release's files the patch touches
    fixed: dict[str, bytes | None]  # the same files with the patch


def find(project: Project, slug: str) -> tuple[ReleaseLine, list[Patch]]:
    """The newest line carrying a patch with this slug (or file name), and its series up to that patch."""
    for line in reversed([ln for pkg in project.packages() for ln in project.lines[pkg]]):
        series = checked_series(line)
        for i, p in enumerate(series):
            if matches(p, slug):
                return line, series[: i + 1]
    known = sorted({p.slug for ln in project.all_lines() for p in parse_series(ln)})
    raise PatchError(f"no patch {slug!r}", f"known patches: {', '.join(known)}")


def carry_to_newest(line: ReleaseLine, upto: list[Patch], version: str, newest: Artifact) -> Carried:
    """The patch alone on the newest release's files, applied as in its series (on the patches before it)."""
    patch = upto[-1]
    new = release_files(line, patch.touched, newest)
    with WorkRepo.of_line(line, upto) as work:
        pre = work.commits[upto[-2].name] if len(upto) > 1 else work.base
        work.branch("upstream", pre, new, f"pristine {line.package} {version}")
        result = carry(work.path, patch, work.commits[patch.name])
        if result.status in ("conflict", "already-upstream"):
            raise PatchError(
                f"{patch.name} does not carry onto {line.package} {version} (the newest release): {result.status}"
                f" ({result.detail})",
                f"rebase the line first (`nox -s rebase -- {line.package} {version}`), then export from it",
            )
        fixed = work.read(patch.touched)
    return Carried(version, result.status, new, fixed)


def sdist_of(line: ReleaseLine, version: str) -> Artifact | None:
    """The newest release's sdist: the line's pin, or as the index lists it."""
    if version == line.version:
        return line.sdist

    return fetch.release_artifacts(line.package, version)[1]


def export(
    project: Project,
    slug: str,
    out_root: Path | None = None,
    log=CONSOLE,
    verify: Verify = upstream_test.both_ways,
    author: str | None = None,
    git_config: GitConfig = user_git_config,
    date: str | None = None,
) -> Path:
    line, upto = find(project, slug)
    patch = upto[-1]
    who = export_commit.author(project.root, author, git_config)
    sub = submission.load(project.root, line.package, patch)
    version, newest, _ = fetch.releases(line.package)[-1]
    carried = carry_to_newest(line, upto, version, newest)
    elsewhere = None if patch.is_feature else proposed_in(patch)
    # Someone else's pull request holds the fix: the commit adds the test on top of it (the release with the fix).
    before = carried.fixed if elsewhere else carried.base
    after = {**carried.fixed, **({} if patch.is_feature else sub.tests)}
    text = _comment_message(sub) if elsewhere else sub.message or _feature_message(patch, sub)
    closes = export_commit.fixes(patch, line.package)
    where = f"{line.package} {version}"
    mbox = export_commit.commit(
        before,
        after,
        export_commit.message(text, closes, patch.is_feature or elsewhere is not None),
        who,
        date or export_commit.today(),
        where,
    )
    export_commit.refuse_ours(mbox, "the exported commit")
    style = _style(line, version, before, after)
    runs = None
    if not patch.is_feature:
        log(f"{patch.name}: running upstream's test on {where}, pristine and patched ...")
        patched = {w: d for p, d in carried.fixed.items() if (w := line.wheel_path(p)) is not None}
        runs = _judged(verify(project, line, newest, patched, sub), where, sub)
    files = {f"0001-{patch.slug}.patch": mbox}
    if patch.is_feature:
        files["ISSUE.md"] = _issue(sub, patch, where, carried.status, style).encode()
    elif elsewhere:
        files["COMMENT.md"] = _comment(line, patch, sub, version, style, runs).encode()
    else:
        files["PR.md"] = _description(project, line, patch, sub, carried, style, runs).encode()
        if sub.issue:  # upstream has no issue for the bug: the one to open, which the pull request then fixes
            files["ISSUE.md"] = sub.issue.encode()
    for name, data in files.items():
        export_commit.refuse_ours(data, name)
    out = _write((out_root or project.exports) / patch.slug, files)
    ran = (
        f"upstream's test {', '.join(sub.tests)}: failed on pristine, passed patched"
        if runs
        else "a feature: ISSUE.md proposes it, the patch is attached for reference"
    )
    offered = f"; the test alone, for {elsewhere}" if elsewhere else ""
    log(
        f"wrote {out}/: {', '.join(files)} (by {who}; {carried.status} onto {where}, verified with git am{offered}; "
        f"{ran}; ruff with {line.package} {version}'s settings: clean)"
    )
    return out


def _comment_message(sub: submission.Submission) -> str:
    """The test commit's message: the comment's title as its subject, the comment as its body."""
    return sub.subject + "\n\n" + (sub.comment or "").split("\n", 1)[1].strip()


def _comment(line: ReleaseLine, patch: Patch, sub: submission.Submission, version: str, style: str, runs) -> str:
    tests = ", ".join(f"`{t}`" for t in sub.tests)
    return "\n".join(
        [
            (sub.comment or "").split("\n", 1)[1].strip(),
            "",
            "## The test",
            "",
            f"`0001-{patch.slug}.patch` adds {tests} as a commit on top of this pull request (`git am` takes it on "
            f"its branch). Run on {line.package} {version} (CPU, torch {proofenv.torch_version()}; nothing is "
            "downloaded):",
            "",
            f"- pristine {version}: fails as the issue describes ({runs[0].detail})",
            f"- {version} with this pull request's change: passes ({runs[1].detail})",
            "",
            "```sh",
            f"pytest {' '.join(sub.tests)}",
            "```",
            "",
            f"{style}: clean on the lines the test writes.",
            "",
        ]
    )


def _feature_message(patch: Patch, sub: submission.Submission) -> str:
    title = (sub.proposal or "").splitlines()[0].lstrip("# ").strip() if sub.proposal else patch.subject
    return f"{patch.subject}\n\nThe implementation of a proposal for discussion: {title}."


def _style(line: ReleaseLine, version: str, before: dict, after: dict) -> str:
    """Refuses a commit that ruff, with upstream's settings, does not pass; what was checked, for the texts."""
    pyproject = upstream_style.settings(line.package, version, sdist_of(line, version))
    found = upstream_style.ruff_problems(pyproject, after, upstream_style.changed_lines(before, after))
    where = f"{line.package} {version}"
    if found:
        raise PatchError(
            f"the exported diff is not in {where}'s style (ruff with its pyproject.toml settings):\n  "
            + "\n  ".join(found),
            "fix the patch (edit overlay/, then `nox -s refresh`) or the upstream test in upstream-pr/, and export "
            "again",
        )
    return f"ruff check and ruff format --check with {where}'s settings ({upstream_style.describe(pyproject)})"


def _judged(runs, where: str, sub: submission.Submission):
    before, after = runs
    if before.verdict != "fails":
        raise PatchError(
            f"upstream's test does not fail on pristine {where} as the bug does ({before.verdict}: {before.detail})",
            "if the bug is fixed there, drop the patch (see the matrix, `nox -s matrix`); otherwise make the test "
            "show it, "
            f"with the exception {sub.folder}/expect.toml names",
        )
    if after.verdict != "passes":
        raise PatchError(
            f"upstream's test does not pass on {where} with the exported patch applied "
            f"({after.verdict}: {after.detail})",
            "the fix or the test is wrong there: fix the patch (rebase the line onto the release if needed), or the "
            "test",
        )
    return before, after


def _write(out: Path, files: dict[str, bytes]) -> Path:
    """``out`` holds exactly ``files`` afterwards, replaced in one rename (a failure leaves the old one)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _issue(sub: submission.Submission, patch: Patch, where: str, status: str, style: str) -> str:
    return (
        (sub.proposal or "").rstrip()
        + "\n\n## The patch, for reference\n\n"
        + f"`0001-{patch.slug}.patch`, beside this file, implements the proposal on {where} ({status}; `git am` "
        + f"takes it; {style}: clean). It is attached for the discussion, not sent as a pull request: once the "
        + "API is agreed on, it can become one, with a test in the suite.\n"
    )


def _measured(project: Project, line: ReleaseLine, patch: Patch, version: str) -> tuple[list[str], list[str]]:
    """Releases where this project's own tests saw the bug, and where they saw it fixed (the committed matrix),
    plus the pins of the lines that carry the fix (their proofs fail there) and the release the export just ran."""
    shows: list[str] = [version]
    fixed: list[str] = []
    matrix = Matrix.load(project.matrix_json)
    for entry in matrix.lines if matrix else []:
        if entry.package != line.package:
            continue
        for row in entry.patches:
            if row.slug == patch.slug:
                for v, cell in row.cells.items():
                    {"fails": shows, "passes": fixed}.get(cell.behaviour or "", []).append(v)
    shows += [ln.version for ln in project.lines[line.package] if any(q.slug == patch.slug for q in parse_series(ln))]
    return sorted(set(shows), key=Version), sorted(set(fixed), key=Version)  # 1.9 < 1.10, .post1


def _description(project, line, patch, sub, carried: Carried, style: str, runs) -> str:
    version = carried.version
    shows, fixed = _measured(project, line, patch, version)
    tests = ", ".join(f"`{t}`" for t in sub.tests)
    body = patch.body
    return "\n".join(
        [
            f"# {sub.subject}",
            "",
            body,
            "",
            *export_commit.fixes(patch, line.package),
            "",
            "## Test",
            "",
            f"This PR adds {tests}. Run on {line.package} {version} (CPU, torch {proofenv.torch_version()}; nothing "
            "is downloaded; a test that needs accelerators is skipped without them):",
            "",
            f"- pristine {version}: fails as the issue describes ({runs[0].detail})",
            f"- {version} with this PR: passes ({runs[1].detail})",
            "",
            "```sh",
            f"pytest {' '.join(sub.tests)}",
            "```",
            "",
            "## Style",
            "",
            f"{style}: clean on the lines this PR writes.",
            "",
            "## Versions affected",
            "",
            f"- this applies to {line.package} {version} ({carried.status}); it was first written for "
            f"{line.package} {line.version}",
            f"- the bug shows on: {', '.join(shows)}",
            f"- fixed on: {', '.join(fixed) or 'none measured'}",
            "",
        ]
    )
