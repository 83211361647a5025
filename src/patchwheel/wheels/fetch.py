"""Download upstream artifacts from a PEP 503 index into a sha256-verified cache.

Nothing is used before its sha256 matches the pin. The cache is content-addressed
(``<cache>/sha256/<digest>/<filename>``), so once a file is there the build works offline.

A download follows http(s) links only (and ``file:`` links of an index on disk), reads no more than the size the
server states nor :data:`MAX_DOWNLOAD`, and writes into a ``.part-*`` file beside its target whose ``flock`` it holds
until the file is renamed or removed: the next download sweeps the ``.part-*`` files of downloads that were killed
(their lock is free), as a build sweeps the staging folders of killed builds (staging.py).

An index named with a user and password (``https://USER:PASSWORD@host/simple``) is sent them as a basic-auth header,
on every request to its origin (scheme, host and port: its pages and files, as pip does) and to no other (a link or a
redirect elsewhere gets none); they are never part of the address asked for, nor of any message (:mod:`..urls`).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import http.client
import os
import stat
import sys
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from ..config import SHA256, Artifact, cache_dir
from ..errors import ConfigError, FetchError, PatchwheelError
from ..names import file_name_problem
from ..reporter import CONSOLE
from ..urls import redact, split_auth
from .staging import locked_tempfile, still_linked

DEFAULT_INDEX = "https://pypi.org/simple"
_CHUNK = 1 << 20
#: The most a download may be: a generous bound (the pinned wheels and sdists are 1 to 15 MB), for a server that
#: states no size (a larger stated size is refused before anything is written).
MAX_DOWNLOAD = 512 << 20
#: The name of a download in progress, beside its target in the cache.
PART_PREFIX = ".part-"
_UNTRUSTED_INDEX = "the index is broken or not trustworthy: point PATCHWHEEL_INDEX_URL at another PEP 503 index"


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


class _Unreachable(FetchError):
    """The index (or a file it links) could not be fetched: the network, or the index's address."""


class _HttpRedirectsOnly(urllib.request.HTTPRedirectHandler):
    """urllib follows a redirect to ftp: too: a redirect must not get round the check of a link's scheme."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            raise FetchError(
                f"{req.full_url} redirects to {newurl}: only http and https redirects are followed", _UNTRUSTED_INDEX
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _origin(url: str) -> tuple[str, str, int] | None:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    except ValueError:  # not a port: urllib refuses the URL itself
        return None
    return parts.scheme, parts.hostname or "", port


class _BasicAuth(urllib.request.BaseHandler):
    """The user and password a URL was named with, sent as a basic-auth header with the request for it and with a
    redirect to the same origin, never elsewhere. urllib would read them as part of the host name
    (``alice:s3cret@127.0.0.1`` was looked up in DNS), so :func:`_open` takes them out of the URL. The header is
    one urllib does not carry across a redirect (``add_unredirected_header``): it is added here to each request
    on the origin."""

    def __init__(self, url: str, user: str, password: str) -> None:
        self.origin = _origin(url)
        self.header = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def http_request(self, req: urllib.request.Request) -> urllib.request.Request:
        if self.origin is not None and _origin(req.full_url) == self.origin:
            req.add_unredirected_header("Authorization", self.header)
        return req

    https_request = http_request


class Refused(FetchError):
    """The index asked for a user and password (HTTP 401), or refused the ones it was given (401, 403)."""


_OPENER = urllib.request.build_opener(_HttpRedirectsOnly)


def _open(url: str, what: str, timeout: float = 60):
    """Open ``url``, with the user and password it names, if any (:class:`_BasicAuth`). Messages name ``url`` as
    given, which every error shows redacted (``http://***@host/...``: it was named with credentials)."""
    bare, auth = split_auth(url)
    opener = _OPENER
    if auth is not None:
        if urllib.parse.urlsplit(bare).scheme not in ("http", "https"):
            raise FetchError(
                f"{url} is named with a user and password, which only an http or https index is sent",
                "remove them from the URL (PATCHWHEEL_INDEX_URL, TORCH_SOURCE or PIP_INDEX_URL)",
            )
        opener = urllib.request.build_opener(_HttpRedirectsOnly, _BasicAuth(bare, *auth))
    try:
        return opener.open(urllib.request.Request(bare, headers={"User-Agent": "patchwheel"}), timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code not in (401, 403):
            raise _unreachable(url, what, exc) from exc
        raise Refused(
            f"the package index refused {url} (HTTP {exc.code}: {exc.reason}): it needs a user and password it accepts",
            "put them in the index's URL, each percent-encoded (@ as %40, : as %3A, / as %2F): "
            "https://<user>:<password>@host/simple",
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise _unreachable(url, what, exc) from exc


def _with_auth_of(page: str, url: str) -> str:
    """``url``, linked from the index page ``page``, with the page's user and password where it is on the page's
    origin and names none (a relative link has them from ``urljoin`` already), as pip sends an index's credentials
    to its host: the index's own files are behind them too. A link elsewhere gets none."""
    page_bare, auth = split_auth(page)
    if auth is None or split_auth(url)[1] is not None or _origin(page_bare) != _origin(url):
        return url
    userinfo = urllib.parse.urlsplit(page).netloc.rpartition("@")[0]
    start = url.index("//") + 2
    return f"{url[:start]}{userinfo}@{url[start:]}"


def _unreachable(url: str, what: str, exc: Exception) -> _Unreachable:
    reason = getattr(exc, "reason", exc)
    encoded = " (a user and password in its URL percent-encoded: @ as %40, : as %3A, / as %2F)" if "@" in url else ""
    return _Unreachable(
        f"cannot fetch {what} from {url}: {reason}",
        "check the network (the index must be reachable once; later builds use the cache), or set "
        f"PATCHWHEEL_INDEX_URL to a reachable PEP 503 index{encoded}",
    )


def _page_url(package: str, index: str | None = None) -> str:
    """The project page of ``package``; the index must be an http(s) URL, or a file:// tree on disk."""
    index = index or index_url()
    if urllib.parse.urlsplit(index).scheme not in ("http", "https", "file"):
        raise FetchError(
            f"the package index {index!r} is not an http://, https:// or file:// URL",
            "set PATCHWHEEL_INDEX_URL to a PEP 503 index, e.g. https://pypi.org/simple, or file:///path/to/simple "
            "for a tree on disk",
        )
    return f"{index}/{package}/"


def _project_page(package: str, index: str | None = None) -> tuple[str, list[tuple[str, str, dict]]]:
    page = _page_url(package, index)
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
        url, _, frag = _with_auth_of(page, urllib.parse.urljoin(page, href)).partition("#")
        sha = _listed_sha256(frag)
        if sha == "":
            raise FetchError(
                f"the index page {page} lists {text} with the digest {frag!r}: not 64 lower-case hex digits",
                _UNTRUSTED_INDEX,
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


def _mismatch(artifact: Artifact, got: str, source: str) -> FetchError:
    return FetchError(
        f"sha256 mismatch for {artifact.filename} from {source}: got {got}, the pin says {artifact.sha256}; "
        "the file was not used",
        "upstream never replaces a released file: your index or mirror serves a different file. Point "
        "PATCHWHEEL_INDEX_URL at a trustworthy index; change the pin only after checking the release itself",
    )


def _check_artifact(artifact: Artifact) -> None:
    """Both parts of an artifact become a cache path: they must be a digest and a plain file name, whatever made
    the artifact (a pin is checked when loaded; a rebase takes them from the index)."""
    if not SHA256.match(artifact.sha256):
        raise FetchError(
            f"{artifact.filename}: sha256 {artifact.sha256!r} is not 64 lower-case hex digits",
            "pin the sha256 shown next to the file on the package index",
        )
    if problem := file_name_problem(artifact.filename):
        raise FetchError(
            f"file name {artifact.filename!r} {problem}", "pin the file name exactly as the package index lists it"
        )


def _check_link(page: str, filename: str, url: str) -> None:
    """A file is downloaded over http(s) only: an index page must not make the tool read a local file (a device
    never ends), nor anything else urllib opens. An index on disk (``file://``) may link files on disk."""
    on_disk = page.startswith("file:")
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme in ("http", "https") or (on_disk and scheme == "file"):
        return
    shown = redact(url)  # before it is cut: a URL cut before its '@' would not be seen to hold a password
    shown = shown if len(shown) <= 80 else shown[:77] + "…"
    only = (
        "http, https and file links are downloaded from an index on disk"
        if on_disk
        else "http and https links are downloaded"
    )
    raise FetchError(
        f"the index page {page} links {filename} to a {scheme}: URL ({shown}): only {only}", _UNTRUSTED_INDEX
    )


def _claim_part(folder: Path) -> tuple[int, str]:
    """A new ``.part-*`` file in ``folder``, its lock held first (as staging.claim does for a staging folder)."""
    return locked_tempfile(folder, PART_PREFIX)


def sweep(cache: Path, log=None) -> None:
    """Remove the ``.part-*`` files that killed downloads left (kill -9, power loss) in the cache's digest folders.
    Only what a download makes is looked at (a regular file named ``.part-*``, never through a link), and only when
    no download holds its lock: a running download's file is left alone."""
    root = cache / "sha256"
    try:
        folders = [p for p in root.iterdir() if SHA256.fullmatch(p.name) and not p.is_symlink() and p.is_dir()]
    except OSError:
        return  # no cache yet
    for folder in folders:
        for part in folder.glob(PART_PREFIX + "*"):
            try:
                fd = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # a link (not ours), or swept meanwhile
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a running download
                if still_linked(fd, part):
                    part.unlink()
                    if log:
                        log(f"removed {part}, left by a download that was stopped")
            finally:
                os.close(fd)


def _too_big(url: str, message: str) -> FetchError:
    return FetchError(
        f"{url} {message}",
        "the index (or its mirror) serves something other than the pinned release's file: point "
        "PATCHWHEEL_INDEX_URL at a trustworthy index",
    )


def _download(url: str, filename: str, out, log) -> str:
    """Copy ``url`` into ``out``: no more than the size the server states (Content-Length), nor MAX_DOWNLOAD when
    it states none. The sha256 of what was written."""
    h = hashlib.sha256()
    with _open(url, filename, timeout=300) as resp:
        stated = str(resp.headers.get("Content-Length") or "").strip()
        total = int(stated) if stated.isdigit() else None
        if total is not None and total > MAX_DOWNLOAD:
            raise _too_big(
                url, f"is {total} bytes, more than the limit of a download ({MAX_DOWNLOAD} bytes): not downloaded"
            )
        limit = MAX_DOWNLOAD if total is None else total
        if log:
            log(f"downloading {filename} ({total / 1e6:.1f} MB)" if total else f"downloading {filename}")
        done = 0
        progress = bool(total) and sys.stderr.isatty()
        while True:
            try:
                chunk = resp.read(min(_CHUNK, limit - done + 1))  # one byte past the limit tells that it goes on
            except (OSError, http.client.HTTPException) as exc:
                raise _Unreachable(
                    f"the download of {filename} from {url} was cut short after {done} bytes: {exc}",
                    "check the network and build again (what was downloaded was not kept)",
                ) from exc
            if not chunk:
                break
            done += len(chunk)
            if done > limit:
                what = "the limit of a download" if total is None else "the size it stated"
                raise _too_big(url, f"sent more than {limit} bytes ({what}): stopped, nothing was kept")
            out.write(chunk)
            h.update(chunk)
            if progress:
                CONSOLE.meter(f"  {done / 1e6:6.1f} / {limit / 1e6:.1f} MB")
        if progress:
            CONSOLE.meter(f"  {done / 1e6:6.1f} / {limit / 1e6:.1f} MB", done=True)
    if total is not None and done < total:  # http.client ends a body cut short without an error
        raise _Unreachable(
            f"the download of {filename} from {url} was cut short: {done} of {total} bytes",
            "check the network and build again (what was downloaded was not kept)",
        )
    return h.hexdigest()


def download(url: str, filename: str, out, log=None) -> str:
    """Copy the file at the http(s) ``url`` into the open file ``out`` (bounded as every download is); its sha256."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise FetchError(f"{url} is not an http:// or https:// URL", "pass a file, or its http(s) URL")
    return _download(url, filename, out, log)


def _unchecked(package: str, artifact: Artifact, cache: Path, exc: PatchwheelError) -> FetchError:
    """The pinned file is not in the cache and the index is out of reach: the pin could not be checked. A file of
    that name the cache holds under another digest (verified again here) hints that the pin was mistyped."""
    others = [
        f"{artifact.filename} with sha256 {p.parent.name}"
        for p in sorted((cache / "sha256").glob(f"*/{artifact.filename}"))
        if SHA256.fullmatch(p.parent.name) and p.is_file() and sha256_file(p) == p.parent.name
    ]
    held = f"; the cache holds {', '.join(others)}" if others else ""
    return FetchError(
        f"cannot check the pin of {artifact.filename}: no file with its sha256 {artifact.sha256} is in the cache "
        f"({cache}), and {exc.message}{held}",
        f"if the sha256 in overlay/{package}/pins.toml was changed, check it against the index; otherwise " + exc.hint,
    )


def fetch_verified(package: str, artifact: Artifact, *, log=None) -> tuple[Path, bytes]:
    """:func:`fetch`, and the file's bytes, read once and verified against the pin: what is used is what was
    hashed."""
    _check_artifact(artifact)
    target = cache_dir() / "sha256" / artifact.sha256 / artifact.filename
    if target.is_file() and hashlib.sha256(data := target.read_bytes()).hexdigest() == artifact.sha256:
        return target, data
    path = fetch(package, artifact, log=log)  # (a damaged file in the cache is dropped there)
    data = path.read_bytes()
    if (got := hashlib.sha256(data).hexdigest()) != artifact.sha256:
        raise _mismatch(artifact, got, str(path))
    return path, data


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
    try:
        links = project_links(package, index)
    except _Unreachable as exc:
        raise _unchecked(package, artifact, cache, exc) from exc
    if artifact.filename not in links:
        raise FetchError(
            f"{artifact.filename} is not listed on {_page_url(package, index)}",
            "check the pinned filename in overlay/<pkg>/pins.toml against the index",
        )
    url, listed_sha = links[artifact.filename]
    if listed_sha is not None and listed_sha != artifact.sha256:
        raise _mismatch(artifact, listed_sha, f"the index listing {url}")
    _check_link(_page_url(package, index), artifact.filename, url)
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep(cache, log)
    fd, tmp = _claim_part(target.parent)
    with os.fdopen(fd, "wb") as out:  # its lock is held until it is closed, after the rename or the removal
        try:
            got = _download(url, artifact.filename, out, log)
            if got != artifact.sha256:
                raise _mismatch(artifact, got, url)
            out.flush()
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
    return target


def release_artifacts(package: str, version: str) -> tuple[Artifact, Artifact | None]:
    """The new release's wheel and sdist, with the sha256 the index lists (one read of the index page). File
    names are read as the wheel and sdist specs say: a project ``foo-bar`` publishes ``foo_bar-1.0-….whl``."""
    links = project_links(package)
    want = (canonicalize_name(package), str(Version(version)))  # spelled alike: 1.1 is not taken for 1.1.0
    wheel = sdist = None
    for name, (_, sha) in links.items():
        if not sha:
            continue
        try:
            if name.endswith(".whl"):
                project, release, _, tags = parse_wheel_filename(name)
                if (project, str(release)) == want and any(str(t) == "py3-none-any" for t in tags):
                    wheel = Artifact(name, sha)
            else:
                project, release = parse_sdist_filename(name)
                if (project, str(release)) == want:
                    sdist = Artifact(name, sha)
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue  # not a file of any release: nothing to pick
    if wheel is None:
        raise ConfigError(
            f"{package} {version} has no py3-none-any wheel on {index_url()}",
            f"pick a version {package} has released (its files: {index_url()}/{package}/)",
        )
    return wheel, sdist
