"""Load and validate the overlay configuration once: pins, release lines, consumer sets.

Layout (relative to the project root)::

    overlay/<pkg>/pins.toml        package settings + [release."X"] pins (wheel/sdist filename and sha256)
    overlay/sets.toml              consumer sets: which release lines are installed together
    patches/<pkg>/<X>/series       patch order for release line X
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .errors import PatchwheelError

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LOCAL = re.compile(r"^[a-z0-9]+(?:[.][a-z0-9]+)*$")


@dataclass(frozen=True)
class Artifact:
    filename: str
    sha256: str


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

    @property
    def fixed_version(self) -> str:
        return f"{self.version}+{self.local_label}"

    @property
    def key(self) -> str:
        return f"{self.package}/{self.version}"

    def upstream_path(self, wheel_path: str) -> str:
        """Map a path inside the wheel (transformers/x.py) to upstream's tree (src/transformers/x.py)."""
        return f"{self.source_root}/{wheel_path}" if self.source_root else wheel_path

    def wheel_path(self, upstream_path: str) -> str | None:
        """Inverse of :meth:`upstream_path`; None when the path is outside the shipped package."""
        prefix = f"{self.source_root}/" if self.source_root else ""
        if not upstream_path.startswith(prefix):
            return None
        rel = upstream_path[len(prefix) :]
        return rel if rel.split("/", 1)[0] == self.import_name else None


@dataclass(frozen=True)
class Overlay:
    root: Path
    lines: dict[str, list[ReleaseLine]]  # package -> lines, oldest first
    sets: dict[str, dict[str, str]] = field(default_factory=dict)  # set name -> {package: version}

    def packages(self) -> list[str]:
        return sorted(self.lines)

    def all_lines(self) -> list[ReleaseLine]:
        return [line for pkg in self.packages() for line in self.lines[pkg]]

    def line(self, package: str, version: str | None = None) -> ReleaseLine:
        """One release line; the newest when ``version`` is None. Clear errors for unknown input."""
        pkg = canonicalize_name(package)
        if pkg not in self.lines:
            raise PatchwheelError(
                f"unknown package {package!r}",
                f"known packages: {', '.join(self.packages())} (each has overlay/<pkg>/pins.toml)",
            )
        lines = self.lines[pkg]
        if version is None:
            return lines[-1]
        for line in lines:
            if line.version == version:
                return line
        raise PatchwheelError(
            f"no release line {pkg} {version}",
            f"known lines: {', '.join(l.version for l in lines)}; add [release.\"{version}\"] to "
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


def _read_toml(path: Path) -> dict:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise PatchwheelError(f"{path}: not valid TOML ({exc})", "correct the syntax at the position given") from exc


def _artifact(path: Path, version: str, kind: str, raw: object, required: bool) -> Artifact | None:
    if raw is None and not required:
        return None
    where = f"{path}: release {version!r} {kind}"
    if not isinstance(raw, dict) or set(raw) != {"filename", "sha256"}:
        raise PatchwheelError(
            f"{where} must be a table with exactly 'filename' and 'sha256'",
            f'write {kind} = {{ filename = "...", sha256 = "<64 hex digits from the index>" }}',
        )
    sha = str(raw["sha256"]).lower()
    if not _SHA256.match(sha):
        raise PatchwheelError(f"{where}: sha256 {raw['sha256']!r} is not 64 hex digits",
                              "copy the sha256 shown next to the file on the package index")
    filename = str(raw["filename"])
    if version not in filename:
        raise PatchwheelError(f"{where}: filename {filename!r} does not carry version {version}",
                              "pin the artifact of the same release as the table's name")
    if kind == "wheel" and not filename.endswith(".whl"):
        raise PatchwheelError(f"{where}: {filename!r} is not a wheel", "pin the py3-none-any .whl file")
    return Artifact(filename, sha)


def load(root: Path | str) -> Overlay:
    """Read overlay/*/pins.toml, overlay/sets.toml and check that patches/<pkg>/<X>/series exist."""
    root = Path(root).resolve()
    overlay_dir = root / "overlay"
    if not overlay_dir.is_dir():
        raise PatchwheelError(f"{root} has no overlay/ folder", "run the tool from the project root or pass --root")
    lines: dict[str, list[ReleaseLine]] = {}
    for pins in sorted(overlay_dir.glob("*/pins.toml")):
        data = _read_toml(pins)
        package = canonicalize_name(str(data.get("package", "")))
        if package != pins.parent.name:
            raise PatchwheelError(f"{pins}: package = {data.get('package')!r} but the folder is {pins.parent.name!r}",
                                  "make them agree")
        local = str(data.get("local-label", "fixed"))
        if not _LOCAL.match(local):
            raise PatchwheelError(f"{pins}: local-label {local!r} is not a PEP 440 local label",
                                  "use lower-case letters, digits and dots, e.g. 'fixed'")
        import_name = str(data.get("import-name", package.replace("-", "_")))
        source_root = str(data.get("source-root", "src")).strip("/")
        releases = data.get("release")
        if not isinstance(releases, dict) or not releases:
            raise PatchwheelError(f"{pins}: no [release.\"X\"] table", "pin at least one upstream release")
        pkg_lines = []
        for version, raw in releases.items():
            try:
                Version(version)
            except InvalidVersion as exc:
                raise PatchwheelError(f"{pins}: {version!r} is not a version", "name the table after the "
                                      "upstream release, e.g. [release.\"4.50.3\"]") from exc
            if not isinstance(raw, dict):
                raise PatchwheelError(f"{pins}: release {version!r} must be a table", "see overlay/*/pins.toml")
            unknown = set(raw) - {"wheel", "sdist"}
            if unknown:
                raise PatchwheelError(f"{pins}: release {version!r} has unknown keys {sorted(unknown)}",
                                      "only 'wheel' and 'sdist' are allowed")
            patch_dir = root / "patches" / package / version
            if not (patch_dir / "series").is_file():
                raise PatchwheelError(f"release line {package} {version} has no {patch_dir / 'series'}",
                                      "create it (an empty series is allowed) or remove the pin")
            pkg_lines.append(ReleaseLine(
                package=package, version=version,
                wheel=_artifact(pins, version, "wheel", raw.get("wheel"), True),
                sdist=_artifact(pins, version, "sdist", raw.get("sdist"), False),
                patch_dir=patch_dir, local_label=local, import_name=import_name, source_root=source_root,
            ))
        lines[package] = sorted(pkg_lines, key=lambda l: Version(l.version))
    if not lines:
        raise PatchwheelError(f"{overlay_dir} holds no <pkg>/pins.toml", "add overlay/<pkg>/pins.toml")
    for pkg_dir in sorted((root / "patches").glob("*/*")):
        if pkg_dir.is_dir() and not any(l.patch_dir == pkg_dir for ls in lines.values() for l in ls):
            raise PatchwheelError(f"{pkg_dir} has no pin in overlay/{pkg_dir.parent.name}/pins.toml",
                                  f"add [release.\"{pkg_dir.name}\"] there or remove the folder")
    sets: dict[str, dict[str, str]] = {}
    sets_file = overlay_dir / "sets.toml"
    if sets_file.is_file():
        for name, members in _read_toml(sets_file).get("set", {}).items():
            if not isinstance(members, dict) or not members:
                raise PatchwheelError(f"{sets_file}: set {name!r} must map packages to versions",
                                      'e.g. [set.default] transformers = "4.50.3"')
            ov = Overlay(root, lines)
            for pkg, version in members.items():
                ov.line(pkg, str(version))  # raises a clear error when unknown
            sets[name] = {canonicalize_name(k): str(v) for k, v in members.items()}
    return Overlay(root, lines, sets)
