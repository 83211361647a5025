"""The build pipeline on the synthetic demo package: success, reproducibility, and every bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import CORE, INIT, TRAILERS, make_patch, other_patch_set
from patchwheel.config import BuildRecord
from patchwheel.errors import PatchwheelError
from patchwheel.wheels import build as build_mod
from patchwheel.wheels import buildno
from patchwheel.wheels.rewrite import read
from patchwheel.wheels.verify import verify


def _build(demo, dist=None, **kw):
    return build_mod.build(demo.load(), dist or demo.root / "dist", log=lambda m: None, **kw)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_build_rewrites_only_what_it_must(demo_project):
    (built,) = _build(demo_project)
    dist = demo_project.root / "dist"
    wheel = dist / built.filename
    line = demo_project.load().line("demo")
    assert built.filename == f"demo-1.0.0+fixed-1_{line.build.inputs[:12]}-py3-none-any.whl"
    new = {e.name: (e.info, e.data) for e in read(wheel)}
    old = {e.name: (e.info, e.data) for e in read(demo_project.upstream)}
    assert list(new) == [
        "demo/__init__.py",
        "demo/core.py",
        "demo-1.0.0+fixed.dist-info/METADATA",
        "demo-1.0.0+fixed.dist-info/WHEEL",
        "demo-1.0.0+fixed.dist-info/overlay-fixes.json",
        "demo-1.0.0+fixed.dist-info/sboms/patchwheel.cdx.json",
        "demo-1.0.0+fixed.dist-info/RECORD",
    ]
    assert b'"hello, " + name' in new["demo/core.py"][1]
    assert b'__version__ = "1.0.0+fixed"' in new["demo/__init__.py"][1]
    assert b"Version: 1.0.0+fixed\n" in new["demo-1.0.0+fixed.dist-info/METADATA"][1]
    # WHEEL: upstream's, with the Build line of the file name's build tag (PEP 427)
    wheel_file = old["demo-1.0.0.dist-info/WHEEL"][1]
    assert new["demo-1.0.0+fixed.dist-info/WHEEL"][1] == wheel_file + f"Build: 1_{line.build.inputs[:12]}\n".encode()
    for name, (zi, _) in new.items():  # upstream timestamps and modes are kept
        assert zi.date_time == (2024, 5, 6, 7, 8, 10) and zi.external_attr == 0o644 << 16, name
    manifest = json.loads(new["demo-1.0.0+fixed.dist-info/overlay-fixes.json"][1])
    assert manifest["upstream"] == {
        "version": "1.0.0",
        "wheel": demo_project.upstream.name,
        "sha256": demo_project.sha256,
    }
    assert [p["name"] for p in manifest["patches"]] == ["0001-greet-comma.patch"]
    assert manifest["patches"][0]["upstream_status"] == "Pending"
    index = (dist / "simple" / "demo" / "index.html").read_text()
    assert f'href="../../{wheel.name.replace("+", "%2B")}#sha256={built.sha256}"' in index
    pins = (dist / "pins-default.txt").read_text()
    assert f"demo==1.0.0+fixed --hash=sha256:{built.sha256}  # {wheel.name}\n" in pins
    assert f"demo==1.0.0+fixed  # {wheel.name} sha256:" in (dist / "constraints-default.txt").read_text()


def test_rebuild_is_byte_identical(demo_project, tmp_path):
    _build(demo_project, tmp_path / "a")
    _build(demo_project, tmp_path / "b")
    assert _snapshot(tmp_path / "a") == _snapshot(tmp_path / "b")
    _build(demo_project, tmp_path / "a")  # rebuilding into a dist/ with the same patch set is allowed
    assert _snapshot(tmp_path / "a") == _snapshot(tmp_path / "b")


def test_wheel_library_accepts_record(demo_project, tmp_path):
    (built,) = _build(demo_project)
    wheel = demo_project.root / "dist" / built.filename
    subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", str(tmp_path / "u"), str(wheel)], check=True)


def test_verify_catches_a_tampered_wheel(demo_project, tmp_path):
    (built,) = _build(demo_project)
    wheel = demo_project.root / "dist" / built.filename
    entries = read(wheel)
    bad = tmp_path / built.filename
    with zipfile.ZipFile(bad, "w") as zf:
        for e in entries:
            zf.writestr(e.info, e.data.replace(b'"hello, "', b'"hullo, "') if e.name == "demo/core.py" else e.data)
    line = demo_project.load().line("demo")
    with pytest.raises(PatchwheelError) as err:
        verify(line, bad, demo_project.upstream, build_mod.checked_series(line))
    assert "RECORD hash or size of demo/core.py is wrong" in str(err.value)
    assert "0001-greet-comma.patch is not present" in str(err.value)
    # an SBOM that no longer says what the manifest and the series say (a patch's class changed by hand)
    bom = "demo-1.0.0+fixed.dist-info/sboms/patchwheel.cdx.json"
    with zipfile.ZipFile(bad, "w") as zf:
        for e in entries:
            zf.writestr(e.info, e.data.replace(b'"unofficial"', b'"backport"') if e.name == bom else e.data)
    with pytest.raises(PatchwheelError) as err:
        verify(line, bad, demo_project.upstream, build_mod.checked_series(line))
    assert f"{bom} is not the SBOM of this line's manifest and series" in str(err.value)


def test_sha256_mismatch_is_refused_and_nothing_written(demo_project):
    demo_project.write_pins("0" * 64)
    with pytest.raises(PatchwheelError) as err:
        _build(demo_project)
    assert "sha256 mismatch" in err.value.message and "was not used" in err.value.message
    assert not (demo_project.root / "dist").exists()
    assert not list(demo_project.cache.rglob("*.whl")), "an unverified file must not enter the cache"


def test_download_with_wrong_content_is_refused(demo_project):
    # The index lists the right hash, but the file it serves differs: caught after download.
    demo_project.upstream.write_bytes(demo_project.upstream.read_bytes() + b"tampered")
    with pytest.raises(PatchwheelError, match="sha256 mismatch"):
        _build(demo_project)
    assert not list(demo_project.cache.rglob("*.whl"))


def test_offline_with_empty_cache_then_with_warm_cache(demo_project, monkeypatch):
    monkeypatch.setenv("PATCHWHEEL_INDEX_URL", "http://127.0.0.1:9/simple")  # port 9: nothing listens
    with pytest.raises(PatchwheelError) as err:
        _build(demo_project)
    assert "cannot fetch" in err.value.message and "network" in err.value.hint
    monkeypatch.setenv("PATCHWHEEL_INDEX_URL", demo_project.index.as_uri())
    _build(demo_project)  # warms the cache
    monkeypatch.setenv("PATCHWHEEL_INDEX_URL", "http://127.0.0.1:9/simple")
    _build(demo_project, clean=True)  # offline now, from the cache


def test_patch_that_no_longer_applies_names_patch_file_and_hunk(demo_project):
    moved = {
        "src/demo/core.py": CORE.replace(b"def greet(name):", b"def greet(name, punct=''):"),
        "src/demo/__init__.py": INIT,
    }
    stale = make_patch(
        moved,
        lambda f: (
            {**f, "src/demo/core.py": f["src/demo/core.py"] + b"\n# tail\n"}
            | {"src/demo/core.py": f["src/demo/core.py"].replace(b"punct=''", b'punct="!"')}
        ),
        "Change a line upstream does not have",
        TRAILERS,
    )
    demo_project.set_series(("0001-stale.patch", stale))
    with pytest.raises(PatchwheelError) as err:
        _build(demo_project)
    msg = err.value.message
    assert "0001-stale.patch" in msg and "src/demo/core.py" in msg and "hunk #1 (@@ -1," in msg, msg
    assert "rebase" in err.value.hint
    assert not (demo_project.root / "dist").exists()


def test_already_upstream_patch_is_reported(demo_project):
    # The same change twice: when the second copy comes, the tree already has it (it applies in reverse).
    data = (demo_project.patch_dir / "0001-greet-comma.patch").read_bytes()
    demo_project.set_series(("0001-greet-comma.patch", data), ("0002-greet-again.patch", data))
    with pytest.raises(PatchwheelError) as err:
        _build(demo_project)
    assert "0002-greet-again.patch is already present" in err.value.message
    assert "drop the patch" in err.value.hint


def test_another_series_under_the_same_number_gets_another_name(demo_project):
    """Another series under a build number that named the first one (a record edited by hand: lint sees a record
    that matches its series) gave a wheel name dist/ held with other bytes, which the build had to refuse. The build
    tag carries the inputs digest: the name is another one, and the published file keeps its bytes."""
    dist = demo_project.root / "dist"
    (first,) = _build(demo_project)
    other_patch_set(demo_project)  # build 2, recorded as the tool's series commands do
    pins = demo_project.root / "overlay" / "demo" / "pins.toml"
    buildno.write_record(pins, "1.0.0", BuildRecord(1, demo_project.load().line("demo").build.inputs))
    (second,) = _build(demo_project)
    assert first.filename.startswith("demo-1.0.0+fixed-1_") and second.filename.startswith("demo-1.0.0+fixed-1_")
    assert first.filename != second.filename and first.sha256 != second.sha256
    assert sorted(p.name for p in dist.glob("*.whl")) == [second.filename]


def test_foreign_dist_is_refused(demo_project):
    dist = demo_project.root / "dist"
    dist.mkdir()
    (dist / "mine.txt").write_text("not a build")
    with pytest.raises(PatchwheelError, match="not made by patchwheel"):
        _build(demo_project)
    assert (dist / "mine.txt").read_text() == "not a build"


def test_build_with_tmpdir_inside_a_git_work_tree_still_applies_every_patch(demo_project, tmp_path, monkeypatch):
    # `git apply` inside another work tree silently skips every file: the build must refuse to work there.
    repo = tmp_path / "somerepo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.setenv("TMPDIR", str(repo))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    # GIT_CEILING_DIRECTORIES stops git at the temporary folder's parent, so this must still build correctly,
    # and each patch is then proven present by the reverse check.
    (built,) = _build(demo_project)
    assert built.patches


def test_unknown_package_and_version(demo_project):
    ov = demo_project.load()
    with pytest.raises(PatchwheelError, match="unknown package 'nope'") as err:
        ov.select(["nope"])
    assert "known packages: demo" in err.value.hint
    with pytest.raises(PatchwheelError, match="no release line demo 9.9") as err:
        ov.select(["demo==9.9"])
    assert "known lines: 1.0.0" in err.value.hint


def test_cli_reports_errors_without_traceback(demo_project):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    res = subprocess.run(
        [sys.executable, "-m", "patchwheel", "--root", str(demo_project.root), "build", "nope"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.returncode == 2
    assert res.stderr.startswith("error: unknown package 'nope'") and "fix: known packages" in res.stderr
    assert "Traceback" not in res.stderr
