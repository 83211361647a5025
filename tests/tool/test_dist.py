"""dist/ as the build leaves it: partial builds keep the other lines, the swap is one atomic step,
killed builds are swept, and bad --dist / build.json / --python input is a clear error, never a traceback."""

from __future__ import annotations

import csv
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from conftest import CORE, HANG, INIT, TRAILERS, edit_greet, make_patch, other_patch_set
from patchwheel import cli
from patchwheel.errors import PatchwheelError
from patchwheel.series import parse_series
from patchwheel.wheels import build as build_mod
from patchwheel.wheels import staging
from patchwheel.wheels.rewrite import read, record_hash, wheel_names
from patchwheel.wheels.verify import verify

SRC = Path(__file__).resolve().parents[2] / "src"


def _name(demo, version: str = "1.0.0") -> str:
    """The +fixed wheel's file name for the line as its pins record it now (build number and inputs digest)."""
    return wheel_names(demo.load().line("demo", version)).filename


def _build(demo, dist=None, **kw):
    return build_mod.build(demo.load(), dist or demo.root / "dist", log=lambda m: None, **kw)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _siblings(dist: Path) -> list[str]:
    """Leftovers of builds beside dist/: staging folders, old trees, their lock files. (``.<dist>.lock``, the lock
    builds into dist/ take turns with, stays by design: an empty file.)"""
    return sorted(
        p.name for p in dist.parent.iterdir() if p.name.startswith(f".{dist.name}.") and p.name != f".{dist.name}.lock"
    )


def _two_lines(demo) -> None:
    """A second release line demo 1.1.0 (same patch, one line further down) and a consumer set 'latest' for it."""
    demo.add_release("1.1.0", b"# moved\n" + CORE)
    whl = demo.upstream.parent / "demo-1.1.0-py3-none-any.whl"
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    pins = demo.root / "overlay" / "demo" / "pins.toml"
    pin = f'\n[release."1.1.0"]\nwheel = {{ filename = "{whl.name}", sha256 = "{sha}" }}\n'
    pins.write_text(pins.read_text() + pin)
    new_dir = demo.root / "patches" / "demo" / "1.1.0"
    new_dir.mkdir()
    for f in demo.patch_dir.iterdir():
        (new_dir / f.name).write_bytes(f.read_bytes())
    sets = demo.root / "overlay" / "sets.toml"
    sets.write_text(sets.read_text() + '\n[set.latest]\ndemo = "1.1.0"\n')
    demo.vendor()
    assert cli.main(["--root", str(demo.root), "bump", "demo==1.1.0"]) == 0  # as a maintainer pinning a line does


def _consumer_files(out: str) -> list[Path]:
    return [Path(m) for m in re.findall(r" -c (\S+)", out)]


# 1. building one line keeps the others ---------------------------------------------------------------------------


def test_building_one_line_keeps_the_other_lines(demo_project):
    _two_lines(demo_project)
    dist = demo_project.root / "dist"
    _build(demo_project)
    before = _snapshot(dist)
    assert {
        _name(demo_project),
        _name(demo_project, "1.1.0"),
        "constraints-default.txt",
        "constraints-latest.txt",
        "pins-default.txt",
        "pins-latest.txt",
    } <= set(before)
    (built,) = _build(demo_project, select=["demo==1.0.0"])
    assert built.filename == _name(demo_project)
    assert _snapshot(dist) == before, "a rebuild of one line with the same patch set changes nothing"
    manifest = json.loads((dist / "build.json").read_text())
    assert [(w["filename"], w["package"], w["upstream_version"], w["fixed_version"]) for w in manifest["wheels"]] == [
        (_name(demo_project), "demo", "1.0.0", "1.0.0+fixed"),
        (_name(demo_project, "1.1.0"), "demo", "1.1.0", "1.1.0+fixed"),
    ]
    index = (dist / "simple" / "demo" / "index.html").read_text()
    assert _name(demo_project) in index and _name(demo_project, "1.1.0") in index
    assert "demo==1.1.0+fixed" in (dist / "constraints-latest.txt").read_text()


def test_kept_wheel_from_a_build_json_without_line_fields(demo_project):
    """build.json written before package/upstream_version/fixed_version existed: derived from the file name."""
    _two_lines(demo_project)
    dist = demo_project.root / "dist"
    _build(demo_project)
    manifest = json.loads((dist / "build.json").read_text())
    for w in manifest["wheels"]:
        for key in ("package", "upstream_version", "fixed_version"):
            w.pop(key, None)
    (dist / "build.json").write_text(json.dumps(manifest, indent=2) + "\n")
    _build(demo_project, select=["demo==1.0.0"])
    assert {_name(demo_project), _name(demo_project, "1.1.0"), "constraints-latest.txt", "pins-latest.txt"} <= set(
        os.listdir(dist)
    )
    wheels = json.loads((dist / "build.json").read_text())["wheels"]
    assert [(w["package"], w["upstream_version"], w["fixed_version"]) for w in wheels] == [
        ("demo", "1.0.0", "1.0.0+fixed"),
        ("demo", "1.1.0", "1.1.0+fixed"),
    ]


@pytest.mark.parametrize("damage", ["tampered", "missing"])
def test_damaged_kept_wheel_is_refused(demo_project, damage):
    _two_lines(demo_project)
    dist = demo_project.root / "dist"
    _build(demo_project)
    if damage == "missing":
        (dist / _name(demo_project, "1.1.0")).unlink()
    else:
        (dist / _name(demo_project, "1.1.0")).write_bytes((dist / _name(demo_project, "1.1.0")).read_bytes() + b"x")
    before = _snapshot(dist)
    with pytest.raises(PatchwheelError) as err:
        _build(demo_project, select=["demo==1.0.0"])
    assert f"{dist}/{_name(demo_project, '1.1.0')}" in err.value.message and "dist/ is damaged" in err.value.message
    assert "--clean" in err.value.hint
    assert _snapshot(dist) == before
    assert _siblings(dist) == []
    _build(demo_project, select=["demo==1.0.0"], clean=True)
    assert sorted(p.name for p in dist.glob("*.whl")) == [_name(demo_project)]


def _plant(wheel: Path) -> str:
    """Rewrite a built +fixed wheel with one line of code added to its __init__.py and RECORD to match: a wheel the
    build's own verify step accepts (a build changes __init__.py anyway), which no build makes. Its sha256."""
    entries = read(wheel)
    files = {e.name: e.data for e in entries}
    files["demo/__init__.py"] += b"import os  # planted\n"
    record = next(n for n in files if n.endswith(".dist-info/RECORD"))
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    for name, data in files.items():
        writer.writerow([name, "", ""] if name == record else [name, record_hash(data), len(data)])
    files[record] = rows.getvalue().encode()
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for e in entries:
            zf.writestr(e.info, files[e.name])
    return hashlib.sha256(wheel.read_bytes()).hexdigest()


def _record_sha256(dist: Path, filename: str, sha256: str) -> None:
    """Set the sha256 build.json records for one wheel, as whoever planted it would."""
    manifest = json.loads((dist / "build.json").read_text())
    for w in manifest["wheels"]:
        if w["filename"] == filename:
            w["sha256"] = sha256
    (dist / "build.json").write_text(json.dumps(manifest, indent=2) + "\n")


def test_kept_wheel_changed_with_a_matching_build_json_is_refused(demo_project):
    """A one-line build kept the other lines' wheels on build.json's sha256 alone, so a changed wheel
    with a matching build.json was kept and its hash written into the pins. Kept wheels are rebuilt from the
    pinned upstream wheel and the series and must be byte-identical."""
    _two_lines(demo_project)
    dist = demo_project.root / "dist"
    _build(demo_project)
    planted = _plant(dist / _name(demo_project, "1.1.0"))
    _record_sha256(dist, _name(demo_project, "1.1.0"), planted)
    line = demo_project.load().line("demo", "1.1.0")
    verify(
        line,
        dist / _name(demo_project, "1.1.0"),
        demo_project.upstream.parent / "demo-1.1.0-py3-none-any.whl",
        parse_series(line),
    )
    before = _snapshot(dist)
    with pytest.raises(PatchwheelError) as err:
        _build(demo_project, select=["demo==1.0.0"])
    assert err.value.message.startswith(
        f"{dist}/{_name(demo_project, '1.1.0')} differs from a rebuild from its pinned upstream wheel and "
        "patches/demo/1.1.0/ "
        f"(sha256 {planted[:16]}…, the rebuild gives "
    ), err.value.message
    assert err.value.message.endswith(
        "): it was changed after it was built, or built by another version of patchwheel; dist/ was left as it was"
    ), err.value.message
    assert "--clean" in err.value.hint
    assert _snapshot(dist) == before
    assert _siblings(dist) == []
    _build(demo_project, clean=True)
    assert planted not in (dist / "pins-latest.txt").read_text()


def _counting_builds(monkeypatch) -> list[str]:
    """The lines each build_line call makes, in order (the build and _keep's rebuilds both call it)."""
    made: list[str] = []
    real = build_mod.build_line

    def counted(line, *args, **kw):
        made.append(line.version)
        return real(line, *args, **kw)

    monkeypatch.setattr(build_mod, "build_line", counted)
    return made


def test_a_kept_wheel_with_this_tools_record_is_not_rebuilt(demo_project, monkeypatch):
    """A one-line build cost a full one: every kept wheel was rebuilt to prove it. A wheel whose sha256 this tool
    recorded in its own cache, for the line's inputs as they are now, is copied instead; without the record (a
    cache emptied), it is rebuilt, and the rebuild records it again."""
    _two_lines(demo_project)
    dist = demo_project.root / "dist"
    made = _counting_builds(monkeypatch)
    _build(demo_project)
    assert made == ["1.0.0", "1.1.0"]
    before = _snapshot(dist)
    said: list[str] = []
    build_mod.build(demo_project.load(), dist, select=["demo==1.0.0"], log=said.append)
    assert made[2:] == ["1.0.0"], "the kept 1.1.0 wheel is not built again"
    assert _snapshot(dist) == before
    assert (
        f"kept {_name(demo_project, '1.1.0')} (this tool built it from the same inputs: its record in the tool's "
        "cache)" in said
    ), said
    shutil.rmtree(demo_project.cache / "records" / "built")
    _build(demo_project, select=["demo==1.0.0"])
    assert made[3:] == ["1.1.0", "1.0.0"], "no record: the kept wheel is proven by a rebuild"
    _build(demo_project, select=["demo==1.0.0"])
    assert made[5:] == ["1.0.0"], "the rebuild recorded it"
    assert _snapshot(dist) == before


@pytest.mark.parametrize("damage", ["not JSON", "another sha256", "a list"])
def test_a_damaged_record_is_no_match_and_the_kept_wheel_is_rebuilt(demo_project, monkeypatch, damage):
    _two_lines(demo_project)
    dist = demo_project.root / "dist"
    made = _counting_builds(monkeypatch)
    _build(demo_project)
    for record in (demo_project.cache / "records" / "built").iterdir():
        text = {
            "not JSON": "{",
            "another sha256": record.read_text().replace('"sha256": "', '"sha256": "0'),
            "a list": "[]",
        }
        record.write_text(text[damage])
    before = _snapshot(dist)
    _build(demo_project, select=["demo==1.0.0"])
    assert made[2:] == ["1.1.0", "1.0.0"], "no record: the kept wheel is proven by a rebuild"
    assert _snapshot(dist) == before


@pytest.mark.parametrize("forged", ["build.json", "build.json and the record's file name"])
def test_a_changed_kept_wheel_with_a_forged_build_json_is_rebuilt_and_refused(demo_project, monkeypatch, forged):
    """Whoever can write dist/ can change a kept wheel and build.json to match, not the tool's record of what it
    built: the changed wheel has no record, so it is rebuilt, and the rebuild refuses it. A record copied onto
    another key (the cache's other line) names other inputs, so it matches nothing either."""
    _two_lines(demo_project)
    dist = demo_project.root / "dist"
    made = _counting_builds(monkeypatch)
    _build(demo_project)
    planted = _plant(dist / _name(demo_project, "1.1.0"))
    _record_sha256(dist, _name(demo_project, "1.1.0"), planted)
    if forged != "build.json":  # a record under the 1.0.0 line's key, naming the planted wheel
        (record,) = [
            p for p in (demo_project.cache / "records" / "built").iterdir() if _name(demo_project) in p.read_text()
        ]
        record.write_text(json.dumps({"filename": _name(demo_project, "1.1.0"), "sha256": planted}))
    before = _snapshot(dist)
    with pytest.raises(PatchwheelError) as err:
        _build(demo_project, select=["demo==1.0.0"])
    assert made[2:] == ["1.1.0"], "the kept wheel is rebuilt (and refused before the selected line is built)"
    assert "differs from a rebuild from its pinned upstream wheel" in err.value.message
    assert _snapshot(dist) == before


@pytest.mark.parametrize("change", ["another patch", "the patch edited under its name"])
def test_kept_wheel_of_a_changed_series_is_refused(demo_project, change):
    """A kept wheel built from another series than the line has now cannot be checked by a rebuild: it is refused
    (it used to be kept, with a note), and the error says how to build it too or leave it out. build.json records
    the patch names only; the wheel's own manifest has their sha256, so an edited patch is told from a changed
    wheel too."""
    _two_lines(demo_project)
    dist = demo_project.root / "dist"
    _build(demo_project)
    built = _name(demo_project)
    if change == "another patch":  # the 1.0.0 line's series
        other_patch_set(demo_project)
    else:
        upstream = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
        edited = make_patch(upstream, edit_greet, "Greet with a comma, as upstream's docs do", TRAILERS)
        demo_project.set_series(("0001-greet-comma.patch", edited))
    before = _snapshot(dist)
    with pytest.raises(PatchwheelError) as err:
        _build(demo_project, select=["demo==1.1.0"])
    assert err.value.message == (
        f"{dist}/{built} was built from other pins or patches than overlay/ and patches/ hold now, so it "
        "cannot be checked by a rebuild; dist/ was left as it was"
    )
    assert err.value.hint == (
        "build that line too (nox -s build -- demo==1.1.0 demo==1.0.0), or pass --clean: dist/ then holds only "
        "the lines built"
    )
    assert _snapshot(dist) == before
    assert _siblings(dist) == []


def test_cli_build_names_only_constraints_files_that_exist(demo_project, capsys):
    _two_lines(demo_project)
    dist = demo_project.root / "out"
    root = ["--root", str(demo_project.root)]
    assert cli.main(root + ["build", "demo==1.0.0", "--dist", str(dist)]) == 0  # set 'latest' is incomplete
    out = capsys.readouterr().out
    assert _consumer_files(out) == [dist / "constraints-default.txt"], out
    assert "latest" in out and "demo==1.1.0" in out, "say which line the incomplete set lacks"
    assert cli.main(root + ["build", "--dist", str(dist)]) == 0
    assert cli.main(root + ["build", "demo==1.1.0", "--dist", str(dist)]) == 0
    out = capsys.readouterr().out.split("wrote ")[-1]
    files = _consumer_files(out)
    assert files == [dist / "constraints-default.txt", dist / "constraints-latest.txt"], out
    assert all(f.is_file() for f in files)


# 2. the swap into dist/ is one step ------------------------------------------------------------------------------


def test_the_swap_never_leaves_a_moment_without_dist(demo_project, monkeypatch):
    dist = demo_project.root / "dist"
    _build(demo_project)
    before = _snapshot(dist)
    other_patch_set(demo_project)
    gaps = []
    for name in ("replace", "rename"):
        real = getattr(os, name)

        def checked(src, dst, *a, _real=real, **kw):
            _real(src, dst, *a, **kw)
            if not dist.is_dir():
                gaps.append(f"os.{_real.__name__}({src}, {dst}) left no {dist}")

        monkeypatch.setattr(os, name, checked)
    swaps = []
    real_exchange = getattr(staging, "_exchange", None)

    def exchange(a, b):
        assert real_exchange is not None
        swaps.append(real_exchange(a, b))
        return swaps[-1]

    monkeypatch.setattr(staging, "_exchange", exchange, raising=False)
    _build(demo_project, clean=True)
    assert gaps == []
    assert swaps == [True], "swapped in by one exchange"
    assert _snapshot(dist) != before and (dist / _name(demo_project)).is_file(), "the new build was swapped in"
    assert _siblings(dist) == []


def test_exchange_swaps_two_folders(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("in a")
    (b / "y").write_text("in b")
    assert staging._exchange(a, b), "renameat2(RENAME_EXCHANGE) is expected on Linux ext4/tmpfs"
    assert os.listdir(a) == ["y"] and os.listdir(b) == ["x"]


def test_fallback_swap_failure_leaves_dist_exactly_as_before(demo_project, monkeypatch):
    dist = demo_project.root / "dist"
    _build(demo_project)
    before = _snapshot(dist)
    other_patch_set(demo_project)
    monkeypatch.setattr(staging, "_exchange", lambda a, b: False, raising=False)  # no renameat2 here
    real = os.replace

    def second_rename_fails(src, dst):
        if Path(dst) == dist and Path(src).name.startswith(".dist.partial-"):
            raise OSError(5, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", second_rename_fails)
    monkeypatch.setattr(os, "rename", second_rename_fails)
    with pytest.raises(PatchwheelError) as err:
        _build(demo_project, clean=True)
    assert "Input/output error" in err.value.message and str(dist) in err.value.message
    assert _snapshot(dist) == before
    assert _siblings(dist) == []
    monkeypatch.setattr(os, "replace", real)
    monkeypatch.setattr(os, "rename", real)
    _build(demo_project, clean=True)  # the two-rename swap itself works
    assert _snapshot(dist) != before and (dist / _name(demo_project)).is_file()
    assert _siblings(dist) == []


# 3. staging folders of killed builds are swept -------------------------------------------------------------------


def test_stale_staging_is_swept_and_a_live_one_is_kept(demo_project):
    dist = demo_project.root / "dist"
    parent = dist.parent
    for stale in (".dist.partial-killed1", ".dist.old-4242"):
        (parent / stale).mkdir()
        (parent / stale / "demo-1.0.0+fixed-py3-none-any.whl").write_bytes(b"half written")
    (parent / ".dist.partial-killed2.lock").touch()  # a lock file whose build died before making its folder
    live = parent / ".dist.partial-running"
    live.mkdir()
    with open(parent / ".dist.partial-running.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as a running build holds it
        _build(demo_project)
        assert _siblings(dist) == [".dist.partial-running", ".dist.partial-running.lock"]
    assert (dist / _name(demo_project)).is_file()
    _build(demo_project)  # the lock is free now: the folder is stale
    assert _siblings(dist) == []


def test_killed_build_is_swept_by_the_next_build(demo_project):
    """A real build process, stopped mid-build (it waits on its stdin after the first step's log line), then
    killed with SIGKILL: its staging folder stays behind until the next build."""
    dist = demo_project.root / "dist"
    driver = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from patchwheel.wheels import build
        from patchwheel import config

        def log(msg):
            if msg.startswith("[1/"):
                print("staged", flush=True)
                sys.stdin.readline()  # the test kills us here
        build.build(config.load({str(demo_project.root)!r}), Path({str(dist)!r}), log=log)
    """)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(
        [sys.executable, "-c", driver], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == "staged\n"
        partial = [n for n in _siblings(dist) if not n.endswith(".lock")]
        assert len(partial) == 1 and partial[0].startswith(".dist.partial-"), _siblings(dist)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert partial[0] in _siblings(dist), "kill -9 runs no cleanup"
    _build(demo_project)
    assert _siblings(dist) == []


@pytest.mark.parametrize("how", ["planted", "cut swap"])
def test_old_tree_of_another_build_is_never_restored(demo_project, how):
    """With no dist/, the next build moved any `.dist.old-*` into place and kept its wheels, so a planted
    one (a changed wheel, a build.json to match) was published and its hash written into the pins. A build can
    not tell a planted tree from the previous dist/ of a build killed between the two renames of the fallback
    swap (`dist -> .dist.old-X`, then staging -> dist): it restores neither, only what it moved itself."""
    _two_lines(demo_project)
    dist = demo_project.root / "dist"
    _build(demo_project)
    old = dist.with_name(f".dist.old-{how.replace(' ', '')}")
    os.replace(dist, old)
    planted = _plant(old / _name(demo_project, "1.1.0")) if how == "planted" else None
    if planted:
        _record_sha256(old, _name(demo_project, "1.1.0"), planted)
    said: list[str] = []
    build_mod.build(demo_project.load(), dist, select=["demo==1.0.0"], log=said.append)
    assert sorted(p.name for p in dist.glob("*.whl")) == [_name(demo_project)], "the old tree's 1.1.0 wheel is not kept"
    assert not (dist / "pins-latest.txt").exists()
    assert not planted or all(planted.encode() not in data for data in _snapshot(dist).values())
    assert _siblings(dist) == []
    assert (
        f"removed {old}, left by a build that was stopped while it swapped dist/: not restored, as a build cannot "
        "tell it from a planted folder (build the lines it held again)"
    ) in said, said


# 4./5. bad --dist and a damaged build.json ------------------------------------------------------------------------


@pytest.mark.parametrize("clean", [False, True])
def test_dist_that_is_a_file_is_refused(demo_project, tmp_path, capsys, clean):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    listing = sorted(tmp_path.iterdir())
    for dist in (afile, afile / "dist"):
        argv = ["--root", str(demo_project.root), "build", "--dist", str(dist)] + (["--clean"] if clean else [])
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {afile} is a file") and "\n  fix: " in err, err
    assert afile.read_text() == "mine"
    assert sorted(tmp_path.iterdir()) == listing, "nothing is made beside it"


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder``: a file's bytes, None for a folder (an empty one counts too)."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("clean", [False, True])
def test_folder_the_tool_did_not_make_is_refused_even_with_clean(demo_project, tmp_path, capsys, clean):
    """`build --clean --dist <a folder of mine>` emptied it (and `--dist .` in a clone removed .git)."""
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_text("my notes")
    (mine / "sub" / "y.txt").write_text("more")
    before, listing = _tree(mine), sorted(tmp_path.iterdir())
    argv = ["--root", str(demo_project.root), "build", "demo==1.0.0", "--dist", str(mine)]
    assert cli.main(argv + (["--clean"] if clean else [])) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {mine} exists and was not made by patchwheel (no build.json); it holds notes.txt, sub/\n"
        "  fix: a build replaces the whole --dist folder: pass --dist a new or empty folder, e.g. --dist "
        f"{demo_project.root}/dist, or move what this one holds elsewhere\n"
    ), err
    assert _tree(mine) == before
    assert sorted(tmp_path.iterdir()) == listing, "nothing is made beside it"


@pytest.mark.parametrize("clean", [False, True])
def test_files_added_to_a_dist_the_tool_made_are_refused(demo_project, capsys, clean):
    """A build replaces the whole folder: what someone put into dist/ besides the build's files would be lost. The
    core metadata and SBOM the build writes beside each wheel are its own; a `.metadata` or `.cdx.json` of a wheel
    build.json does not list is not, nor a link in the place of its own."""
    dist = demo_project.root / "dist"
    _build(demo_project)
    assert (dist / f"{_name(demo_project)}.metadata").is_file()  # the build's: not refused below
    (dist / "notes.txt").write_text("my notes")
    (dist / "demo-0.9+fixed-py3-none-any.whl.metadata").write_text("Metadata-Version: 2.1\n")
    (dist / "demo-0.9+fixed-py3-none-any.whl.cdx.json").write_text("{}")  # an SBOM of no wheel listed
    own = dist / f"{_name(demo_project)}.cdx.json"  # the build's SBOM, swapped for a link
    own.unlink()
    own.symlink_to(dist / "notes.txt")
    (dist / "simple" / "extra").mkdir()
    before = _tree(dist)
    argv = ["--root", str(demo_project.root), "build", "--dist", str(dist)]
    assert cli.main(argv + (["--clean"] if clean else [])) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {dist} holds what no build wrote: demo-0.9+fixed-py3-none-any.whl.cdx.json, "
        f"demo-0.9+fixed-py3-none-any.whl.metadata, {own.name}, notes.txt, simple/extra/\n"
        "  fix: a build replaces the whole --dist folder: move them elsewhere, or pass --dist another folder\n"
    ), err
    assert _tree(dist) == before
    assert _siblings(dist) == []


@pytest.mark.parametrize("clean", [False, True])
@pytest.mark.parametrize("which", ["project root", "above the project root", "home", "above home"])
def test_dist_that_is_or_holds_the_project_or_home_is_refused(
    demo_project, tmp_path, monkeypatch, capsys, which, clean
):
    home = tmp_path / "users" / "me"
    home.mkdir(parents=True)
    (home / ".profile").write_text("mine")
    monkeypatch.setenv("HOME", str(home))
    root = demo_project.root  # tmp_path/project
    dist, said = {
        "project root": (root, "is the project root"),
        "above the project root": (tmp_path, f"holds the project root ({root})"),
        "home": (home, "is your home folder"),
        "above home": (home.parent, f"holds your home folder ({home})"),
    }[which]
    before = _tree(tmp_path)
    argv = ["--root", str(root), "build", "--dist", str(dist)]
    assert cli.main(argv + (["--clean"] if clean else [])) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: --dist {dist} {said}: a build replaces the whole --dist folder\n"
        f"  fix: pass --dist a folder of its own (it is made when missing), e.g. --dist {root}/dist\n"
    ), err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("clean", [False, True])
def test_dist_at_the_file_system_root_is_an_error(demo_project, monkeypatch, capsys, clean):
    """`--dist /` ended in a ValueError traceback (and only because `/` has no name for the lock file)."""

    def never(*args, **kwargs):
        raise AssertionError("the build went on with --dist /")

    monkeypatch.setattr(staging, "exclusive", never)  # whatever happens, nothing under / is touched
    monkeypatch.setattr(build_mod.shutil, "rmtree", never)
    argv = ["--root", str(demo_project.root), "build", "--dist", "/"]
    assert cli.main(argv + (["--clean"] if clean else [])) == 2
    assert capsys.readouterr().err == (
        "error: --dist / is the file system root: a build replaces the whole --dist folder\n"
        f"  fix: pass --dist a folder of its own (it is made when missing), e.g. --dist {demo_project.root}/dist\n"
    )


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[]",
        '{"wheels": 3}',
        '{"wheels": [{"filename": 1}]}',
        '{"wheels": [{"filename": "x.whl", "sha256": "00"}]}',
        "\udcff",
    ],
)
def test_corrupt_build_json_is_refused_even_with_clean(demo_project, content):
    """A damaged build.json does not show the folder is the tool's: --clean is refused too, and the hint no longer
    recommends it; removing the folder by hand is the way out."""
    dist = demo_project.root / "dist"
    _build(demo_project)
    (dist / "build.json").write_bytes(content.encode("utf-8", "surrogateescape"))
    before = _tree(dist)
    for clean in (False, True):
        with pytest.raises(PatchwheelError) as err:
            _build(demo_project, clean=clean)
        assert err.value.message.startswith(f"{dist}/build.json is damaged: "), err.value.message
        assert err.value.hint == (
            f"a build replaces only a folder it made: if {dist} is patchwheel's output, remove it (or move it "
            "aside) and build again; if not, pass --dist another folder"
        )
        assert _tree(dist) == before
    shutil.rmtree(dist)
    _build(demo_project)
    assert [w["filename"] for w in json.loads((dist / "build.json").read_text())["wheels"]] == [_name(demo_project)]


# 6. status --python ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["status"], ["diagnose", "some/checkpoint"]])
def test_python_that_is_not_an_interpreter(tmp_path, capsys, command):
    assert cli.main(command + ["--python", "/nonexistent/python"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no interpreter at /nonexistent/python\n  fix: ") and ".venv/bin/python" in err
    plain = tmp_path / "python"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    assert cli.main(command + ["--python", str(plain)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {plain} is not executable\n  fix: "), err
    assert cli.main(command + ["--python", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path} is not executable")
    plain.write_text("not a program")
    plain.chmod(0o755)  # executable, but the kernel cannot run it (no #! line)
    assert cli.main(command + ["--python", str(plain)]) == 2
    assert capsys.readouterr().err.startswith(f"error: cannot run {plain}: Exec format error")


# 7. what an interrupt says ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,func,said",
    [
        (["build"], "cmd_build", "interrupted; dist/ is unchanged\n"),
        (["rebase", "demo", "1.1.0"], "cmd_rebase", "interrupted\n"),
        (["matrix", "run"], "cmd_matrix_run", "interrupted\n"),
        (["lint"], "cmd_lint", "interrupted\n"),
    ],
)
def test_interrupt_message_names_dist_only_for_build(monkeypatch, capsys, argv, func, said):
    def interrupted(args):
        raise KeyboardInterrupt

    module = "commands" if func in ("cmd_build", "cmd_lint") else "maint_commands"
    monkeypatch.setattr(f"patchwheel.{module}.{func}", interrupted)  # the parser imports it when it runs
    assert cli.main(argv) == 130
    assert capsys.readouterr().err == said


def test_builds_into_the_same_dist_take_turns(demo_project, tmp_path):
    """A second build into a dist/ that a first build holds waits for it, rather than racing it (last one wins)."""
    import threading

    dist = demo_project.root / "dist"
    holder = os.open(dist.with_name(".dist.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(holder, fcntl.LOCK_EX)  # "the first build"
    waiting, done, ended, said = threading.Event(), threading.Event(), threading.Event(), []

    def log(message: str) -> None:
        said.append(message)
        if message.startswith("waiting for another build"):
            waiting.set()
            ended.set()

    def second() -> None:
        try:
            build_mod.build(demo_project.load(), dist, log=log)
            done.set()
        finally:
            ended.set()  # the build went on, or failed: either way it did not wait

    thread = threading.Thread(target=second)
    thread.start()
    try:
        # no guess of how long the build takes to reach the lock: it says it waits, or it ends
        assert ended.wait(HANG) and waiting.is_set(), said
        assert not done.is_set() and not dist.exists(), "the second build went on while the first held dist/"
    finally:
        os.close(holder)
    thread.join(HANG)
    assert done.is_set() and (dist / "build.json").is_file()
