"""What this tool has built and checked, recorded in its own cache (``<cache>/records/``), where whoever can write
dist/ cannot write.

* **Built wheels.** After a wheel passed verification, the build records its file name and sha256 under a key made
  of everything its bytes depend on: the line's inputs digest (:func:`buildno.inputs_digest`: the pinned upstream
  wheel, the line's settings, the series), the line's vendored modules in overlay/ (the build checks the wheel
  against them) and the tool's own code. A later build that keeps that wheel in dist/ takes it when the file there
  has the recorded sha256, instead of building it again to prove it: build.json is no proof (whoever changed a
  wheel can change it too), a record is, and a wheel without one is rebuilt.
* **Audited upstream wheels.** The first build from a pinned upstream wheel inflates every member once, checks its
  CRC and sizes, and that upstream's RECORD lists each with the right sha256 and size; the verdict is recorded under
  the wheel's sha256 and the tool's code. Later builds copy the unchanged members raw and take their RECORD rows
  from upstream's RECORD, checked against the pinned wheel's central directory, without inflating them.

(Lint's signature check keeps what it read of each upstream module, by the module's sha256, beside these, in
``<cache>/records/api/``: :mod:`patchwheel.signatures`.)

A record that is missing, damaged or for other inputs is no match: the build then does the full work, as it did
before records existed. Records are written atomically (a reader finds the old file or the new one).
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from ..atomic import replace_text
from ..config import ReleaseLine, cache_dir
from ..errors import PatchwheelError
from ..names import SHA256
from . import buildno

_SCHEMA = 1


@functools.cache
def tool_digest() -> str:
    """The sha256 of the tool's pipeline code (every module of the package but the maintenance tools under maint/):
    another version of patchwheel may make other bytes from the same inputs, so its records are not ours."""
    h = hashlib.sha256()
    package = Path(__file__).parents[1]
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.parts[0] != "maint":
            h.update(f"{rel.as_posix()}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return h.hexdigest()


def _overlay_digest(line: ReleaseLine) -> str:
    h = hashlib.sha256()
    folder = line.vendor_dir
    if folder.is_dir():
        for p in sorted(folder.rglob("*")):
            if p.is_file() and "__pycache__" not in p.relative_to(folder).parts:
                rel = p.relative_to(folder).as_posix()
                h.update(f"{rel}\0{hashlib.sha256(p.read_bytes()).hexdigest()}\n".encode())
    return h.hexdigest()


def _folder(kind: str) -> Path:
    return cache_dir() / "records" / kind


def _key(*parts: str) -> str:
    return hashlib.sha256("\n".join([f"patchwheel record {_SCHEMA}", tool_digest(), *parts]).encode()).hexdigest()


def line_key(line: ReleaseLine, inputs: str | None = None) -> str:
    """The key of a line's built wheel: its inputs (``inputs``: their digest, where the caller has made it), its
    vendored modules, the tool's code."""
    return _key(f"inputs {inputs or buildno.inputs_digest(line)}", f"overlay {_overlay_digest(line)}")


def _write(path: Path, record: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_text(path, json.dumps(record))
    except OSError:
        pass  # a cache that cannot be written costs the next build time, never this one its result


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def remember_built(line: ReleaseLine, filename: str, sha256: str, inputs: str | None = None) -> None:
    _write(_folder("built") / line_key(line, inputs), {"filename": filename, "sha256": sha256})


def built_matches(line: ReleaseLine, filename: str, sha256: str) -> bool:
    """Whether this tool built ``filename`` with this ``sha256`` (the sha256 of the file as it is now) from the
    line's inputs as they are now."""
    try:
        key = line_key(line)
    except PatchwheelError:  # a series that cannot be read has no record: the caller says what is wrong with it
        return False
    record = _read(_folder("built") / key)
    return SHA256.match(sha256) is not None and record == {"filename": filename, "sha256": sha256}


def remember_audited(upstream_sha256: str) -> None:
    _write(_folder("audited") / _key(f"upstream {upstream_sha256}"), {"sha256": upstream_sha256, "audited": True})


def audited(upstream_sha256: str) -> bool:
    """Whether the pinned upstream wheel with this sha256 was audited whole by this tool (see the module)."""
    record = _read(_folder("audited") / _key(f"upstream {upstream_sha256}"))
    return record == {"sha256": upstream_sha256, "audited": True}
