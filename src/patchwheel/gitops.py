"""Small functions over git for patch import/export (after Electron's script/lib/git.py).

Scratch repositories live in a temporary folder outside any work tree, with a fixed identity and no user or
system configuration, so exports are byte-stable.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from .errors import PatchwheelError
from .patches import FORMAT_PATCH_FLAGS

IDENTITY = ("patchwheel maintainers", "maintainers@patchwheel.invalid")


def _env(repo: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CEILING_DIRECTORIES=str(repo.parent), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
               GIT_AUTHOR_NAME=IDENTITY[0], GIT_AUTHOR_EMAIL=IDENTITY[1], GIT_COMMITTER_NAME=IDENTITY[0],
               GIT_COMMITTER_EMAIL=IDENTITY[1], TZ="UTC")
    return env


def git(repo: Path, *args: str, input: bytes | None = None, env: dict | None = None) -> bytes:
    res = subprocess.run(["git", *args], cwd=repo, env={**_env(repo), **(env or {})}, input=input,
                         capture_output=True)
    if res.returncode != 0:
        raise PatchwheelError(f"git {' '.join(args)} failed in {repo}:\n{res.stderr.decode(errors='replace')}",
                              "see git's message above")
    return res.stdout


def try_git(repo: Path, *args: str) -> tuple[int, str]:
    """Like :func:`git`, for commands whose failure is an answer (a patch that does not apply, a conflict)."""
    res = subprocess.run(["git", *args], cwd=repo, env=_env(repo), capture_output=True, text=True)
    return res.returncode, res.stdout + res.stderr


def scratch_repo(files: dict[str, bytes], message: str = "pristine") -> Path:
    """A new repository under a temporary folder, with ``files`` committed as its first commit."""
    repo = Path(tempfile.mkdtemp(prefix="patchwheel-git-")) / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write_files(repo, files)
    git(repo, "add", "-A")
    commit(repo, message)
    return repo


def write_files(repo: Path, files: dict[str, bytes | None]) -> None:
    for rel, data in files.items():
        p = repo / rel
        if data is None:
            p.unlink(missing_ok=True)
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def commit(repo: Path, message: str, date: str = "2026-01-01T00:00:00Z", author: str | None = None) -> None:
    env = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    args = ["commit", "-q", "--allow-empty", "--no-verify", "-F", "-"]
    if author:
        args.append(f"--author={author}")
    git(repo, *args, input=message.encode(), env=env)


def am(repo: Path, patch: Path) -> None:
    """Apply a format-patch mbox as a commit, keeping its author, date and message (no fuzz)."""
    git(repo, "am", "-q", "--keep", "--keep-cr", "--committer-date-is-author-date", str(patch))


def format_patch(repo: Path, rev: str = "HEAD") -> bytes:
    """Export one commit with the pinned flags (byte-stable)."""
    return git(repo, "format-patch", *FORMAT_PATCH_FLAGS, "--stdout", "-1", rev)
