"""Build numbers: a published wheel's file name never gets other bytes.

A +fixed wheel is named after its upstream release and the local label (``accelerate-1.15.0+fixed-…``), but what
it holds depends on the patch series: a reworded patch message changes the manifest inside, a new patch the code.
An index refuses a second file under a published name, and a consumer who has the first must be able to tell the
two apart. So each series a line is built from gets its own wheel build number, and the build tag (PEP 427's
tie-break between files of one version) carries it with the start of the inputs digest:
``accelerate-1.15.0+fixed-3_aaa9b8dffe61-py3-none-any.whl``. The number is a counter in the pins, which two clones
can both take for different changes; the digest gives them two names. pip and uv install the highest build of a
version (the number compared as a number, then the rest), so ``accelerate==1.15.0+fixed`` keeps meaning the newest.

``overlay/<pkg>/pins.toml`` records, in each ``[release."X"]`` table, the number and the digest of the inputs it
was given for (:func:`inputs_digest`: the upstream pin, the line's settings, the series, the rewrite's format)::

    build = { number = 2, inputs = "<sha256>" }

lint and the build refuse inputs whose digest is not the recorded one (changed inputs under an old number);
:func:`bump` records the next number, and the commands that change a series themselves (refresh, new, fold,
rebase) call it. A number never goes down: after a revert, bump again. lint also compares each record with every
commit of the checkout that recorded a build of that line (:func:`history_problem`): a number kept, and its digest
recomputed for new inputs, passes the digest check but names a published wheel whose bytes it no longer makes.
"""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from .. import config, draft, gitops
from ..config import BuildRecord, Project, ReleaseLine
from ..configfiles import write_record
from ..errors import ConfigError, PatchError, PatchwheelError
from ..reporter import CONSOLE

if TYPE_CHECKING:
    from ..series import Patch

#: The rewrite's output format: raise it when the same inputs would give a wheel other bytes (every line's record
#: then asks for a bump, so no published name gets the new bytes).
REWRITE_FORMAT = 2


def inputs_digest(line: ReleaseLine, series: list[Patch] | None = None) -> str:
    """The sha256 of everything the wheel's bytes depend on: the pinned upstream wheel (file name and sha256), the
    line's local label, import name and source root, the rewrite's format, the torch releases it is proven on (its
    manifest names them), and the series as the build reads it
    (each listed patch's name and the sha256 of its bytes, in order; comments and blank lines of ``series`` change
    nothing in the wheel, so they do not count). ``series``: the line's patches where the caller has read them (the
    build), else read here."""
    from ..series import series_names

    h = hashlib.sha256()
    for part in (
        f"rewrite {REWRITE_FORMAT}",
        f"upstream {line.wheel.filename} {line.wheel.sha256}",
        f"local-label {line.local_label}",
        f"import-name {line.import_name}",
        f"source-root {line.source_root}",
        *([f"proven-torch {' '.join(line.proven_torch)}"] if line.proven_torch else []),
    ):
        h.update(part.encode() + b"\n")
    if series is not None:
        for patch in series:
            h.update(f"patch {patch.name}\0{patch.sha256}\n".encode())
        return h.hexdigest()
    for name in series_names(line):
        path = line.patch_dir / name
        if not path.is_file():
            raise ConfigError(f"series entry {name} has no file {path}", "add the file or remove the entry")
        h.update(f"patch {name}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return h.hexdigest()


#: How much of the inputs digest the build tag carries: enough that two sets of inputs never share a name.
TAG_DIGEST = 12


def tag(line: ReleaseLine, series: list[Patch] | None = None) -> str:
    """The wheel's build tag: the number, then ``_`` and the start of the inputs digest (``2_0735a3436692``), so that
    two clones that record the same number for other inputs build two names; "" for a line without a record. A
    draft series (:mod:`draft`) has no number: ``0_draft_`` and the start of its inputs digest."""
    if drafts(line) if series is None else draft_names(series):
        return f"{draft.DRAFT_TAG}{inputs_digest(line, series)[:TAG_DIGEST]}"
    return f"{line.build.number}_{line.build.inputs[:TAG_DIGEST]}" if line.build else ""


def drafts(line: ReleaseLine) -> list[str]:
    """The patches of the line's series whose message is still the template `nox -s new` wrote (:mod:`draft`;
    empty: the series is no draft). A patch that cannot be read is none: the lint says what is wrong with it."""
    from ..series import parse_patch, series_names

    try:
        return draft_names([parse_patch(line.patch_dir / name) for name in series_names(line)])
    except (PatchwheelError, OSError, ValueError):
        return []


def draft_names(series: list[Patch]) -> list[str]:
    """The patches of a parsed series whose message is still the template `nox -s new` wrote (:func:`drafts`)."""
    return [p.name for p in series if draft.todo_lines(p.subject, p.message)]


def _bump_command(line: ReleaseLine) -> str:
    return f"nox -s bump -- {line.package}=={line.version}"


def problem(line: ReleaseLine, series: list[Patch] | None = None) -> str | None:
    """Why the line's recorded build number does not name its inputs; None when it does."""
    pins = f"overlay/{line.package}/pins.toml"
    try:
        digest = inputs_digest(line, series)
    except PatchwheelError as exc:
        return exc.message
    if line.build is None:
        return (
            f'{pins} [release."{line.version}"] records no build number for its inputs: run `{_bump_command(line)}` '
            f'(it writes build = {{ number = 1, inputs = "{digest}" }})'
        )
    if line.build.number <= line.retired_build:
        return (
            f"{line.key} records build {line.build.number}, but a retired line of {line.version} recorded build "
            f"{line.retired_build} ([retired] in {pins}), whose wheels may be published: a line made again starts "
            f'above it; write build = {{ number = {line.retired_build + 1}, inputs = "{digest}" }}'
        )
    if line.build.inputs != digest:
        return (
            f"the inputs of {line.key} (patches/{line.key}/, its upstream pin or settings in {pins}, or the torch "
            "its sets are proven on, [torch] of overlay/sets.toml) changed "
            f"since build {line.build.number} was recorded there: a wheel name "
            f"that may be published must not get other bytes; run `{_bump_command(line)}` (build "
            f"{line.build.number + 1})"
        )
    return None


def recorded(package: str, version: str, root: Path, *, merging: bool = True) -> list[tuple[str, BuildRecord]]:
    """Every build record of the line ``package`` ``version`` in the history of the checkout at ``root`` (newest
    commit first): the commit and its record. Empty outside a git checkout of its own (a scratch copy, a tarball).
    During a merge, the other side's history too, unless ``merging`` is False."""
    pins = f"overlay/{package}/pins.toml"
    try:
        if Path(gitops.git(root, "rev-parse", "--show-toplevel").decode().strip()).resolve() != root.resolve():
            return []
        # During a merge, the other side's records too: its numbers are as good as published.
        merging = merging and gitops.try_git(root, "rev-parse", "-q", "--verify", "MERGE_HEAD")[0] == 0
        heads = ["HEAD", "MERGE_HEAD"] if merging else ["HEAD"]
        commits = gitops.git(root, "log", "--format=%H", *heads, "--", pins).decode().split()
    except PatchwheelError:
        return []
    out = []
    for sha in commits:
        code, text = gitops.try_git(root, "show", f"{sha}:{pins}")
        try:
            build = tomllib.loads(text)["release"][version]["build"] if code == 0 else None
        except (tomllib.TOMLDecodeError, KeyError, TypeError):
            build = None
        if isinstance(build, dict) and isinstance(build.get("number"), int) and isinstance(build.get("inputs"), str):
            out.append((sha, BuildRecord(build["number"], build["inputs"])))
    return out


def history_problem(line: ReleaseLine, root: Path) -> str | None:
    """Why the line's record names a build that a commit recorded for other inputs; None when none did."""
    if line.build is None:
        return None
    history = recorded(line.package, line.version, root)
    clash = next(
        (sha for sha, rec in history if rec.number == line.build.number and rec.inputs != line.build.inputs), None
    )
    if clash is None:
        return None
    return (
        f"{line.key} records build {line.build.number} for other inputs than commit {clash[:12]} recorded for it: a "
        f"published name would get other bytes; run `{_bump_command(line)}` (build "
        f"{max(rec.number for _, rec in history) + 1})"
    )


def require_number(line: ReleaseLine, series: list[Patch] | None = None) -> None:
    """:func:`problem` as an error (what the build calls before it names a wheel)."""
    if why := problem(line, series):
        raise ConfigError(
            f"{line.key}: {why}", "then rebuild; docs/maintainers/release-lines.md#build-numbers says why"
        )


def bump(project: Project, line: ReleaseLine, log=CONSOLE) -> BuildRecord:
    """Record the line's inputs under the next build number (1 for a line without one) in its pins.toml; nothing
    changes when the recorded number already names these inputs. Returns the record in force. A draft series is
    refused: its inputs change when its message is written (:mod:`draft`)."""
    if names := drafts(line):
        raise PatchError(
            f"{line.key} is a draft: the message of {names[0]} is still the template `nox -s new` wrote, so a build "
            "number recorded now would name inputs that change when it is written",
            f"write the message (each TODO line; docs/adding-a-fix.md), then run `nox -s rebase -- {line.package} "
            f"{line.version} --reexport` (it re-exports the series and records the number)",
        )
    digest = inputs_digest(line)
    history = [rec.number for _, rec in recorded(line.package, line.version, project.root)]
    if line.build is not None and line.build.inputs == digest and not history_problem(line, project.root):
        log(f"{line.key}: build {line.build.number} records these inputs already")
        return line.build
    record = BuildRecord(max([line.build.number if line.build else 0, line.retired_build, *history]) + 1, digest)
    pins = project.pins_file(line.package)
    write_record(pins, line.version, record)
    if config.build_record(pins, line.version) != record:  # what the next load reads
        raise ConfigError(
            f"{pins}: the build record written for {line.version} does not read back",
            f'write build = {{ number = {record.number}, inputs = "{digest}" }} in [release."{line.version}"]',
        )
    log(f"{line.key}: build {record.number} recorded for these inputs in {pins.relative_to(project.root)}")
    return record


def bump_unless_draft(project: Project, line: ReleaseLine, log=CONSOLE) -> BuildRecord | None:
    """:func:`bump`, for the commands that change a series (refresh, new, rebase); a draft series gets no number
    (its inputs change when its message is written) and is built as a draft until then."""
    if names := drafts(line):
        log(
            f"{line.key}: no build number recorded: {names[0]} is a draft (its message is the template); the build "
            f"builds it as a draft for the proofs; once its message is written: nox -s rebase -- {line.package} "
            f"{line.version} --reexport"
        )
        return None
    return bump(project, line, log=log)
