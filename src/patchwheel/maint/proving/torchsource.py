"""Where torch comes from, named once, for uv and pip alike: ``TORCH_SOURCE``, a folder of wheels (find-links) or a
PEP 503 index (``https://download.pytorch.org/whl/cpu``, ``file:///path/simple``); without it, pip's own find-links
(``PIP_FIND_LINKS`` or pip's configuration: the CPU wheel on this project's machines), else the package index.

The source is asked first which torch wheels it has for this interpreter: a ``TORCH_VERSION`` it lacks fails at
once, naming the source and the versions it has, instead of resolving somewhere else (a bare ``torch==X`` that a
find-links folder lacks quietly becomes PyPI's CUDA build, several GB). The base environment then installs that one
file by its address (with its listed sha256, where the index gives one); an index source is also handed to the
installer as an extra index, so that torch's own dependencies (a CUDA build's ``nvidia-*``) come from where torch
did, and every other package keeps the installer's usual index strategy.
"""

from __future__ import annotations

import functools
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ...errors import ConfigError, FetchError
from ...urls import redact
from ...wheels import fetch

ENV = "TORCH_SOURCE"
_HINT = (
    f"set TORCH_VERSION to one of them, or {ENV} to a folder of torch wheels or an index that has it "
    "(e.g. https://download.pytorch.org/whl/cpu for CPU wheels)"
)


@dataclass(frozen=True)
class Source:
    location: str  # a folder, or an index URL (http, https, file)
    is_index: bool
    named_by: str  # how it was chosen, for messages

    def __str__(self) -> str:  # an index named with a user and password is shown without them
        return f"{redact(self.location)} ({self.named_by})"

    def installer_args(self) -> list[str]:
        """What the installer is told besides the wheel's address (see the module's docstring)."""
        return ["--extra-index-url", self.location] if self.is_index else []


@dataclass(frozen=True)
class TorchWheel:
    version: str
    filename: str
    url: str  # the file's address, with #sha256=<hex> where the source lists one
    source: Source

    @property
    def requirement(self) -> str:
        return f"torch @ {self.url}"

    @property
    def sha256(self) -> str | None:
        """The wheel's sha256, which the installer checks: the index's, or a folder's file's own; None where an
        index lists none."""
        algorithm, _, digest = self.url.partition("#")[2].partition("=")
        return digest if algorithm == "sha256" else None


def source(find_links: list[str]) -> Source:
    """The torch source: TORCH_SOURCE, else ``find_links`` (pip's, as :func:`proofenv.pip_find_links` reads them),
    else the index pip would use."""
    if named := os.environ.get(ENV, "").strip():
        return _classify(named, ENV)
    if find_links:
        return _classify(find_links[0], "pip's find-links")
    index = os.environ.get("PIP_INDEX_URL", "").strip() or fetch.DEFAULT_INDEX
    return Source(index.rstrip("/"), True, "the package index")


def _classify(location: str, named_by: str) -> Source:
    scheme = urllib.parse.urlsplit(location).scheme
    if scheme in ("http", "https", "file"):
        # A find-links page lists files; an index has a page per project. A URL that ends in /torch/ is torch's
        # page of an index (the old form of this project's workflows); any other URL is an index.
        if location.rstrip("/").endswith("/torch"):
            return Source(location.rstrip("/")[: -len("/torch")], True, named_by)
        return Source(location.rstrip("/"), True, named_by)
    if scheme:
        raise ConfigError(f"{named_by} {location!r} is not a folder or an http, https or file URL", _HINT)
    folder = Path(location).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"{named_by} {location!r} is not a folder", _HINT)
    return Source(str(folder.resolve()), False, named_by)


def _files(src: Source) -> dict[str, str]:
    """filename -> address of every file the source lists for torch."""
    if not src.is_index:
        return {p.name: p.as_uri() for p in sorted(Path(src.location).iterdir()) if p.is_file()}
    try:
        links = fetch.project_links("torch", src.location)
    except FetchError as exc:  # (an index that refused its user and password: how to give them)
        hint = exc.hint if isinstance(exc, fetch.Refused) else _HINT
        raise ConfigError(f"torch's page cannot be read from {src}: {exc.message}", hint) from exc
    return {name: url + (f"#sha256={sha}" if sha else "") for name, (url, sha) in links.items()}


def available(src: Source) -> dict[Version, tuple[str, str]]:
    """The torch versions the source has a wheel of for this interpreter: version -> (filename, address), the
    wheel whose tag this interpreter prefers when there are several."""
    rank = {tag: i for i, tag in enumerate(sys_tags())}
    best: dict[Version, tuple[int, str, str]] = {}
    for name, url in _files(src).items():
        if not name.endswith(".whl"):
            continue
        try:
            project, version, _, tags = parse_wheel_filename(name)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        fits = [rank[t] for t in tags if t in rank]
        if canonicalize_name(project) != "torch" or not fits or version.is_prerelease or version.is_devrelease:
            continue
        if version not in best or min(fits) < best[version][0]:
            best[version] = (min(fits), name, url)
    return {v: (name, url) for v, (_, name, url) in best.items()}


def wheel(version: str, find_links: list[str]) -> TorchWheel:
    """The torch wheel of ``version`` (TORCH_VERSION: ``2.13.0`` takes ``2.13.0+cpu`` too) from the source, or a
    ConfigError naming the source and what it has. Asked once per process and source: every environment on the
    base asks for it, and an index's page of torch is large."""
    named = (os.environ.get(ENV, ""), os.environ.get("PIP_INDEX_URL", ""))
    return _wheel(version, tuple(find_links), named)


@functools.cache
def _wheel(version: str, find_links: tuple[str, ...], _named: tuple[str, str]) -> TorchWheel:
    try:
        want = Version(version)
    except InvalidVersion as exc:
        raise ConfigError(f"TORCH_VERSION={version!r} is not a version", "write e.g. TORCH_VERSION=2.13.0") from exc
    src = source(list(find_links))
    have = available(src)
    match = sorted((v for v in have if v == want or (not want.local and Version(v.public) == want)), reverse=True)
    if not match:
        listed = ", ".join(str(v) for v in sorted(have)) or "none"
        raise ConfigError(
            f"torch {version} is not in the torch source {src}: it has, for this Python ({next(iter(sys_tags()))}): "
            f"{listed}",
            _HINT,
        )
    name, url = have[match[0]]
    if not src.is_index:  # its bytes, not its name, key the base environment (a file replaced under its name)
        url += "#sha256=" + fetch.sha256_file(Path(src.location) / name)
    return TorchWheel(str(match[0]), name, url, src)
