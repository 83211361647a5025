"""What a dist/ folder holds, and which folders a build may write: its build.json read and checked, the files a build
writes, the folders a build refuses (the project, the home folder, a folder it did not make), and the +fixed wheel
of a line in it.

A build replaces only a dist/ it made: a sound build.json, and nothing a build does not write. A draft's wheel
(:mod:`patchwheel.draft`) is for the proofs only: it goes into ``dist/drafts/`` (:func:`wheel_file`), out of reach
of the upload docs/publishers.md shows (``dist/*.whl``), as it is out of the index and the pins."""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .. import draft
from ..config import ReleaseLine
from ..errors import ConfigError, DistError
from ..names import DIST_RECORD, SHA256, wheel_name_version
from ..probes import manifest as fixes
from ..series import parse_series
from . import rewrite, sbom
from .index import METADATA_SUFFIX

#: The files a build writes into dist/ besides the wheels build.json lists, their core metadata and the simple/ index.
_PINS_FILE = re.compile(r"^(constraints|pins)-[^/]+\.txt\Z")
REPLACES = "a build replaces the whole --dist folder"
#: The folder of dist/ that holds the drafts' wheels: no glob of dist/'s wheels (``dist/*.whl``) reaches it.
DRAFTS = "drafts"


def wheel_file(dist: Path, filename: str) -> Path:
    """Where ``dist`` holds the wheel ``filename`` (as build.json lists it): a draft's in ``dist/drafts/``, every
    other in ``dist/`` itself."""
    return dist / DRAFTS / filename if draft.is_draft_wheel(filename) else dist / filename


@dataclass(frozen=True)
class DistWheel:
    """One wheel as build.json records it: built by this run, or kept from the previous build of dist/."""

    filename: str
    sha256: str
    package: str
    upstream_version: str
    fixed_version: str
    upstream_sha256: str | None
    patches: tuple[str, ...]
    proven_torch: tuple[str, ...] = ()  # the torch releases its fixes are proven on ([torch] of sets.toml)

    @property
    def key(self) -> tuple[str, Version]:
        """The release line it belongs to; versions compared as versions ("1.0" is "1.0.0")."""
        return self.package, Version(self.upstream_version)

    def record(self) -> dict:
        return {
            "filename": self.filename,
            "sha256": self.sha256,
            "package": self.package,
            "upstream_version": self.upstream_version,
            "fixed_version": self.fixed_version,
            "upstream_sha256": self.upstream_sha256,
            "patches": list(self.patches),
        } | ({"proven_torch": list(self.proven_torch)} if self.proven_torch else {})


def _home() -> Path | None:
    try:
        return Path.home().resolve()
    except (RuntimeError, KeyError):  # no HOME and no password entry
        return None


def check_dist_path(dist: Path, root: Path) -> None:
    """dist/ must be a folder or a path that can become one, and never one whose replacement would take the
    project, the home folder or the whole file system with it (`--dist .` in a clone, `--dist /`). A
    file there ended in NotADirectoryError, and with --clean the build even replaced the file."""
    hint = f"pass --dist a folder of its own (it is made when missing), e.g. --dist {root / 'dist'}"
    if dist == Path(dist.anchor):
        raise DistError(f"--dist {dist} is the file system root: {REPLACES}", hint)
    for what, folder in (("the project root", root), ("your home folder", _home())):
        if folder is not None and dist == folder:
            raise DistError(f"--dist {dist} is {what}: {REPLACES}", hint)
        if folder is not None and dist in folder.parents:
            raise DistError(f"--dist {dist} holds {what} ({folder}): {REPLACES}", hint)
    for path in (dist, *dist.parents):
        if path.is_dir():
            return
        if path.exists() or path.is_symlink():
            so = "" if path == dist else f", so {dist} cannot be made"
            raise DistError(
                f"{path} is a file, not a folder{so}",
                "pass --dist a folder (it is made when missing), e.g. --dist dist",
            )


def _damaged_record_hint(mf: Path) -> str:
    """What to do about a damaged build.json: not --clean, which would replace a folder nothing shows is the
    tool's."""
    return (
        f"a build replaces only a folder it made: if {mf.parent} is patchwheel's output, remove it (or move it "
        "aside) and build again; if not, pass --dist another folder"
    )


def _published_entry(mf: Path, i: int, raw: object) -> DistWheel:
    """One build.json entry, checked; entries written before package and versions were recorded get them from
    the wheel's file name."""

    def damaged(why: str) -> DistError:
        return DistError(f"{mf} is damaged: wheel entry {i}: {why}", _damaged_record_hint(mf))

    if not isinstance(raw, dict):
        raise damaged("not an object")
    filename, sha256, patches = raw.get("filename"), raw.get("sha256"), raw.get("patches", [])
    if not isinstance(filename, str) or Path(filename).name != filename:
        raise damaged(f"filename {filename!r} is not a file name")
    try:
        package, fixed = wheel_name_version(filename)
        version = Version(fixed)
    except (ConfigError, InvalidVersion) as exc:
        raise damaged(str(exc).splitlines()[0]) from exc
    if not isinstance(sha256, str) or not SHA256.match(sha256):
        raise damaged(f"sha256 {sha256!r} is not 64 hex digits")
    if not isinstance(patches, list) or not all(isinstance(p, str) for p in patches):
        raise damaged("patches is not a list of names")
    torch = raw.get("proven_torch", [])
    if not isinstance(torch, list) or not all(isinstance(t, str) for t in torch):
        raise damaged("proven_torch is not a list of versions")
    derived = {"package": str(package), "upstream_version": version.public, "fixed_version": str(version)}
    fields = {key: raw.get(key, value) for key, value in derived.items()}
    upstream_sha256 = raw.get("upstream_sha256")
    for key, value in {**fields, "upstream_sha256": "" if upstream_sha256 is None else upstream_sha256}.items():
        if not isinstance(value, str):
            raise damaged(f"{key} {value!r} is not a string")
    try:
        Version(fields["upstream_version"])
    except InvalidVersion as exc:
        raise damaged(str(exc)) from exc
    return DistWheel(
        filename,
        sha256,
        canonicalize_name(fields["package"]),
        fields["upstream_version"],
        fields["fixed_version"],
        upstream_sha256,
        tuple(patches),
        tuple(torch),
    )


def dist_wheels(dist: Path) -> list[DistWheel]:
    """The wheels dist/build.json lists (none when there is no build.json). A damaged file is an error that says
    what to do, never a traceback."""
    mf = dist / DIST_RECORD
    if not mf.is_file():
        return []
    try:
        data = json.loads(mf.read_bytes())
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise DistError(f"{mf} is damaged: not JSON ({exc})", _damaged_record_hint(mf)) from exc
    wheels = data.get("wheels") if isinstance(data, dict) else None
    if not isinstance(wheels, list):
        raise DistError(f'{mf} is damaged: no "wheels" list', _damaged_record_hint(mf))
    return [_published_entry(mf, i, raw) for i, raw in enumerate(wheels, 1)]


def listing(names: list[str], most: int = 8) -> str:
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def _not_written(dist: Path, wheels: list[DistWheel]) -> list[str]:
    """What dist/ holds that no build wrote (a folder with a trailing /): the swap replaces the whole
    folder, so any of it would be lost. A build writes build.json, the wheels it lists (a draft's in drafts/; a
    build before drafts/ existed wrote it beside the others), each published wheel's SBOM (``<wheel>.cdx.json``) and
    core metadata (``<wheel>.metadata``, PEP 658; never a draft's: a draft is not on the index) beside it, the pins
    files and the simple/ index (an index.html per folder), and never a link."""
    published = [w.filename for w in wheels if not draft.is_draft_wheel(w.filename)]
    own = {
        DIST_RECORD,
        *(w.filename for w in wheels),
        *(f + s for f in published for s in (METADATA_SUFFIX, sbom.DETACHED)),
    }
    drafts = {w.filename for w in wheels if draft.is_draft_wheel(w.filename)}
    found = []
    for entry in sorted(dist.iterdir()):
        if entry.name == "simple" and entry.is_dir() and not entry.is_symlink():
            found += [f"simple/{name}" for name in _not_written_index(entry)]
        elif entry.name == DRAFTS and entry.is_dir() and not entry.is_symlink():
            found += [
                f"{DRAFTS}/{p.name}" + ("/" if p.is_dir() and not p.is_symlink() else "")
                for p in sorted(entry.iterdir())
                if p.is_symlink() or not p.is_file() or p.name not in drafts
            ]
        elif entry.is_symlink() or not entry.is_file() or not (entry.name in own or _PINS_FILE.match(entry.name)):
            found.append(entry.name + ("/" if entry.is_dir() and not entry.is_symlink() else ""))
    return found


def _not_written_index(simple: Path) -> list[str]:
    found = []
    for entry in sorted(simple.iterdir()):
        if entry.is_symlink() or not entry.is_dir():
            if entry.name != "index.html" or entry.is_symlink() or not entry.is_file():
                found.append(entry.name)
            continue
        inside = [p.name for p in entry.iterdir()]
        page = entry / "index.html"
        if inside != ["index.html"] or page.is_symlink() or not page.is_file():
            found.append(f"{entry.name}/")
    return found


def read_previous(dist: Path, root: Path) -> list[DistWheel] | None:
    """The previous build in dist/ (None when there is no dist/ or it is empty), after checking that the tool
    made it: it has a sound build.json and nothing a build does not write. --clean replaces dist/ too, so it gets
    the same check (it once emptied any folder --dist named)."""
    if not dist.exists():
        return None
    held = sorted(p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in dist.iterdir())
    if not (dist / DIST_RECORD).is_file():
        if held:
            raise DistError(
                f"{dist} exists and was not made by patchwheel (no {DIST_RECORD}); it holds {listing(held)}",
                f"{REPLACES}: pass --dist a new or empty folder, e.g. --dist {root / 'dist'}, or move what this "
                "one holds elsewhere",
            )
        return None
    wheels = dist_wheels(dist)
    if foreign := _not_written(dist, wheels):
        raise DistError(
            f"{dist} holds what no build wrote: {listing(foreign)}",
            f"{REPLACES}: move them elsewhere, or pass --dist another folder",
        )
    return wheels


def current_wheel(line: ReleaseLine, dist: Path, hint: str) -> Path:
    """The line's +fixed wheel in ``dist``, checked to carry the line's current patches: a wheel built before a
    patch changed is refused (``hint``: how the caller's user builds it)."""
    path = wheel_file(dist, rewrite.wheel_names(line).filename)
    if not path.is_file():
        raise DistError(f"{path} does not exist", hint)
    built = [(p["name"], p["sha256"]) for p in wheel_manifest(path)["patches"]]
    # (the series as the build read it: a draft's message is not judged, its wheel is for the proofs)
    if built != [(p.name, p.sha256) for p in parse_series(line)]:
        raise DistError(f"{path} was built from other patches than patches/{line.key}/ holds now", hint)
    return path


def wheel_manifest(path: Path) -> dict:
    """The manifest the +fixed wheel at ``path`` carries (ValueError: it cannot be read)."""
    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/" + fixes.NAME))
        return fixes.loads(rewrite.read_member(zf, name))


def wheel_sbom(path: Path) -> bytes:
    """The SBOM the +fixed wheel at ``path`` carries, as bytes (ValueError or KeyError: it has none, or more than
    one; :func:`sbom.loads` reads it)."""
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if n.endswith(f".dist-info/{sbom.FOLDER}/{sbom.NAME}") and n.count("/") == 2]
        if len(names) != 1:
            raise ValueError(f"{path.name} holds {len(names)} {sbom.FOLDER}/{sbom.NAME} files, not one")
        return rewrite.read_member(zf, names[0])
