"""Write a PEP 503 "simple" tree that pip reads straight from disk (``--extra-index-url file:///…/simple``), or
from any server that serves dist/ as files, with each wheel's core metadata beside it (PEP 658, PEP 714): an
installer reads a few kB of METADATA to resolve instead of downloading the wheel."""

from __future__ import annotations

import hashlib
import html
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import quote

from ..errors import DistError
from ..names import wheel_name_version
from . import rewrite

#: What PEP 658 names a wheel's core metadata file: the wheel's file name with this suffix, beside the wheel.
METADATA_SUFFIX = ".metadata"


def core_metadata(root: Path, filenames: Iterable[str]) -> dict[str, bytes]:
    """Each wheel's core metadata, the bytes of its ``<name>-<version>.dist-info/METADATA`` as they are, read from
    the wheel ``root/<file name>`` (the member's name is made from the file name as the wheel spec says, never
    taken from the wheel)."""
    out = {}
    for filename in filenames:
        wheel_name_version(filename)
        name, version, _ = filename.split("-", 2)  # a valid wheel name has no '-' in its name or version part
        member = f"{name}-{version}.dist-info/METADATA"
        path = root / filename
        try:
            with zipfile.ZipFile(path) as zf:
                out[filename] = rewrite.read_member(zf, member)
        except KeyError as exc:
            raise DistError(
                f"{path} has no {member}: it carries no core metadata for an installer to read",
                "rebuild it (nox -s build -- --clean)",
            ) from exc
    return out


def write_simple(root: Path, wheels: dict[str, str], metadata: Mapping[str, bytes] | None = None) -> None:
    """``wheels`` maps wheel file names (in ``root``) to sha256. Pages link ``../../<file>#sha256=…``, the file name
    percent-encoded (a local version's ``+`` as ``%2B``: object stores and some index servers read a raw ``+`` in a
    path as a space, and an installer decodes ``%2B`` to the file's own name).

    ``metadata`` maps wheel file names to their core metadata (:func:`core_metadata`): each is written to
    ``root/<file>.metadata`` (PEP 658), and its link names that file's sha256 in ``data-core-metadata`` (PEP 714)
    and in the ``data-dist-info-metadata`` older installers read."""
    metadata = metadata or {}
    by_project: dict[str, list[str]] = {}
    for name in sorted(wheels):
        by_project.setdefault(_project(name), []).append(name)
    simple = root / "simple"
    simple.mkdir()
    top = [f'<a href="{p}/">{p}</a><br/>' for p in sorted(by_project)]
    (simple / "index.html").write_text(_page("Simple index", top))
    for project, files in by_project.items():
        (simple / project).mkdir()
        links = []
        for f in files:
            attrs = ""
            if f in metadata:
                (root / (f + METADATA_SUFFIX)).write_bytes(metadata[f])
                digest = f"sha256={hashlib.sha256(metadata[f]).hexdigest()}"
                attrs = f' data-core-metadata="{digest}" data-dist-info-metadata="{digest}"'
            links.append(f'<a href="../../{quote(f)}#sha256={wheels[f]}"{attrs}>{html.escape(f)}</a><br/>')
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
