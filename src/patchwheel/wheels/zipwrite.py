"""Write a plain PKZIP archive (no zip64, no encryption), the +fixed wheel: members copied raw keep upstream's
compressed bytes, CRC and sizes; changed ones are deflated at a fixed level (:mod:`rewrite` says why by hand)."""

from __future__ import annotations

import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import VerifyError


@dataclass(frozen=True)
class Entry:
    """One zip member: its metadata, its content (None: not inflated, see :func:`rewrite.scan`), and (for an
    unchanged member) upstream's compressed bytes; ``row``: its RECORD hash and size where its content was not
    inflated."""

    info: zipfile.ZipInfo
    content: bytes | None
    raw: bytes | None = None
    row: tuple[str, str] | None = None

    @property
    def data(self) -> bytes:
        """Its content, which the caller knows was read (every member :func:`rewrite.read` gives)."""
        return _need(self.name, self.content)

    @property
    def name(self) -> str:
        return self.info.filename


def _need(name: str, data: bytes | None) -> bytes:
    if data is None:
        raise VerifyError(f"{name} was not inflated where its content is needed", "report this")
    return data


COMPRESSLEVEL = 6
LOCAL = struct.Struct("<4s2B4HL2L2H")
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
    Path(dest).unlink(missing_ok=True)  # a new file: never written through a link to another (build._stage)
    with open(dest, "xb") as fh:
        for e in entries:
            zi = e.info
            if e.raw is not None:
                method, raw = zi.compress_type, e.raw
            else:
                method = zipfile.ZIP_DEFLATED if zi.compress_type == zipfile.ZIP_DEFLATED else zipfile.ZIP_STORED
                raw = _deflate(e.data) if method == zipfile.ZIP_DEFLATED else e.data
            name = zi.filename.encode("utf-8")
            flags = 0x800 if not zi.filename.isascii() else 0
            crc, size = (zi.CRC, zi.file_size) if e.content is None else (zlib.crc32(e.data), len(e.data))
            offset = fh.tell()
            if max(len(raw), size, offset) >= _LIMIT:
                raise VerifyError(
                    f"{zi.filename}: needs zip64, which this writer does not do",
                    "extend patchwheel.wheels.rewrite.write",
                )
            t, d = _dos(zi.date_time)
            fh.write(LOCAL.pack(b"PK\x03\x04", 20, 0, flags, method, t, d, crc, len(raw), size, len(name), 0))
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
                    size,
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
