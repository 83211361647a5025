"""Downloads from the index: only http(s) links from an http(s) index, a bounded size, no
partial file left behind (a killed download's ``.part-*`` file is swept by the next download), and an offline
build that cannot check a pin says so."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import http.server
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import HANG, serve_locally
from patchwheel.config import Artifact
from patchwheel.errors import PatchwheelError
from patchwheel.wheels import fetch

SRC = Path(__file__).resolve().parents[2] / "src"
MiB = 1 << 20


class HttpIndex:
    """A PEP 503 index over http://127.0.0.1 (the demo project's own index is a file:// tree). ``routes`` maps a
    request path to a function that answers it."""

    def __init__(self) -> None:
        self.routes: dict[str, Callable[[http.server.BaseHTTPRequestHandler], None]] = {}
        self.release = threading.Event()  # a stalled answer waits for it
        routes = self.routes

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the name http.server calls)
                answer = routes.get(self.path)
                if answer is None:
                    self.send_error(404)
                else:
                    answer(self)

            def log_message(self, *args):
                pass

        self.server = serve_locally(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def page(self, href: str, filename: str, sha256: str) -> None:
        """The demo project's page, listing ``filename`` at ``href``."""
        body = f'<a href="{href}#sha256={sha256}">{filename}</a>\n'.encode()
        self.routes["/simple/demo/"] = lambda h: _send(h, body)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def _send(handler, body: bytes, length: int | None = -1) -> None:
    """Answer ``body``; with Content-Length ``length`` (default: its true length; None: no Content-Length, the end of
    the connection ends the body, as HTTP/1.0 allows)."""
    handler.send_response(200)
    if length is not None:
        handler.send_header("Content-Length", str(len(body) if length == -1 else length))
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture
def http_index(demo_project, monkeypatch) -> Iterator[HttpIndex]:
    """The demo project's index served over HTTP: its page links /files/<wheel>, which serves the real wheel."""
    index = HttpIndex()
    name, data = demo_project.upstream.name, demo_project.upstream.read_bytes()
    index.routes[f"/files/{name}"] = lambda h: _send(h, data)
    index.page(f"/files/{name}", name, demo_project.sha256)
    monkeypatch.setenv("PATCHWHEEL_INDEX_URL", f"{index.url}/simple")
    yield index
    index.close()


def _artifact(demo) -> Artifact:
    return Artifact(demo.upstream.name, demo.sha256)


def _cache_files(demo) -> list[str]:
    """Every file in the download cache, hidden ones (``.part-*``) included."""
    return sorted(str(p.relative_to(demo.cache)) for p in demo.cache.rglob("*") if not p.is_dir())


def test_an_http_index_serves_its_files_over_http(demo_project, http_index):
    got = fetch.fetch("demo", _artifact(demo_project))
    assert got.read_bytes() == demo_project.upstream.read_bytes()
    assert _cache_files(demo_project) == [f"sha256/{demo_project.sha256}/{demo_project.upstream.name}"]


@pytest.mark.parametrize("scheme", ["file", "data"])
def test_an_http_index_may_link_only_http_or_https(demo_project, http_index, scheme):
    """An index page on the network must not make the tool read local files (file:///dev/zero wrote 1.7 GB in 3 s)
    or anything else urllib can open: here the very file pinned, so only the link's scheme is wrong."""
    data = demo_project.upstream.read_bytes()
    href = (
        demo_project.upstream.as_uri()
        if scheme == "file"
        else "data:application/octet-stream;base64," + base64.b64encode(data).decode()
    )
    http_index.page(href, demo_project.upstream.name, demo_project.sha256)
    with pytest.raises(PatchwheelError) as err:
        fetch.fetch("demo", _artifact(demo_project))
    msg = err.value.message
    assert msg.startswith(
        f"the index page {http_index.url}/simple/demo/ links {demo_project.upstream.name} to a {scheme}: URL ("
    ), msg
    assert msg.endswith("): only http and https links are downloaded") and len(msg) < 250, msg
    assert "PATCHWHEEL_INDEX_URL" in err.value.hint
    assert _cache_files(demo_project) == []


def test_a_link_may_redirect_only_to_http_or_https(demo_project, http_index):
    """urllib follows an http redirect to ftp: (and refuses file:): a redirect must not get round the link check."""
    name = demo_project.upstream.name

    def to_ftp(handler):
        handler.send_response(302)
        handler.send_header("Location", f"ftp://127.0.0.1:9/{name}")
        handler.end_headers()

    http_index.routes[f"/files/{name}"] = to_ftp
    with pytest.raises(PatchwheelError) as err:
        fetch.fetch("demo", _artifact(demo_project))
    assert err.value.message == (
        f"{http_index.url}/files/{name} redirects to ftp://127.0.0.1:9/{name}: only http and https redirects are "
        "followed"
    ), err.value.message
    assert "PATCHWHEEL_INDEX_URL" in err.value.hint
    assert _cache_files(demo_project) == []


def test_a_file_index_may_link_local_files(demo_project):
    """A PEP 503 tree on disk (file://, as the tool tests and `--extra-index-url file://…` use) links local files."""
    page = demo_project.index / "demo" / "index.html"
    page.write_text(
        f'<a href="{demo_project.upstream.as_uri()}#sha256={demo_project.sha256}">{demo_project.upstream.name}</a>\n'
    )
    assert fetch.fetch("demo", _artifact(demo_project)).read_bytes() == demo_project.upstream.read_bytes()


@pytest.mark.parametrize("index", ["ftp://127.0.0.1/simple", "data:,hello", "127.0.0.1/simple"])
def test_the_index_url_must_be_http_https_or_file(demo_project, monkeypatch, index):
    monkeypatch.setenv("PATCHWHEEL_INDEX_URL", index)
    with pytest.raises(PatchwheelError) as err:
        fetch.fetch("demo", _artifact(demo_project))
    assert err.value.message == f"the package index {index!r} is not an http://, https:// or file:// URL"
    assert "PATCHWHEEL_INDEX_URL" in err.value.hint
    assert _cache_files(demo_project) == []


def test_a_download_with_no_stated_size_stops_at_the_limit(demo_project, http_index, monkeypatch):
    """No Content-Length: the body ends when the server closes the connection, so only the limit stops it."""
    monkeypatch.setattr(fetch, "MAX_DOWNLOAD", MiB, raising=False)  # (none before the limit)
    endless = b"\0" * (3 * MiB)
    http_index.routes[f"/files/{demo_project.upstream.name}"] = lambda h: _send(h, endless, length=None)
    with pytest.raises(PatchwheelError) as err:
        fetch.fetch("demo", _artifact(demo_project))
    assert err.value.message == (
        f"{http_index.url}/files/{demo_project.upstream.name} sent more than 1048576 bytes (the limit of a download): "
        "stopped, nothing was kept"
    ), err.value.message
    assert "PATCHWHEEL_INDEX_URL" in err.value.hint
    assert _cache_files(demo_project) == []


def test_a_download_larger_than_the_limit_is_refused_before_it_starts(demo_project, http_index, monkeypatch):
    monkeypatch.setattr(fetch, "MAX_DOWNLOAD", MiB, raising=False)  # (none before the limit)
    big = b"\0" * (2 * MiB)
    http_index.routes[f"/files/{demo_project.upstream.name}"] = lambda h: _send(h, big)
    with pytest.raises(PatchwheelError) as err:
        fetch.fetch("demo", _artifact(demo_project))
    assert err.value.message == (
        f"{http_index.url}/files/{demo_project.upstream.name} is {2 * MiB} bytes, more than the limit of a download "
        "(1048576 bytes): not downloaded"
    ), err.value.message
    assert _cache_files(demo_project) == []


def test_a_download_cut_short_is_an_error(demo_project, http_index):
    """The connection ends before the size the server stated (before: "sha256 mismatch ... your index or mirror
    serves a different file", which blames the index for a network failure)."""
    data = demo_project.upstream.read_bytes()
    http_index.routes[f"/files/{demo_project.upstream.name}"] = lambda h: _send(h, data[:1000], length=len(data))
    with pytest.raises(PatchwheelError) as err:
        fetch.fetch("demo", _artifact(demo_project))
    url = f"{http_index.url}/files/{demo_project.upstream.name}"
    assert err.value.message == (
        f"the download of {demo_project.upstream.name} from {url} was cut short: 1000 of {len(data)} bytes"
    ), err.value.message
    assert _cache_files(demo_project) == []


def test_a_download_stops_at_the_size_it_states(demo_project):
    """A file: link to a device states its size as 0 and never ends: reading stops past the stated size. (Before,
    this wrote /dev/zero into the cache until the disk was full.)"""
    page = demo_project.index / "demo" / "index.html"
    page.write_text(f'<a href="file:///dev/zero#sha256={demo_project.sha256}">{demo_project.upstream.name}</a>\n')
    with pytest.raises(PatchwheelError) as err:
        fetch.fetch("demo", _artifact(demo_project))
    assert err.value.message == (
        "file:///dev/zero sent more than 0 bytes (the size it stated): stopped, nothing was kept"
    ), err.value.message
    assert _cache_files(demo_project) == []


def test_a_killed_download_is_swept_by_the_next_one(demo_project, http_index):
    """A real process killed with SIGKILL mid-download (the server stalls after 1 MiB) leaves its .part-* file; the
    next download removes it. A .part-* file another download holds (its lock) is left alone, and so is what the
    tool did not make."""
    data = demo_project.upstream.read_bytes()

    def stall(handler):
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(data) + 2 * MiB))
        handler.end_headers()
        handler.wfile.write(b"\0" * MiB)
        handler.wfile.flush()
        http_index.release.wait()  # set when the test ends

    http_index.routes[f"/files/{demo_project.upstream.name}"] = stall
    driver = textwrap.dedent(f"""
        from patchwheel.wheels import fetch
        from patchwheel.config import Artifact
        fetch.fetch("demo", Artifact({demo_project.upstream.name!r}, {demo_project.sha256!r}))
    """)
    proc = subprocess.Popen([sys.executable, "-c", driver], env={**os.environ, "PYTHONPATH": str(SRC)})
    folder = demo_project.cache / "sha256" / demo_project.sha256
    try:
        deadline = time.monotonic() + HANG
        while True:  # until the first MiB is on disk; the server stalls there until the test ends
            assert time.monotonic() < deadline, "the download hung before its first MiB"
            parts = sorted(folder.glob(".part-*")) if folder.is_dir() else []
            if parts and parts[0].stat().st_size >= MiB:
                break
            assert proc.poll() is None, "the download ended before it was killed"
            threading.Event().wait(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (killed,) = parts
    assert killed.is_file(), "kill -9 runs no cleanup"
    other = demo_project.cache / "sha256" / ("1" * 64)  # another artifact's folder: a running download's file
    other.mkdir()
    (other / ".part-running").write_bytes(b"half")
    for path in (folder / "notes.txt", other / ".partial", demo_project.cache / "outside"):
        path.write_text("mine")
    (folder / ".part-link").symlink_to(demo_project.cache / "outside")  # a link is never followed nor removed
    http_index.routes[f"/files/{demo_project.upstream.name}"] = lambda h: _send(h, data)
    with open(other / ".part-running", "rb") as running:
        fcntl.flock(running, fcntl.LOCK_EX)  # as the running download holds it
        fetch.fetch("demo", _artifact(demo_project))
    assert _cache_files(demo_project) == sorted(
        [
            "outside",
            f"sha256/{'1' * 64}/.part-running",
            f"sha256/{'1' * 64}/.partial",
            f"sha256/{demo_project.sha256}/.part-link",
            f"sha256/{demo_project.sha256}/notes.txt",
            f"sha256/{demo_project.sha256}/{demo_project.upstream.name}",
        ]
    )
    (folder / demo_project.upstream.name).unlink()  # so that the next fetch downloads (and sweeps) again
    fetch.fetch("demo", _artifact(demo_project))
    assert f"sha256/{'1' * 64}/.part-running" not in _cache_files(demo_project)


def test_a_wrong_pin_while_offline_says_that_it_could_not_be_checked(demo_project, monkeypatch):
    """The cache holds the release's file (a build ran before); the pin was then mistyped and the index is out of
    reach. "Cannot fetch the index page" alone would hide that the pin is the problem."""
    fetch.fetch("demo", _artifact(demo_project))  # warms the cache
    wrong = demo_project.sha256[:-1] + ("0" if demo_project.sha256[-1] != "0" else "1")
    monkeypatch.setenv("PATCHWHEEL_INDEX_URL", "http://127.0.0.1:9/simple")  # port 9: nothing listens
    with pytest.raises(PatchwheelError) as err:
        fetch.fetch("demo", Artifact(demo_project.upstream.name, wrong))
    name = demo_project.upstream.name
    assert err.value.message == (
        f"cannot check the pin of {name}: no file with its sha256 {wrong} is in the cache ({demo_project.cache}), and "
        "cannot fetch the index page of demo from http://127.0.0.1:9/simple/demo/: [Errno 111] Connection refused; "
        f"the cache holds {name} with sha256 {demo_project.sha256}"
    ), err.value.message
    assert "pins.toml" in err.value.hint and "network" in err.value.hint
    assert not (demo_project.cache / "sha256" / wrong).exists(), "no folder is made for a pin that was not checked"


def test_an_unchecked_pin_with_an_empty_cache_says_so(demo_project, monkeypatch):
    monkeypatch.setenv("PATCHWHEEL_INDEX_URL", "http://127.0.0.1:9/simple")
    with pytest.raises(PatchwheelError) as err:
        fetch.fetch("demo", _artifact(demo_project))
    assert err.value.message == (
        f"cannot check the pin of {demo_project.upstream.name}: no file with its sha256 {demo_project.sha256} is in "
        f"the cache ({demo_project.cache}), and cannot fetch the index page of demo from "
        "http://127.0.0.1:9/simple/demo/: [Errno 111] Connection refused"
    ), err.value.message
    assert hashlib.sha256(demo_project.upstream.read_bytes()).hexdigest() == demo_project.sha256
