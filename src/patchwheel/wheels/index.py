"""Write a PEP 503 "simple" tree that pip reads straight from disk (``--extra-index-url file:///…/simple``)."""

from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import quote

from ..names import wheel_name_version


def write_simple(root: Path, wheels: dict[str, str]) -> None:
    """``wheels`` maps wheel file names (in ``root``) to sha256. Pages link ``../../<file>#sha256=…``, the file name
    percent-encoded (a local version's ``+`` as ``%2B``: object stores and some index servers read a raw ``+`` in a
    path as a space, and an installer decodes ``%2B`` to the file's own name)."""
    by_project: dict[str, list[str]] = {}
    for name in sorted(wheels):
        by_project.setdefault(_project(name), []).append(name)
    simple = root / "simple"
    simple.mkdir()
    top = [f'<a href="{p}/">{p}</a><br/>' for p in sorted(by_project)]
    (simple / "index.html").write_text(_page("Simple index", top))
    for project, files in by_project.items():
        (simple / project).mkdir()
        links = [f'<a href="../../{quote(f)}#sha256={wheels[f]}">{html.escape(f)}</a><br/>' for f in files]
        (simple / project / "index.html").write_text(_page(f"Links for {project}", links))


def _project(filename: str) -> str:
    """The canonical project a wheel belongs to, read as the wheel spec says (pip looks it up under that name). A
    name pip cannot read is refused here, rather than published on a page pip never asks for."""
    hint = (
        "a wheel is named <name>-<version>(-<build>)-<tags>.whl, with '_' for '-' in the name: check local-label "
        "and the package name in overlay/<pkg>/pins.toml"
    )
    return wheel_name_version(filename, hint=hint)[0]


def _page(title: str, body: list[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html>\n<head><meta name="pypi:repository-version" content="1.0">'
        f"<title>{title}</title></head>\n<body>\n<h1>{title}</h1>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )
