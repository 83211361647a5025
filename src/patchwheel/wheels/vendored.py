"""The vendored fixed modules: ``overlay/<pkg>/<version>/<path in the package>``.

For every release line, the whole fixed file of each module its series touches (or creates), byte for byte as the
+fixed wheel installs it. They are generated, never written by hand: the sha256-pinned upstream wheel with the
series applied by the build's own apply step. Upstream's license headers stay as they are; beside them:

- ``LICENSE``: the license file the upstream wheel ships (its ``License-File``);
- ``VENDORED.json``: where the files come from (the wheel and its sha256, each patch and its sha256) and the
  sha256 of every file as it was written, so that an edit by hand is told apart from a file the series outgrew.

``overlay/NOTICE`` lists every line's origin and license. Three users:

- :func:`write` (``nox -s vendor``) writes every line and removes the folders of lines no longer pinned; it
  refuses to overwrite an edit that was not refreshed into its patch (``--force`` discards it);
- :func:`overlay_problems` (``nox -s lint``) fails when the committed files differ from pristine + series,
  naming each file;
- :func:`check_wheel` (the build's verify step) reads the rewritten wheel's patched files back and compares them
  with the overlay's bytes: a second check, independent of the reverse-apply.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

from ..config import Project, ReleaseLine
from ..errors import OverlayError
from ..names import VENDOR_RECORD, path_problem
from ..reporter import CONSOLE
from ..series import Patch, checked_series
from . import fetch, rewrite, zipwrite
from .apply import apply_line

LICENSE = "LICENSE"
NOTICE = "NOTICE"
_OWN = {VENDOR_RECORD, LICENSE}  # the folder's own files, next to the package's
_GENERATED_BY = "patchwheel vendor (nox -s vendor) from the pinned wheel and patches/{key}/series; do not edit"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Vendored:
    """What overlay/<pkg>/<version>/ must hold for one line: every file by its path in that folder."""

    line: ReleaseLine
    modules: dict[str, bytes]  # path in the package -> fixed bytes (a file the series deletes is not here)
    license: bytes | None
    record: bytes
    #: Each file the series touches, by its path in the wheel, as the pinned wheel has it (None: not there).
    pristine: dict[str, bytes | None] = field(default_factory=dict)
    series: tuple[Patch, ...] = ()  # the series it was made from

    @property
    def files(self) -> dict[str, bytes]:
        own = {VENDOR_RECORD: self.record} | ({LICENSE: self.license} if self.license is not None else {})
        return own | self.modules


def _license(entries: list[zipwrite.Entry]) -> tuple[bytes | None, str]:
    """The wheel's license file (METADATA's first License-File, under .dist-info/ or .dist-info/licenses/) and
    the license as METADATA names it."""
    by_name = {e.name: c for e in entries if (c := e.content) is not None}  # (the .dist-info files are)
    meta_name = next((n for n in by_name if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
    if meta_name is None:
        return None, "not stated"
    meta = HeaderParser().parsestr(by_name[meta_name].decode("utf-8", errors="replace"))
    stated = meta.get("License-Expression") or meta.get("License") or "not stated"
    distinfo = meta_name.rsplit("/", 1)[0]
    for name in meta.get_all("License-File") or []:
        for candidate in (f"{distinfo}/licenses/{name}", f"{distinfo}/{name}"):
            if candidate in by_name:
                return by_name[candidate], stated.strip()
    return None, stated.strip()


def generate(line: ReleaseLine, series: list[Patch] | None = None) -> Vendored:
    """pristine wheel + series -> the line's vendored files (the wheel is fetched and sha256-verified; only the
    members the series touches and the .dist-info files are inflated)."""
    series = checked_series(line, messages=False) if series is None else series
    touched = {w for p in series for t in p.touched if (w := line.wheel_path(t))}
    path, blob = fetch.fetch_verified(line.package, line.wheel)
    entries = rewrite.scan(path, blob, lambda name: name in touched or _in_distinfo(name))
    upstream = {e.name: e.content for e in entries if e.content is not None}
    patched = apply_line(line, series, upstream)
    modules = {w: d for w, d in sorted(patched.items()) if d is not None}
    license, stated = _license(entries)
    record = {
        "generated-by": _GENERATED_BY.format(key=line.key),
        "package": line.package,
        "version": line.version,
        "wheel": {"filename": line.wheel.filename, "sha256": line.wheel.sha256},
        "license": stated,
        "has-license-file": license is not None,
        "series": [{"name": p.name, "sha256": p.sha256} for p in series],
        "files": {w: _sha(d) for w, d in modules.items()},
    }
    record_bytes = (json.dumps(record, indent=1) + "\n").encode()
    pristine = {w: upstream.get(w) for w in sorted(patched)}
    return Vendored(line, modules, license, record_bytes, pristine, tuple(series))


def _in_distinfo(name: str) -> bool:
    """A member of the wheel's top-level .dist-info folder (METADATA and the license files :func:`_license` reads)."""
    return name.split("/", 1)[0].endswith(".dist-info")


def _on_disk(folder: Path) -> dict[str, Path]:
    """Every file in a line's folder by its relative path (bytecode caches left by running a module skipped)."""
    if not folder.is_dir():
        return {}
    return {
        p.relative_to(folder).as_posix(): p
        for p in sorted(folder.rglob("*"))
        if (p.is_file() or p.is_symlink()) and "__pycache__" not in p.relative_to(folder).parts
    }


def _recorded(folder: Path) -> dict[str, str]:
    """The sha256 of each module as ``vendor`` last wrote it (empty when VENDORED.json is missing or unreadable)."""
    try:
        files = json.loads((folder / VENDOR_RECORD).read_bytes()).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return files if isinstance(files, dict) else {}


def _rel(project: Project, path: Path) -> str:
    return path.relative_to(project.root).as_posix()


def _edited_hint(line: ReleaseLine) -> str:
    return (
        f"turn the edit into its patch with `nox -s refresh -- {line.package} {line.version} <patch>` (or into a new "
        f"patch: `nox -s new -- {line.package} {line.version} <slug>`), or discard it: `nox -s vendor -- --force`"
    )


#: What a file of a line's folder is, against what ``vendor`` would write (``want``) and what it wrote last time
#: (VENDORED.json): ``same``; ``missing``; ``stale`` (as written, but the series changed since); ``edited`` (changed
#: by hand on top of the current series: refresh takes it); ``edited-stale`` (changed by hand, and the series changed
#: that file since: refreshing it would undo the series' change); ``outgrown`` (written for a series that no longer
#: touches it); ``extra`` (not written by vendor: a new module, or a stray file); ``own`` (LICENSE or VENDORED.json,
#: differing).
STATES = ("same", "missing", "stale", "edited", "edited-stale", "outgrown", "extra", "own")


def classify(want: Vendored) -> dict[str, str]:
    """The state of every file that is in the line's folder or should be (:data:`STATES`)."""
    folder = want.line.vendor_dir
    have, recorded = _on_disk(folder), _recorded(folder)
    out = {}
    for rel in sorted(set(have) | set(want.files)):
        path = have.get(rel)
        data = None if path is None or path.is_symlink() else path.read_bytes()
        wanted = want.files.get(rel)
        if path is None:
            out[rel] = "missing"
        elif data is not None and data == wanted:
            out[rel] = "same"
        elif rel in _OWN:
            out[rel] = "own"
        elif data is not None and recorded.get(rel) == _sha(data):
            out[rel] = "stale" if wanted is not None else "outgrown"
        elif wanted is None:
            out[rel] = "extra"
        else:
            out[rel] = "edited" if recorded.get(rel) in (None, _sha(wanted)) else "edited-stale"
    return out


def _edited_stale_hint(line: ReleaseLine) -> str:
    return (
        "refreshing it would undo the series' change: move the file away, run `nox -s vendor`, and make the edit "
        f"again on the fresh copy (then `nox -s refresh -- {line.package} {line.version} <patch>`)"
    )


def differences(project: Project, want: Vendored) -> list[str]:
    """Each file of the line's folder that is missing, differs or should not be there, said so that the reader
    knows what to run."""
    line = want.line
    say = {
        "missing": "is missing: run `nox -s vendor`",
        "own": "differs from what `nox -s vendor` writes: run it",
        "stale": "is out of date: the series changed since it was written; run `nox -s vendor`",
        "edited": f"was edited and differs from pristine {line.package} {line.version} + the series: "
        + _edited_hint(line),
        "edited-stale": "was edited, and the series changed it since `nox -s vendor` wrote it: "
        + _edited_stale_hint(line),
        "outgrown": f"is not a file the series of {line.key} makes any more: run `nox -s vendor`",
        "extra": f"is not a file the series of {line.key} makes: a new module goes into a patch with "
        "`nox -s refresh` or `nox -s new`; anything else, delete it",
    }
    return [
        f"{_rel(project, line.vendor_dir / rel)} {say[state]}"
        for rel, state in classify(want).items()
        if state != "same"
    ]


def notice(records: list[dict]) -> bytes:
    """overlay/NOTICE from every line's VENDORED.json record."""
    lines = [
        "Vendored fixed modules",
        "======================",
        "",
        "The folders overlay/<package>/<version>/ hold, for each release line, the whole fixed file of every",
        "module its patch series (patches/<package>/<version>/series) changes or adds, at its path inside the",
        "installed package. Each is upstream's file from the wheel named below (verified by its sha256) with the",
        "series applied: the same bytes the <version>+fixed wheel installs. They are generated by",
        "`nox -s vendor`, never edited by hand: a change is made in the patch (edit the file, then",
        "`nox -s refresh -- <package> <version> <patch>`), and `nox -s lint` fails when a file differs.",
        "",
        "The files keep upstream's copyright and license headers. They and the patches that change them are",
        "under upstream's license; each folder holds the license file its wheel ships (LICENSE) and a record of",
        "where its files come from (VENDORED.json).",
        "",
    ]
    for r in records:
        lic = f" (overlay/{r['package']}/{r['version']}/{LICENSE})" if r.get("has-license-file") else ""
        lines += [
            f"{r['package']} {r['version']}",
            f"  from:    {r['wheel']['filename']}",
            f"  sha256:  {r['wheel']['sha256']}",
            f"  license: {r['license']}{lic}",
            "  files:",
            *([f"    {rel}" for rel in r["files"]] or ["    none (an empty series)"]),
            "",
        ]
    return "\n".join(lines).encode()


def _stale_folders(project: Project) -> list[Path]:
    """overlay/<pkg>/<version>/ folders of lines that are no longer pinned."""
    pinned = {line.vendor_dir for line in project.all_lines()}
    return [
        d
        for pkg in project.packages()
        for d in sorted(project.vendor_root(pkg).iterdir())
        if d.is_dir() and d not in pinned and not d.name.startswith(".")
    ]


def _safe(rel: str) -> None:
    if problem := path_problem(rel):
        raise OverlayError(f"refusing to write {rel!r} into overlay/: {problem}", "report this")


def _replace_folder(folder: Path, files: dict[str, bytes]) -> None:
    """Write a line's folder whole: into a sibling, then swapped in, so a failure leaves the old one as it was."""
    tmp = folder.with_name(f".{folder.name}.partial")
    old = folder.with_name(f".{folder.name}.old")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
    try:
        for rel, data in files.items():
            _safe(rel)
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(data)
        if folder.exists():
            folder.rename(old)
        try:
            tmp.rename(folder)
        except BaseException:
            if old.exists():
                old.rename(folder)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def _records(project: Project, made: list[Vendored]) -> list[dict]:
    """Every pinned line's record: from ``made`` where it was just generated, else from its VENDORED.json (a line
    without a readable one is generated)."""
    fresh = {v.line.key: json.loads(v.record) for v in made}
    out = []
    for line in project.all_lines():
        if line.key not in fresh:
            try:
                fresh[line.key] = json.loads((line.vendor_dir / VENDOR_RECORD).read_bytes())
            except (OSError, ValueError):
                fresh[line.key] = json.loads(generate(line).record)
        out.append(fresh[line.key])
    return out


def write(
    project: Project,
    lines: list[ReleaseLine] | None = None,
    *,
    force: bool = False,
    log: Callable[[str], None] = CONSOLE,
) -> list[str]:
    """Write the vendored files of ``lines`` (default: every line; then the folders of lines no longer pinned are
    removed) and overlay/NOTICE. Returns the paths written or removed.

    An edit not yet refreshed into its patch is kept (``edited``), and so is a file vendor did not write (a new
    module): only ``force`` overwrites or removes them. An edit of a file the series changed since
    (``edited-stale``), or of a line no longer pinned, stops the command before anything is written, unless
    ``force``."""
    every = lines is None
    made = [generate(line) for line in (project.all_lines() if lines is None else lines)]
    states = {v.line.key: classify(v) for v in made}
    links = [
        f"overlay/{v.line.key}/{rel}"
        for v in made
        for rel, st in states[v.line.key].items()
        if st in ("edited", "extra") and (v.line.vendor_dir / rel).is_symlink()
    ]
    if links and not force:  # kept files are read back: never through a link
        raise OverlayError(
            f"{', '.join(links)} {'is a symbolic link' if len(links) == 1 else 'are symbolic links'}: "
            "vendor does not read through links",
            "replace each by a regular file, or run `nox -s vendor -- --force`: it writes what the series makes "
            "and removes the rest",
        )
    blocked = [f"overlay/{key}/{rel}" for key, s in states.items() for rel, st in s.items() if st == "edited-stale"]
    stale_dirs = _stale_folders(project) if every else []
    for d in stale_dirs:
        recorded = _recorded(d)
        blocked += [
            f"{_rel(project, p)} (its line is no longer pinned)"
            for rel, p in _on_disk(d).items()
            if rel not in _OWN and (p.is_symlink() or recorded.get(rel) != _sha(p.read_bytes()))
        ]
    if blocked and not force:
        raise OverlayError(
            "edited by hand, and vendor would overwrite or remove them: " + ", ".join(blocked),
            "move each file away, run `nox -s vendor`, and make the edit again on the fresh copy; or "
            "`nox -s vendor -- --force` discards the edits",
        )
    changed = []
    for v in made:
        files, kept = dict(v.files), []
        for rel, state in states[v.line.key].items():
            if state in ("edited", "extra") and not force:
                files[rel] = (v.line.vendor_dir / rel).read_bytes()
                kept.append(rel)
        on_disk = {rel: None if p.is_symlink() else p.read_bytes() for rel, p in _on_disk(v.line.vendor_dir).items()}
        if on_disk != files:
            _replace_folder(v.line.vendor_dir, files)
            changed.append(f"overlay/{v.line.key}/")
            log(f"{v.line.key}: wrote {len(v.modules)} module(s)")
        else:
            log(f"{v.line.key}: up to date ({len(v.modules)} module(s))")
        if kept:
            log(f"  kept, not refreshed into a patch yet: {', '.join(kept)}")
    for stale in stale_dirs:
        shutil.rmtree(stale)
        changed.append(_rel(project, stale) + "/")
        log(f"removed {_rel(project, stale)}/: that line is no longer pinned")
    text = notice(_records(project, made))
    path = project.notice
    if not path.is_file() or path.read_bytes() != text:
        path.write_bytes(text)
        changed.append(_rel(project, path))
    return changed


def overlay_problems(
    project: Project,
    lines: list[ReleaseLine] | None = None,
    generated: Callable[[ReleaseLine], Vendored] = generate,
) -> list[str]:
    """Every difference between the committed overlay and pristine + series (empty: all equal). ``generated``: what
    :func:`generate` makes of a line (lint hands in what it made for the signature check)."""
    every = lines is None
    made = [generated(line) for line in (project.all_lines() if lines is None else lines)]
    problems = [p for v in made for p in differences(project, v)]
    if every:
        problems += [
            f"{_rel(project, d)}/ belongs to no pinned line: run `nox -s vendor`" for d in _stale_folders(project)
        ]
        path = project.notice
        if not path.is_file() or path.read_bytes() != notice([json.loads(v.record) for v in made]):
            problems.append("overlay/NOTICE differs from what `nox -s vendor` writes: run it")
    return problems


def check_wheel(line: ReleaseLine, built: Path, patched: dict[str, bytes | None], in_wheel: dict) -> None:
    """The rewritten wheel's patched files (``in_wheel``: as verify read them back from it) equal
    overlay/<pkg>/<version>/."""
    folder = line.vendor_dir
    have = {rel for rel in _on_disk(folder) if rel not in _OWN}
    hint = (
        f"regenerate the vendored modules (`nox -s vendor`), or, if overlay/{line.key}/ was edited, turn the "
        f"edit into its patch first (`nox -s refresh -- {line.package} {line.version} <patch>`)"
    )
    for rel in sorted(patched):
        data = in_wheel.get(rel)
        path = folder / rel
        if data is None:
            if rel in have:
                raise OverlayError(f"{built.name}: the series deletes {rel}, but overlay/{line.key}/ has it", hint)
            continue
        if not path.is_file():
            raise OverlayError(f"{built.name}: {rel} is patched, but overlay/{line.key}/{rel} is missing", hint)
        if path.read_bytes() != data:
            raise OverlayError(f"{built.name}: {rel} differs from overlay/{line.key}/{rel}", hint)
    if extra := sorted(have - set(patched)):
        raise OverlayError(
            f"{built.name}: overlay/{line.key}/ has files the series does not patch: {', '.join(extra)}", hint
        )
