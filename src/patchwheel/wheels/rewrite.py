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
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import ReleaseLine
from ..errors import VerifyError
from ..names import path_problem, wheel_name_version
from ..probes import manifest as fixes
from . import buildno, sbom
from .zipwrite import COMPRESSLEVEL as COMPRESSLEVEL  # the level changed members are deflated at
from .zipwrite import LOCAL, Entry, _need
from .zipwrite import write as write  # the build writes what it planned here

if TYPE_CHECKING:
    from ..series import Patch

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
    tag: str = ""  # its build tag (buildno.tag), which the WHEEL file's Build line names


def wheel_names(line: ReleaseLine, series: list[Patch] | None = None) -> WheelNames:
    """The upstream wheel's names and the +fixed wheel's, from the pinned file name.

    packaging validates the name; its parts are then taken as upstream wrote them (packaging normalizes the
    project name and returns the tags as a set), so the +fixed wheel differs only in its version. ``series``: the
    line's patches, where the caller has read them (the build tag is made from them)."""
    filename = line.wheel.filename
    wheel_name_version(filename, hint="pin the upstream .whl file exactly as the package index lists it")
    name, version, rest = filename.split("-", 2)  # a valid name has no '-' in its project or version part
    if version != line.version:
        raise VerifyError(f"wheel {filename} is not version {line.version}", "fix the pin")
    if rest.count("-") == 3:  # upstream's own build tag names upstream's builds, not ours: ours replaces it
        rest = rest.split("-", 1)[1]
    fixed = line.fixed_version
    build = f"{tag}-" if (tag := buildno.tag(line, series)) else ""
    return WheelNames(
        name, f"{name}-{version}.dist-info", f"{name}-{fixed}.dist-info", f"{name}-{fixed}-{build}{rest}", tag
    )


def sbom_of(line: ReleaseLine, series: list[Patch], manifest: dict, metadata: bytes, names: WheelNames) -> bytes:
    """The wheel's SBOM (:mod:`sbom`), from its manifest, the series' bytes and upstream's METADATA: what the build
    writes and what verify expects."""
    bom = sbom.make(
        manifest,
        {p.name: p.raw for p in series},
        metadata,
        names.filename,
        number=names.tag.split("_", 1)[0] if names.tag else "",
        inputs=buildno.inputs_digest(line, series),
        rewrite=buildno.REWRITE_FORMAT,
    )
    return sbom.dumps(bom)


def _replace_once(data: bytes, pattern: str, repl: str, what: str) -> bytes:
    new, n = re.subn(pattern.encode(), repl.encode(), data, flags=re.M)
    if n != 1:
        raise VerifyError(
            f"expected exactly one {what}, found {n}",
            "upstream changed its layout: extend patchwheel.wheels.rewrite for this release",
        )
    return new


def with_build_line(wheel: bytes, tag: str) -> bytes:
    """WHEEL's ``Build:`` line says the file name's build tag (PEP 427): ours, or none without a build record;
    upstream's own, if it had one, goes, as the file name's does. Unchanged bytes when there is nothing to say."""
    new = re.sub(rb"^Build: [^\r\n]*\r?\n", b"", wheel, flags=re.M)
    if tag:
        nl = b"\r\n" if b"\r\n" in new else b"\n"
        new = new.rstrip(b"\r\n") + nl + f"Build: {tag}".encode() + nl
    return wheel if new == wheel else new  # the same object: upstream's compressed bytes are kept


def _info(template: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    zi = zipfile.ZipInfo(name, template.date_time)
    zi.external_attr = template.external_attr
    zi.create_system = template.create_system
    zi.compress_type = template.compress_type
    zi.CRC, zi.file_size = template.CRC, template.file_size  # what a member copied raw, not inflated, is written with
    return zi


def record_rows(record: bytes) -> dict[str, tuple[str, str]]:
    """A RECORD's rows: path -> (hash, size), as written."""
    return {row[0]: (row[1], row[2]) for row in csv.reader(io.StringIO(record.decode())) if len(row) == 3}


def contents(entries: list[Entry]) -> dict[str, bytes]:
    """Each member's content by name, from :func:`read` (which inflates them all)."""
    return {e.name: e.data for e in entries}


def audit(entries: list[Entry], record_name: str) -> dict[str, tuple[str, str]] | None:
    """Upstream's RECORD rows, when they are right: every member inflated (:func:`read`) is listed once with its
    sha256 and size, and nothing else is. None otherwise (the build then hashes every member itself)."""
    by_name = {e.name: e.content for e in entries}
    record = by_name.get(record_name)
    if record is None or None in by_name.values():
        return None
    try:
        rows = record_rows(record)
    except (UnicodeDecodeError, csv.Error):
        return None
    want = {n: (record_hash(d), str(len(d))) for n, d in by_name.items() if n != record_name and d is not None}
    return rows if {n: r for n, r in rows.items() if n != record_name} == want else None


def plan(
    line: ReleaseLine,
    upstream: list[Entry],
    patched: dict[str, bytes | None],
    manifest: dict,
    upstream_rows: dict[str, tuple[str, str]] | None = None,
    names: WheelNames | None = None,
    sbom_bytes: bytes | None = None,
) -> tuple[WheelNames, list[Entry]]:
    """Pure: the +fixed wheel's entries, in order, from upstream's entries and the patched package files.

    ``patched`` maps wheel paths (``transformers/x.py``) to new bytes, None meaning deleted. ``upstream_rows``:
    upstream's RECORD rows, audited (:func:`audit`), for the members that were not inflated. ``names``: the
    line's :func:`wheel_names`, where the caller has them. ``sbom_bytes``: the wheel's SBOM (:func:`sbom_of`),
    written into ``.dist-info/sboms/`` after the manifest.
    """
    names = names or wheel_names(line)
    esc = re.escape(line.version)
    out: list[Entry] = []
    record_at = metadata_info = record_info = None
    existing = {e.name for e in upstream}
    created = sorted(p for p, d in patched.items() if d is not None and p not in existing)
    for e in upstream:
        name, data, raw = e.name, e.content, e.raw
        if name.startswith(names.old_distinfo + "/"):
            name = names.new_distinfo + name[len(names.old_distinfo) :]
            if name == f"{names.new_distinfo}/RECORD":
                record_at, record_info = len(out), e.info
                continue
            if name == f"{names.new_distinfo}/METADATA":
                data = _replace_once(
                    _need(e.name, data),
                    rf"^Version: {esc}\r?$",
                    f"Version: {line.fixed_version}",
                    f"'Version: {line.version}' line in METADATA",
                )
                metadata_info = e.info
            if name == f"{names.new_distinfo}/WHEEL":
                data = with_build_line(_need(e.name, data), names.tag)
            if created and not any(o.name.startswith(names.new_distinfo) for o in out):
                # files new to the package go right before the dist-info folder
                out += [Entry(_info(e.info, path), patched[path]) for path in created]
        elif e.name in patched:
            if patched[e.name] is None:
                continue
            data = patched[e.name]
        if e.name == f"{line.import_name}/__init__.py":
            data = _replace_once(
                _need(e.name, data),
                rf"""^__version__\s*=\s*(['"]){esc}\1""",
                f'__version__ = "{line.fixed_version}"',
                f'__version__ = "{line.version}"',
            )
        row = None
        if data is None:
            if upstream_rows is None or e.name not in upstream_rows:
                raise VerifyError(f"{e.name} was not read and has no audited RECORD row", "report this")
            row = upstream_rows[e.name]
        out.append(Entry(_info(e.info, name), data, raw if data is e.content else None, row))
    if record_at is None or metadata_info is None or record_info is None:
        raise VerifyError(
            f"{line.wheel.filename} has no {names.old_distinfo}/RECORD or METADATA",
            "the pinned file is not a valid wheel",
        )
    manifest_bytes = fixes.dumps(manifest)
    out.insert(record_at, Entry(_info(metadata_info, f"{names.new_distinfo}/{fixes.NAME}"), manifest_bytes))
    if sbom_bytes is not None:
        record_at += 1
        out.insert(record_at, Entry(_info(metadata_info, sbom.member(names.new_distinfo)), sbom_bytes))
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    for e in out:
        writer.writerow([e.name, *(e.row or (record_hash(e.data), len(e.data)))])
    record_name = f"{names.new_distinfo}/RECORD"
    writer.writerow([record_name, "", ""])
    out.insert(record_at + 1, Entry(_info(record_info, record_name), rows.getvalue().encode()))
    return names, out


def read(path) -> list[Entry]:
    """Every member with its content and its compressed bytes, CRC-checked. A member name that is not a plain
    relative path is refused: the +fixed wheel would carry it to every installer (zip slip)."""
    with open(path, "rb") as fh:
        return scan(path, fh.read(), lambda name: True)


def scan(path, blob: bytes, wanted: Callable[[str], bool]) -> list[Entry]:
    """Every member of the zip file ``blob`` (read from ``path``) from its central directory, with its compressed
    bytes, checked as :func:`read` checks them (paths, methods, bounded sizes, local headers); only the ``wanted``
    members are inflated (and CRC-checked), the others have no content (:func:`inflated` gives it)."""
    try:
        return _read(path, blob, wanted)
    except (zipfile.BadZipFile, zlib.error, struct.error, EOFError) as exc:
        raise VerifyError(f"{path}: not a readable zip file ({exc})", "the file is damaged") from exc


def inflated(path, e: Entry) -> bytes:
    """A member's content: as read, or inflated now from its compressed bytes (bounded, CRC-checked)."""
    if e.content is not None:
        return e.content
    assert e.raw is not None  # (every member :func:`scan` gives has its compressed bytes)
    try:
        return _content(path, e.info, e.raw)
    except zlib.error as exc:
        raise VerifyError(f"{path}: not a readable zip file ({exc})", "the file is damaged") from exc


def same_member(a: Entry, b: Entry) -> bool:
    """Whether two members hold the same compressed bytes under the same method, CRC and sizes: the same content,
    told without inflating either."""
    x, y = a.info, b.info
    return (x.compress_type, x.CRC, x.compress_size, x.file_size) == (
        y.compress_type,
        y.CRC,
        y.compress_size,
        y.file_size,
    ) and a.raw == b.raw


class Members(Mapping[str, bytes]):
    """The members of a wheel by name (renamed by ``rename``), their content inflated when first asked for."""

    def __init__(self, path, entries: list[Entry], rename: Callable[[str], str] = lambda n: n) -> None:
        self.path, self.entries = path, {rename(e.name): e for e in entries}
        self._done: dict[str, bytes] = {}

    def __getitem__(self, name: str) -> bytes:
        if name not in self._done:
            self._done[name] = inflated(self.path, self.entries[name])
        return self._done[name]

    def __contains__(self, name: object) -> bool:  # (Mapping's would inflate it)
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


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


def _content(path, zi: zipfile.ZipInfo, raw: bytes) -> bytes:
    data = _inflate(path, zi, raw) if zi.compress_type == zipfile.ZIP_DEFLATED else raw
    if zlib.crc32(data) != zi.CRC or len(data) != zi.file_size:
        raise VerifyError(f"{path}: {zi.filename} fails its CRC check", "the file is damaged")
    return data


def _read(path, blob: bytes, wanted: Callable[[str], bool]) -> list[Entry]:
    out = []
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
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
            at = zi.header_offset
            if blob[at : at + 4] != b"PK\x03\x04":
                raise VerifyError(f"{path}: bad local header for {zi.filename}", "the file is damaged")
            name_len, extra_len = struct.unpack_from("<2H", blob, at + 26)
            start = at + LOCAL.size + name_len + extra_len
            raw = blob[start : start + zi.compress_size]
            if len(raw) != zi.compress_size:
                raise VerifyError(f"{path}: {zi.filename} is cut short", "the file is damaged")
            out.append(Entry(zi, _content(path, zi, raw) if wanted(zi.filename) else None, raw))
    return out
