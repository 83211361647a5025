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
import os
import shutil
import subprocess
import sys
import urllib.parse
import zipfile
from pathlib import Path

import pytest

from conftest import run_cli, serve_locally
from patchwheel.wheels import build as build_mod

SRC = Path(__file__).resolve().parents[2] / "src" / "patchwheel"
GIT = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


_run = run_cli


@pytest.fixture
def published(demo_project, tmp_path):
    """The demo project as a repository with this tool's source, its build recorded and committed; and the wheel
    that commit's tool put into dist/. That tool writes its SBOM with another indent than the tool running the tests:
    a rebuild by any other tool than the commit's gives other bytes."""
    root = demo_project.root
    shutil.copytree(SRC, root / "src" / "patchwheel", ignore=shutil.ignore_patterns("__pycache__"))
    committed = root / "src" / "patchwheel" / "wheels" / "sbom.py"
    text = committed.read_text()
    assert "json.dumps(bom, indent=2," in text
    committed.write_text(text.replace("json.dumps(bom, indent=2,", "json.dumps(bom, indent=1,"))
    assert _run("--root", str(root), "bump", "demo")[0] == 0
    _git(root, "init", "-q")
    _git(root, "add", "-A", "overlay", "patches", "src", "tests")
    _git(root, "commit", "-qm", "build 1")
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    built = subprocess.run(
        [sys.executable, "-m", "patchwheel", "--root", str(root), "build", "--dist", str(tmp_path / "dist")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    return root, wheel


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *GIT, *args], check=True)


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
    server = serve_locally(functools.partial(_Quiet, directory=str(folder)))  # type: ignore[arg-type]
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_verify_accepts_the_build_and_refuses_one_changed_byte(published, tmp_path):
    root, wheel = published
    with _serving(wheel.parent) as url:  # the wheel as a consumer finds it: by URL, its '+' percent-encoded, signed
        signed = f"{url.replace('//', '//user:PASSWORD@')}/{urllib.parse.quote(wheel.name)}?X-Amz-Signature=SECRET"
        rc, out, err = _run("--root", str(root), "verify", signed)
    assert rc == 0, out + err
    assert f"verified: {wheel.name} is, byte for byte, the build of commit " in out
    assert "SECRET" not in out + err and "PASSWORD" not in out + err, "no credential is printed"
    # by the commit's own tool: the tool running here writes its SBOMs otherwise, so its rebuild would differ
    assert "indent=1" not in (SRC / "wheels" / "sbom.py").read_text()
    assert "build 1 of demo 1.0.0, recorded by commit" in out

    bad = _tampered(wheel, tmp_path / "tampered", "demo/core.py")
    rc, out, err = _run("--root", str(root), "verify", str(wheel), str(bad))  # what `nox -s verify -- dist/*.whl` does
    assert rc == 1, out + err
    assert "NOT verified" in out and "  - demo/core.py: content differs" in out, out
    assert "demo-1.0.0+fixed.dist-info/RECORD: content differs" in out, out
    assert out.rstrip().endswith("1 of 2 wheel(s) verified"), out


def test_verify_names_what_it_cannot_check(published, demo_project, tmp_path):
    root, wheel = published
    rc, _, err = _run("--root", str(root), "verify", str(demo_project.upstream))  # a wheel with no SBOM
    assert rc == 2 and "has no SBOM that names its build" in err, err
    page = tmp_path / "page" / wheel.name
    page.parent.mkdir()
    page.write_text("<html>sign in</html>")  # a login page saved under the wheel's name
    rc, out, err = _run("--root", str(root), "verify", str(page), str(wheel))
    assert rc == 2 and f"error: {wheel.name} is not a readable wheel" in err and "Traceback" not in err, err
    assert f"verified: {wheel.name}" in out and "1 of 2 wheel(s) verified" in out, "the other wheel is still checked"
    # a checkout that never recorded this build (another repository of the same shape, or a branch without it)
    other = tmp_path / "other"
    shutil.copytree(root / "overlay", other / "overlay")
    rc, _, err = _run("--root", str(other), "verify", str(wheel))
    assert rc == 2 and "is not a git clone of the project" in err, err
    pins = other / "overlay" / "demo" / "pins.toml"
    pins.write_text(pins.read_text().replace("number = 1,", "number = 7,"))
    _git(other, "init", "-q")
    _git(other, "add", "-A")
    _git(other, "commit", "-qm", "x")
    rc, _, err = _run("--root", str(other), "verify", str(wheel))
    assert rc == 2 and "does not hold the build of" in err and "--commit" in err, err
    rc, _, err = _run("--root", str(root), "verify", str(wheel), "--commit=no-such-branch")
    assert rc == 2 and "no-such-branch is not a commit" in err, err


def test_verify_says_a_record_is_not_committed_and_exports_no_link(published, demo_project, tmp_path):
    root, wheel = published
    patch = demo_project.patch_dir / "0001-greet-comma.patch"
    patch.write_bytes(patch.read_bytes().replace(b"Greet with a comma", b"Greet people with a comma"))
    demo_project.vendor()
    assert _run("--root", str(root), "bump", "demo")[0] == 0  # build 2, recorded here and not committed
    (built,) = build_mod.build(demo_project.load(), tmp_path / "dist2", log=lambda m: None)
    rc, _, err = _run("--root", str(root), "verify", str(tmp_path / "dist2" / built.filename))
    assert rc == 2 and "the record is in overlay/demo/pins.toml, not committed yet" in err, err
    _git(root, "add", "-A", "overlay", "patches")
    (root / "docs").mkdir()
    (root / "docs" / "link").symlink_to("../overlay")
    _git(root, "add", "docs/link")
    _git(root, "commit", "-qm", "build 2, and a link")
    rc, _, err = _run("--root", str(root), "verify", str(tmp_path / "dist2" / built.filename))
    assert rc == 2 and "holds 'docs/link' (120000 blob)" in err and "regular files only" in err, err
