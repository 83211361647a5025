"""A user and password in a URL the tool is given (PATCHWHEEL_INDEX_URL, TORCH_SOURCE, PIP_INDEX_URL) are used as
the server asks, sent to their own host only, and shown nowhere: not in the output, not in an error, not in a file
the tool writes. Each index here is a real HTTP server on 127.0.0.1 that requires basic authentication."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import subprocess
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import make_wheel, serve_locally
from patchwheel import cli, torchaxis
from patchwheel.config import Artifact
from patchwheel.errors import PatchwheelError
from patchwheel.maint.proving import proofenv, torchsource
from patchwheel.wheels import fetch

USER, PASSWORD = "alice", "s3cret/p@ss:word"  # '/', '@' and ':' must be percent-encoded in a URL
#: What must appear nowhere: the password, as given or percent-encoded, and the basic-auth header's value.
SECRETS = ("s3cret", base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode())
USERINFO = f"{USER}:{urllib.parse.quote(PASSWORD, safe='')}"
TORCH_TABLE = '\n[torch]\nsuite = "2.13.0"\nnewest = "2.14.1"\n[torch.floor]\ndefault = "{floor}"\n'


class AuthIndex:
    """A PEP 503 index over http://127.0.0.1 that answers 401 to a request without the basic-auth header of
    ``user``/``password`` (``user`` None: an open server). ``files`` maps a request path to the bytes served;
    ``seen`` lists every request as (path, its Authorization header)."""

    def __init__(self, user: str | None = USER, password: str = PASSWORD) -> None:
        self.files: dict[str, bytes | Callable[[http.server.BaseHTTPRequestHandler], None]] = {}
        self.seen: list[tuple[str, str | None]] = []
        want = None if user is None else "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        files, seen = self.files, self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self):  # noqa: N802 (uv asks first whether a wheel's server takes range requests)
                self.do_GET(head=True)

            def do_GET(self, head=False):  # noqa: N802 (the name http.server calls)
                seen.append((self.path, self.headers.get("Authorization")))
                if want is not None and self.headers.get("Authorization") != want:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="test index"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = files.get(self.path)
                if body is None:
                    self.send_error(404)
                elif callable(body):
                    body(self)
                else:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if not head:
                        self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = serve_locally(Handler)
        self.origin = f"127.0.0.1:{self.server.server_address[1]}"

    def url(self, userinfo: str | None = USERINFO) -> str:
        return f"http://{userinfo + '@' if userinfo else ''}{self.origin}/simple"

    def project(self, name: str, wheel: Path, href: str | None = None) -> None:
        """List ``wheel`` on ``name``'s page (at /files/<wheel>, or ``href``) and serve it there."""
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        self.files[f"/files/{wheel.name}"] = wheel.read_bytes()
        link = f'<a href="{href or "/files/" + wheel.name}#sha256={sha}">{wheel.name}</a>\n'
        self.files[f"/simple/{name}/"] = link.encode()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def auth_index() -> Iterator[AuthIndex]:
    index = AuthIndex()
    yield index
    index.close()


@pytest.fixture
def open_server() -> Iterator[AuthIndex]:
    index = AuthIndex(user=None)
    yield index
    index.close()


def _leaks(texts: dict[str, str], *folders: Path) -> list[str]:
    """Where a secret shows: the texts named, and every file under ``folders`` (links not followed)."""
    found = [where for where, text in texts.items() if any(s in text for s in SECRETS)]
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                if any(s.encode() in data for s in SECRETS):
                    found.append(str(path))
    return found


def _must_not_leak(texts: dict[str, str], *folders: Path) -> None:
    leaks = _leaks(texts, *folders)
    shown = "\n".join(f"--- {k}:\n{v}" for k, v in texts.items() if k in leaks)
    assert not leaks, f"the password shows in {leaks}\n{shown}"


def _torch_wheel(tmp_path: Path, version: str = "2.13.0") -> Path:
    folder = tmp_path / "torch-wheels"
    folder.mkdir(exist_ok=True)
    return make_wheel(folder, {"torch/__init__.py": f'__version__ = "{version}"\n'.encode()}, "torch", version)


# --- the package index of the pins (PATCHWHEEL_INDEX_URL) --------------------------------------------------------


@pytest.mark.parametrize("link", ["relative", "absolute"])
def test_an_index_with_a_user_and_password_is_read_with_them_and_shows_them_nowhere(
    demo_project, auth_index, monkeypatch, capsys, tmp_path, scratch_temp, link
):
    """Once the URL was printed whole in the error, and the request went to the host `alice:s3cret@127.0.0.1`
    (urllib takes the user and password for part of the host name: `Name or service not known`). The page links
    its file by path, or by a full address on the index's host (without the user and password): both are sent
    them, as pip sends them to the index's host."""
    name = demo_project.upstream.name
    auth_index.project(
        "demo", demo_project.upstream, f"http://{auth_index.origin}/files/{name}" if link == "absolute" else None
    )
    monkeypatch.setenv("PATCHWHEEL_INDEX_URL", auth_index.url())
    rc = cli.main(["--root", str(demo_project.root), "build"])
    out, err = capsys.readouterr()
    _must_not_leak({"stdout": out, "stderr": err}, tmp_path, scratch_temp)
    assert rc == 0, err
    assert [p for p, _ in auth_index.seen] == ["/simple/demo/", f"/files/{name}"]
    assert all(auth == "Basic " + SECRETS[1] for _, auth in auth_index.seen), auth_index.seen
    assert list((demo_project.root / "dist").glob("demo-1.0.0+fixed*.whl"))


def test_a_refused_password_is_one_error_that_shows_no_secret(demo_project, monkeypatch, capsys, tmp_path):
    index = AuthIndex(password="another one")
    try:
        index.project("demo", demo_project.upstream)
        monkeypatch.setenv("PATCHWHEEL_INDEX_URL", index.url())
        rc = cli.main(["--root", str(demo_project.root), "build"])
        out, err = capsys.readouterr()
        _must_not_leak({"stdout": out, "stderr": err}, tmp_path)
        assert rc == 2
        assert err == (
            f"error: the package index refused http://***@{index.origin}/simple/demo/ (HTTP 401: Unauthorized): "
            "it needs a user and password it accepts\n"
            "  fix: put them in the index's URL, each percent-encoded (@ as %40, : as %3A, / as %2F): "
            "https://<user>:<password>@host/simple\n"
        )
        # without them, the same words: how to give them
        monkeypatch.setenv("PATCHWHEEL_INDEX_URL", index.url(userinfo=None))
        assert cli.main(["--root", str(demo_project.root), "build"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: the package index refused http://{index.origin}/simple/demo/ (HTTP 401"), err
        assert not list((demo_project.root / "dist").glob("*.whl"))
    finally:
        index.close()


def test_the_credentials_go_to_their_own_host_only(demo_project, auth_index, open_server, monkeypatch, tmp_path):
    """The index's page links its file on its own host, which redirects to another (a mirror, a CDN): the other
    host never gets the index's user and password."""
    name = demo_project.upstream.name
    open_server.files[f"/files/{name}"] = demo_project.upstream.read_bytes()

    def to_the_mirror(handler):
        handler.send_response(302)
        handler.send_header("Location", f"http://{open_server.origin}/files/{name}")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    auth_index.project("demo", demo_project.upstream)
    auth_index.files[f"/files/{name}"] = to_the_mirror
    monkeypatch.setenv("PATCHWHEEL_INDEX_URL", auth_index.url())
    got = fetch.fetch("demo", Artifact(name, demo_project.sha256))
    assert got.read_bytes() == demo_project.upstream.read_bytes()
    assert [p for p, auth in auth_index.seen if auth] == ["/simple/demo/", f"/files/{name}"]
    assert open_server.seen == [(f"/files/{name}", None)], "the mirror was sent the index's credentials"


def test_a_user_and_password_on_an_index_on_disk_are_refused(demo_project, monkeypatch, capsys):
    """A file:// index is read from disk: a user and password there cannot be used (urllib said `file not on local
    host`, with the URL whole), and are not dropped without a word either."""
    monkeypatch.setenv("PATCHWHEEL_INDEX_URL", f"file://{USERINFO}@{demo_project.index}")
    assert cli.main(["--root", str(demo_project.root), "build"]) == 2
    err = capsys.readouterr().err
    _must_not_leak({"stderr": err})
    assert err == (
        f"error: file://***@{demo_project.index}/demo/index.html is named with a user and password, which only an "
        "http or https index is sent\n"
        "  fix: remove them from the URL (PATCHWHEEL_INDEX_URL, TORCH_SOURCE or PIP_INDEX_URL)\n"
    )


# --- the torch source (TORCH_SOURCE, else PIP_INDEX_URL) ------------------------------------------------------


@pytest.fixture(params=["TORCH_SOURCE", "PIP_INDEX_URL"])
def torch_index(request, auth_index, tmp_path, monkeypatch) -> tuple[AuthIndex, str, str]:
    """torch 2.13.0 on the basic-auth index, named by TORCH_SOURCE or (without it, and without pip's find-links)
    by PIP_INDEX_URL; the variable, and how messages name the source."""
    auth_index.project("torch", _torch_wheel(tmp_path))
    monkeypatch.delenv("TORCH_SOURCE", raising=False)
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.setenv(request.param, auth_index.url())
    monkeypatch.setattr(proofenv, "pip_find_links", lambda: [])
    monkeypatch.setenv("TORCH_VERSION", "2.13.0")
    return auth_index, request.param, "TORCH_SOURCE" if request.param == "TORCH_SOURCE" else "the package index"


def test_a_torch_index_with_a_user_and_password_is_read_with_them_and_shows_them_nowhere(
    demo_project, torch_index, monkeypatch, capsys, tmp_path
):
    index, variable, named_by = torch_index
    shown = f"http://***@{index.origin}/simple ({named_by})"
    sets = demo_project.root / "overlay" / "sets.toml"
    sets.write_text(sets.read_text() + TORCH_TABLE.format(floor=torchaxis.declared_floor([])))
    rc = cli.main(["--root", str(demo_project.root), "watch", "torch"])
    out, err = capsys.readouterr()
    _must_not_leak({"stdout": out, "stderr": err})
    assert (rc, out) == (0, f"{shown} has no torch newer than [torch] newest, 2.14.1 (its newest: 2.13.0)\n"), err

    wheel = torchsource.wheel("2.13.0", [])
    assert str(wheel.source) == shown
    with pytest.raises(PatchwheelError) as missing:
        torchsource.wheel("2.14.0", [])
    _must_not_leak({"error": str(missing.value)})
    assert str(missing.value).startswith(f"torch 2.14.0 is not in the torch source {shown}: it has"), missing.value
    monkeypatch.setenv(variable, index.url(userinfo=f"{USER}:not-the-s3cret"))
    with pytest.raises(PatchwheelError) as refused:
        torchsource.wheel("2.13.0", [])
    _must_not_leak({"error": str(refused.value)})
    assert str(refused.value) == (
        f"torch's page cannot be read from {shown}: the package index refused "
        f"http://***@{index.origin}/simple/torch/ (HTTP 401: Unauthorized): it needs a user and password it accepts\n"
        "  fix: put them in the index's URL, each percent-encoded (@ as %40, : as %3A, / as %2F): "
        "https://<user>:<password>@host/simple"
    )
    monkeypatch.setenv(variable, index.url())

    # The installer is given them (it fetches the wheel itself); the environment's marker keeps none.
    installed: list[tuple[str, ...]] = []
    monkeypatch.setattr(proofenv, "_create", lambda env: None)
    monkeypatch.setattr(proofenv, "_install", lambda env, *args, **kw: installed.append(args))
    monkeypatch.setattr(proofenv, "_check_torch", lambda env, torch: None)  # nothing installed to check here
    env = proofenv.base_env(tmp_path / "cache")
    _must_not_leak({}, env)
    assert json.loads((env / proofenv.MARKER).read_text())["wheel"] == (
        f"http://***@{index.origin}/files/{wheel.filename}"
    )
    assert installed[0][0] == f"torch @ http://{USERINFO}@{index.origin}/files/{wheel.filename}#sha256=" + (
        hashlib.sha256((tmp_path / "torch-wheels" / wheel.filename).read_bytes()).hexdigest()
    )


def test_the_installer_gets_the_credentials_and_the_environment_keeps_none(auth_index, tmp_path, monkeypatch):
    """A real install (uv, as the proofs' environments are made) of the torch wheel the source names, over the
    basic-auth index, given the credentials outside its command line and checking the wheel's sha256; and an
    install that fails says so without the password. (pip's, the same with PATCHWHEEL_INSTALLER=pip, passes too;
    left out here for its 6 s of ensurepip.)"""
    assert proofenv.uv_bin(), "uv is part of the test extra (patchwheel[maint])"
    wheel_file = _torch_wheel(tmp_path)
    auth_index.project("torch", wheel_file)
    monkeypatch.setenv("TORCH_SOURCE", auth_index.url())
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.setattr(proofenv, "pip_find_links", lambda: [])
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    wheel = torchsource.wheel("2.13.0", [])
    env = tmp_path / "env"
    proofenv._create(env)
    installs = Installs(monkeypatch, passthrough=True)
    # The requirements file keeps the wheel's sha256, which the installer checks.
    with pytest.raises(PatchwheelError) as wrong:
        proofenv._install(env, "--no-deps", wheel.requirement.replace(wheel.sha256 or "?", "0" * 64))
    _must_not_leak({"error": str(wrong.value)})
    assert "hash" in wrong.value.message.lower(), wrong.value.message
    assert not (proofenv.site_packages(env) / "torch-2.13.0.dist-info").exists()
    proofenv._install(env, "--no-deps", wheel.requirement, *wheel.source.installer_args())
    assert (proofenv.site_packages(env) / "torch-2.13.0.dist-info").is_dir()
    _must_not_leak({f"install {i}'s command line": " ".join(c["argv"]) for i, c in enumerate(installs.installs())})
    assert (f"/files/{wheel_file.name}", "Basic " + SECRETS[1]) in auth_index.seen
    _must_not_leak({}, env)

    with pytest.raises(PatchwheelError) as failed:
        proofenv._install(env, "--no-deps", f"torch @ http://{USERINFO}@{auth_index.origin}/files/gone.whl")
    _must_not_leak({"error": str(failed.value)})
    assert f"http://***@{auth_index.origin}/files/gone.whl" in failed.value.message


class Installs:
    """``subprocess.run`` as ``proofenv`` calls it, recorded, not run: each installer's command line, the
    environment it was given, and what each requirements file (``-r``) it names held then (its text, its mode and
    its folder's), since the tool removes it after. ``passthrough``: run it too (a real install)."""

    def __init__(self, monkeypatch, passthrough: bool = False) -> None:
        self.calls: list[dict] = []
        real = subprocess.run

        def run(cmd, *args, **kw):
            files = [Path(cmd[i + 1]) for i, a in enumerate(cmd[:-1]) if a in ("-r", "--requirement")]
            self.calls.append(
                {
                    "argv": list(cmd),
                    "env": dict(kw.get("env") or os.environ),
                    "files": {
                        f: (f.read_text(), f.stat().st_mode & 0o777, f.parent.stat().st_mode & 0o777) for f in files
                    },
                }
            )
            if passthrough:
                return real(cmd, *args, **kw)
            return subprocess.CompletedProcess(cmd, 0, "", "")

        monkeypatch.setattr(proofenv.subprocess, "run", run)

    def installs(self) -> list[dict]:
        return [c for c in self.calls if "install" in c["argv"]]


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_the_installer_is_given_the_credentials_outside_its_command_line(auth_index, tmp_path, monkeypatch, installer):
    """Any user of the machine reads a process's command line (`ps`, /proc/<pid>/cmdline); only its own user reads
    its environment and its private files. Once uv was run with `--index-url $PIP_INDEX_URL`, `--extra-index-url`,
    `--find-links` and `torch @ URL` each holding the user and password, and pip with the torch index and
    `torch @ URL`. Now pip's indexes reach uv by its own environment variables, and each other argument holding a
    credential reaches either installer by a requirements file of mode 0600 in a private folder, removed after; the
    wheel's sha256 goes with it."""
    monkeypatch.setenv("PATCHWHEEL_INSTALLER", installer)
    wheel_file = _torch_wheel(tmp_path)
    auth_index.project("torch", wheel_file)
    index, extra = auth_index.url(), auth_index.url().replace("/simple", "/extra/simple")
    monkeypatch.setenv("TORCH_SOURCE", index.replace("/simple", "/torch/simple"))
    monkeypatch.setenv("PIP_INDEX_URL", index)
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", extra)
    monkeypatch.setattr(torchsource, "_files", lambda src: {wheel_file.name: f"{src.location}/f.whl#sha256=ab"})
    links = [str(tmp_path), index.replace("/simple", "/links/")]  # uv is given pip's find-links
    monkeypatch.setattr(proofenv, "pip_find_links", lambda: links)
    torch = torchsource.wheel("2.13.0", [])
    assert torch.requirement == f"torch @ {index.replace('/simple', '/torch/simple')}/f.whl#sha256=ab"
    installs = Installs(monkeypatch)
    proofenv._install(tmp_path / "env", torch.requirement, "pytest", *torch.source.installer_args())
    [call] = installs.installs()
    _must_not_leak({"the installer's command line": " ".join(call["argv"])})

    # What it reads: its environment, and the requirements file the command line names.
    [(file, (text, mode, folder_mode))] = call["files"].items()
    assert (mode, folder_mode) == (0o600, 0o700)
    assert not file.parent.exists(), "the requirements file is left behind"
    lines = [torch.requirement, f"--extra-index-url {torch.source.location}"]
    if installer == "uv":
        assert text.splitlines() == [f"--find-links {links[1]}", *lines]
        assert call["argv"][call["argv"].index("--find-links") + 1] == links[0]  # no credential: where it was
        assert (call["env"]["UV_INDEX_URL"], call["env"]["UV_EXTRA_INDEX_URL"]) == (index, extra)
    else:  # pip reads its find-links, PIP_INDEX_URL and PIP_EXTRA_INDEX_URL itself
        assert text.splitlines() == lines
        assert (call["env"]["PIP_INDEX_URL"], call["env"]["PIP_EXTRA_INDEX_URL"]) == (index, extra)
    assert "pytest" in call["argv"]


# --- the one redaction --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://alice:s3cret@host.example/simple", "https://***@host.example/simple"),
        ("https://TOKEN@pypi.example:8443/simple/", "https://***@pypi.example:8443/simple/"),
        ("https://alice:s3cret%2Fp%40ss@host.example/simple", "https://***@host.example/simple"),
        # not encoded: no URL parser takes that password whole, and none of it is shown
        ("https://alice:s3/cret@host.example/simple", "https://***@host.example/simple"),
        ("https://alice:s3@cret@host.example/simple", "https://***@host.example/simple"),
        ("https://alice:s3?c#ret@host.example/simple", "https://***@host.example/simple"),
        (
            "cannot fetch 'http://u:s3cret@127.0.0.1:9/simple/torch/': refused (file:///x/y)",
            "cannot fetch 'http://***@127.0.0.1:9/simple/torch/': refused (file:///x/y)",
        ),
        (
            "https://cdn.example/f.whl?X-Amz-Signature=s3cret&X-Amz-Credential=k#sha256=ab",
            "https://cdn.example/f.whl?X-Amz-Signature=***&X-Amz-Credential=***#sha256=ab",
        ),
        ("https://pypi.org/simple", "https://pypi.org/simple"),
        ("file://alice:s3cret@/srv/simple", "file://***@/srv/simple"),
        ("file:///home/alice/proj@v2/simple/", "file:///home/alice/proj@v2/simple/"),
        ("/home/alice/wheels and git@github.com:o/r", "/home/alice/wheels and git@github.com:o/r"),
    ],
)
def test_a_url_is_shown_without_its_user_password_and_query_values(text, shown):
    from patchwheel.urls import redact

    assert redact(text) == shown


_TEXT = st.characters(exclude_categories=["Cs"])  # a lone surrogate is no text a URL can hold


@given(
    user=st.text(_TEXT, min_size=1, max_size=12),
    password=st.text(_TEXT, min_size=1, max_size=24),
    around=st.sampled_from(["{}", "cannot fetch {}: gone", "{!r} is not a folder", "torch @ {}#sha256=00"]),
)
def test_no_user_or_password_survives_the_redaction(user, password, around):
    """Whatever the user and password (percent-encoded, as a URL holds them), inside whatever message."""
    from patchwheel.urls import redact, split_auth

    url = f"https://{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password, safe='')}@host.example/simple"
    shown = redact(around.format(url))
    assert shown == around.format("https://***@host.example/simple")
    assert split_auth(url) == ("https://host.example/simple", (user, password))


#: A password as someone might paste it into a URL: printable ASCII, not encoded. (Quotes and angle brackets end
#: a URL in a message, as they end it for a reader.)
_RAW = st.characters(codec="ascii", exclude_categories=["Cc", "Zs"], exclude_characters="'\"<>")


@given(password=st.text(_RAW, min_size=1, max_size=24))
def test_a_password_written_without_percent_encoding_is_hidden_too(password):
    """No URL parser reads a password with a raw '/', '?', '#' or '@' whole (urllib sent the request elsewhere, and
    said where): the redaction hides it anyway."""
    from patchwheel.urls import redact

    assert redact(f"from https://alice:{password}@host.example/simple:") == "from https://***@host.example/simple:"
