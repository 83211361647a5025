"""One way to replace a file whole: written beside it under a name of its own, then renamed over it, so a reader
sees the old file or the new one, never part of either; the file keeps its mode; on any failure the temporary file
is removed and the error goes on. What the pins, sets, matrix, build records and journal writers share."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def replace_text(path: Path, text: str, *, durable: bool = False) -> None:
    """Replace ``path`` with ``text`` (UTF-8). ``durable``: on disk before the rename (a journal that recovery
    reads after a crash)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            mode = 0o644
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
