"""Check a built +fixed wheel against its upstream wheel and its patch series.

1. RECORD lists every entry once, with the right sha256 and size (pip and uv do not check this at install).
2. The file list equals upstream's (dist-info renamed) plus our manifest, our SBOM (made from the manifest: it must
   say what the manifest says) and files the patches create.
3. Only the expected entries differ from upstream: patched files, ``__init__.py``, METADATA, RECORD, and WHEEL
   by its ``Build:`` line alone (the file name's build tag).
4. Every patch is present: undoing the series, last patch first, restores upstream's bytes exactly.
5. The version agrees in the file name, the dist-info name, METADATA and ``__version__``.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from ..config import ReleaseLine
from ..errors import ApplyError, VerifyError
from ..probes import manifest as fixes
from ..series import Patch
from . import sbom
from .apply import reverse_series
from .rewrite import (
    Members,
    WheelNames,
    read,
    record_hash,
    same_member,
    sbom_of,
    scan,
    wheel_names,
    with_build_line,
)
from .undo import undo_series
from .zipwrite import Entry


def check_record(data: Mapping[str, bytes], record_name: str, row: Callable[[str], tuple[str, str]]) -> list[str]:
    """RECORD (in ``data``) lists every member once, with its hash and size: ``row(name)`` gives them."""
    problems = []
    if record_name not in data:
        return [f"no {record_name}"]
    rows = list(csv.reader(io.StringIO(data[record_name].decode())))
    listed = {}
    for written in rows:
        if len(written) != 3:
            problems.append(f"RECORD row {written!r} does not have 3 fields")
            continue
        if written[0] in listed:
            problems.append(f"RECORD lists {written[0]} twice")
        listed[written[0]] = written
    for name in data:
        if name == record_name:
            continue
        found = listed.get(name)
        if found is None:
            problems.append(f"{name} is not in RECORD")
        elif (found[1], found[2]) != row(name):
            problems.append(f"RECORD hash or size of {name} is wrong")
    problems += [f"RECORD lists {n}, which is not in the wheel" for n in listed if n not in data]
    return problems


def verify(
    line: ReleaseLine,
    built: Path,
    upstream_wheel: Path,
    patches: list[Patch],
    upstream: list[Entry] | None = None,
    *,
    built_bytes: bytes | None = None,
    upstream_rows: dict[str, tuple[str, str]] | None = None,
    files: dict[str, bytes | None] | None = None,
    names: WheelNames | None = None,
) -> dict:
    """Raise PatchwheelError listing every problem; return the manifest the wheel carries. ``upstream``: the
    upstream wheel's members where the caller has read them already (the build has: those it did not inflate
    have ``upstream_rows``, upstream's RECORD rows, audited); ``built_bytes``: the built wheel's bytes, where the
    caller has read them; ``files`` is given the patched files as the built wheel holds them; ``names``: the line's
    :func:`wheel_names`, where the caller has them.

    A member whose compressed bytes, method, CRC and sizes are upstream's holds upstream's content, and is not
    inflated; every other member is, once."""
    names = names or wheel_names(line, patches)
    if built.name != names.filename:
        raise VerifyError(f"{built.name} should be named {names.filename}", "rebuild")
    new = scan(built, built.read_bytes() if built_bytes is None else built_bytes, lambda name: False)
    old = upstream if upstream is not None else read(upstream_wheel)

    def renamed(n: str) -> str:
        return names.new_distinfo + n[len(names.old_distinfo) :] if n.startswith(names.old_distinfo + "/") else n

    new_data, old_data = Members(built, new), Members(upstream_wheel, old, renamed)
    same = {n for n, e in new_data.entries.items() if n in old_data and same_member(e, old_data.entries[n])}

    def row(name: str) -> tuple[str, str]:
        e = old_data.entries[name] if name in same else new_data.entries[name]
        if e.content is None and name in same and upstream_rows is not None and e.name in upstream_rows:
            return upstream_rows[e.name]
        data = old_data[name] if name in same else new_data[name]
        return record_hash(data), str(len(data))

    problems = check_record(new_data, f"{names.new_distinfo}/RECORD", row)
    manifest_path = f"{names.new_distinfo}/{fixes.NAME}"
    manifest: dict = {}
    if new_data.get(manifest_path):
        try:
            manifest = fixes.loads(new_data[manifest_path])
        except ValueError as exc:
            problems.append(f"{manifest_path} cannot be read: {exc}")
    # (lint guarantees every touched path maps into the wheel)
    patched_paths = {w for patch in patches for p in patch.touched if (w := line.wheel_path(p)) is not None}
    wheel_file = f"{names.new_distinfo}/WHEEL"
    expected_changed = {
        f"{line.import_name}/__init__.py",
        f"{names.new_distinfo}/METADATA",
        f"{names.new_distinfo}/RECORD",
        wheel_file,
    } | patched_paths
    tag = names.tag
    if wheel_file in old_data and new_data.get(wheel_file) != with_build_line(old_data[wheel_file], tag):
        problems.append(f"{wheel_file} is not upstream's with the Build line of build tag {tag or '(none)'}")
    added = set(new_data) - set(old_data)
    removed = set(old_data) - set(new_data)
    bom_path = sbom.member(names.new_distinfo)
    problems += [f"unexpected new entry {n}" for n in sorted(added - patched_paths - {manifest_path, bom_path})]
    problems += [f"entry {n} is missing" for n in sorted(removed - patched_paths)]
    if manifest_path not in new_data:
        problems.append(f"no {manifest_path}")
    elif bom_path not in new_data:
        problems.append(f"no {bom_path}")
    elif manifest and f"{names.new_distinfo}/METADATA" in old_data:  # (upstream's, renamed)
        # the SBOM says what the manifest says (one source), of the series this wheel was built from
        if new_data[bom_path] != sbom_of(line, patches, manifest, old_data[f"{names.new_distinfo}/METADATA"], names):
            problems.append(f"{bom_path} is not the SBOM of this line's manifest and series")
    for n in sorted(set(new_data) & set(old_data) - same):
        if n not in expected_changed and new_data[n] != old_data[n]:
            problems.append(f"{n} differs from upstream but no patch touches it")
    for n in sorted(patched_paths & set(old_data) & set(new_data)):
        if n in same or new_data[n] == old_data[n]:
            problems.append(f"{n} is touched by the series but identical to upstream")
    # Every patch present: reversing the whole series must give back upstream's bytes.
    touched = sorted({p for patch in patches for p in patch.touched})
    if patches:
        now = {p: new_data.get(line.wheel_path(p)) for p in touched}  # type: ignore[arg-type]
        if files is not None:
            files.update({line.wheel_path(p): d for p, d in now.items()})  # type: ignore[misc]
        back = undo_series(patches, now)  # in memory; it can only accept: git has the last word
        try:
            if back is None or any(back[p] != old_data.get(line.wheel_path(p)) for p in touched):  # type: ignore[arg-type]
                back = reverse_series(patches, now)
        except ApplyError as exc:
            problems.append(exc.message)
        else:
            for p in touched:
                if back[p] != old_data.get(line.wheel_path(p)):  # type: ignore[arg-type]
                    problems.append(f"undoing the series does not restore upstream's {p}")
    meta = new_data.get(f"{names.new_distinfo}/METADATA", b"").decode()
    if not re.search(rf"^Version: {re.escape(line.fixed_version)}$", meta, re.M):
        problems.append(f"METADATA does not say Version: {line.fixed_version}")
    init = new_data.get(f"{line.import_name}/__init__.py", b"").decode()
    if f'__version__ = "{line.fixed_version}"' not in init:
        problems.append(f"{line.import_name}/__init__.py does not set __version__ = {line.fixed_version!r}")
    want = [p.name for p in patches]
    if [p.get("name") for p in manifest.get("patches", [])] != want:
        problems.append(
            f"the manifest lists patches {[p.get('name') for p in manifest.get('patches', [])]}, the series {want}"
        )
    if problems:
        raise VerifyError(
            f"verification of {built.name} failed:\n  - " + "\n  - ".join(problems),
            "do not publish this wheel; rebuild from a clean cache and report the problem",
        )
    return manifest
