"""Rewrite an upstream wheel into its +fixed build.

Everything except the patched files, ``<pkg>/__init__.py`` (``__version__``), METADATA's ``Version:`` line, RECORD
and our added manifest is copied as it is: the same compressed bytes, timestamp and mode, in upstream's order.
Only changed entries are compressed anew (fixed level). Inputs fully determine the output bytes, so two builds give
byte-identical wheels.

``zipfile`` cannot copy an entry's compressed bytes without inflating and deflating them again (0.75 s of the
1.2 s a transformers rewrite took), so this module reads and writes the zip records itself: plain PKZIP, no zip64,
no encryption; anything else is refused with an error.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass

from . import buildno
from .config import ReleaseLine
from .errors import VerifyError
from .names import FIXES_MANIFEST, path_problem, wheel_name_version

COMPRESSLEVEL = 6
#: Bounds on what reading a wheel inflates (a wheel whose sha256 matches its index listing may still be a zip bomb):
#: transformers' largest member is under 1 MiB and all of it under 100 MiB uncompressed.
MAX_MEMBER_SIZE = 256 * 1024 * 1024
MAX_TOTAL_SIZE = 1024 * 1024 * 1024


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@dataclass(frozen=True)
class WheelNames:
    dist: str  # distribution part of the file name, e.g. "transformers"
    old_distinfo: str
    new_distinfo: str
    filename: str  # the +fixed wheel's file name


def wheel_names(line: ReleaseLine) -> WheelNames:
    """The upstream wheel's names and the +fixed wheel's, from the pinned file name.

    packaging validates the name; its parts are then taken as upstream wrote them (packaging normalizes the
    project name and returns the tags as a set), so the +fixed wheel differs only in its version."""
    filename = line.wheel.filename
    wheel_name_version(filename, hint="pin the upstream .whl file exactly as the package index lists it")
    name, version, rest = filename.split("-", 2)  # a valid name has no '-' in its project or version part
    if version != line.version:
        raise VerifyError(f"wheel {filename} is not version {line.version}", "fix the pin")
    if rest.count("-") == 3:  # upstream's own build tag names upstream's builds, not ours: ours replaces it
        rest = rest.split("-", 1)[1]
    fixed = line.fixed_version
    build = f"{tag}-" if (tag := buildno.tag(line)) else ""
    return WheelNames(name, f"{name}-{version}.dist-info", f"{name}-{fixed}.dist-info", f"{name}-{fixed}-{build}{rest}")


def _replace_once(data: bytes, pattern: str, repl: str, what: str) -> bytes:
    new, n = re.subn(pattern.encode(), repl.encode(), data, flags=re.M)
    if n != 1:
        raise VerifyError(
            f"expected exactly one {what}, found {n}",
            "upstream changed its layout: extend patchwheel.rewrite for this release",
        )
    return new


def with_build_line(wheel: bytes, tag: str) -> bytes:
    """WHEEL's ``Build:`` line says the file name's build tag (PEP 427): ours, or none for a first build; upstream's
    own, if it had one, goes, as the file name's does. Unchanged bytes when there is nothing to say."""
    new = re.sub(rb"^Build: [^\r\n]*\r?\n", b"", wheel, flags=re.M)
    if tag:
        nl = b"\r\n" if b"\r\n" in new else b"\n"
        new = new.rstrip(b"\r\n") + nl + f"Build: {tag}".encode() + nl
    return wheel if new == wheel else new  # the same object: upstream's compressed bytes are kept


@dataclass(frozen=True)
class Entry:
    """One zip member: its metadata, its content, and (for an unchanged member) upstream's compressed bytes."""

    info: zipfile.ZipInfo
    data: bytes
    raw: bytes | None = None

    @property
    def name(self) -> str:
        return self.info.filename


def _info(template: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    zi = zipfile.ZipInfo(name, template.date_time)
    zi.external_attr = template.external_attr
    zi.create_system = template.create_system
    zi.compress_type = template.compress_type
    return zi


def plan(
    line: ReleaseLine, upstream: list[Entry], patched: dict[str, bytes | None], manifest: dict
) -> tuple[WheelNames, list[Entry]]:
    """Pure: the +fixed wheel's entries, in order, from upstream's entries and the patched package files.

    ``patched`` maps wheel paths (``transformers/x.py``) to new bytes, None meaning deleted.
    """
    names = wheel_names(line)
    esc = re.escape(line.version)
    out: list[Entry] = []
    record_at = metadata_info = record_info = None
    existing = {e.name for e in upstream}
    created = sorted(p for p, d in patched.items() if d is not None and p not in existing)
    for e in upstream:
        name, data, raw = e.name, e.data, e.raw
        if name.startswith(names.old_distinfo + "/"):
            name = names.new_distinfo + name[len(names.old_distinfo) :]
            if name == f"{names.new_distinfo}/RECORD":
                record_at, record_info = len(out), e.info
                continue
            if name == f"{names.new_distinfo}/METADATA":
                data = _replace_once(
                    data,
                    rf"^Version: {esc}\r?$",
                    f"Version: {line.fixed_version}",
                    f"'Version: {line.version}' line in METADATA",
                )
                metadata_info = e.info
            if name == f"{names.new_distinfo}/WHEEL":
                data = with_build_line(data, buildno.tag(line))
            if created and not any(o.name.startswith(names.new_distinfo) for o in out):
                # files new to the package go right before the dist-info folder
                out += [Entry(_info(e.info, path), patched[path]) for path in created]  # type: ignore[arg-type]
        elif e.name in patched:
            if patched[e.name] is None:
                continue
            data = patched[e.name]  # type: ignore[assignment]
        if e.name == f"{line.import_name}/__init__.py":
            data = _replace_once(
                data,
                rf"""^__version__\s*=\s*(['"]){esc}\1""",
                f'__version__ = "{line.fixed_version}"',
                f'__version__ = "{line.version}"',
            )
        out.append(Entry(_info(e.info, name), data, raw if data is e.data else None))
    if record_at is None or metadata_info is None or record_info is None:
        raise VerifyError(
            f"{line.wheel.filename} has no {names.old_distinfo}/RECORD or METADATA",
            "the pinned file is not a valid wheel",
        )
    manifest_bytes = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    out.insert(record_at, Entry(_info(metadata_info, f"{names.new_distinfo}/{FIXES_MANIFEST}"), manifest_bytes))
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    for e in out:
        writer.writerow([e.name, record_hash(e.data), len(e.data)])
    record_name = f"{names.new_distinfo}/RECORD"
    writer.writerow([record_name, "", ""])
    out.insert(record_at + 1, Entry(_info(record_info, record_name), rows.getvalue().encode()))
    return names, out


_LOCAL = struct.Struct("<4s2B4HL2L2H")
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_END = struct.Struct("<4s4H2LH")
_LIMIT = 0xFFFFFFFF


def _dos(date_time) -> tuple[int, int]:
    y, mo, d, h, mi, s = date_time
    return (h << 11) | (mi << 5) | (s // 2), ((y - 1980) << 9) | (mo << 5) | d


def _deflate(data: bytes) -> bytes:
    c = zlib.compressobj(COMPRESSLEVEL, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def write(entries: list[Entry], dest) -> None:
    """Write a plain PKZIP archive: unchanged entries keep their compressed bytes, changed ones are deflated."""
    central = []
    with open(dest, "wb") as fh:
        for e in entries:
            zi = e.info
            if e.raw is not None:
                method, raw = zi.compress_type, e.raw
            else:
                method = zipfile.ZIP_DEFLATED if zi.compress_type == zipfile.ZIP_DEFLATED else zipfile.ZIP_STORED
                raw = _deflate(e.data) if method == zipfile.ZIP_DEFLATED else e.data
            name = zi.filename.encode("utf-8")
            flags = 0x800 if not zi.filename.isascii() else 0
            crc = zlib.crc32(e.data)
            offset = fh.tell()
            if max(len(raw), len(e.data), offset) >= _LIMIT:
                raise VerifyError(
                    f"{zi.filename}: needs zip64, which this writer does not do", "extend patchwheel.rewrite.write"
                )
            t, d = _dos(zi.date_time)
            fh.write(_LOCAL.pack(b"PK\x03\x04", 20, 0, flags, method, t, d, crc, len(raw), len(e.data), len(name), 0))
            fh.write(name)
            fh.write(raw)
            central.append(
                _CENTRAL.pack(
                    b"PK\x01\x02",
                    20,
                    zi.create_system,
                    20,
                    0,
                    flags,
                    method,
                    t,
                    d,
                    crc,
                    len(raw),
                    len(e.data),
                    len(name),
                    0,
                    0,
                    0,
                    0,
                    zi.external_attr,
                    offset,
                )
                + name
            )
        start = fh.tell()
        for c in central:
            fh.write(c)
        fh.write(_END.pack(b"PK\x05\x06", 0, 0, len(central), len(central), fh.tell() - start, start, 0))


def read(path) -> list[Entry]:
    """Every member with its content and its compressed bytes, CRC-checked. A member name that is not a plain
    relative path is refused: the +fixed wheel would carry it to every installer (zip slip)."""
    try:
        return _read(path)
    except (zipfile.BadZipFile, zlib.error, struct.error, EOFError) as exc:
        raise VerifyError(f"{path}: not a readable zip file ({exc})", "the file is damaged") from exc


def _inflate(path, zi: zipfile.ZipInfo, raw: bytes) -> bytes:
    """A deflated member, inflated to at most one byte more than it declares: a member that lies about its size
    stops there instead of filling the memory."""
    inflater = zlib.decompressobj(-15)
    data = inflater.decompress(raw, zi.file_size + 1)
    if len(data) > zi.file_size or inflater.unconsumed_tail:
        raise VerifyError(
            f"{path}: {zi.filename} inflates to more than the {zi.file_size} bytes it declares",
            "do not build from this file: check the pin and the index it came from",
        )
    return data


def read_member(zf: zipfile.ZipFile, name: str) -> bytes:
    """One member's bytes, refused when it declares more than :data:`MAX_MEMBER_SIZE` (zipfile inflates no more than
    a member declares, and checks its CRC)."""
    _check_sizes(zf.filename, [zf.getinfo(name)])
    return zf.read(name)


def _check_sizes(path, infos: list[zipfile.ZipInfo]) -> None:
    """Declared sizes within bounds, before anything is inflated."""
    hint = "do not build from this file: check the pin and the index it came from"
    for zi in infos:
        if zi.file_size > MAX_MEMBER_SIZE:
            raise VerifyError(
                f"{path}: {zi.filename} declares {zi.file_size} bytes uncompressed, over the limit of "
                f"{MAX_MEMBER_SIZE} bytes for one member",
                hint,
            )
    total = sum(zi.file_size for zi in infos)
    if total > MAX_TOTAL_SIZE:
        raise VerifyError(
            f"{path}: its members declare {total} bytes uncompressed in all, over the limit of {MAX_TOTAL_SIZE} bytes",
            hint,
        )


def _read(path) -> list[Entry]:
    out = []
    with zipfile.ZipFile(path) as zf, open(path, "rb") as fh:
        _check_sizes(path, zf.infolist())
        for zi in zf.infolist():
            if problem := path_problem(zi.filename):
                raise VerifyError(
                    f"{path}: member {zi.filename!r} {problem}: an installer would write it "
                    "outside its folder or where it does not belong (zip slip)",
                    "do not build from this file: check the pin and the index it came from",
                )
            if zi.flag_bits & 0x1 or zi.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise VerifyError(
                    f"{path}: {zi.filename} is encrypted or uses compression {zi.compress_type}",
                    "only stored or deflated members are supported",
                )
            fh.seek(zi.header_offset)
            head = fh.read(_LOCAL.size)
            if head[:4] != b"PK\x03\x04":
                raise VerifyError(f"{path}: bad local header for {zi.filename}", "the file is damaged")
            name_len, extra_len = struct.unpack("<2H", head[26:30])
            fh.seek(zi.header_offset + _LOCAL.size + name_len + extra_len)
            raw = fh.read(zi.compress_size)
            data = _inflate(path, zi, raw) if zi.compress_type == zipfile.ZIP_DEFLATED else raw
            if zlib.crc32(data) != zi.CRC or len(data) != zi.file_size:
                raise VerifyError(f"{path}: {zi.filename} fails its CRC check", "the file is damaged")
            out.append(Entry(zi, data, raw))
    return out
