"""The project's naming rules, each written once: the sha256 form, the record files the tool writes, wheel file
names read as the wheel spec says, and which paths and file names from input the tool accepts at all. A patch's
own name (``NNNN-slug.patch``, a slug, how a patch is looked up) and a hunk header are the patch format's, in
:mod:`series`.

Standard library and ``packaging`` only (the build runs in nox's own interpreter)."""

from __future__ import annotations

import re

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from .errors import ConfigError

#: A sha256 as the tool uses it: it becomes a cache folder's name, so nothing else is accepted.
SHA256 = re.compile(r"^[0-9a-f]{64}\Z")

#: What the tool records, file by file (the wheel's own list of its fixes is manifest.py's):
#: what a dist/ folder holds, where a line's fixed modules come from.
DIST_RECORD = "build.json"
VENDOR_RECORD = "VENDORED.json"


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
