"""The pins compare versions as PEP 440 does: one version is one line and one retired number, under one spelling.

A line's key names its wheels (``<key>+fixed``), its folders and its build numbers, and ``[retired]`` keeps the
number a retired line reached so that a line made again starts above it. Two spellings of one version gave that
version two sets of numbers: a line ``1.0`` for 1.0.0's own wheel, beside the line 1.0.0 or after it was retired,
started again at build 1 under a name ``==1.0.0+fixed`` also installs; ``"v1.0.0" = 1`` beside ``"1.0.0" = 6``
passed as a new key and the tool read 1.0.0's retired number as 1. The propose filter's side is in
test_workflows.py."""

from __future__ import annotations

import shutil

import pytest

from patchwheel import cli
from patchwheel.errors import ConfigError


def _pins(demo):
    return demo.root / "overlay" / "demo" / "pins.toml"


def _loaded_or_refused(demo) -> str:
    """The refusal's text; a load that passes fails the test with what the tool then reads."""
    try:
        project = demo.load()
    except ConfigError as exc:
        return str(exc)
    read = {ln.version: (ln.wheel.filename, ln.retired_build) for ln in project.lines["demo"]}
    pytest.fail(f"loaded: its lines (wheel, retired build number) read as {read}", pytrace=False)


def _rename_line(demo, new: str) -> None:
    """The line 1.0.0 under the key ``new``: its table, series and vendored modules, its wheel kept."""
    pins = _pins(demo)
    pins.write_text(pins.read_text().replace('[release."1.0.0"]', f'[release."{new}"]'))
    demo.patch_dir.rename(demo.patch_dir.with_name(new))
    vendored = demo.root / "overlay" / "demo" / "1.0.0"
    if vendored.exists():
        vendored.rename(vendored.with_name(new))
    sets = demo.root / "overlay" / "sets.toml"
    sets.write_text(sets.read_text().replace('demo = "1.0.0"', f'demo = "{new}"'))


def test_a_line_of_a_retired_line_s_version_under_another_spelling_is_refused(demo_project, capsys):
    """1.0.0 retired at build 7, and a line 1.0 for its own wheel: lint passed and the line's build numbers
    started again at 1 (its retired number was looked up under "1.0")."""
    _rename_line(demo_project, "1.0")
    _pins(demo_project).write_text(_pins(demo_project).read_text() + '\n[retired]\n"1.0.0" = 7\n')
    said = _loaded_or_refused(demo_project)
    assert said.startswith(f'{_pins(demo_project)}: [release."1.0"] and [retired] "1.0.0" are one version'), said
    assert "fix: " in said
    assert cli.main(["--root", str(demo_project.root), "lint", "demo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "\n  fix: " in err and "Traceback" not in err, err


def test_two_lines_of_one_version_are_refused(demo_project):
    """A line 1.0 beside the line 1.0.0, pinning 1.0.0's wheel: two lines (two sets of build numbers) for one
    version, both installed by ``==1.0.0+fixed``."""
    shutil.copytree(demo_project.patch_dir, demo_project.patch_dir.with_name("1.0"))
    pins = _pins(demo_project)
    table = pins.read_text().split('[release."1.0.0"]')[1]
    pins.write_text(pins.read_text() + '\n[release."1.0"]' + table)
    said = _loaded_or_refused(demo_project)
    assert '[release."1.0.0"] and [release."1.0"] are one version (PEP 440: 1.0.0 == 1.0)' in said, said


def test_a_retired_number_under_another_spelling_is_refused(demo_project):
    """``"v1.0.0" = 1`` beside ``"1.0.0" = 6``: a new key to TOML, and the tool read 1.0.0's retired number as 1."""
    pins = _pins(demo_project)
    pins.write_text(pins.read_text() + '\n[retired]\n"1.0.0" = 6\n"v1.0.0" = 1\n')
    said = _loaded_or_refused(demo_project)
    assert "[retired] 'v1.0.0' is not a version as PEP 440 writes it: write '1.0.0'" in said, said


def test_one_version_retired_twice_is_refused(demo_project):
    pins = _pins(demo_project)
    pins.write_text(pins.read_text() + '\n[retired]\n"0.9.0" = 6\n"0.9" = 1\n')
    said = _loaded_or_refused(demo_project)
    assert '[retired] "0.9.0" and [retired] "0.9" are one version (PEP 440: 0.9.0 == 0.9)' in said, said


def test_a_line_pins_its_own_release_s_wheel(demo_project):
    """A line 1.0 for 1.0.0's wheel (alone): "1.0" is in the file name, which was all that was checked."""
    _rename_line(demo_project, "1.0")
    said = _loaded_or_refused(demo_project)
    assert "release '1.0' wheel: filename 'demo-1.0.0-py3-none-any.whl' is a wheel of 1.0.0, not of 1.0" in said


@pytest.mark.parametrize(
    ("key", "written"),
    [("v1.0.0", "1.0.0"), ("1.0.0-post0", "1.0.0.post0"), ("01.0.0", "1.0.0"), ("0!1.0.0", "1.0.0")],
)
def test_a_line_s_key_is_written_as_pep_440_writes_it(demo_project, key, written):
    _rename_line(demo_project, key)
    said = _loaded_or_refused(demo_project)
    assert f"{key!r} is not a version as PEP 440 writes it: write {written!r}" in said, said


def test_a_line_s_key_has_no_local_label(demo_project):
    _rename_line(demo_project, "1.0.0+mine")
    said = _loaded_or_refused(demo_project)
    assert "'1.0.0+mine' has a local label: an upstream release has none" in said, said


def test_a_line_made_again_keeps_its_retired_number(demo_project):
    """The designed case stays: a line whose release was retired before, under the same key, reads its number."""
    pins = _pins(demo_project)
    pins.write_text(pins.read_text() + '\n[retired]\n"1.0.0" = 6\n')
    assert demo_project.load().line("demo", "1.0.0").retired_build == 6
