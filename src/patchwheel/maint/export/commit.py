"""The commit a contributor sends upstream: their name, today's date, a message written for upstream, the fix and
upstream's own test, and nothing of this project (no trailers of ours, no paths of our tree, no name of ours)."""

from __future__ import annotations

import datetime
import re
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from ... import gitops
from ...errors import ConfigError
from ...series import API_TRAILER, GUARD_TRAILER, Patch
from ..workrepo import WorkRepo

#: This project's trailers: none of them reaches upstream.
OUR_TRAILERS = (
    "Proof-Test",
    "Feature-Test",
    GUARD_TRAILER,
    "Drop-When",
    "Mutant-Survives",
    "Upstream-Status",
    "Upstream-Issue",
    API_TRAILER,
)
#: Words that name this project or its tree: upstream cannot use them (our test paths, our tool, our trailers).
OUR_WORDS = re.compile(
    r"^(?:" + "|".join(OUR_TRAILERS) + r"):|tests/proof/|tests/guards/|upstream-pr/|patchwheel", re.M | re.I
)
_AUTHOR = re.compile(r"([^<>\x00-\x1f\x7f]*[^<>\s\x00-\x1f\x7f][^<>\x00-\x1f\x7f]*) <([^<>\s@]+@[^<>\s@]+)>\Z")
_ISSUE_URL = re.compile(r"^https://github\.com/([\w.-]+/[\w.-]+)/(issues|pull)/(\d+)\Z")
_ISSUE_REF = re.compile(r"^([\w.-]+/[\w.-]+)#(\d+)\Z")

#: ``git config <key>`` in the checkout, as the user's git reads it (their global configuration included).
GitConfig = Callable[[Path, str], str | None]


def user_git_config(root: Path, key: str) -> str | None:
    """The value the user's own git gives ``key`` in ``root`` (not the tool's pinned git environment, which reads
    no user configuration on purpose), or None when it is not set."""
    res = subprocess.run(["git", "config", "--get", key], cwd=root, capture_output=True, text=True)
    return res.stdout.strip() or None if res.returncode == 0 else None


def author(root: Path, given: str | None, config: GitConfig = user_git_config) -> str:
    """``Name <email>`` of the exported commit: ``--author``, else the checkout's ``git config user.name`` and
    ``user.email``."""
    hint = (
        'pass --author "Your Name <you@example.org>", or set your git identity: git config user.name "Your Name" '
        "and git config user.email you@example.org"
    )
    if given is not None:
        if not _AUTHOR.match(given.strip(" ")):  # whole, and no control character (a `\r` reached `From:`)
            raise ConfigError(f"--author {given!r} is not 'Name <email>'", hint)
        return given.strip(" ")
    name, email = config(root, "user.name"), config(root, "user.email")
    missing = [key for key, value in (("user.name", name), ("user.email", email)) if not value]
    if missing:
        raise ConfigError(
            f"no author for the exported commit: --author is not given and git config {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set in {root}",
            hint,
        )
    return f"{name} <{email}>"


def issue_refs(value: str) -> list[tuple[str, str, str]]:
    """Each issue or pull request of a comma-separated trailer value (a URL, or ``owner/repo#N``) as (``owner/repo``,
    ``issues`` or ``pull``, the number); what is neither is left out."""
    refs = []
    for raw in value.split(","):
        ref = raw.strip()
        if m := _ISSUE_URL.match(ref):
            refs.append((m.group(1), m.group(2), m.group(3)))
        elif m := _ISSUE_REF.match(ref):
            refs.append((m.group(1), "issues", m.group(2)))
    return refs


def fixes(patch: Patch, package: str) -> list[str]:
    """``Fixes #N`` lines from the ``Upstream-Issue`` trailer: ``#N`` in the package's own repository (the first one
    named like the package, else huggingface/<package>), ``owner/repo#N`` elsewhere; ``Refs`` for a pull request,
    which a commit does not fix (such as a downstream project's where no upstream issue exists)."""
    refs = issue_refs(patch.trailers.get("Upstream-Issue", ""))
    home = next((repo for repo, _, _ in refs if repo.rsplit("/", 1)[-1] == package), f"huggingface/{package}")
    return [f"{'Fixes' if kind == 'issues' else 'Refs'} {'' if repo == home else repo}#{n}" for repo, kind, n in refs]


def message(text: str, closes: list[str], feature: bool) -> str:
    """The commit message: the submission's text, then the issue lines (``Refs`` only, for a feature: its issue
    stays open until upstream has decided)."""
    lines = [ln.replace("Fixes ", "Refs ", 1) for ln in closes] if feature else closes
    return text.strip() + "\n\n" + "\n".join(lines) + "\n" if lines else text.strip() + "\n"


def ours(text: str) -> list[str]:
    """What in ``text`` is this project's: trailers, paths of our tree, our name (each once, in order)."""
    return list(dict.fromkeys(m.group(0) for m in OUR_WORDS.finditer(text)))


def refuse_ours(mbox: bytes, what: str) -> None:
    found = ours(mbox.decode("utf-8", errors="replace"))
    if found:
        raise ConfigError(
            f"{what} names this project: {', '.join(found)}; upstream cannot use our trailers, paths or name",
            "word the message, the test and the code for upstream's tree and APIs only (the long form stays in "
            "the patch message and PR.md)",
        )


def today() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()


def commit(
    base: Mapping[str, bytes | None],
    after: Mapping[str, bytes | None],
    text: str,
    who: str,
    date: str,
    title: str,
) -> bytes:
    """A repository of the release's files ``base``, one commit making them ``after`` (the fix and the tests),
    exported with the pinned flags; then ``git am`` must take that mbox on a fresh repository of ``base``."""
    with WorkRepo.create(base, title) as work:
        gitops.write_files(work.path, after)
        gitops.git(work.path, "add", "-A")
        gitops.commit(work.path, text, date=date, author=who)
        mbox = gitops.format_patch(work.path)
    with WorkRepo.create(base, title) as check, tempfile.TemporaryDirectory(prefix="patchwheel-export-") as tmp:
        path = Path(tmp) / "0001.patch"
        path.write_bytes(mbox)
        gitops.am(check.path, path)
        got = check.read(after)
    if got != {p: d for p, d in after.items()}:
        raise ConfigError(
            f"git am of the exported commit does not give the files it was made from ({title})", "report this"
        )
    return mbox
