"""Small functions over git for patch import/export (after Electron's script/lib/git.py).

Every git subprocess of the tool runs with :func:`git_env`: temporary repositories live in a temporary folder outside
any work tree, with a fixed identity and none of the user's or the system's git configuration, so exports are
byte-stable and ``git apply`` is as strict on every machine as it is here.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .errors import GitError

IDENTITY = ("patchwheel maintainers", "maintainers@patchwheel.invalid")
#: Flags that make ``git format-patch`` output byte-stable (Electron's choice): what every patch file is made with.
FORMAT_PATCH_FLAGS = ("--keep-subject", "--no-stat", "--zero-commit", "--full-index", "--no-signature")
#: GIT_CONFIG_GLOBAL (2.32) and GIT_CONFIG_COUNT (2.31): an older git ignores them and reads the user's config.
MIN_GIT = (2, 32)
#: Settings given to every git call as command-line configuration, above any file.
PINNED_CONFIG = (
    ("core.hooksPath", os.devnull),  # no hook runs: `--no-verify` does not stop prepare-commit-msg or post-*
    ("core.excludesFile", os.devnull),  # a global ignore file would drop files from `git add -A`
    ("core.attributesFile", os.devnull),  # global attributes could make diffs binary or change whitespace rules
    # A work repository's own config (a maintainer's `git config core.fsmonitor ...` there) would start git's
    # fsmonitor daemon, whose socket a copy of the folder cannot read, or run the command it names as a hook.
    ("core.fsmonitor", "false"),
)
#: The settings ``git init`` writes into a repository's own config, and the values it writes: all a work
#: repository of the tool holds (the tool sets nothing there). See :func:`foreign_config`.
INIT_CONFIG = {
    "core.repositoryformatversion": ("0",),
    "core.filemode": ("true", "false"),
    "core.bare": ("false",),
    "core.logallrefupdates": ("true",),
    "core.symlinks": ("true", "false"),  # written where the file system has none
    "core.ignorecase": ("true", "false"),  # where it folds case
    "core.precomposeunicode": ("true", "false"),  # macOS
}


@functools.cache
def _check_version() -> None:
    try:
        out = subprocess.run(
            ["git", "--version"],
            env={"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C"},
            capture_output=True,
            text=True,
        ).stdout
    except OSError as exc:
        raise GitError(f"cannot run git: {exc}", "install git (2.32 or newer) and put it on PATH") from exc
    m = re.search(r"(\d+)\.(\d+)", out)
    if m and (int(m.group(1)), int(m.group(2))) < MIN_GIT:
        raise GitError(
            f"{out.strip()} is too old: patchwheel needs git {'.'.join(map(str, MIN_GIT))} or newer",
            "an older git ignores GIT_CONFIG_GLOBAL and would apply patches with your own git "
            "configuration (for example apply.ignoreWhitespace): upgrade git",
        )


def git_env(root: Path) -> dict[str, str]:
    """The environment of every git subprocess of the tool, for a work tree or temporary folder at ``root``.

    - The caller's ``GIT_*`` variables are removed (a GIT_DIR or GIT_INDEX_FILE from a hook would redirect us).
    - ``GIT_CEILING_DIRECTORIES`` stops at ``root``'s parent: ``git apply`` inside another work tree silently skips
      every file.
    - No configuration file of the user or the system: ``GIT_CONFIG_NOSYSTEM`` and ``GIT_CONFIG_GLOBAL``. The
      latter replaces both ``~/.gitconfig`` and ``$XDG_CONFIG_HOME/git/config``, so HOME and XDG_CONFIG_HOME are
      left alone: the only other per-user files the commands we run read through them are the default ignore and
      attributes files (``$XDG_CONFIG_HOME/git/ignore``, ``.../attributes``), which :data:`PINNED_CONFIG` points at
      /dev/null, together with core.hooksPath. A user's ``apply.ignoreWhitespace`` would otherwise make
      ``git apply`` take a patch whose context differs in whitespace: fuzz, which release builds never do.
    - A fixed identity and ``TZ=UTC`` (commits and exports are byte-stable), and ``LC_ALL=C`` (which also makes
      gettext ignore LANGUAGE), so the messages parsed by regex (``patch failed``, ``Hunk #1 succeeded``) are in
      English.
    """
    _check_version()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "LANGUAGE"}
    env.update(
        GIT_CEILING_DIRECTORIES=str(root.parent),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME=IDENTITY[0],
        GIT_AUTHOR_EMAIL=IDENTITY[1],
        GIT_COMMITTER_NAME=IDENTITY[0],
        GIT_COMMITTER_EMAIL=IDENTITY[1],
        TZ="UTC",
        LC_ALL="C",
        GIT_CONFIG_COUNT=str(len(PINNED_CONFIG)),
    )
    for i, (key, value) in enumerate(PINNED_CONFIG):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return env


def git(repo: Path, *args: str, input: bytes | None = None, env: dict | None = None) -> bytes:
    res = subprocess.run(
        ["git", *args], cwd=repo, env={**git_env(repo), **(env or {})}, input=input, capture_output=True
    )
    if res.returncode != 0:
        raise GitError(
            f"git {' '.join(args)} failed in {repo}:\n{res.stderr.decode(errors='replace')}", "see git's message above"
        )
    return res.stdout


def foreign_config(repo: Path) -> list[tuple[str, str, str | None]]:
    """Every setting git reads for ``repo`` beyond the command line that the tool did not write there: (where git read
    it, its key as git spells it, its value; None for a bare key). An allow-list, not a list of the dangerous ones:
    a repository's own config can make git run a program in many ways (``commit.gpgSign`` with ``gpg.program``, a
    filter or diff driver an attributes file names, ``core.editor``, ``core.sshCommand``, ``include.path`` pulling
    any of these from another file), so only :data:`INIT_CONFIG` is kept, and the keys :data:`PINNED_CONFIG` sets
    (the command line wins over any file). Includes are listed, never followed: an included file is not opened."""
    out = git(repo, "config", "--list", "--no-includes", "--show-scope", "--show-origin", "-z").decode(errors="replace")
    pinned = {key.lower() for key, _ in PINNED_CONFIG}
    fields = out.split("\0")
    foreign = []
    for scope, origin, entry in zip(fields[0::3], fields[1::3], fields[2::3], strict=False):
        key, newline, value = entry.partition("\n")
        if scope == "command" or key in pinned or (newline and value in INIT_CONFIG.get(key, ())):
            continue
        foreign.append((origin, key, value if newline else None))
    return foreign


def try_git(repo: Path, *args: str) -> tuple[int, str]:
    """Like :func:`git`, for commands whose failure is an answer (a patch that does not apply, a conflict)."""
    res = subprocess.run(
        ["git", *args], cwd=repo, env=git_env(repo), capture_output=True, text=True, encoding="utf-8", errors="replace"
    )
    return res.returncode, res.stdout + res.stderr


@functools.lru_cache(maxsize=256)
def numstat(patch: bytes) -> tuple[tuple[int, int, str], ...] | str:
    """What ``git apply`` reads in ``patch`` (an mbox as the build applies it): (lines added, lines removed, path)
    for each file it would change, in order (``git apply --numstat``: nothing is applied); git's message when it
    cannot read the patch. Run in an empty folder outside any work tree: inside one, git would leave out the paths
    outside the current folder. Cached by content: lint reads each patch more than once."""
    with tempfile.TemporaryDirectory(prefix="patchwheel-numstat-") as tmp:
        res = subprocess.run(
            ["git", "apply", "--numstat", "-z", "-"], cwd=tmp, env=git_env(Path(tmp)), input=patch, capture_output=True
        )
    if res.returncode != 0:
        return res.stderr.decode(errors="replace").strip() or f"git apply exited with status {res.returncode}"
    return parse_numstat(res.stdout)


def parse_numstat(out: bytes) -> tuple[tuple[int, int, str], ...]:
    """``git apply --numstat -z``'s records: "added<TAB>removed<TAB>path" (-z: the path as it is)."""
    rows = []
    for record in out.split(b"\0")[:-1]:
        added, removed, path = record.decode(errors="replace").split("\t", 2)
        rows.append((int(added) if added.isdigit() else -1, int(removed) if removed.isdigit() else -1, path))
    return tuple(rows)


def run_git(repo: Path, *args: str) -> tuple[int, bytes]:
    """Like :func:`try_git`: the exit status and git's standard output alone, as bytes."""
    res = subprocess.run(["git", *args], cwd=repo, env=git_env(repo), capture_output=True)
    return res.returncode, res.stdout


def temp_repo(files: Mapping[str, bytes], message: str = "pristine") -> Path:
    """A new repository under a temporary folder, with ``files`` committed as its first commit. The caller removes
    ``repo.parent``; when a step fails here, this function does."""
    tmp = Path(tempfile.mkdtemp(prefix="patchwheel-git-"))
    try:
        repo = tmp / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        write_files(repo, files)
        git(repo, "add", "-A")
        commit(repo, message)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return repo


def write_files(repo: Path, files: Mapping[str, bytes | None]) -> None:
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
