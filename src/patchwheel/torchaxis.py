"""The torch axis: which torch releases each consumer set is proven on, as ``[torch]`` of overlay/sets.toml says::

    [torch]
    suite = "2.13.0"     # the default suite's torch, for the sets [suite] names
    newest = "2.14.1"    # the newest torch release: every set is proven on it
    [torch.floor]        # each set's floor: the oldest torch its releases declare that installs on this Python
    latest = "2.6.0"
    [torch.unproven]     # floors the proofs cannot judge yet, each with why (a run there showed it)
    v4 = "torch 2.2.0: ..."

A set is proven on its floor (unless ``[torch.unproven]`` says why not), the suite's torch and the newest; a release
line on what every set that holds it is proven on. Lint checks each floor against the releases' own
``Requires-Dist`` (:func:`declared_floor`), so a new release that raises its floor cannot leave a set proven on a
torch its users cannot install.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name
from packaging.version import Version

from .errors import ConfigError

if TYPE_CHECKING:
    from packaging.requirements import Requirement

#: A torch release as this file writes it: three numbers, nothing else (2.13.0, never 2.13 or 2.13.0+cpu).
RELEASE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+\Z")
#: The oldest torch with wheels for each Python this tool runs on: a floor below it cannot be installed there.
OLDEST_INSTALLABLE = {(3, 11): "1.13.0", (3, 12): "2.2.0", (3, 13): "2.5.0"}
#: The extra of transformers that carries its torch requirement (accelerate's is unconditional).
EXTRA = "torch"
_HINT = 'e.g. [torch] suite = "2.13.0", newest = "2.14.1", and [torch.floor] latest = "2.6.0"'


@dataclass(frozen=True)
class TorchAxis:
    suite: str
    newest: str
    floors: dict[str, str]  # set name -> floor
    unproven: dict[str, str] = field(default_factory=dict)  # set name -> why its floor is not proven

    def of_set(self, name: str) -> tuple[str, ...]:
        """The torch releases the set is proven on, oldest first: its floor too unless it is unproven."""
        floor = set() if name in self.unproven else {self.floors[name]}
        return tuple(sorted(floor | {self.suite, self.newest}, key=Version))

    def of_line(self, sets: dict[str, dict[str, str]], package: str, version: str) -> tuple[str, ...]:
        """The torch releases a release line is proven on: those of every set that holds it (none: no set)."""
        found = {t for name, members in sets.items() if members.get(package) == version for t in self.of_set(name)}
        return tuple(sorted(found, key=Version))

    def cells(self, sets: list[str]) -> list[dict[str, str]]:
        """Every (set, torch) the sets workflow proves, as its job matrix lists them."""
        return [{"set": name, "torch": torch} for name in sets for torch in self.of_set(name)]


def parse(sets_file: Path, raw: object, sets: dict[str, dict[str, str]]) -> TorchAxis:
    """``[torch]`` of ``sets_file``, checked: every version a plain release, a floor for every set and only for
    sets of the file, floor <= suite <= newest."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{sets_file}: 'torch' must be a table", _HINT)
    unknown = sorted(set(raw) - {"suite", "newest", "floor", "unproven"})
    if unknown:
        raise ConfigError(f"{sets_file}: [torch] has unknown key(s) {', '.join(map(repr, unknown))}", _HINT)
    floors = raw.get("floor", {})
    if not isinstance(floors, dict):
        raise ConfigError(f"{sets_file}: [torch.floor] must map set names to torch releases", _HINT)
    values = {"suite": raw.get("suite"), "newest": raw.get("newest"), **{f"floor.{k}": v for k, v in floors.items()}}
    for key, value in values.items():
        if not isinstance(value, str) or not RELEASE.match(value):
            raise ConfigError(
                f"{sets_file}: [torch] {key} = {value!r} is not a torch release written as three numbers", _HINT
            )
    if extra := sorted(set(floors) - set(sets)):
        raise ConfigError(f"{sets_file}: [torch.floor] names no set {', '.join(map(repr, extra))}", _HINT)
    if missing := sorted(set(sets) - set(floors)):
        raise ConfigError(
            f"{sets_file}: [torch.floor] has no floor for the set(s) {', '.join(map(repr, missing))}",
            "add the oldest torch their releases declare (`nox -s lint` says which)",
        )
    unproven = raw.get("unproven", {})
    if not isinstance(unproven, dict) or not all(isinstance(v, str) and v.strip() for v in unproven.values()):
        raise ConfigError(f"{sets_file}: [torch.unproven] must map set names to why their floor is not proven", _HINT)
    if extra := sorted(set(unproven) - set(sets)):
        raise ConfigError(f"{sets_file}: [torch.unproven] names no set {', '.join(map(repr, extra))}", _HINT)
    axis = TorchAxis(str(raw["suite"]), str(raw["newest"]), {k: str(v) for k, v in floors.items()}, dict(unproven))
    if Version(axis.suite) > Version(axis.newest):
        raise ConfigError(f"{sets_file}: [torch] suite {axis.suite} is newer than newest {axis.newest}", _HINT)
    if above := [f"{name} ({floor})" for name, floor in floors.items() if Version(floor) > Version(axis.newest)]:
        raise ConfigError(f"{sets_file}: [torch.floor] above newest {axis.newest}: {', '.join(above)}", _HINT)
    return axis


def suite_of(root: Path) -> str | None:
    """The ``[torch] suite`` release of the project at ``root``, read quietly (None where it states none or the file
    cannot be read: the commands that need the file say what is wrong with it)."""
    try:
        suite = tomllib.loads((root / "overlay" / "sets.toml").read_text()).get("torch", {}).get("suite")
    except (OSError, ValueError, AttributeError):
        return None
    return suite if isinstance(suite, str) and RELEASE.match(suite) else None


def use_suite_torch(root: Path) -> None:
    """Make the project's suite torch the run's TORCH_VERSION where the caller named none: every part of a run (and
    the proof processes it starts) then uses one torch, the one the committed matrix and the suite use."""
    if not os.environ.get("TORCH_VERSION") and (suite := suite_of(root)):
        os.environ["TORCH_VERSION"] = suite


def declared(metadata: str) -> list[Requirement]:
    """The torch requirements a wheel's METADATA declares for a user who installs it with torch: unconditional
    ones and those of the ``torch`` extra. (packaging's requirement parser, which compiles many regular expressions,
    and the e-mail parser are imported here: every command reads the suite's torch from this module at its start.)"""
    from email.parser import Parser

    from packaging.markers import UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    for line in Parser().parsestr(metadata).get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != "torch":
            continue
        try:
            applies = req.marker is None or req.marker.evaluate({"extra": EXTRA})
        except UndefinedEnvironmentName:
            applies = False
        if applies:
            out.append(req)
    return out


def declared_floor(reqs: list[Requirement], python: tuple[int, int] | None = None) -> str:
    """The oldest torch release these requirements admit that installs on ``python`` (this one by default): the
    highest lower bound they state, or the oldest torch with wheels for that Python where it is higher."""
    python = python or (sys.version_info.major, sys.version_info.minor)
    bounds = [Version(OLDEST_INSTALLABLE.get(python, "1.13.0"))]
    for req in reqs:
        for spec in req.specifier:
            if spec.operator in (">=", "~=", "=="):
                bounds.append(Version(spec.version))
    floor = max(bounds)
    return ".".join(str(n) for n in (*floor.release, 0, 0)[:3])


def floor_problems(name: str, axis: TorchAxis, metadata: dict[str, str]) -> list[str]:
    """What the set ``name``'s floor says against its releases' METADATA (``pkg==version`` -> text)."""
    reqs = [req for text in metadata.values() for req in declared(text)]
    want = declared_floor(reqs)
    out = []
    if axis.floors[name] != want:
        says = "; ".join(f"{pin}: {', '.join(str(r.specifier) or 'torch' for r in declared(t)) or 'no torch'}"
                         for pin, t in metadata.items())  # fmt: skip
        out.append(
            f"set {name!r}: [torch.floor] says {axis.floors[name]}, its releases declare {want} ({says}): "
            f'write {name} = "{want}" in [torch.floor] of overlay/sets.toml'
        )
    for torch in axis.of_set(name):
        refused = [str(r) for r in reqs if not r.specifier.contains(torch, prereleases=True)]
        if refused:
            out.append(f"set {name!r} is proven on torch {torch}, which its releases refuse ({', '.join(refused)})")
    return out
