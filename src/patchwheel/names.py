"""The project's naming rules, each written once: patch file names and how a patch is looked up, the sha256 form,
a unified diff's hunk header, the record files the tool writes, wheel file names read as the wheel spec says, and
which paths and file names from input the tool accepts at all.

Standard library and ``packaging`` only (the build runs in nox's own interpreter)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from .errors import ConfigError, PatchError

if TYPE_CHECKING:
    from .patches import Patch

#: ``NNNN-slug.patch``: a four-digit place in the series, then a lower-case slug that names the fix on every line.
PATCH_NAME = re.compile(r"^(\d{4})-([a-z0-9][a-z0-9.-]*)\.patch\Z")
#: A slug as `nox -s new` takes it: not a patch's number or file name, which `refresh` would take for that patch.
SLUG = re.compile(r"^(?!\d{4}(-|\Z))(?!.*\.patch\Z)[a-z0-9][a-z0-9.-]*\Z")
#: A sha256 as the tool uses it: it becomes a cache folder's name, so nothing else is accepted.
SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
#: A unified diff's hunk header: old start, old count, new start, new count (a count of 1 may be left out).
HUNK_HEADER = r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@"
HUNK = re.compile(HUNK_HEADER)

#: What the tool records, file by file (the wheel's own list of its fixes is manifest.py's):
#: what a dist/ folder holds, where a line's fixed modules come from.
DIST_RECORD = "build.json"
VENDOR_RECORD = "VENDORED.json"


def patch_name(number: int, slug: str) -> str:
    return f"{number:04d}-{slug}.patch"


def split_patch_name(name: str) -> tuple[int, str] | None:
    """(place in the series, slug) of ``NNNN-slug.patch``; None for any other name."""
    m = PATCH_NAME.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


def slug_of(name: str) -> str:
    """The fix a patch file is of, the same on every line (``0003-dataparallel-num-items.patch`` ->
    ``dataparallel-num-items``); a name of another form is its own slug, without ``.patch``."""
    parts = split_patch_name(name)
    return parts[1] if parts else name.removesuffix(".patch")


def matches(patch: Patch, key: str) -> bool:
    """Whether ``key`` names ``patch`` as a maintainer types it: its slug, its file name (with or without
    ``.patch``, or a path ending in it) or its number (``0002``)."""
    key = key.rsplit("/", 1)[-1]
    return key in (patch.name, patch.slug, patch.name.removesuffix(".patch"), patch.name[:4])


def find(series: Iterable[Patch], key: str, where: str) -> Patch:
    """The patch of ``series`` that ``key`` names (:func:`matches`), or an error listing what there is."""
    series = list(series)
    for p in series:
        if matches(p, key):
            return p
    known = ", ".join(p.slug for p in series) or "none"
    raise PatchError(f"no patch {key!r} in {where}", f"name one of: {known} (a slug, a file name or a number)")


WHEEL_NAME_HINT = "pin or build a wheel named <name>-<version>(-<build>)-<tags>.whl, as pip writes it"


def wheel_name_version(filename: str, *, where: str = "", hint: str = WHEEL_NAME_HINT) -> tuple[str, str]:
    """(canonical project name, normalized version) of a wheel file name, read as the wheel spec says: a name
    split by hand takes a build tag, a stray hyphen or an unnormalized version for something else. ``where`` and
    ``hint``: the refusal's context and advice."""
    try:
        name, version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise ConfigError(f"{where}{filename!r} is not a valid wheel file name ({exc})", hint) from exc
    return str(name), str(version)


def path_problem(path: str) -> str | None:
    """Why ``path`` cannot name a file of upstream's tree or of a wheel; None when it is a plain relative path.

    Paths in patches and wheels are input. An absolute one, or one that climbs out with '..', would make git or an
    installer write outside the tree (zip slip); '.git' reaches into a repository; a backslash is a separator on
    Windows; empty and '.' components make one file look like two.
    """
    if not path:
        return "is empty"
    if "\x00" in path:
        return "contains a NUL character"
    if "\\" in path:
        return "contains a backslash"
    if path.startswith("/"):
        return "is absolute"
    for part in path.split("/"):
        if not part:
            return "has an empty component"
        if part in (".", ".."):
            return f"has a {part!r} component"
        if part.lower() == ".git":
            return "has a '.git' component"
    return None


def file_name_problem(name: str) -> str | None:
    """Why ``name`` is not a plain file name (it becomes part of a cache path); None when it is one."""
    if not name or name == "." or ".." in name or any(c in name for c in "/\\\x00"):
        return "is not a plain file name (no '/', '\\' or '..')"
    return None
