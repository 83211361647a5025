"""Load and validate the overlay configuration once: pins, release lines, consumer sets.

Layout (relative to the project root)::

    overlay/<pkg>/pins.toml        package settings + [release."X"] pins (wheel/sdist filename and sha256, and the
                                   +fixed wheel's build number with the digest of the series it was given for)
    overlay/sets.toml              consumer sets: which release lines are installed together
    patches/<pkg>/<X>/series       patch order for release line X
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import InvalidVersion, Version

from . import torchaxis, writeback
from .errors import ConfigError
from .names import SHA256, file_name_problem, path_problem, wheel_name_version
from .torchaxis import TorchAxis

_LOCAL = re.compile(r"^[a-z0-9]+(?:[.][a-z0-9]+)*\Z")
#: The keys each file may have: anything else is a typo that would otherwise be ignored, leaving a default in place.
PINS_KEYS = ("package", "local-label", "import-name", "source-root", "release", "retired")
RELEASE_KEYS = ("wheel", "sdist", "build")
SETS_KEYS = ("set", "suite", "torch")
#: The consumer set of what new users install: `follow` moves it to each new line, and the default suite proves it.
LATEST = "latest"
SET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_keys(path: Path, table: dict, known: tuple[str, ...], where: str = "") -> None:
    """Refuse keys of ``table`` that are not in ``known``, suggesting the closest known one."""
    unknown = [k for k in table if k not in known]
    if not unknown:
        return

    def named(key: str) -> str:
        close = difflib.get_close_matches(key, known, n=1)
        return f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key)

    raise ConfigError(
        f"{path}: {where}unknown key{'s' if len(unknown) > 1 else ''} "
        f"{', '.join(named(k) for k in unknown)}; known keys: {', '.join(known)}",
        "correct or remove it: an unknown key is not ignored, since a misspelt one would leave "
        "the default in place without a word",
    )


@dataclass(frozen=True)
class Artifact:
    """An upstream file as pinned: its name on the index and the sha256 it must have."""

    filename: str
    sha256: str


@dataclass(frozen=True)
class BuildRecord:
    """``build = { number = N, inputs = "<sha256>" }``: the +fixed wheel's build number (its PEP 427 build tag is
    ``N_`` and the digest's first 12 digits) and the digest of the inputs it was given for: the upstream pin, the
    line's settings and the series (see :mod:`patchwheel.wheels.buildno`)."""

    number: int
    inputs: str


@dataclass(frozen=True)
class ReleaseLine:
    package: str
    version: str
    wheel: Artifact
    sdist: Artifact | None
    patch_dir: Path
    local_label: str
    import_name: str
    source_root: str
    build: BuildRecord | None = None
    retired_build: int = 0  # the highest build a retired line of this release recorded ([retired]): start above it
    proven_torch: tuple[str, ...] = ()  # the torch releases the sets that hold it are proven on ([torch])

    @property
    def fixed_version(self) -> str:
        return f"{self.version}+{self.local_label}"

    @property
    def key(self) -> str:
        return f"{self.package}/{self.version}"

    @property
    def vendor_dir(self) -> Path:
        """overlay/<pkg>/<version>/: the line's vendored fixed modules, at their paths inside the package."""
        return self.patch_dir.parents[2] / "overlay" / self.package / self.version

    def upstream_path(self, wheel_path: str) -> str:
        """Map a path inside the wheel (transformers/x.py) to upstream's tree (src/transformers/x.py)."""
        return f"{self.source_root}/{wheel_path}" if self.source_root else wheel_path

    def wheel_path(self, upstream_path: str) -> str | None:
        """Inverse of :meth:`upstream_path`; None when the path is outside the shipped package (or not a plain
        relative path: ``src/demo/../../x`` starts with the package's folder but is not in it)."""
        prefix = f"{self.source_root}/" if self.source_root else ""
        if not upstream_path.startswith(prefix) or path_problem(upstream_path):
            return None
        rel = upstream_path[len(prefix) :]
        return rel if rel.split("/", 1)[0] == self.import_name else None


#: Where the shared paths are, under the project root.
PATHS = {
    "matrix_json": "patches/MATRIX.json",
    "dist": "dist",
    "sets_file": "overlay/sets.toml",
    "notice": "overlay/NOTICE",
    "exports": "export",
}


@dataclass(frozen=True)
class Project:
    """The project's configuration, loaded and checked once: its root, its release lines (overlay/<pkg>/pins.toml
    and patches/<pkg>/<X>/) and its consumer sets (overlay/sets.toml), and the paths the tools share."""

    root: Path
    lines: dict[str, list[ReleaseLine]]  # package -> lines, oldest first
    sets: dict[str, dict[str, str]] = field(default_factory=dict)  # set name -> {package: version}
    suite: tuple[str, ...] | None = None  # the sets the default suite proves ([suite] sets); None: every set
    torch: TorchAxis | None = None  # the torch each set is proven on ([torch]); None: not stated
    # The paths every tool shares, set from ``root`` once (PATHS says where each is):
    matrix_json: Path = field(init=False)  # the committed matrix (its Markdown, MATRIX.md, beside it)
    dist: Path = field(init=False)  # where `build` writes by default, and the suite's sessions read
    sets_file: Path = field(init=False)
    notice: Path = field(init=False)  # where the vendored modules come from, and under which license
    exports: Path = field(init=False)  # where `export` writes, a folder a fix

    def __post_init__(self) -> None:
        for name, rel in PATHS.items():
            object.__setattr__(self, name, self.root / rel)

    @property
    def cache(self) -> Path:
        """The download and environment cache (:func:`cache_dir`)."""
        return cache_dir()

    def pins_file(self, package: str) -> Path:
        return self.root / "overlay" / package / "pins.toml"

    def series_dir(self, package: str, version: str) -> Path:
        """patches/<pkg>/<version>/: a line's series, or where a new line's goes."""
        return self.root / "patches" / package / version

    def vendor_root(self, package: str) -> Path:
        """overlay/<pkg>/: the package's pins and its lines' fixed modules."""
        return self.root / "overlay" / package

    def packages(self) -> list[str]:
        return sorted(self.lines)

    def all_lines(self) -> list[ReleaseLine]:
        return [line for pkg in self.packages() for line in self.lines[pkg]]

    def line(self, package: str, version: str | None = None) -> ReleaseLine:
        """One release line; the newest when ``version`` is None. Clear errors for unknown input."""
        pkg = canonicalize_name(package)
        if pkg not in self.lines:
            raise ConfigError(
                f"unknown package {package!r}",
                f"known packages: {', '.join(self.packages())} (each has overlay/<pkg>/pins.toml)",
            )
        lines = self.lines[pkg]
        if version is None:
            return lines[-1]
        for line in lines:
            if line.version == version:
                return line
        raise ConfigError(
            f"no release line {pkg} {version}",
            f'known lines: {", ".join(ln.version for ln in lines)}; add [release."{version}"] to '
            f"overlay/{pkg}/pins.toml and patches/{pkg}/{version}/series (or rebase onto it)",
        )

    def select(self, specs: list[str]) -> list[ReleaseLine]:
        """Parse ``pkg`` or ``pkg==version`` selections; empty means every line."""
        if not specs:
            return self.all_lines()
        out: list[ReleaseLine] = []
        for spec in specs:
            name, _, version = spec.partition("==")
            if version:
                out.append(self.line(name, version))
            else:
                self.line(name)  # validates the name
                out.extend(self.lines[canonicalize_name(name)])
        return out


def cache_dir() -> Path:
    """Downloads (by sha256) and test environments: PATCHWHEEL_CACHE, else the user's cache folder."""
    if env := os.environ.get("PATCHWHEEL_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "patchwheel"


def _read_toml(path: Path) -> dict:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})", "correct the syntax at the position given") from exc


def _artifact(path: Path, version: str, kind: str, raw: object) -> Artifact:
    where = f"{path}: release {version!r} {kind}"
    if not isinstance(raw, dict) or set(raw) != {"filename", "sha256"}:
        raise ConfigError(
            f"{where} must be a table with exactly 'filename' and 'sha256'",
            f'write {kind} = {{ filename = "...", sha256 = "<64 hex digits from the index>" }}',
        )
    sha = str(raw["sha256"]).lower()
    if not SHA256.match(sha):
        raise ConfigError(
            f"{where}: sha256 {raw['sha256']!r} is not 64 hex digits",
            "copy the sha256 shown next to the file on the package index",
        )
    filename = str(raw["filename"])
    if problem := file_name_problem(filename):
        raise ConfigError(
            f"{where}: filename {filename!r} {problem}", "pin the file name exactly as the package index lists it"
        )
    if kind == "wheel" and not filename.endswith(".whl"):
        raise ConfigError(f"{where}: {filename!r} is not a wheel", "pin the py3-none-any .whl file")
    if kind == "wheel":
        hint = "pin the py3-none-any .whl file exactly as the package index lists it"
        of = wheel_name_version(filename, where=f"{where}: ", hint=hint)[1]
    else:
        try:
            of = str(parse_sdist_filename(filename)[1])
        except InvalidSdistFilename as exc:
            raise ConfigError(
                f"{where}: filename {filename!r} is not an sdist's ({exc})",
                "pin the .tar.gz file exactly as the package index lists it",
            ) from exc
    if of != version:  # the whole version: "5.24" is in "...-5.24.0-py3-none-any.whl", and is another key
        raise ConfigError(
            f"{where}: filename {filename!r} is {'a wheel' if kind == 'wheel' else 'an sdist'} of {of}, not of "
            f"{version}",
            "pin the artifact of the same release as the table's name",
        )
    return Artifact(filename, sha)


def _retired(path: Path, raw: object) -> dict[str, int]:
    """``[retired] "X" = N``: the highest build number each retired line recorded (its wheels may be published)."""
    hint = '[retired] "5.23.0" = 1: a version and the highest build number its retired line recorded'
    if not isinstance(raw, dict) or not all(type(n) is int and n >= 1 for n in raw.values()):
        raise ConfigError(f"{path}: [retired] must map versions to build numbers (1 or more)", hint)
    for version in raw:
        _version_key(path, "[retired]", version, hint)
    return dict(raw)


def _version_key(path: Path, where: str, key: str, hint: str) -> Version:
    """A version as a key of pins.toml (``where``: a line's table, "release", or "[retired]"): one spelling per
    version, the one PEP 440 writes (``str(Version(key))``), without a local label. ``v5.23.0`` beside ``5.23.0``
    was another key to TOML and the same version to everything else (the wheel's name, pip)."""
    try:
        version = Version(key)
    except InvalidVersion as exc:
        raise ConfigError(f"{path}: {where} {key!r} is not a version", hint) from exc
    written = str(version) if version.local is None else version.public
    pkg = path.parent.name
    if where == "release":
        rename = (
            f'name the table [release."{written}"] and the line\'s folders patches/{pkg}/{written}/ and '
            f"overlay/{pkg}/{written}/, as the package index names the release"
        )
    else:
        rename = (
            f'write the key "{written}", as the package index names the release; where "{written}" is there too, '
            "keep the higher number under it alone"
        )
    if version.local is not None:
        raise ConfigError(f"{path}: {where} {key!r} has a local label: an upstream release has none", rename)
    if written != key:
        raise ConfigError(f"{path}: {where} {key!r} is not a version as PEP 440 writes it: write {written!r}", rename)
    return version


def _one_spelling(path: Path, releases: list[str], retired: list[str]) -> None:
    """One version is one line and one retired number: ``1.0`` and ``1.0.0`` are one version (PEP 440), so a line
    of the one beside (or after) the other would give that version a second set of build numbers. A line made
    again for a retired release keeps the release's key, so it reads the retired number."""
    lines: dict[Version, str] = {}
    numbers: dict[Version, str] = {}
    for key in releases:
        if (seen := lines.setdefault(Version(key), key)) != key:
            raise _two_spellings(path, f'[release."{seen}"]', f'[release."{key}"]')
    for key in retired:
        if (seen := numbers.setdefault(Version(key), key)) != key:
            raise _two_spellings(path, f'[retired] "{seen}"', f'[retired] "{key}"')
        if (line := lines.get(Version(key), key)) != key:
            raise _two_spellings(path, f'[release."{line}"]', f'[retired] "{key}"')


def _two_spellings(path: Path, first: str, second: str) -> ConfigError:
    one, other = first.split('"')[1], second.split('"')[1]
    return ConfigError(
        f"{path}: {first} and {second} are one version (PEP 440: {one} == {other})",
        "keep one spelling of a release, the one its wheel's file name has, and remove the other: a line made "
        "again for a retired release takes the retired key, so that its build numbers start above the retired "
        "line's",
    )


def _build_record(path: Path, version: str, raw: object) -> BuildRecord | None:
    if raw is None:
        return None
    hint = 'write build = { number = 1, inputs = "<sha256>" }, or let `nox -s bump -- PKG==VERSION` write it'
    where = f"{path}: release {version!r} build"
    if not isinstance(raw, dict) or set(raw) != {"number", "inputs"}:
        raise ConfigError(f"{where} must be a table with exactly 'number' and 'inputs'", hint)
    number, inputs = raw["number"], raw["inputs"]
    if type(number) is not int or number < 1:
        raise ConfigError(f"{where}: number {number!r} is not a whole number of 1 or more", hint)
    if not isinstance(inputs, str) or not SHA256.match(inputs):
        raise ConfigError(f"{where}: inputs {inputs!r} is not 64 lower-case hex digits", hint)
    return BuildRecord(number, inputs)


def load(root: Path | str) -> Project:
    """Read overlay/*/pins.toml, overlay/sets.toml and check that patches/<pkg>/<X>/series exist."""
    root = Path(root).resolve()
    overlay_dir = root / "overlay"
    if not overlay_dir.is_dir():
        raise ConfigError(f"{root} has no overlay/ folder", "run the tool from the project root or pass --root")
    writeback.recover(root)  # a write-back that a kill cut short: finished or undone before anything is read
    lines: dict[str, list[ReleaseLine]] = {}
    for pins in sorted(overlay_dir.glob("*/pins.toml")):
        data = _read_toml(pins)
        check_keys(pins, data, PINS_KEYS)
        package = canonicalize_name(str(data.get("package", "")))
        if package != pins.parent.name:
            raise ConfigError(
                f"{pins}: package = {data.get('package')!r} but the folder is {pins.parent.name!r}", "make them agree"
            )
        local = str(data.get("local-label", "fixed"))
        if not _LOCAL.match(local):
            raise ConfigError(
                f"{pins}: local-label {local!r} is not a PEP 440 local label",
                "use lower-case letters, digits and dots, e.g. 'fixed'",
            )
        import_name = str(data.get("import-name", package.replace("-", "_")))
        source_root = str(data.get("source-root", "src")).strip("/")
        releases = data.get("release")
        if not isinstance(releases, dict) or not releases:
            raise ConfigError(f'{pins}: no [release."X"] table', "pin at least one upstream release")
        retired = _retired(pins, data.get("retired", {}))
        for version in releases:
            _version_key(pins, "release", version, 'name the table after the upstream release, e.g. [release."4.50.3"]')
        _one_spelling(pins, list(releases), list(retired))
        pkg_lines = []
        for version, raw in releases.items():
            if not isinstance(raw, dict):
                raise ConfigError(f"{pins}: release {version!r} must be a table", "see overlay/*/pins.toml")
            check_keys(pins, raw, RELEASE_KEYS, f"release {version!r}: ")
            patch_dir = root / "patches" / package / version
            if not (patch_dir / "series").is_file():
                raise ConfigError(
                    f"release line {package} {version} has no {patch_dir / 'series'}",
                    "create it (an empty series is allowed) or remove the pin",
                )
            pkg_lines.append(
                ReleaseLine(
                    package=package,
                    version=version,
                    wheel=_artifact(pins, version, "wheel", raw.get("wheel")),
                    sdist=None if raw.get("sdist") is None else _artifact(pins, version, "sdist", raw["sdist"]),
                    patch_dir=patch_dir,
                    local_label=local,
                    import_name=import_name,
                    source_root=source_root,
                    build=_build_record(pins, version, raw.get("build")),
                    retired_build=retired.get(version, 0),
                )
            )
        lines[package] = sorted(pkg_lines, key=lambda ln: Version(ln.version))
    if not lines:
        raise ConfigError(f"{overlay_dir} holds no <pkg>/pins.toml", "add overlay/<pkg>/pins.toml")
    for pkg_dir in sorted((root / "patches").glob("*/*")):
        if pkg_dir.is_dir() and not any(ln.patch_dir == pkg_dir for ls in lines.values() for ln in ls):
            raise ConfigError(
                f"{pkg_dir} has no pin in overlay/{pkg_dir.parent.name}/pins.toml",
                f'add [release."{pkg_dir.name}"] there or remove the folder',
            )
    sets: dict[str, dict[str, str]] = {}
    suite: tuple[str, ...] | None = None
    axis: TorchAxis | None = None
    sets_file = overlay_dir / "sets.toml"
    if sets_file.is_file():
        data = _read_toml(sets_file)
        check_keys(sets_file, data, SETS_KEYS)
        if not isinstance(data.get("set", {}), dict):
            raise ConfigError(
                f"{sets_file}: 'set' must be a table of sets", 'e.g. [set.default] transformers = "4.50.3"'
            )
        for name, members in data.get("set", {}).items():
            if not SET_NAME.fullmatch(name):
                raise ConfigError(
                    f"{sets_file}: set name {name!r} is not a plain name (it names dist/pins-<name>.txt)",
                    "use letters, digits, '.', '_' and '-', starting with a letter or digit, e.g. [set.\"v4.53\"]",
                )
            if not isinstance(members, dict) or not members:
                raise ConfigError(
                    f"{sets_file}: set {name!r} must map packages to versions",
                    'e.g. [set.default] transformers = "4.50.3"',
                )
            ov = Project(root, lines)
            for pkg, version in members.items():
                ov.line(pkg, str(version))  # raises a clear error when unknown
            sets[name] = {canonicalize_name(k): str(v) for k, v in members.items()}
        suite = _suite(sets_file, data["suite"], sets) if "suite" in data else None
        if "torch" in data:
            axis = torchaxis.parse(sets_file, data["torch"], sets)
            lines = {
                pkg: [replace(ln, proven_torch=axis.of_line(sets, pkg, ln.version)) for ln in pkg_lines]
                for pkg, pkg_lines in lines.items()
            }
    return Project(root, lines, sets, suite, axis)


def _suite(sets_file: Path, raw: object, sets: dict[str, dict[str, str]]) -> tuple[str, ...]:
    """``[suite] sets = [...]``: the sets `nox` proves on every run (every set, when there is no such table)."""
    hint = 'e.g. [suite] sets = ["latest", "v4"]: sets of this file'
    if not isinstance(raw, dict):
        raise ConfigError(f"{sets_file}: 'suite' must be a table", hint)
    check_keys(sets_file, raw, ("sets",), "[suite] ")
    names = raw.get("sets")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{sets_file}: [suite] sets must be a list of set names", hint)
    unknown = [n for n in names if n not in sets]
    if unknown or len(set(names)) != len(names):
        what = f"names no set {', '.join(map(repr, unknown))}" if unknown else "names a set twice"
        raise ConfigError(f"{sets_file}: [suite] sets {what}", hint)
    return tuple(names)


def changed(
    project: Project,
    *,
    lines: dict[str, list[ReleaseLine]] | None = None,
    sets: dict[str, dict[str, str]] | None = None,
    suite: tuple[str, ...] | None = None,
    torch: TorchAxis | None = None,
) -> Project:
    """``project`` as :func:`load` would read it after a command wrote the packages' ``lines`` (package -> its
    lines, in any order), ``sets``, ``suite`` or ``torch`` (each given replaces the project's): a command that
    writes the configuration passes this along instead of loading everything again. Each line's torch is
    recomputed from the sets, as load does."""
    axis = project.torch if torch is None else torch
    sets = project.sets if sets is None else sets
    every = {**project.lines, **(lines or {})}
    every = {
        pkg: sorted(
            (replace(ln, proven_torch=axis.of_line(sets, pkg, ln.version) if axis else ()) for ln in pkg_lines),
            key=lambda ln: Version(ln.version),
        )
        for pkg, pkg_lines in every.items()
    }
    return Project(project.root, every, sets, project.suite if suite is None else suite, axis)


def build_record(pins: Path, version: str) -> BuildRecord | None:
    """The build record of ``[release."<version>"]`` in ``pins``, read as :func:`load` reads it (one file: what a
    writer reads back)."""
    raw = _read_toml(pins).get("release", {}).get(version)
    return _build_record(pins, version, raw.get("build") if isinstance(raw, dict) else None)


def retired_build(pins: Path, version: str) -> int:
    """The build number ``[retired]`` of ``pins`` records for ``version`` (0: none), as :func:`load` reads it."""
    return _retired(pins, _read_toml(pins).get("retired", {})).get(version, 0)
