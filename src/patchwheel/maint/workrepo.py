"""The work repository every maintenance tool starts from (after Fedora's rebase-helper and gbp's patch queue).

A temporary git repository outside any work tree (:func:`patchwheel.gitops.temp_repo`):

- the base commit holds a release's files, only those the series touches (read from the sha256-pinned wheel,
  laid out as in upstream's git tree: ``src/transformers/...``);
- each patch of the series is a commit on top (``git am``: message, author and date kept), so a patch's commit
  is the state the series makes up to it, and ``git format-patch`` exports it byte for byte;
- :meth:`WorkRepo.branch` starts another branch from any of those commits with other files (another release's),
  for carrying the patches over by cherry-pick.

``textcheck`` and ``rebase`` classify and carry a series onto a new release, ``export`` carries one patch onto the
newest release, ``rebase --reexport`` re-exports a series, ``refresh`` rewrites one patch from an edited vendored
module and ``new`` turns edits into a patch: all of them build this repository the same way, here.
"""

from __future__ import annotations

import shutil
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import gitops
from ..config import Artifact, ReleaseLine
from ..series import Patch
from ..wheels import fetch, rewrite


def release_files(line: ReleaseLine, paths: Iterable[str], artifact: Artifact | None = None) -> dict[str, bytes | None]:
    """Upstream-tree path -> the file's bytes in a release's wheel (``artifact``, default: the line's own pin);
    None where the release has no such file. The wheel is fetched and sha256-verified (cached)."""
    with zipfile.ZipFile(fetch.fetch(line.package, artifact or line.wheel)) as zf:
        names = set(zf.namelist())
        wheel_paths = {p: line.wheel_path(p) for p in paths}
        return {p: rewrite.read_member(zf, w) if w is not None and w in names else None for p, w in wheel_paths.items()}


def touched(series: Iterable[Patch]) -> list[str]:
    """Every upstream-tree path a series touches, sorted."""
    return sorted({t for p in series for t in p.touched})


@dataclass
class WorkRepo:
    """A work repository: ``base`` (a release's files), then one commit per applied patch (``commits``, by name)."""

    path: Path
    base: str
    commits: dict[str, str] = field(default_factory=dict)
    _owned: Path | None = None  # the temporary folder to remove on close (None: kept, e.g. a rebase in progress)

    @classmethod
    def create(cls, files: Mapping[str, bytes | None], message: str, at: Path | None = None) -> WorkRepo:
        """A new repository whose first commit holds ``files`` (None entries: absent). With ``at`` the repository
        is moved there to outlive the command (a rebase waiting for a human), and :meth:`close` keeps it."""
        repo = gitops.temp_repo({k: v for k, v in files.items() if v is not None}, message)
        if at is None:
            return cls(repo, rev(repo), _owned=repo.parent)
        try:
            shutil.move(str(repo), at)
        finally:
            shutil.rmtree(repo.parent, ignore_errors=True)
        return cls(at, rev(at))

    @classmethod
    def of_line(
        cls,
        line: ReleaseLine,
        series: list[Patch],
        *,
        extra: Iterable[str] = (),
        at: Path | None = None,
    ) -> WorkRepo:
        """The line's pristine files (those ``series`` touches, and ``extra``) as the base, ``series`` as commits."""
        files = release_files(line, sorted(set(touched(series)) | set(extra)))
        work = cls.create(files, f"pristine {line.package} {line.version}", at)
        try:
            work.apply(series)
        except BaseException:
            work.close()
            raise
        return work

    def apply(self, series: Iterable[Patch]) -> None:
        """Each patch as a commit on the current branch (``git am``: no fuzz; message, author and date kept)."""
        for p in series:
            gitops.am(self.path, p.path)
            self.commits[p.name] = rev(self.path)

    def branch(self, name: str, start: str, files: Mapping[str, bytes | None], message: str) -> str:
        """Check out a new branch ``name`` at ``start`` and commit ``files`` there (None: delete); its commit."""
        gitops.git(self.path, "checkout", "-q", "-b", name, start)
        gitops.write_files(self.path, files)
        gitops.git(self.path, "add", "-A")
        gitops.commit(self.path, message)
        return rev(self.path)

    def read(self, paths: Iterable[str], ref: str = "HEAD") -> dict[str, bytes | None]:
        """Files as they are at ``ref`` (None: not there)."""
        out: dict[str, bytes | None] = {}
        for p in paths:
            rc, _ = gitops.try_git(self.path, "cat-file", "-e", f"{ref}:{p}")
            out[p] = gitops.git(self.path, "show", f"{ref}:{p}") if rc == 0 else None
        return out

    def close(self) -> None:
        if self._owned is not None:
            shutil.rmtree(self._owned, ignore_errors=True)

    def __enter__(self) -> WorkRepo:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def rev(repo: Path, ref: str = "HEAD") -> str:
    return gitops.git(repo, "rev-parse", ref).decode().strip()
