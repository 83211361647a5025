"""Edit a vendored fixed module, then turn the edit into a patch (like quilt's ``refresh`` and gbp's ``pq export``).

``overlay/<pkg>/<version>/`` holds the line's fixed modules (:mod:`patchwheel.wheels.vendored`). A maintainer edits them
in place, then:

- ``nox -s refresh -- <pkg> <version> <patch>`` folds the edit into that patch. Its message, author and date stay;
  its diff is made anew. The edit must belong to the patch: it may not change lines another patch wrote, nor touch
  the context a later patch needs (those would be that patch's edit, or a new one). A later patch of the series
  that touches the same file is re-exported (its line numbers and ``index`` lines move with the edit) and must
  keep exactly its change; every other patch keeps its bytes.
- ``nox -s new -- <pkg> <version> <slug>`` makes the edit a new patch at the end of the series, with the trailer
  template, and writes the stubs of every file the later steps need (:mod:`.stubs`: the proof, the guards,
  ``upstream-pr/``), each failing or refused by lint until it is written. The series is then a draft
  (:mod:`patchwheel.draft`): the build takes it, lint does not, and no build number is recorded until its message
  is written.

Both work in a :class:`~patchwheel.maint.workrepo.WorkRepo` (pristine files, the series as commits), check the
result by applying the new series to the pristine wheel's files with the build's own apply step (it must give
exactly the edited files), and only then write the patch files, the series and the overlay.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import gitops
from ..config import Project, ReleaseLine
from ..errors import PatchError
from ..names import path_problem
from ..reporter import CONSOLE
from ..series import HUNK_HEADER, SLUG, Patch, checked_series, find, mailinfo_cut, parse_patch, test_refs
from ..wheels import buildno, fetch, vendored
from ..wheels.apply import ApplyTree, apply_line, explain_failure
from . import stubs
from .workrepo import WorkRepo, release_files

_PORCELAIN = re.compile(r"^([0-9a-f]{40}) \d+ (\d+)", re.M)
_U0_HUNK = re.compile(HUNK_HEADER, re.M)


@dataclass
class Edits:
    """What a maintainer changed in overlay/<pkg>/<version>/, against pristine + series."""

    line: ReleaseLine
    series: list[Patch]
    edited: dict[str, bytes]  # upstream-tree path -> the edited bytes (files that differ, or are new)
    state: dict[str, bytes]  # every vendored module as it is now (upstream-tree paths), edited or not


#: Files in the overlay that are no one's module: editor backups and swap files, merge leftovers, hidden files.
_JUNK = re.compile(r"(^|/)\.|~\Z|\.(orig|rej|swp|swo|bak|pyc)\Z")


def _edits(project: Project, line: ReleaseLine) -> Edits:
    """The edits of overlay/<pkg>/<version>/, refused when the folder is not a clean base for them: a module
    missing or out of date (the series changed since `nox -s vendor` wrote it: folding it back would undo that
    change)."""
    series = checked_series(line, messages=False)
    want = vendored.generate(line, series)
    states = vendored.classify(want)
    folder = line.vendor_dir
    if bad := [f"{rel} ({s})" for rel, s in states.items() if s in ("missing", "stale", "outgrown", "edited-stale")]:
        raise PatchError(
            f"overlay/{line.key}/ does not match the series it would be folded into: {', '.join(bad)}",
            "run `nox -s vendor` first: it brings the folder up to date and keeps edits made on top of the current "
            "series (an edit of a file the series changed since must be made again on the fresh copy)",
        )
    pristine: dict[str, bytes | None] = {}
    extra = [rel for rel, s in states.items() if s == "extra" and not _JUNK.search(rel)]
    if extra:
        pristine = release_files(line, [line.upstream_path(rel) for rel in extra])
    state, edited = {}, {}
    for rel, s in states.items():
        if s == "own" or rel in vendored._OWN or (s == "extra" and rel not in extra):
            continue
        path = folder / rel
        if problem := path_problem(rel):
            raise PatchError(f"overlay/{line.key}/{rel}: {problem}", "rename or remove it")
        if rel.split("/", 1)[0] != line.import_name:
            raise PatchError(
                f"overlay/{line.key}/{rel} is outside the package ({line.import_name}/)",
                f"only files of the installed package can be patched: move it under {line.import_name}/",
            )
        if path.is_symlink():
            raise PatchError(f"overlay/{line.key}/{rel} is a symbolic link", "replace it by the file itself")
        data = path.read_bytes()
        up = line.upstream_path(rel)
        if s == "extra" and b"\0" in data:
            raise PatchError(
                f"overlay/{line.key}/{rel} is not a text file", "patches carry text: remove it from the overlay"
            )
        if s == "extra" and pristine.get(up) == data:
            continue  # a pristine copy, not edited (yet): no part of any patch
        state[up] = data
        if s in ("edited", "extra"):
            edited[up] = data
    return Edits(line, series, edited, state)


def _blame(work: WorkRepo, path: str, first: int, last: int) -> dict[int, str]:
    """Line number -> the commit that wrote that line, at HEAD, for lines first..last (1-based, inclusive)."""
    out = gitops.git(work.path, "blame", "--porcelain", "-L", f"{first},{last}", "HEAD", "--", path).decode(
        errors="replace"
    )
    return {int(m.group(2)): m.group(1) for m in _PORCELAIN.finditer(out)}


def _owners(work: WorkRepo, edits: Edits) -> list[tuple[str, int, str]]:
    """(path, line, patch) for each line of the series' result that the edit changes or removes, or inserts
    into, and that a patch wrote: the edit is that patch's business."""
    by_commit = {c: name for name, c in work.commits.items()}
    found = []
    for path, data in edits.edited.items():
        if work.read([path])[path] is None:
            continue  # a new file: nobody wrote it yet
        total = len(gitops.git(work.path, "show", f"HEAD:{path}").splitlines())
        with tempfile.NamedTemporaryFile(prefix="patchwheel-edit-", delete=False) as tmp:
            tmp.write(data)
        try:
            blob = gitops.git(work.path, "hash-object", "-w", tmp.name).decode().strip()
        finally:
            Path(tmp.name).unlink()
        diff = gitops.git(work.path, "diff", "-U0", f"HEAD:{path}", blob).decode(errors="replace")
        for m in _U0_HUNK.finditer(diff):
            start, count = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
            if count:  # lines changed or removed: each one's author
                lines = _blame(work, path, start, start + count - 1)
                found += [(path, n, by_commit[c]) for n, c in sorted(lines.items()) if c in by_commit]
            elif total and 0 < start < total:  # an insertion after line `start`, inside one patch's lines?
                around = _blame(work, path, start, start + 1)
                a, b = around.get(start), around.get(start + 1)
                if a is not None and a == b and a in by_commit:
                    found.append((path, start, by_commit[a]))
    return found


def _under_later(edits: Edits, later: list[Patch]) -> dict[str, bytes | None]:
    """The edited state with the later patches taken off again (last first, strictly): the state the refreshed
    patch must leave. A later patch that no longer reverses needs lines the edit changed."""
    with ApplyTree(edits.state) as tree:
        for q in reversed(later):
            rc, out = gitops.try_git(tree.root, "apply", "--reverse", "--whitespace=nowarn", str(q.path))
            if rc != 0:
                raise PatchError(
                    f"the edit touches lines that {q.name}, later in the series, needs as it is "
                    f"({explain_failure(q, out)})",
                    f"make that part of the edit in {q.name} (`nox -s refresh -- {edits.line.package} "
                    f"{edits.line.version} {q.slug}`), or as a new patch after it (`nox -s new`)",
                )
        return tree.read(edits.state)


def _change(raw: bytes) -> list[bytes]:
    """A patch's change without its line numbers and blob ids: the lines each hunk removes, adds and keeps."""
    return [
        ln
        for ln in raw.split(b"\n")
        if ln.startswith((b"+", b"-", b" ", b"diff --git ")) and not ln.startswith((b"+++ ", b"--- "))
    ]


def _check_result(edits: Edits, files: list[tuple[str, bytes]]) -> None:
    """The new series (file names and bytes), applied by the build to the pristine wheel's files, gives exactly
    the edited files."""
    line = edits.line
    with tempfile.TemporaryDirectory(prefix="patchwheel-series-") as tmp:
        for name, data in files:
            (Path(tmp) / name).write_bytes(data)
        series = [parse_patch(Path(tmp) / name) for name, _ in files]
        paths = sorted(set(edits.state) | {t for p in series for t in p.touched})
        pristine = {w: d for p, d in release_files(line, paths).items() if d is not None and (w := line.wheel_path(p))}
        got = apply_line(line, series, pristine)
    for up, data in edits.state.items():
        rel = line.wheel_path(up)
        assert rel is not None
        if got.get(rel, pristine.get(rel)) != data:
            raise PatchError(
                f"the new series does not give overlay/{line.key}/{rel} as edited",
                "report this, with the edit: nothing was written",
            )


def _write_patches(files: dict[Path, bytes]) -> None:
    """Each file written whole: all into temporary siblings first, then each renamed over its file."""
    tmps = {path: path.with_name(f".{path.name}.tmp") for path in files}
    try:
        for path, data in files.items():
            tmps[path].write_bytes(data)
        for path, tmp in tmps.items():
            tmp.replace(path)
    finally:
        for tmp in tmps.values():
            tmp.unlink(missing_ok=True)


def _check_messages(series: list[Patch]) -> None:
    """git am ends a message at a line that starts a diff or a diffstat (git mailinfo): refreshing such a patch
    would drop the rest of its message and its trailers."""
    for p in series:
        if problem := mailinfo_cut(p):
            raise PatchError(problem, "reword that line in the .patch file (e.g. indent it), then refresh")


def refresh(project: Project, package: str, version: str, ref: str, log: Callable[[str], None] = CONSOLE) -> None:
    line = project.line(package, version)
    edits = _edits(project, line)
    series = edits.series
    k = series.index(find(series, ref, f"the series of {line.key}"))
    target, later = series[k], series[k + 1 :]
    if not edits.edited:
        log(f"overlay/{line.key}/ equals pristine + series: nothing to refresh into {target.name}")
        return
    new_paths = [p for p in edits.edited if p not in {t for q in series for t in q.touched}]
    _check_messages(series[k:])
    with WorkRepo.of_line(line, series, extra=new_paths) as work:
        if deleted := [
            (p, q.name)
            for p in edits.edited
            if work.read([p])[p] is None
            for q in series
            if q is not target and p in q.touched
        ]:
            raise PatchError(
                f"the edit adds {line.wheel_path(deleted[0][0])}, which {deleted[0][1]} deletes, so it cannot belong "
                f"to {target.name}",
                f"change {deleted[0][1]} instead, or remove the file from overlay/{line.key}/",
            )
        if owned := [(p, n, q) for p, n, q in _owners(work, edits) if q != target.name]:
            where = "; ".join(f"{line.wheel_path(p)} line {n} ({q})" for p, n, q in owned[:6])
            more = f" and {len(owned) - 6} more" if len(owned) > 6 else ""
            first = next(p.slug for p in series if p.name == owned[0][2])
            raise PatchError(
                f"the edit changes lines that another patch wrote, so it cannot belong to {target.name}: {where}{more}",
                f"refresh {first} instead (`nox -s refresh -- {line.package} {line.version} {first}`); an edit "
                "that spans several patches is refreshed one patch at a time",
            )
        state = _under_later(edits, later)
        gitops.git(work.path, "checkout", "-q", "--detach", work.commits[target.name])
        gitops.write_files(work.path, state)
        gitops.git(work.path, "add", "-A")
        if not gitops.git(work.path, "diff", "--cached", "--name-only", f"{work.commits[target.name]}~1").strip():
            raise PatchError(
                f"with the edit, {target.name} changes nothing",
                f"to drop the patch, remove it from patches/{line.key}/series and delete its file",
            )
        gitops.git(work.path, "commit", "-q", "--amend", "--no-edit", "--no-verify", "--allow-empty")
        out = {target.path: gitops.format_patch(work.path)}
        for q in later:
            gitops.am(work.path, q.path)
            raw = gitops.format_patch(work.path)
            if _change(raw) != _change(q.raw):
                raise PatchError(f"{q.name} would change with the edit", "report this: nothing was written")
            if raw != q.raw:
                out[q.path] = raw
    _check_result(edits, [(p.name, out.get(p.path, p.raw)) for p in series])
    if out[target.path] == target.raw:
        log(f"{target.name}: unchanged")
        return
    _write_patches(out)
    vendored.write(project, [line], log=lambda m: None)
    buildno.bump_unless_draft(project, line, log=log)
    files = ", ".join(sorted(str(line.wheel_path(p)) for p in edits.edited))
    log(f"refreshed {_rel(project, target.path)} from the edit of {files}")
    for q in later:
        if q.path in out:
            log(f"re-exported {_rel(project, q.path)}: its line numbers moved with the edit; its change is the same")
    refs = test_refs(target.trailers.get("Proof-Test") or target.trailers.get("Feature-Test"))
    tests = refs[0][0] + (f", {len(refs)} of its tests" if len(refs) > 1 else "") if refs else "its test"
    log(f"next: run its proof both ways ({tests}): nox -s prove")


def _rel(project: Project, path: Path) -> str:
    return path.relative_to(project.root).as_posix()


TEMPLATE = """\
TODO: the subject, what the fix does (imperative)

TODO: the problem: what fails, where, with the exception and message it raises.

TODO: the root cause, and how this change fixes it. What changes for users who never hit the bug.
TODO: keep each upstream signature it touches (lint checks), or declare the change: API-Change: <module>.<name>: <why>

Upstream-Issue: TODO https://github.com/huggingface/{package}/issues/<N>
Upstream-Status: Pending
{test_trailer}: {test}
Guard-Test: {guard}
Drop-When: {drop_when}
"""


def new(
    project: Project,
    package: str,
    version: str,
    slug: str,
    *,
    feature: bool = False,
    log: Callable[[str], None] = CONSOLE,
) -> None:
    line = project.line(package, version)
    if not SLUG.fullmatch(slug):
        raise PatchError(
            f"{slug!r} is not a patch slug (a number or file name of a patch is not one)",
            "use lower-case letters, digits, '.' and '-', not starting with a patch's four digits, e.g. "
            "fix-warmup-tp-plan",
        )
    edits = _edits(project, line)
    series = edits.series
    if any(p.slug == slug for p in series):
        raise PatchError(
            f"{line.key} already has a patch named {slug}",
            f"to change it: `nox -s refresh -- {line.package} {line.version} {slug}`; or pick another slug",
        )
    if not edits.edited:
        raise PatchError(
            f"overlay/{line.key}/ equals pristine + series: there is no edit to make a patch of",
            f"edit the fixed modules under overlay/{line.key}/{line.import_name}/ first; to patch a module no patch "
            f"touches yet, copy it there from the pinned wheel: unzip -p {fetch.fetch(line.package, line.wheel)} "
            f"{line.import_name}/<path> > overlay/{line.key}/{line.import_name}/<path>",
        )
    name = f"{len(series) + 1:04d}-{slug}.patch"
    func = slug.replace("-", "_").replace(".", "_")
    test = f"tests/proof/test_{func}.py"
    message = TEMPLATE.format(
        package=line.package,
        test_trailer="Feature-Test" if feature else "Proof-Test",
        test=test,
        guard=f"tests/guards/test_{func}.py",
        drop_when="pr-released pending" if feature else "proof-passes-upstream",
    )
    new_paths = [p for p in edits.edited if p not in {t for q in series for t in q.touched}]
    with WorkRepo.of_line(line, series, extra=new_paths) as work:
        gitops.write_files(work.path, dict(edits.edited))
        gitops.git(work.path, "add", "-A")
        gitops.commit(work.path, message)
        raw = gitops.format_patch(work.path)
    _check_result(edits, [(p.name, p.raw) for p in series] + [(name, raw)])
    written = stubs.write(
        project.root, line.package, name, slug, feature=feature, proof=test, guard=f"tests/guards/test_{func}.py"
    )
    (line.patch_dir / name).write_bytes(raw)
    series_file = line.patch_dir / "series"
    text = series_file.read_text()
    series_file.write_text(text + ("" if text.endswith("\n") or not text else "\n") + name + "\n")
    vendored.write(project, [line], log=lambda m: None)
    files = ", ".join(sorted(str(line.wheel_path(p)) for p in edits.edited))
    log(f"wrote {_rel(project, line.patch_dir / name)} from the edit of {files}")
    for rel, wrote in written:
        log(f"{'wrote the stub' if wrote else 'kept'} {rel}{'' if wrote else ' (it exists)'}")
    buildno.bump_unless_draft(project, line, log=log)
    log("next: docs/adding-a-fix.md, step 3: write the proof and see it fail on the pristine release (the build")
    log("      takes the draft), then the guards, the message (each TODO line) and upstream-pr/; `nox -s lint`")
    log("      refuses every stub and TODO line until it is written")
