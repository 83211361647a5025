"""What a build does, counted (never timed): each member of a wheel inflated at most once and only where the build
changes or reads it, one git process per line, the audit of a pinned wheel's RECORD, and the in-memory undo that
proves every patch present (git has the last word when it cannot)."""

from __future__ import annotations

import hashlib
import subprocess
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from conftest import CORE, INIT, make_wheel
from patchwheel import cli, gitops
from patchwheel.errors import PatchwheelError
from patchwheel.probes.manifest import NAME as FIXES_MANIFEST
from patchwheel.series import parse_series
from patchwheel.wheels import build as build_mod
from patchwheel.wheels import records, rewrite, undo
from patchwheel.wheels.verify import verify

#: Members the series does not touch and the build does not read: copied raw.
UNCHANGED = {f"demo/extra{i}.py": f"VALUE = {i}\n".encode() * 50 for i in range(4)}


def _republish(demo, files: dict[str, bytes], record=None) -> Path:
    """Replace demo 1.0.0 on the index (and its pin) with a wheel holding ``files`` (``record``: rewrite its RECORD's
    text first), and record the new inputs' build number as a maintainer would."""
    whl = make_wheel(demo.upstream.parent, files)
    if record is not None:
        with zipfile.ZipFile(whl) as zf:
            members = {zi: zf.read(zi) for zi in zf.infolist()}
        with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as zf:
            for zi, data in members.items():
                zf.writestr(zi, record(data) if zi.filename.endswith("/RECORD") else data)
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    page = f'<a href="../../upstream/{whl.name}#sha256={sha}">{whl.name}</a>\n'
    (demo.index / "demo" / "index.html").write_text(page)
    demo.write_pins(sha)
    assert cli.main(["--root", str(demo.root), "bump", "demo==1.0.0"]) == 0
    return whl


def _build_line(demo, out: Path):
    line = demo.load().line("demo")
    out.mkdir(parents=True, exist_ok=True)
    return line, build_mod.build_line(line, out, log=lambda m: None)


def _count_inflates(monkeypatch) -> Counter:
    """(archive file name, member) -> how many times it was inflated."""
    counts: Counter = Counter()
    real = rewrite._inflate

    def counted(path, zi, raw):
        counts[(Path(path).name, zi.filename)] += 1
        return real(path, zi, raw)

    monkeypatch.setattr(rewrite, "_inflate", counted)
    return counts


def test_each_member_is_inflated_at_most_once_and_unchanged_ones_never(demo_project, monkeypatch, tmp_path):
    whl = _republish(demo_project, {"demo/__init__.py": INIT, "demo/core.py": CORE, **UNCHANGED})
    counts = _count_inflates(monkeypatch)
    line, first = _build_line(demo_project, tmp_path / "a")
    assert records.audited(line.wheel.sha256), "the first build from a pinned wheel audits its RECORD"
    assert {m for (archive, m), n in counts.items() if archive == whl.name} >= set(UNCHANGED), "the audit inflates all"
    assert max(counts.values()) == 1, counts
    counts.clear()
    line, built = _build_line(demo_project, tmp_path / "b")
    assert built.sha256 == first.sha256, "the audited route makes the same bytes"
    assert max(counts.values()) == 1, counts
    inflated = {m for _, m in counts}
    assert not inflated & set(UNCHANGED), "unchanged members are copied raw and checked without inflating"
    assert inflated <= {"demo/core.py", "demo/__init__.py"} | {
        f"demo-{v}.dist-info/{n}" for v in ("1.0.0", line.fixed_version) for n in ("METADATA", "WHEEL", "RECORD")
    } | {f"demo-{line.fixed_version}.dist-info/{n}" for n in (FIXES_MANIFEST, "sboms/patchwheel.cdx.json")}, inflated
    with zipfile.ZipFile(tmp_path / "b" / built.filename) as zf:
        assert all(zf.read(n) == d for n, d in UNCHANGED.items())
        assert zf.testzip() is None


def test_an_upstream_record_that_is_wrong_is_not_trusted(demo_project, tmp_path):
    """A pinned wheel whose RECORD lists a wrong sha256 is not audited: every build hashes its members itself, and
    the +fixed wheel's RECORD is right (verify checks it against the content)."""
    wrong = rewrite.record_hash(b"something else")
    _republish(
        demo_project,
        {"demo/__init__.py": INIT, "demo/core.py": CORE, **UNCHANGED},
        record=lambda data: data.replace(rewrite.record_hash(UNCHANGED["demo/extra1.py"]).encode(), wrong.encode()),
    )
    for out in ("a", "b"):
        line, built = _build_line(demo_project, tmp_path / out)
        assert not records.audited(line.wheel.sha256)
        with zipfile.ZipFile(tmp_path / out / built.filename) as zf:
            record = zf.read(f"demo-{line.fixed_version}.dist-info/RECORD").decode()
        assert f"demo/extra1.py,{rewrite.record_hash(UNCHANGED['demo/extra1.py'])}," in record
        assert wrong not in record


def test_one_git_process_per_line(demo_project, monkeypatch, tmp_path):
    _build_line(demo_project, tmp_path / "warm")
    calls: list[list[str]] = []
    real = subprocess.run

    def counted(args, *a, **kw):
        if args[:1] == ["git"] and args[1:2] != ["--version"]:
            calls.append(list(args))
        return real(args, *a, **kw)

    monkeypatch.setattr(subprocess, "run", counted)
    gitops.numstat.cache_clear()  # lint's own check would not run a process when cached
    _build_line(demo_project, tmp_path / "b")
    assert [c[:2] for c in calls] == [["git", "apply"]], calls
    assert "--numstat" in calls[0], "the process that applies the series also says what it applied"


def test_undo_proves_each_patch_present_and_git_decides_when_it_cannot(demo_project, monkeypatch, tmp_path):
    line, built = _build_line(demo_project, tmp_path)
    series = parse_series(line)
    with zipfile.ZipFile(tmp_path / built.filename) as zf:
        now = {"src/demo/core.py": zf.read("demo/core.py")}
    assert undo.undo_series(series, now) == {"src/demo/core.py": CORE}
    assert undo.undo_series(series, {"src/demo/core.py": CORE}) is None, "a hunk that is not there is not undone"
    # When undo cannot prove it, verify asks git, whose verdict stands: the wheel is the same, so it passes.
    monkeypatch.setattr("patchwheel.wheels.verify.undo_series", lambda patches, files: None)
    verify(line, tmp_path / built.filename, demo_project.upstream, series)


def test_a_wheel_member_recompressed_is_compared_by_content(demo_project, tmp_path):
    """A member whose compressed bytes are not upstream's is inflated and compared by content: recompressed alone
    it passes, changed it is named."""
    line, built = _build_line(demo_project, tmp_path)
    wheel = tmp_path / built.filename
    entries = rewrite.read(wheel)
    for level, change in ((1, b""), (1, b"# changed\n")):
        other = tmp_path / "other" / built.filename
        other.parent.mkdir(exist_ok=True)
        with zipfile.ZipFile(other, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as zf:
            for e in entries:
                data = rewrite.inflated(wheel, e)
                zf.writestr(e.info, data + change if e.name.endswith(".dist-info/WHEEL") else data)
        if not change:
            verify(line, other, demo_project.upstream, parse_series(line))
            continue
        with pytest.raises(PatchwheelError) as err:
            verify(line, other, demo_project.upstream, parse_series(line))
        assert "WHEEL is not upstream's with the Build line" in err.value.message


def test_a_build_reads_and_checks_each_series_once(demo_project, monkeypatch, tmp_path):
    """A line's series file is read, each of its patches parsed and the series checked once in a build: the build's
    lint, its draft check, its build tag (the inputs digest) and the wheel's names, asked by the rewrite and by verify,
    each read it again (every patch was parsed 7 times, the series file read 9 times, in one build)."""
    from patchwheel import series

    demo_project.bump()
    parsed: Counter = Counter()
    listed: Counter = Counter()
    checked: Counter = Counter()
    real_parse, real_names, real_lint = series.parse_patch, series.series_names, series.lint_series

    def parse_patch(path):
        parsed[Path(path).name] += 1
        return real_parse(path)

    def series_names(line):
        listed[line.key] += 1
        return real_names(line)

    def lint_series(line, *args, **kw):
        checked[line.key] += 1
        return real_lint(line, *args, **kw)

    monkeypatch.setattr(series, "parse_patch", parse_patch)
    monkeypatch.setattr(series, "series_names", series_names)
    monkeypatch.setattr(series, "lint_series", lint_series)
    build_mod.build(demo_project.load(), tmp_path / "dist", log=lambda m: None)
    assert (dict(parsed), dict(listed), dict(checked)) == (
        {"0001-greet-comma.patch": 1},
        {"demo/1.0.0": 1},
        {"demo/1.0.0": 1},
    )
