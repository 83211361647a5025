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
- :func:`check` (``nox -s lint``) fails when the committed files differ from pristine + series, naming each file;
- :func:`check_wheel` (the build's verify step) reads the rewritten wheel's patched files back and compares them
  with the overlay's bytes: a second check, independent of the reverse-apply.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from . import fetch, rewrite
from .apply import apply_line
from .config import Overlay, ReleaseLine, path_problem
from .errors import PatchwheelError
from .patches import Patch, load_series

RECORD = "VENDORED.json"
LICENSE = "LICENSE"
NOTICE = "NOTICE"
_OWN = {RECORD, LICENSE}  # the folder's own files, next to the package's
_GENERATED_BY = "patchwheel vendor (nox -s vendor) from the pinned wheel and patches/{key}/series; do not edit"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Vendored:
    """What overlay/<pkg>/<version>/ must hold for one line: every file by its path in that folder."""

    line: ReleaseLine
    modules: dict[str, bytes]  # path in the package -> fixed bytes (a file the series deletes is not here)
    license: bytes | None
    license_name: str  # as the wheel's METADATA states it
    record: bytes

    @property
    def files(self) -> dict[str, bytes]:
        own = {RECORD: self.record} | ({LICENSE: self.license} if self.license is not None else {})
        return own | self.modules


def _license(entries: list[rewrite.Entry]) -> tuple[bytes | None, str]:
    """The wheel's license file (METADATA's first License-File, under .dist-info/ or .dist-info/licenses/) and
    the license as METADATA names it."""
    by_name = {e.name: e.data for e in entries}
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
    """pristine wheel + series -> the line's vendored files (the wheel is fetched and sha256-verified)."""
    series = load_series(line, messages=False) if series is None else series
    entries = rewrite.read(fetch.fetch(line.package, line.wheel))
    patched = apply_line(line, series, {e.name: e.data for e in entries})
    modules = {w: d for w, d in sorted(patched.items()) if d is not None}
    license, stated = _license(entries)
    record = {
        "generated-by": _GENERATED_BY.format(key=line.key),
        "package": line.package,
        "version": line.version,
        "wheel": {"filename": line.wheel.filename, "sha256": line.wheel.sha256},
        "license": stated,
        "series": [{"name": p.name, "sha256": p.sha256} for p in series],
        "files": {w: _sha(d) for w, d in modules.items()},
    }
    return Vendored(line, modules, license, stated, (json.dumps(record, indent=1) + "\n").encode())


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
        files = json.loads((folder / RECORD).read_bytes()).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return files if isinstance(files, dict) else {}


def _rel(overlay: Overlay, path: Path) -> str:
    return path.relative_to(overlay.root).as_posix()


def _edited_hint(line: ReleaseLine) -> str:
    return (
        f"turn the edit into its patch with `nox -s refresh -- {line.package} {line.version} <patch>` (or into a new "
        f"patch: `nox -s new -- {line.package} {line.version} <slug>`), or discard it: `nox -s vendor -- --force`"
    )


def differences(overlay: Overlay, want: Vendored) -> list[str]:
    """Each file of the line's folder that is missing, differs or should not be there, said so that the reader
    knows what to run."""
    line, folder = want.line, want.line.vendor_dir
    have, recorded = _on_disk(folder), _recorded(folder)
    out = []
    for rel, data in want.files.items():
        path = folder / rel
        if rel not in have:
            out.append(f"{_rel(overlay, path)} is missing: run `nox -s vendor`")
        elif path.is_symlink() or path.read_bytes() != data:
            if rel in _OWN:
                out.append(f"{_rel(overlay, path)} differs from what `nox -s vendor` writes: run it")
            elif recorded.get(rel) != _sha(path.read_bytes()):
                out.append(
                    f"{_rel(overlay, path)} was edited and differs from pristine {line.package} {line.version} + "
                    f"the series: {_edited_hint(line)}"
                )
            else:
                out.append(
                    f"{_rel(overlay, path)} is out of date: the series changed since it was written; run "
                    "`nox -s vendor`"
                )
    for rel in sorted(set(have) - set(want.files)):
        out.append(f"{_rel(overlay, folder / rel)} is not a file the series of {line.key} makes: run `nox -s vendor`")
    return out


def _edits(want: Vendored) -> list[str]:
    """Modules changed by hand since ``vendor`` wrote them, that ``want`` would overwrite or remove."""
    folder = want.line.vendor_dir
    have, recorded = _on_disk(folder), _recorded(folder)
    edited = []
    for rel, path in have.items():
        if rel in _OWN or path.is_symlink():
            continue
        data = path.read_bytes()
        if data != want.modules.get(rel) and recorded.get(rel) != _sha(data):
            edited.append(rel)
    return edited


def notice(overlay: Overlay, made: list[Vendored]) -> bytes:
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
    for v in made:
        line = v.line
        lines += [
            f"{line.package} {line.version}",
            f"  from:    {line.wheel.filename}",
            f"  sha256:  {line.wheel.sha256}",
            f"  license: {v.license_name}"
            + (f" (overlay/{line.package}/{line.version}/{LICENSE})" if v.license is not None else ""),
            "  files:",
            *([f"    {rel}" for rel in v.modules] or ["    none (an empty series)"]),
            "",
        ]
    return "\n".join(lines).encode()


def _stale_folders(overlay: Overlay) -> list[Path]:
    """overlay/<pkg>/<version>/ folders of lines that are no longer pinned."""
    pinned = {line.vendor_dir for line in overlay.all_lines()}
    return [
        d
        for pkg in overlay.packages()
        for d in sorted((overlay.root / "overlay" / pkg).iterdir())
        if d.is_dir() and d not in pinned and not d.name.startswith(".")
    ]


def _safe(rel: str) -> None:
    if problem := path_problem(rel):
        raise PatchwheelError(f"refusing to write {rel!r} into overlay/: {problem}", "report this")


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


def write(
    overlay: Overlay,
    lines: list[ReleaseLine] | None = None,
    *,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> list[str]:
    """Write the vendored files of ``lines`` (default: every line; then stale folders are removed too) and
    overlay/NOTICE. Returns the paths written or removed. Nothing is written when a line fails to generate, or
    when an edit would be lost without ``force``."""
    every = lines is None
    todo = overlay.all_lines() if lines is None else lines
    made = [generate(line) for line in todo]
    edited = {v.line.key: e for v in made if (e := _edits(v))}
    if edited and not force:
        where = "; ".join(f"overlay/{key}/: {', '.join(files)}" for key, files in edited.items())
        first = next(v.line for v in made if v.line.key in edited)
        raise PatchwheelError(f"edited by hand and not refreshed into a patch: {where}", _edited_hint(first))
    changed = []
    for v in made:
        diff = differences(overlay, v)
        if diff:
            _replace_folder(v.line.vendor_dir, v.files)
            changed.append(f"overlay/{v.line.key}/")
            log(f"{v.line.key}: wrote {len(v.modules)} module(s) ({len(diff)} change(s))")
        else:
            log(f"{v.line.key}: up to date ({len(v.modules)} module(s))")
    if every:
        for stale in _stale_folders(overlay):
            shutil.rmtree(stale)
            changed.append(_rel(overlay, stale) + "/")
            log(f"removed {_rel(overlay, stale)}/: that line is no longer pinned")
    all_made = made if every else [generate(line) for line in overlay.all_lines()]
    text = notice(overlay, all_made)
    path = overlay.root / "overlay" / NOTICE
    if not path.is_file() or path.read_bytes() != text:
        path.write_bytes(text)
        changed.append(_rel(overlay, path))
    return changed


def check(overlay: Overlay, lines: list[ReleaseLine] | None = None) -> list[str]:
    """Every difference between the committed overlay and pristine + series (empty: all equal)."""
    every = lines is None
    made = [generate(line) for line in (overlay.all_lines() if lines is None else lines)]
    problems = [p for v in made for p in differences(overlay, v)]
    if every:
        problems += [
            f"{_rel(overlay, d)}/ belongs to no pinned line: run `nox -s vendor`" for d in _stale_folders(overlay)
        ]
        path = overlay.root / "overlay" / NOTICE
        if not path.is_file() or path.read_bytes() != notice(overlay, made):
            problems.append("overlay/NOTICE differs from what `nox -s vendor` writes: run it")
    return problems


def check_wheel(line: ReleaseLine, built: Path, patched: dict[str, bytes | None]) -> None:
    """The rewritten wheel's patched files, read back from the wheel, equal overlay/<pkg>/<version>/."""
    with zipfile.ZipFile(built) as zf:  # only the patched members: not a second read of the whole wheel
        names = set(zf.namelist())
        in_wheel = {rel: zf.read(rel) for rel in patched if rel in names}
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
                raise PatchwheelError(f"{built.name}: the series deletes {rel}, but overlay/{line.key}/ has it", hint)
            continue
        if not path.is_file():
            raise PatchwheelError(f"{built.name}: {rel} is patched, but overlay/{line.key}/{rel} is missing", hint)
        if path.read_bytes() != data:
            raise PatchwheelError(f"{built.name}: {rel} differs from overlay/{line.key}/{rel}", hint)
    if extra := sorted(have - set(patched)):
        raise PatchwheelError(
            f"{built.name}: overlay/{line.key}/ has files the series does not patch: {', '.join(extra)}", hint
        )
