"""Download upstream artifacts from a PEP 503 index into a sha256-verified cache.

Nothing is used before its sha256 matches the pin. The cache is content-addressed
(``<cache>/sha256/<digest>/<filename>``), so once a file is there the build works offline.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

from .config import SHA256, Artifact, file_name_problem
from .errors import PatchwheelError

DEFAULT_INDEX = "https://pypi.org/simple"
_CHUNK = 1 << 20


def cache_dir() -> Path:
    if env := os.environ.get("PATCHWHEEL_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "patchwheel"


def index_url() -> str:
    return (os.environ.get("PATCHWHEEL_INDEX_URL") or DEFAULT_INDEX).rstrip("/")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str, dict]] = []  # (text, href, attributes)
        self._attrs: dict | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._attrs = dict(attrs)

    def handle_data(self, data):
        if self._attrs is not None and data.strip():
            self.links.append((data.strip(), self._attrs.get("href") or "", self._attrs))
            self._attrs = None


def _open(url: str, what: str, timeout: float = 60):
    try:
        return urllib.request.urlopen(
            urllib.request.Request(url, headers={"User-Agent": "patchwheel"}), timeout=timeout
        )
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PatchwheelError(
            f"cannot fetch {what} from {url}: {reason}",
            "check the network (the index must be reachable once; later builds use the cache), or set "
            "PATCHWHEEL_INDEX_URL to a reachable PEP 503 index",
        ) from exc


def _project_page(package: str, index: str | None = None) -> tuple[str, list[tuple[str, str, dict]]]:
    page = f"{index or index_url()}/{package}/"
    # A PEP 503 tree on disk (file://…/simple) serves its pages as <project>/index.html.
    target = page + "index.html" if page.startswith("file:") else page
    with _open(target, f"the index page of {package}") as resp:
        html = resp.read().decode("utf-8", "replace")
    parser = _Links()
    parser.feed(html)
    return page, parser.links


def _listed_sha256(frag: str) -> str | None:
    """The digest of a ``#sha256=<hex>`` fragment; None when the fragment names none, "" when it is not 64 lower-case
    hex digits (a digest becomes a cache folder's name: ``sha256=../..`` must not)."""
    if not frag.startswith("sha256="):
        return None
    sha = frag[len("sha256=") :]
    return sha if SHA256.match(sha) else ""


def project_links(package: str, index: str | None = None) -> dict[str, tuple[str, str | None]]:
    """filename -> (absolute url without fragment, sha256 from the fragment or None). A malformed sha256 fragment
    is an error: the index is broken or hostile."""
    page, links = _project_page(package, index)
    out = {}
    for text, href, _ in links:
        url, _, frag = urllib.parse.urljoin(page, href).partition("#")
        sha = _listed_sha256(frag)
        if sha == "":
            raise PatchwheelError(
                f"the index page {page} lists {text} with the digest {frag!r}: not 64 lower-case hex digits",
                "the index is broken or not trustworthy: point PATCHWHEEL_INDEX_URL at another PEP 503 index",
            )
        out[text] = (url, sha)
    return out


def releases(package: str, index: str | None = None) -> list[tuple[str, Artifact, bool]]:
    """Final releases with a py3-none-any wheel, oldest first: (version, wheel artifact, yanked).

    The sha256 comes from the index listing (the pins of newer releases are what the index says they are)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    page, links = _project_page(package, index)
    out = {}
    for text, href, attrs in links:
        if not text.endswith("-py3-none-any.whl"):
            continue
        try:
            _, version, _, _ = parse_wheel_filename(text)
        except InvalidWheelFilename:
            continue
        sha = _listed_sha256(urllib.parse.urljoin(page, href).partition("#")[2])
        if version.is_prerelease or version.is_devrelease or not sha or file_name_problem(text):
            continue  # no usable digest or name: not a release this tool can pin
        out[version] = (str(version), Artifact(text, sha), "data-yanked" in attrs)
    return [out[v] for v in sorted(out)]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _mismatch(artifact: Artifact, got: str, source: str) -> PatchwheelError:
    return PatchwheelError(
        f"sha256 mismatch for {artifact.filename} from {source}: got {got}, the pin says {artifact.sha256}; "
        "the file was not used",
        "upstream never replaces a released file: your index or mirror serves a different file. Point "
        "PATCHWHEEL_INDEX_URL at a trustworthy index; change the pin only after checking the release itself",
    )


def _check_artifact(artifact: Artifact) -> None:
    """Both parts of an artifact become a cache path: they must be a digest and a plain file name, whatever made
    the artifact (a pin is checked when loaded; a rebase takes them from the index)."""
    if not SHA256.match(artifact.sha256):
        raise PatchwheelError(
            f"{artifact.filename}: sha256 {artifact.sha256!r} is not 64 lower-case hex digits",
            "pin the sha256 shown next to the file on the package index",
        )
    if problem := file_name_problem(artifact.filename):
        raise PatchwheelError(
            f"file name {artifact.filename!r} {problem}", "pin the file name exactly as the package index lists it"
        )


def fetch(package: str, artifact: Artifact, *, index: str | None = None, cache: Path | None = None, log=None) -> Path:
    """Return a local path to ``artifact``, verified against its pinned sha256."""
    _check_artifact(artifact)
    cache = cache or cache_dir()
    target = cache / "sha256" / artifact.sha256 / artifact.filename
    if target.is_file():
        got = sha256_file(target)
        if got == artifact.sha256:
            return target
        target.unlink()  # a damaged cache entry is dropped and fetched again
    links = project_links(package, index)
    if artifact.filename not in links:
        raise PatchwheelError(
            f"{artifact.filename} is not listed on {index or index_url()}/{package}/",
            "check the pinned filename in overlay/<pkg>/pins.toml against the index",
        )
    url, listed_sha = links[artifact.filename]
    if listed_sha is not None and listed_sha != artifact.sha256:
        raise _mismatch(artifact, listed_sha, f"the index listing {url}")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".part-")
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out, _open(url, artifact.filename, timeout=300) as resp:
            total = int(resp.headers.get("Content-Length") or 0)
            done = 0
            if log:
                log(
                    f"downloading {artifact.filename} ({total / 1e6:.1f} MB)"
                    if total
                    else f"downloading {artifact.filename}"
                )
            for chunk in iter(lambda: resp.read(_CHUNK), b""):
                out.write(chunk)
                h.update(chunk)
                done += len(chunk)
                if total and sys.stderr.isatty():
                    print(f"\r  {done / 1e6:6.1f} / {total / 1e6:.1f} MB", end="", file=sys.stderr, flush=True)
            if total and sys.stderr.isatty():
                print(file=sys.stderr)
        if h.hexdigest() != artifact.sha256:
            raise _mismatch(artifact, h.hexdigest(), url)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
