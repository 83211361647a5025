"""Upstream's style: the exported diff must pass ruff with upstream's own settings.

The settings are the ``[tool.ruff]`` tables of the release's own ``pyproject.toml``, read from its sdist (sha256
pinned in ``overlay/<pkg>/pins.toml``, or as the index lists it for a release no line pins). ruff is this project's
pinned one (the ``export`` extra; upstream pins its own, older, version: the settings are what make the style).
``ruff check`` and ``ruff format --check`` run on the files after the commit, laid out as in upstream's tree, so
per-file settings apply; what they report counts only where the commit wrote it: every line of a new file, and the
lines a changed file's diff adds (upstream's own code is upstream's business).
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path

from ... import gitops
from ...config import Artifact
from ...errors import PatchError
from ...series import HUNK_HEADER
from ...wheels import fetch

_HUNK = re.compile(HUNK_HEADER, re.M)


def ruff_bin() -> str:
    """The ruff executable: the ``ruff`` package beside this tool, else ``ruff`` on PATH."""
    try:
        from ruff.__main__ import find_ruff_bin

        return str(find_ruff_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("ruff")
    if found is None:
        raise PatchError(
            "export checks upstream's style with ruff, which is not installed here",
            "run it as `nox -s export -- <slug>` (its environment has the pinned ruff), or pip install -e '.[export]'",
        )
    return found


def settings(package: str, version: str, sdist: Artifact | None) -> bytes:
    """The release's own pyproject.toml (from its sha256-verified sdist), which holds its ruff settings."""
    if sdist is None:
        raise PatchError(
            f"no sdist of {package} {version} is known, so upstream's ruff settings cannot be read",
            f"pin the sdist of {package} {version} in overlay/{package}/pins.toml (the index lists its sha256)",
        )
    with tarfile.open(fetch.fetch(package, sdist)) as tar:
        for member in tar.getmembers():
            if member.isfile() and re.fullmatch(r"[^/]+/pyproject\.toml", member.name):
                data = tar.extractfile(member).read()  # type: ignore[union-attr]
                if "ruff" in tomllib.load(io.BytesIO(data)).get("tool", {}):
                    return data
    raise PatchError(f"{sdist.filename} has no pyproject.toml with [tool.ruff]", "report this")


def describe(pyproject: bytes) -> str:
    """A one-line summary of upstream's ruff settings, for PR.md."""
    ruff = tomllib.load(io.BytesIO(pyproject))["tool"]["ruff"]
    lint = ruff.get("lint", {})
    rules = lint.get("select", []) + lint.get("extend-select", [])
    return (
        f"line-length {ruff.get('line-length', 88)}, target {ruff.get('target-version', '?')}, rules {', '.join(rules)}"
    )


def added_lines(diff: str) -> set[int]:
    """Line numbers (in the new file) that a ``git diff -U0`` of one file adds."""
    out: set[int] = set()
    for m in _HUNK.finditer(diff):
        start, count = int(m.group(3)), int(m.group(4) if m.group(4) is not None else 1)
        out.update(range(start, start + count))
    return out


def changed_lines(base: Mapping[str, bytes | None], after: Mapping[str, bytes | None]) -> dict[str, set[int] | None]:
    """Upstream-tree path -> the lines the commit wrote there (None: the whole file is new), for Python files."""
    out: dict[str, set[int] | None] = {}
    with tempfile.TemporaryDirectory(prefix="patchwheel-style-") as tmp:
        for path, data in after.items():
            if data is None or not path.endswith(".py"):
                continue
            if base.get(path) is None:
                out[path] = None
                continue
            old, new = Path(tmp) / "old.py", Path(tmp) / "new.py"
            old.write_bytes(base[path] or b"")
            new.write_bytes(data)
            _, diff = gitops.try_git(Path(tmp), "diff", "--no-index", "-U0", "old.py", "new.py")
            out[path] = added_lines(diff)
    return out


def _counts(rows: list[int], lines: set[int] | None) -> bool:
    return lines is None or any(r in lines for r in rows)


def _ruff(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    res = subprocess.run([ruff_bin(), *args], cwd=cwd, capture_output=True, text=True)
    if res.returncode not in (0, 1):
        raise PatchError(f"ruff {' '.join(args[:2])} failed: {res.stderr.strip()[-800:]}", "see ruff's message")
    return res


def ruff_problems(pyproject: bytes, after: Mapping[str, bytes | None], lines: dict[str, set[int] | None]) -> list[str]:
    """ruff's findings (check, then format) on the lines the commit wrote; empty when it is in upstream's style."""
    if not lines:
        return []
    with tempfile.TemporaryDirectory(prefix="patchwheel-style-") as tmp:
        tree = Path(tmp)
        (tree / "pyproject.toml").write_bytes(pyproject)
        gitops.write_files(tree, {p: after[p] for p in lines})
        common = ["--no-cache", "--config", str(tree / "pyproject.toml")]
        res = _ruff(["check", *common, "--output-format", "json", *sorted(lines)], tree)
        found = []
        for v in json.loads(res.stdout or "[]"):
            path = Path(v["filename"]).resolve().relative_to(tree.resolve()).as_posix()
            rows = list(range(v["location"]["row"], v["end_location"]["row"] + 1))
            if path in lines and _counts(rows, lines[path]):
                found.append(f"{path}:{v['location']['row']}: {v['code']} {v['message']}")
        for path in sorted(lines):
            rows = _formatted_rows(_ruff(["format", *common, "--diff", path], tree).stdout)
            if rows and _counts(rows, lines[path]):
                first = min(rows)
                found.append(f"{path}:{first}: ruff format would change it (ruff format --diff shows how)")
        return found


def _formatted_rows(diff: str) -> list[int]:
    """The old-file lines a ``ruff format --diff`` of one file changes (a pure insertion: the line before it)."""
    rows: list[int] = []
    for hunk in re.split(r"(?=^@@ )", diff, flags=re.M)[1:]:
        m = _HUNK.match(hunk)
        if m is None:
            continue
        old = int(m.group(1))
        for text in hunk.splitlines()[1:]:
            if text.startswith("-"):
                rows.append(old)
                old += 1
            elif text.startswith("+"):
                rows += [max(old - 1, 1), old]
            elif text.startswith(" "):
                old += 1
    return rows
