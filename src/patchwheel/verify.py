"""Check a built +fixed wheel against its upstream wheel and its patch series.

1. RECORD lists every entry once, with the right sha256 and size (pip and uv do not check this at install).
2. The file list equals upstream's (dist-info renamed) plus our manifest and files the patches create.
3. Only the expected entries differ from upstream: patched files, ``__init__.py``, METADATA, RECORD, and WHEEL
   by its ``Build:`` line alone (the file name's build tag).
4. Every patch is present: undoing the series, last patch first, restores upstream's bytes exactly.
5. The version agrees in the file name, the dist-info name, METADATA and ``__version__``.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

from . import buildno
from .apply import reverse_series
from .config import ReleaseLine
from .errors import ApplyError, VerifyError
from .patches import Patch
from .rewrite import FIXES_MANIFEST, Entry, read, record_hash, wheel_names, with_build_line


def check_record(entries: list[Entry], record_name: str) -> list[str]:
    data = {e.name: e.data for e in entries}
    problems = []
    if record_name not in data:
        return [f"no {record_name}"]
    rows = list(csv.reader(io.StringIO(data[record_name].decode())))
    listed = {}
    for row in rows:
        if len(row) != 3:
            problems.append(f"RECORD row {row!r} does not have 3 fields")
            continue
        if row[0] in listed:
            problems.append(f"RECORD lists {row[0]} twice")
        listed[row[0]] = row
    for name, d in data.items():
        if name == record_name:
            continue
        found = listed.get(name)
        if found is None:
            problems.append(f"{name} is not in RECORD")
        elif found[1] != record_hash(d) or found[2] != str(len(d)):
            problems.append(f"RECORD hash or size of {name} is wrong")
    problems += [f"RECORD lists {n}, which is not in the wheel" for n in listed if n not in data]
    return problems


def verify(
    line: ReleaseLine, built: Path, upstream_wheel: Path, patches: list[Patch], upstream: list[Entry] | None = None
) -> dict:
    """Raise PatchwheelError listing every problem; return the manifest the wheel carries. ``upstream``: the
    upstream wheel's members where the caller has read them already (the build has)."""
    names = wheel_names(line)
    if built.name != names.filename:
        raise VerifyError(f"{built.name} should be named {names.filename}", "rebuild")
    new = read(built)
    old = upstream if upstream is not None else read(upstream_wheel)
    new_data = {e.name: e.data for e in new}
    problems = check_record(new, f"{names.new_distinfo}/RECORD")

    def renamed(n: str) -> str:
        return names.new_distinfo + n[len(names.old_distinfo) :] if n.startswith(names.old_distinfo + "/") else n

    old_data = {renamed(e.name): e.data for e in old}
    manifest_path = f"{names.new_distinfo}/{FIXES_MANIFEST}"
    manifest = json.loads(new_data.get(manifest_path, b"{}") or b"{}")
    # (lint guarantees every touched path maps into the wheel)
    patched_paths = {w for patch in patches for p in patch.touched if (w := line.wheel_path(p)) is not None}
    wheel_file = f"{names.new_distinfo}/WHEEL"
    expected_changed = {
        f"{line.import_name}/__init__.py",
        f"{names.new_distinfo}/METADATA",
        f"{names.new_distinfo}/RECORD",
        wheel_file,
    } | patched_paths
    tag = buildno.tag(line)
    if wheel_file in old_data and new_data.get(wheel_file) != with_build_line(old_data[wheel_file], tag):
        problems.append(f"{wheel_file} is not upstream's with the Build line of build tag {tag or '(none)'}")
    added = set(new_data) - set(old_data)
    removed = set(old_data) - set(new_data)
    problems += [f"unexpected new entry {n}" for n in sorted(added - patched_paths - {manifest_path})]
    problems += [f"entry {n} is missing" for n in sorted(removed - patched_paths)]
    if manifest_path not in new_data:
        problems.append(f"no {manifest_path}")
    for n in sorted(set(new_data) & set(old_data)):
        if new_data[n] != old_data[n] and n not in expected_changed:
            problems.append(f"{n} differs from upstream but no patch touches it")
    for n in sorted(patched_paths & set(old_data) & set(new_data)):
        if new_data[n] == old_data[n]:
            problems.append(f"{n} is touched by the series but identical to upstream")
    # Every patch present: reversing the whole series must give back upstream's bytes.
    touched = sorted({p for patch in patches for p in patch.touched})
    if patches:
        now = {p: new_data.get(line.wheel_path(p)) for p in touched}  # type: ignore[arg-type]
        try:
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
