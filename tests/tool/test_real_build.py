"""Checks of this repository's real series and of the dist/ that `nox -s build` made (the tests session builds
first; the upstream wheels come from the verified cache)."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
from cyclonedx.model.bom import Bom
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from wheel.wheelfile import WheelFile

from patchwheel import config, gitops, series
from patchwheel.names import DIST_RECORD
from patchwheel.probes.manifest import NAME as FIXES_MANIFEST
from patchwheel.wheels import build as build_mod
from patchwheel.wheels import fetch, sbom
from patchwheel.wheels.rewrite import wheel_names

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
OVERLAY = config.load(ROOT)
LINES = OVERLAY.all_lines()


@pytest.fixture(scope="module")
def built_dist():
    if not (DIST / DIST_RECORD).is_file():
        pytest.fail("dist/ is missing: run `nox -s build` first (the nox tests session does)")
    return json.loads((DIST / DIST_RECORD).read_text())


@pytest.mark.parametrize("line", LINES, ids=[ln.key for ln in LINES])
def test_series_regenerates_byte_for_byte(line):
    """git am the series in order onto upstream's files; format-patch with the pinned flags gives each patch's
    committed bytes (its `index` line names the blob the previous patches left)."""
    patches = series.parse_series(line)
    touched = sorted({p for patch in patches for p in patch.touched})
    with zipfile.ZipFile(fetch.fetch(line.package, line.wheel)) as zf:
        files = {p: zf.read(line.wheel_path(p)) for p in touched if line.wheel_path(p) in zf.namelist()}
    repo = gitops.temp_repo(files)
    try:
        for patch in patches:
            gitops.am(repo, patch.path)
            assert gitops.format_patch(repo) == patch.raw, patch.name
    finally:
        shutil.rmtree(repo.parent)


@pytest.mark.parametrize("line", LINES, ids=[ln.key for ln in LINES])
def test_dist_wheel_is_upstream_plus_patches_only(line, built_dist):
    names = wheel_names(line)
    wheel = DIST / names.filename
    patches = series.parse_series(line)
    touched = {line.wheel_path(p) for s in patches for p in s.touched}
    # wheel's own reader: each member read is checked against RECORD, and one RECORD does not list is refused (an
    # independent RECORD check, as `wheel unpack` makes it, without writing the files out)
    with zipfile.ZipFile(fetch.fetch(line.package, line.wheel)) as up, WheelFile(wheel) as new:
        old = {n.replace(names.old_distinfo, names.new_distinfo): up.read(n) for n in up.namelist()}
        ours = {n: new.read(n) for n in new.namelist()}
        created = sorted(touched - set(up.namelist()))
        assert [n.replace(names.old_distinfo, names.new_distinfo) for n in up.namelist()] == [
            n for n in new.namelist() if not n.endswith((FIXES_MANIFEST, sbom.NAME)) and n not in created
        ], "same entries, same order, plus what the patches create, the manifest and the SBOM"
        assert all(n in ours for n in created)
        for n in up.namelist():
            a, b = up.getinfo(n), new.getinfo(n.replace(names.old_distinfo, names.new_distinfo))
            assert (a.date_time, a.external_attr) == (b.date_time, b.external_attr), n
    changed = {n for n in old if old[n] != ours[n]}
    expected = {f"{line.import_name}/__init__.py", f"{names.new_distinfo}/METADATA", f"{names.new_distinfo}/RECORD"} | (
        touched - set(created)
    )
    if line.build is not None:  # WHEEL's Build line names the build (its build tag)
        expected.add(f"{names.new_distinfo}/WHEEL")
    assert changed == expected
    manifest = json.loads(ours[f"{names.new_distinfo}/{FIXES_MANIFEST}"])
    assert [p["name"] for p in manifest["patches"]] == [p.name for p in patches]
    assert manifest["upstream"]["sha256"] == line.wheel.sha256
    raw = ours[sbom.member(names.new_distinfo)]
    assert raw == (DIST / (names.filename + sbom.DETACHED)).read_bytes(), "the detached copy is the wheel's SBOM"
    check_sbom(raw, line, patches)


def check_sbom(raw: bytes, line, patches) -> None:
    """The wheel's SBOM passes CycloneDX's strict 1.6 schema, and CycloneDX's own model, read from it, finds the
    pinned upstream wheel as the ancestor (its sha256 as pins.toml pins it) and each patch of the series, in order."""
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(raw.decode()) is None
    component = Bom.from_json(json.loads(raw)).metadata.component  # type: ignore[attr-defined]
    assert (component.name, component.version) == (line.package, line.fixed_version)
    [ancestor] = component.pedigree.ancestors
    assert (ancestor.name, ancestor.version) == (line.package, line.version)
    assert [(h.alg.value, h.content) for h in ancestor.hashes] == [("SHA-256", line.wheel.sha256)]
    assert {p.diff.text.content for p in component.pedigree.patches} == {p.raw.decode() for p in patches}
    listed = json.loads(raw)["metadata"]["component"]["pedigree"]["patches"]  # (the model keeps a set: the order)
    assert [p["diff"]["text"]["content"] for p in listed] == [p.raw.decode() for p in patches]
    assert [p.value for p in component.properties if p.name == sbom.PATCH] == [
        f"{p.name} sha256:{p.sha256}" for p in patches
    ]


def test_rebuild_matches_dist_byte_for_byte(built_dist, tmp_path):
    build_mod.build(OVERLAY, tmp_path / "dist", log=lambda m: None)
    for w in built_dist["wheels"]:
        assert (tmp_path / "dist" / w["filename"]).read_bytes() == (DIST / w["filename"]).read_bytes()
    for w in built_dist["wheels"]:  # the SBOMs too: made from the inputs alone (no serial drawn, no time)
        name = w["filename"] + sbom.DETACHED
        assert (tmp_path / "dist" / name).read_bytes() == (DIST / name).read_bytes()
    for f in ("constraints-default.txt", "pins-default.txt", "simple/transformers/index.html"):
        assert (tmp_path / "dist" / f).read_bytes() == (DIST / f).read_bytes()
