"""Classify a release line's patches against another upstream release, by text.

Like Fedora's rebase-helper: a temporary repository gets the line's pristine files as its base commit and the
series as commits on top (``git am``); a second branch from the base gets the new release's files. Each patch is
then carried over in order, each on top of the ones carried before it:

- ``clean``: ``git apply`` takes it as it is; ``offset``: it applies, with hunks at other line numbers;
- ``already-upstream``: it applies in reverse (the release has the change), or a 3-way merge leaves nothing;
- ``3-way``: only a 3-way merge (``git cherry-pick``) takes it; ``conflict``: not even that.

Only the files the series touches are involved, so a whole series against one release takes well under a second
from a warm cache.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ... import gitops
from ...errors import GitError
from ...series import Patch
from ..workrepo import WorkRepo

_OFFSET = re.compile(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)")

STATUSES = ("clean", "offset", "3-way", "already-upstream", "conflict")


@dataclass
class TextResult:
    patch: str
    status: str
    detail: str = ""
    rebased: bytes | None = field(default=None, repr=False)  # the patch re-exported onto the new release
    conflicts: list[str] = field(default_factory=list)


def classify(
    patches: list[Patch],
    old_files: Mapping[str, bytes],
    new_files: Mapping[str, bytes | None],
    *,
    keep_repo: Path | None = None,
) -> list[TextResult]:
    """Text result per patch, in series order. ``old_files``/``new_files``: upstream-tree path -> bytes (the
    new release's None means the file is gone). With ``keep_repo`` the temporary repository is moved there (for a
    human to resolve conflicts) instead of deleted."""
    with WorkRepo.create(old_files, "pristine base") as work:
        work.apply(patches)
        work.branch("rebased", work.base, new_files, "new upstream release")
        results = [carry(work.path, p, work.commits[p.name]) for p in patches]
        if keep_repo is not None:
            shutil.move(str(work.path), keep_repo)
        return results


def carry(repo: Path, patch: Patch, commit: str) -> TextResult:
    rc, out = gitops.try_git(repo, "apply", "--check", "--verbose", str(patch.path))
    if rc == 0:
        offsets = _OFFSET.findall(out)
        gitops.am(repo, patch.path)
        rebased = gitops.format_patch(repo)
        if offsets:
            detail = ", ".join(f"hunk #{h} at {line} ({int(o):+d})" for h, line, o in offsets)
            return TextResult(patch.name, "offset", detail, rebased)
        return TextResult(patch.name, "clean", "", rebased)
    if gitops.try_git(repo, "apply", "--check", "--reverse", str(patch.path))[0] == 0:
        return TextResult(patch.name, "already-upstream", "applies in reverse")
    rc, out = gitops.try_git(repo, "cherry-pick", "--allow-empty", "--keep-redundant-commits", commit)
    if rc == 0:
        if not gitops.git(repo, "diff", "--name-only", "HEAD~1", "HEAD").strip():
            gitops.git(repo, "reset", "-q", "--hard", "HEAD~1")
            return TextResult(patch.name, "already-upstream", "empty after a 3-way merge")
        return TextResult(patch.name, "3-way", "needs a 3-way merge", gitops.format_patch(repo))
    conflicts = gitops.git(repo, "diff", "--name-only", "--diff-filter=U").decode().split()
    gitops.try_git(repo, "cherry-pick", "--abort")
    if not conflicts:
        raise GitError(f"{patch.name}: git cherry-pick failed without conflicts:\n{out}", "report this")
    return TextResult(patch.name, "conflict", "conflict in " + ", ".join(conflicts), None, conflicts)
