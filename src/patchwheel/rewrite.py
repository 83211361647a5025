"""Rewrite an upstream wheel into its +fixed build.

Everything except the patched files, ``<pkg>/__init__.py`` (``__version__``), METADATA's ``Version:`` line, RECORD
and our added manifest is copied as it is: same content, same timestamp and mode, upstream's order. Inputs fully
determine the output bytes, so two builds give byte-identical wheels.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
import zipfile
from dataclasses import dataclass

from .config import ReleaseLine
from .errors import PatchwheelError

MANIFEST_NAME = "overlay-fixes.json"
COMPRESSLEVEL = 6


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@dataclass(frozen=True)
class WheelNames:
    dist: str  # distribution part of the file name, e.g. "transformers"
    old_distinfo: str
    new_distinfo: str
    filename: str  # the +fixed wheel's file name


def wheel_names(line: ReleaseLine) -> WheelNames:
    name, version, rest = line.wheel.filename.split("-", 2)
    if version != line.version:
        raise PatchwheelError(f"wheel {line.wheel.filename} is not version {line.version}", "fix the pin")
    fixed = line.fixed_version
    return WheelNames(name, f"{name}-{version}.dist-info", f"{name}-{fixed}.dist-info", f"{name}-{fixed}-{rest}")


def _replace_once(data: bytes, pattern: str, repl: str, what: str) -> bytes:
    new, n = re.subn(pattern.encode(), repl.encode(), data, flags=re.M)
    if n != 1:
        raise PatchwheelError(f"expected exactly one {what}, found {n}",
                              "upstream changed its layout: extend patchwheel.rewrite for this release")
    return new


def _info(template: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    zi = zipfile.ZipInfo(name, template.date_time)
    zi.external_attr = template.external_attr
    zi.create_system = template.create_system
    zi.compress_type = template.compress_type
    return zi


def plan(line: ReleaseLine, upstream: list[tuple[zipfile.ZipInfo, bytes]], patched: dict[str, bytes | None],
         manifest: dict) -> tuple[WheelNames, list[tuple[zipfile.ZipInfo, bytes]]]:
    """Pure: the +fixed wheel's entries, in order, from upstream's entries and the patched package files.

    ``patched`` maps wheel paths (``transformers/x.py``) to new bytes, None meaning deleted.
    """
    names = wheel_names(line)
    esc = re.escape(line.version)
    out: list[tuple[zipfile.ZipInfo, bytes]] = []
    record_at = metadata_info = None
    existing = {zi.filename for zi, _ in upstream}
    created = sorted(p for p, d in patched.items() if d is not None and p not in existing)
    for zi, data in upstream:
        name = zi.filename
        if name.startswith(names.old_distinfo + "/"):
            name = names.new_distinfo + name[len(names.old_distinfo):]
            if name == f"{names.new_distinfo}/RECORD":
                record_at = len(out)
                continue
            if name == f"{names.new_distinfo}/METADATA":
                data = _replace_once(data, rf"^Version: {esc}\r?$", f"Version: {line.fixed_version}",
                                     f"'Version: {line.version}' line in METADATA")
                metadata_info = zi
        elif zi.filename in patched:
            if patched[zi.filename] is None:
                continue
            data = patched[zi.filename]  # type: ignore[assignment]
        if zi.filename == f"{line.import_name}/__init__.py":
            data = _replace_once(data, rf"""^__version__\s*=\s*(['"]){esc}\1""",
                                 f'__version__ = "{line.fixed_version}"', f"__version__ = \"{line.version}\"")
        if created and name.startswith(names.new_distinfo + "/") and not any(
                e.filename.startswith(names.new_distinfo) for e, _ in out):
            for path in created:  # files new to the package go right before the dist-info folder
                out.append((_info(zi, path), patched[path]))  # type: ignore[arg-type]
        out.append((_info(zi, name), data))
    if record_at is None or metadata_info is None:
        raise PatchwheelError(f"{line.wheel.filename} has no {names.old_distinfo}/RECORD or METADATA",
                              "the pinned file is not a valid wheel")
    manifest_bytes = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    out.insert(record_at, (_info(metadata_info, f"{names.new_distinfo}/{MANIFEST_NAME}"), manifest_bytes))
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    for zi, data in out:
        writer.writerow([zi.filename, record_hash(data), len(data)])
    record_name = f"{names.new_distinfo}/RECORD"
    writer.writerow([record_name, "", ""])
    record_template = next(zi for zi, _ in upstream if zi.filename == f"{names.old_distinfo}/RECORD")
    out.insert(record_at + 1, (_info(record_template, record_name), rows.getvalue().encode()))
    return names, out


def write(entries: list[tuple[zipfile.ZipInfo, bytes]], dest) -> None:
    with zipfile.ZipFile(dest, "w") as zf:
        for zi, data in entries:
            zf.writestr(zi, data, compresslevel=COMPRESSLEVEL)


def read(path) -> list[tuple[zipfile.ZipInfo, bytes]]:
    with zipfile.ZipFile(path) as zf:
        return [(zi, zf.read(zi)) for zi in zf.infolist()]
