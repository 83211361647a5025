"""`patchwheel verify`: a +fixed wheel is rebuilt from the commit that recorded its build, in a tree exported from
that commit with that commit's own tool, and compared byte for byte. The demo project here is a small repository of
this project's shape: its overlay/ and patches/, and this tool's source under src/patchwheel, committed."""

from __future__ import annotations

import base64
import contextlib
import csv
import functools
import hashlib
import http.server
import io
import shutil
import subprocess
import threading
import urllib.parse
import zipfile
from pathlib import Path

import pytest

from patchwheel import cli
from patchwheel.wheels import build as build_mod

SRC = Path(__file__).resolve().parents[2] / "src" / "patchwheel"
GIT = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def published(demo_project, tmp_path):
    """The demo project as a repository with this tool's source, its build recorded and committed; and the wheel
    a build of that commit put into dist/."""
    root = demo_project.root
    shutil.copytree(SRC, root / "src" / "patchwheel", ignore=shutil.ignore_patterns("__pycache__"))
    assert _run("--root", str(root), "bump", "demo")[0] == 0
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), *GIT, "add", "-A", "overlay", "patches", "src", "tests"], check=True)
    subprocess.run(["git", "-C", str(root), *GIT, "commit", "-qm", "build 1"], check=True)
    (built,) = build_mod.build(demo_project.load(), tmp_path / "dist", log=lambda m: None)
    return root, tmp_path / "dist" / built.filename


def _tampered(wheel: Path, dest: Path, member: str) -> Path:
    """The wheel with one byte of ``member`` changed and its RECORD row made to match (so an installer that checks
    RECORD takes it)."""
    with zipfile.ZipFile(wheel) as zf:
        items = [(info, zf.read(info)) for info in zf.infolist()]
    data = {info.filename: body for info, body in items}
    data[member] = data[member].replace(b"e", b"E", 1)
    record = next(name for name in data if name.endswith(".dist-info/RECORD"))
    rows = list(csv.reader(io.StringIO(data[record].decode())))
    digest = base64.urlsafe_b64encode(hashlib.sha256(data[member]).digest()).rstrip(b"=").decode()
    rows = [[member, f"sha256={digest}", str(len(data[member]))] if row[0] == member else row for row in rows]
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    data[record] = text.getvalue().encode()
    dest.mkdir()
    with zipfile.ZipFile(dest / wheel.name, "w", zipfile.ZIP_DEFLATED) as zf:
        for info, _ in items:
            zf.writestr(info, data[info.filename])
    return dest / wheel.name


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 (the standard library's name)
        pass


@contextlib.contextmanager
def _serving(folder: Path):
    """A static HTTP server on 127.0.0.1 serving ``folder`` as files (its base URL)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_verify_accepts_the_build_and_refuses_one_changed_byte(published, tmp_path):
    root, wheel = published
    with _serving(wheel.parent) as url:  # the wheel as a consumer finds it: by URL, its '+' percent-encoded
        rc, out, err = _run("--root", str(root), "verify", f"{url}/{urllib.parse.quote(wheel.name)}")
    assert rc == 0, out + err
    assert f"verified: {wheel.name} is, byte for byte, the build of commit " in out
    assert "build 1 of demo 1.0.0, recorded by commit" in out

    bad = _tampered(wheel, tmp_path / "tampered", "demo/core.py")
    rc, out, err = _run("--root", str(root), "verify", str(wheel), str(bad))  # what `nox -s verify -- dist/*.whl` does
    assert rc == 1, out + err
    assert "NOT verified" in out and "  - demo/core.py: content differs" in out, out
    assert "demo-1.0.0+fixed.dist-info/RECORD: content differs" in out, out
    assert out.rstrip().endswith("1 of 2 wheel(s) verified"), out


def test_verify_names_what_it_cannot_check(published, demo_project, tmp_path):
    root, wheel = published
    upstream = demo_project.upstream  # a wheel with no SBOM
    rc, _, err = _run("--root", str(root), "verify", str(upstream))
    assert rc == 2 and "has no SBOM that names its build" in err, err
    # a checkout that never recorded this build (another repository of the same shape, or a branch without it)
    other = tmp_path / "other"
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    shutil.copytree(root / "overlay", other / "overlay")
    (other / "overlay" / "demo" / "pins.toml").write_text(
        (other / "overlay" / "demo" / "pins.toml").read_text().replace("number = 1,", "number = 7,")
    )
    subprocess.run(["git", "-C", str(other), *GIT, "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(other), *GIT, "commit", "-qm", "x"], check=True)
    rc, _, err = _run("--root", str(other), "verify", str(wheel))
    assert rc == 2 and "records build 1 of demo 1.0.0 with inputs" in err and "--commit" in err, err
    for rev in ("no-such-branch", "--output=x"):
        rc, _, err = _run("--root", str(root), "verify", str(wheel), f"--commit={rev}")
        assert rc == 2 and f"{rev} is not a commit" in err, err
