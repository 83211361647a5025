"""Which upstream releases a run looks at: ``transformers==4.54.0``, ``'accelerate>=1.10'``, as a maintainer types
them, checked so that a typo or a bare version never selects nothing without a word."""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ...config import Project
from ...errors import ConfigError


@dataclass(frozen=True)
class Selection:
    """Which releases to look at, per package: a specifier (``>=4.54,<4.58``) or explicit versions."""

    specs: dict[str, list[SpecifierSet]]  # canonical name -> specifiers; wanted when any of them admits a release
    items: dict[str, str] = field(default_factory=dict)  # canonical name -> the first item naming it, as written

    @classmethod
    def parse(cls, items: list[str]) -> Selection:
        specs: dict[str, list[SpecifierSet]] = {}
        written: dict[str, str] = {}
        for item in items:
            try:
                req = Requirement(item)
            except InvalidRequirement as exc:
                raise ConfigError(
                    f"cannot read release selection {item!r}",
                    "write e.g. transformers==4.53.3 or 'transformers>=4.54,<4.58'",
                ) from exc
            name = canonicalize_name(req.name)  # Transformers, transformers and TRANSFORMERS select one package
            specs.setdefault(name, []).append(req.specifier)
            written.setdefault(name, item)
        return cls(specs, written)

    def wants(self, package: str, version: str, default: bool = True) -> bool:
        if package not in self.specs:
            return default if not self.specs else False
        return any(Version(version) in spec for spec in self.specs[package])


def check_selections(project: Project, selection: Selection, behaviour: Selection | None) -> None:
    """Refuse a selection that would silently select nothing: a package the overlay does not have (a typo, or a
    bare version, which reads as a package name), or a --behaviour package the release selection leaves out."""
    known = project.packages()
    for what, sel in (("the release selection", selection), ("--behaviour", behaviour)):
        for name, item in (sel.items if sel else {}).items():
            written = Requirement(item).name
            if name in known:
                continue
            if is_version(written):
                raise ConfigError(
                    f"{written!r} in {what} names no package",
                    f"name the package too, e.g. {' or '.join(f'{k}=={written}' for k in known)}",
                )
            newest = project.lines[known[0]][-1].version
            raise ConfigError(
                f"unknown package {written!r} in {what}",
                f"known packages: {', '.join(known)} (each has overlay/<pkg>/pins.toml); e.g. "
                f"'{known[0]}>{newest}' selects every release newer than its newest line",
            )
    if behaviour is not None and selection.specs:
        if left_out := sorted(set(behaviour.specs) - set(selection.specs)):
            raise ConfigError(
                f"--behaviour names {', '.join(left_out)}, which the release selection leaves out "
                f"({', '.join(selection.items.values())}): no proof would run for it",
                "add the package to the release selection, or leave it out of --behaviour",
            )


def is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True
