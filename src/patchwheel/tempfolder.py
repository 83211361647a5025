"""A temporary folder owned by one object, removed when it is closed: the apply trees, follow's scratch copy."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path


class TempFolder:
    """``with Sub(...) as it``: a fresh folder under the temporary directory (``prefix`` names it, so a folder left
    by a killed process says whose it was), removed, with what it holds, on close."""

    def __init__(self, prefix: str) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix=prefix))

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
