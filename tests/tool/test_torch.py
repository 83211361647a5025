"""The torch axis: where torch comes from (one source, or an error at once), which torch each set is proven on
([torch] of overlay/sets.toml, checked against the releases' Requires-Dist), the matrix's torch per cell, and what
users are told (the wheel's record, build.json, `status`)."""

from __future__ import annotations

import hashlib
import json
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import make_wheel
from patchwheel import cli, config, lint, torchaxis
from patchwheel.errors import ConfigError, MatrixError
from patchwheel.maint.proving import proofenv, torchsource
from patchwheel.matrix.checks import NO_ENVIRONMENT, Finding, compare
from patchwheel.matrix.table import Cell, LineMatrix, Matrix, Release, Row
from patchwheel.probes import status
from patchwheel.probes.manifest import NAME as FIXES_MANIFEST
from patchwheel.wheels import build as build_mod

ROOT = Path(__file__).resolve().parents[2]
TORCH_TABLE = '\n[torch]\nsuite = "2.13.0"\nnewest = "2.14.1"\n[torch.floor]\ndefault = "{floor}"\n'


def _wheels(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


def test_a_torch_the_source_lacks_fails_at_once_naming_the_source_and_what_it_has(demo_project, tmp_path, monkeypatch):
    """A `TORCH_VERSION` the torch source lacks once resolved from the public index instead (several GB, without a
    word): now `base-env` fails before anything is made, and names the source and the versions it has for this
    Python (a wheel for another platform is not one of them)."""
    folder = _wheels(
        tmp_path / "wheels", "torch-2.13.0+cpu-py3-none-any.whl", "torch-2.12.0-cp27-cp27m-win32.whl", "notes.txt"
    )
    monkeypatch.setenv("TORCH_SOURCE", str(folder))
    monkeypatch.setenv("TORCH_VERSION", "2.14.0")
    rc = cli.main(["--root", str(demo_project.root), "base-env"])
    assert rc == 2
    with pytest.raises(ConfigError) as exc:
        torchsource.wheel("2.14.0", [])
    assert str(exc.value).startswith(
        f"torch 2.14.0 is not in the torch source {folder} (TORCH_SOURCE): it has, for this Python ("
    ), exc.value
    assert str(exc.value).splitlines()[0].endswith("): 2.13.0+cpu")
    assert not (demo_project.cache / "envs").exists(), "an environment was started before the source was asked"


def test_a_folder_source_gives_the_wheel_by_its_path_and_takes_the_local_build_for_a_plain_version(tmp_path):
    """By its path and its sha256 (which the installer checks, and the base environment is keyed on)."""
    folder = _wheels(tmp_path / "wheels", "torch-2.13.0+cpu-py3-none-any.whl")
    wheel = torchsource.wheel("2.13.0", [str(folder)])
    assert wheel.version == "2.13.0+cpu" and wheel.source.named_by == "pip's find-links"
    sha = hashlib.sha256(b"").hexdigest()
    assert wheel.requirement == f"torch @ {(folder / 'torch-2.13.0+cpu-py3-none-any.whl').as_uri()}#sha256={sha}"
    assert wheel.sha256 == sha
    assert wheel.source.installer_args() == []


def test_an_index_source_gives_the_listed_digest_and_is_the_extra_index_of_the_install(tmp_path, monkeypatch):
    """An index (here a PEP 503 tree on disk, as /opt/pypi-more/simple or download.pytorch.org/whl/cpu) is also
    given to the installer, so that a CUDA build's nvidia-* dependencies come from where torch did."""
    files, page = tmp_path / "files", tmp_path / "simple" / "torch"
    _wheels(files, "torch-2.14.1-py3-none-any.whl")
    page.mkdir(parents=True)
    sha = hashlib.sha256(b"").hexdigest()
    page.joinpath("index.html").write_text(
        f'<a href="../../files/torch-2.14.1-py3-none-any.whl#sha256={sha}">torch-2.14.1-py3-none-any.whl</a>\n'
    )
    index = (tmp_path / "simple").as_uri()
    monkeypatch.setenv("TORCH_SOURCE", index)
    wheel = torchsource.wheel("2.14.1", ["/opt/wheels"])  # TORCH_SOURCE wins over pip's find-links
    assert wheel.url == f"{(files / 'torch-2.14.1-py3-none-any.whl').as_uri()}#sha256={sha}"
    assert wheel.source.installer_args() == ["--extra-index-url", index]
    with pytest.raises(ConfigError, match=r"torch 2\.13\.0 is not in the torch source .*: 2\.14\.1\n"):
        torchsource.wheel("2.13.0", [])


def test_the_source_is_named_once_or_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCH_SOURCE", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "https://example.invalid/simple/")
    assert torchsource.source([]) == torchsource.Source("https://example.invalid/simple", True, "the package index")
    # the form this project's workflows used (pip's find-links on torch's page of an index): the index
    monkeypatch.setenv("TORCH_SOURCE", "https://download.pytorch.org/whl/cpu/torch/")
    assert torchsource.source([]).location == "https://download.pytorch.org/whl/cpu"
    for bad, why in ((str(tmp_path / "missing"), "is not a folder"), ("ftp://x/simple", "is not a folder or an")):
        monkeypatch.setenv("TORCH_SOURCE", bad)
        with pytest.raises(ConfigError, match=why):
            torchsource.source([])
    with pytest.raises(ConfigError, match="is not a version"):
        torchsource.wheel("two", [])


def test_environments_are_kept_per_torch(tmp_path, monkeypatch):
    """Runs under two torch releases keep each their own environments (they were rebuilt in turn)."""
    monkeypatch.setenv("TORCH_VERSION", "2.13.0")
    first = proofenv.envs_dir(tmp_path)
    monkeypatch.setenv("TORCH_VERSION", "2.14.1")
    assert proofenv.envs_dir(tmp_path) != first and proofenv.envs_dir(tmp_path).name == "torch-2.14.1"


# --- the torch a base environment holds is the torch it claims ------------------------------------------------------


def _torch_wheel(folder: Path, version: str, body: bytes = b"", says: str | None = None) -> Path:
    """A tiny wheel named ``torch-<version>-py3-none-any.whl`` (torch/__init__.py holds ``body``) whose METADATA says
    ``says`` (the same version where None), written over a file of that name as one replaces a wheel."""
    built = make_wheel(folder.parent / "building", {"torch/__init__.py": body}, name="torch", version=says or version)
    folder.mkdir(parents=True, exist_ok=True)
    return built.replace(folder / f"torch-{version}-py3-none-any.whl")


@pytest.fixture
def torch_folder(demo_project, tmp_path, monkeypatch) -> Iterator[Path]:
    """TORCH_SOURCE: a folder of tiny torch wheels, installed by the real installer (uv, or pip where
    PATCHWHEEL_INSTALLER=pip) into a base environment in the test's own cache. The installer is given the torch
    wheel alone: the base's pytest would come from the package index, and these tests stay offline."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    monkeypatch.setenv("TORCH_SOURCE", str(folder))
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("TORCH_VERSION", "2.13.0")
    for offline in ("UV_OFFLINE", "PIP_NO_INDEX"):
        monkeypatch.setenv(offline, "1")
    for index in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(index, raising=False)
    install = proofenv._install
    monkeypatch.setattr(
        proofenv,
        "_install",
        lambda env, *args, **kw: install(env, *(a for a in args if a != "pytest"), **kw),
    )
    (tmp_path / "building").mkdir()
    torchsource._wheel.cache_clear()  # each command asks the source once: a new command, a new process
    yield folder
    torchsource._wheel.cache_clear()


def _base_env(demo_project, capsys) -> tuple[int, str]:
    torchsource._wheel.cache_clear()  # a new command
    code = cli.main(["--root", str(demo_project.root), "base-env"])
    return code, capsys.readouterr().err


def _torch_held(base: Path) -> list[str]:
    return sorted(p.name for p in proofenv.site_packages(base).glob("torch-*.dist-info"))


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_a_torch_wheel_that_holds_another_version_is_refused(
    demo_project, torch_folder, monkeypatch, capsys, installer
):
    """A find-links wheel named torch-2.13.0 that holds 2.12.0 made base-torch-2.13.0 with torch 2.12.0, and every
    proof on it then reported 2.13.0 (pip installs it; uv refuses it unless UV_SKIP_WHEEL_FILENAME_CHECK is set,
    as a user may have it). The version installed is checked: a mismatch is refused, and nothing is made."""
    monkeypatch.setenv("PATCHWHEEL_INSTALLER", installer)
    monkeypatch.setenv("UV_SKIP_WHEEL_FILENAME_CHECK", "1")
    wheel = _torch_wheel(torch_folder, "2.13.0", says="2.12.0")
    code, err = _base_env(demo_project, capsys)
    base = demo_project.cache / "envs" / "base-torch-2.13.0"
    assert not base.exists(), f"base-torch-2.13.0 was made, holding {_torch_held(base)}"
    assert code == 2
    assert err == (
        f"error: the torch wheel {wheel.name} from the torch source {torch_folder} (TORCH_SOURCE) installs torch "
        "2.12.0, not 2.13.0 as its file name says; the environment is not made\n"
        "  fix: replace it by torch 2.13.0's own wheel, or set TORCH_SOURCE to a source that has it\n"
    )
    assert sorted(p.name for p in base.parent.iterdir()) == [".base-torch-2.13.0.lock"], "a half-made environment"


def test_a_torch_wheel_replaced_under_its_name_gives_a_new_environment(demo_project, torch_folder, monkeypatch, capsys):
    """A file replaced under the same name kept the environment made from the old one: the base is keyed on the
    wheel's sha256 (the installer checks the file it installs against it), and made again when it changes. A
    replacement that is refused leaves the environment there as it was."""
    monkeypatch.setenv("UV_SKIP_WHEEL_FILENAME_CHECK", "1")
    base = demo_project.cache / "envs" / "base-torch-2.13.0"
    installed = proofenv.site_packages(base) / "torch" / "__init__.py"
    first = _torch_wheel(torch_folder, "2.13.0", b"build = 1\n")
    assert _base_env(demo_project, capsys) == (0, "")
    assert installed.read_bytes() == b"build = 1\n"
    second = _torch_wheel(torch_folder, "2.13.0", b"build = 2\n")
    assert second == first
    assert _base_env(demo_project, capsys) == (0, "")
    assert installed.read_bytes() == b"build = 2\n", "the environment of the file that was replaced was kept"
    sha256 = (base / proofenv.TORCH_SHA256).read_text()
    assert sha256 == hashlib.sha256(second.read_bytes()).hexdigest()
    marker = (base / proofenv.MARKER).read_text()
    assert json.loads(marker) == {"torch": "2.13.0", "wheel": second.as_uri()}, "as a tool from before reads it"
    _torch_wheel(torch_folder, "2.13.0", b"build = 3\n", says="2.12.0")
    code, err = _base_env(demo_project, capsys)
    assert code == 2 and "installs torch 2.12.0, not 2.13.0" in err, err
    assert installed.read_bytes() == b"build = 2\n" and (base / proofenv.MARKER).read_text() == marker
    assert (base / proofenv.TORCH_SHA256).read_text() == sha256


def test_the_cli_takes_the_suite_torch_of_the_project_where_none_is_named(demo_project, monkeypatch):
    sets = demo_project.root / "overlay" / "sets.toml"
    sets.write_text(sets.read_text() + TORCH_TABLE.format(floor="2.0.0").replace("2.13.0", "2.12.0"))
    monkeypatch.delenv("TORCH_VERSION", raising=False)
    torchaxis.use_suite_torch(demo_project.root)
    assert proofenv.torch_version() == "2.12.0"
    monkeypatch.setenv("TORCH_VERSION", "2.14.1")
    torchaxis.use_suite_torch(demo_project.root)
    assert proofenv.torch_version() == "2.14.1", "a named torch is kept"


# [torch] of sets.toml


def _parse(text: str, sets: dict | None = None) -> torchaxis.TorchAxis:
    import tomllib

    return torchaxis.parse(Path("sets.toml"), tomllib.loads(text)["torch"], sets or {"default": {"demo": "1.0.0"}})


def test_the_torch_table_is_read_whole_or_refused():
    axis = _parse(TORCH_TABLE.format(floor="2.0.0"))
    assert axis.of_set("default") == ("2.0.0", "2.13.0", "2.14.1")
    assert axis.cells(["default"]) == [{"set": "default", "torch": t} for t in ("2.0.0", "2.13.0", "2.14.1")]
    for text, why in (
        (TORCH_TABLE.format(floor="2.0"), r"floor\.default = '2\.0' is not a torch release written as three"),
        (TORCH_TABLE.format(floor="2.0.0").replace('default = "2.0.0"', 'other = "2.0.0"'), "names no set 'other'"),
        (TORCH_TABLE.format(floor="2.0.0").replace('default = "2.0.0"', ""), "has no floor for the set"),
        (TORCH_TABLE.format(floor="2.15.0"), "above newest 2.14.1"),
        (TORCH_TABLE.format(floor="2.0.0").replace('suite = "2.13.0"', 'suite = "2.15.0"'), "is newer than newest"),
        (TORCH_TABLE.format(floor="2.0.0").replace("[torch]\n", "[torch]\noldest = 1\n"), "unknown key"),
    ):
        with pytest.raises(ConfigError, match=why):
            _parse(text)


def test_a_line_is_proven_on_the_torch_of_every_set_that_holds_it():
    sets = {"a": {"demo": "1.0.0"}, "b": {"demo": "1.0.0"}, "c": {"demo": "2.0.0"}}
    text = '[torch]\nsuite = "2.13.0"\nnewest = "2.14.1"\n[torch.floor]\na = "2.1.0"\nb = "2.6.0"\nc = "2.0.0"\n'
    axis = _parse(text, sets)
    assert axis.of_line(sets, "demo", "1.0.0") == ("2.1.0", "2.6.0", "2.13.0", "2.14.1")
    assert axis.of_line(sets, "demo", "3.0.0") == ()


METADATA = """Metadata-Version: 2.1
Name: transformers
Requires-Dist: torch>=2.6; extra == "torch"
Requires-Dist: torch>=2.9; extra == "serving"
Requires-Dist: torchvision; extra == "vision"
Requires-Dist: numpy>=1.17
"""


def test_the_floor_is_what_the_releases_declare_for_a_user_who_installs_torch():
    """transformers declares torch in its `torch` extra, accelerate unconditionally; other extras do not count."""
    assert [str(r) for r in torchaxis.declared(METADATA)] == ['torch>=2.6; extra == "torch"']
    reqs = torchaxis.declared(METADATA) + torchaxis.declared("Requires-Dist: torch>=2.0.0\n")
    assert torchaxis.declared_floor(reqs, (3, 11)) == "2.6.0"
    assert torchaxis.declared_floor([], (3, 11)) == "1.13.0", "no floor: the oldest torch this Python installs"
    assert torchaxis.declared_floor([], (3, 13)) == "2.5.0"


def test_lint_holds_each_floor_to_the_pinned_wheels(demo_project, capsys):
    sets = demo_project.root / "overlay" / "sets.toml"
    base = sets.read_text()
    want = torchaxis.declared_floor([])  # the demo wheel declares no torch
    sets.write_text(base + TORCH_TABLE.format(floor="2.1.0"))
    demo_project.bump()
    assert cli.main(["--root", str(demo_project.root), "lint"]) == 1
    out = capsys.readouterr().out
    assert (
        f"set 'default': [torch.floor] says 2.1.0, its releases declare {want} (demo==1.0.0: no torch): "
        f'write default = "{want}" in [torch.floor] of overlay/sets.toml'
    ) in out
    sets.write_text(base + TORCH_TABLE.format(floor=want))
    demo_project.bump()
    assert cli.main(["--root", str(demo_project.root), "lint"]) == 0, capsys.readouterr().out


def test_a_torch_the_releases_refuse_is_named():
    axis = _parse(TORCH_TABLE.format(floor="2.0.0"))
    capped = "Requires-Dist: torch<2.14,>=2.0.0\n"
    problems = torchaxis.floor_problems("default", axis, {"pkg==1": capped})
    assert problems == ["set 'default' is proven on torch 2.14.1, which its releases refuse (torch<2.14,>=2.0.0)"]


def test_the_project_states_its_torch_and_its_floors_hold():
    project = config.load(ROOT)
    assert project.torch is not None and set(project.torch.floors) == set(project.sets)
    assert lint.torch_problems(project) == []


# What users are told


def test_the_wheel_build_json_and_status_name_the_torch_its_fixes_were_proven_on(demo_project, tmp_path, capsys):
    sets = demo_project.root / "overlay" / "sets.toml"
    sets.write_text(sets.read_text() + TORCH_TABLE.format(floor="2.6.0"))
    demo_project.bump()
    dist = tmp_path / "dist"
    (built,) = build_mod.build(demo_project.load(), dist, log=lambda m: None)
    with zipfile.ZipFile(dist / built.filename) as zf:
        manifest = json.loads(zf.read(next(n for n in zf.namelist() if n.endswith(FIXES_MANIFEST))))
    assert manifest["proven_torch"] == ["2.6.0", "2.13.0", "2.14.1"]
    (entry,) = json.loads((dist / "build.json").read_text())["wheels"]
    assert entry["proven_torch"] == ["2.6.0", "2.13.0", "2.14.1"]
    site = tmp_path / "site"
    with zipfile.ZipFile(dist / built.filename) as zf:
        zf.extractall(site)
    rep = status.report(["demo"], [str(site)])
    assert rep["torch"] is None and rep["packages"][0]["proven_torch"] == ["2.6.0", "2.13.0", "2.14.1"]
    assert "      fixes proven on torch 2.6.0, 2.13.0, 2.14.1" in status.render(rep).splitlines()
    assert status.torch_note(rep) is None, "no torch installed: nothing to compare"


def test_status_notes_a_torch_the_fixes_were_not_proven_on_without_changing_the_exit_status():
    package = {"package": "demo", "installed": True, "version": "1.0.0+fixed", "fixed": True, "problems": []}
    package |= {"patches": [], "upstream": {"version": "1.0.0", "sha256": "0" * 64}}
    rep = {"python": sys.executable, "torch": "2.10.0+cu128", "packages": [package | {"proven_torch": ["2.13.0"]}]}
    assert status.report_problem(rep, ["demo"]) is None
    assert status.torch_note(rep) == (
        "torch 2.10.0+cu128 here: the fixes of these +fixed builds were proven on torch 2.13.0, not on this one "
        "(they may well hold; nothing shows that they do)"
    )
    assert status.render(rep).splitlines()[-1] == f"note: {status.torch_note(rep)}"
    assert status.torch_note({**rep, "torch": "2.13.0+cpu"}) is None, "a local build of a proven release is proven"
    assert status.report_problem({**rep, "torch": 2}, ["demo"]) == "'torch' is not a string"


# The matrix's torch


def _matrix(torch: str, behaviour: str, detail: str = "") -> Matrix:
    cell = Cell("clean", behaviour=behaviour, behaviour_detail=detail, torch=torch)
    row = Row("0001-x.patch", "x", None, None, "tests/proof/test_x.py", cells={"1.1.0": cell})
    return Matrix(torch, [LineMatrix("demo/1.0.0", [], [Release("1.1.0", "w", "s")], [row])])


def test_the_staleness_check_compares_like_with_like():
    """An environment that could not be made, and a verdict under another torch, were both called "stale" (with
    the advice to run `nox -s matrix`, which would have saved a matrix of mixed torches)."""
    committed = _matrix("2.13.0", "fails")
    lost = _matrix("2.14.1", "error", NO_ENVIRONMENT + "uv pip install failed: huggingface-hub was not found").lines
    assert compare(committed, lost) == [
        Finding(
            "unjudged",
            "the environment for demo 1.1.0 could not be made (uv pip install failed: huggingface-hub was not found)",
        )
    ]
    assert compare(committed, _matrix("2.14.1", "passes").lines) == [
        Finding(
            "torch",
            "demo/1.0.0 0001-x.patch vs 1.1.0: behaviour under torch 2.14.1 is passes, the committed matrix says fails "
            "under torch 2.13.0",
        )
    ]
    assert compare(committed, _matrix("2.14.1", "fails").lines) == [], "the same verdict on another torch agrees"
    assert [f.kind for f in compare(committed, _matrix("2.13.0", "passes").lines)] == ["stale"]


def test_a_run_under_another_torch_is_not_merged_into_the_matrix():
    committed = _matrix("2.13.0", "fails")
    with pytest.raises(MatrixError, match="judged with torch 2.13.0, this run with torch 2.14.1") as exc:
        committed.merged(_matrix("2.14.1", "passes").lines, torch="2.14.1")
    assert "TORCH_VERSION=2.13.0" in exc.value.hint and "--new-torch" in exc.value.hint
    assert committed.merged(_matrix("2.13.0", "passes").lines, torch="2.13.0").lines[0].patches[0].cells[
        "1.1.0"
    ].torch == ("2.13.0")


def test_cells_written_before_they_named_their_torch_take_the_matrix_s():
    data = _matrix("2.13.0", "fails").to_json()
    del data["lines"][0]["patches"][0]["cells"]["1.1.0"]["torch"]
    assert Matrix.from_json(data).lines[0].patches[0].cells["1.1.0"].torch == "2.13.0"


def test_matrix_check_says_could_not_judge_not_stale(demo_project, monkeypatch, capsys):
    from patchwheel.maint.upstream import matrixrun as upstream

    finding = Finding("unjudged", "the environment for demo 1.1.0 could not be made (no index)")
    monkeypatch.setattr(upstream, "check", lambda *a, **k: ([finding], 1))
    assert cli.main(["--root", str(demo_project.root), "matrix", "check"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("could not judge: the environment for demo 1.1.0 could not be made (no index)\n")
    assert "stale" not in out and "nox -s matrix" not in out


def test_new_torch_judges_the_whole_matrix(demo_project, capsys):
    assert cli.main(["--root", str(demo_project.root), "matrix", "run", "--new-torch", "demo==1.1.0"]) == 2
    assert "--new-torch judges the whole matrix again" in capsys.readouterr().err


def test_the_watch_says_when_torch_has_a_newer_release_than_the_newest_a_set_is_proven_on(
    demo_project, tmp_path, monkeypatch, capsys
):
    sets = demo_project.root / "overlay" / "sets.toml"
    sets.write_text(sets.read_text() + TORCH_TABLE.format(floor=torchaxis.declared_floor([])))
    folder = _wheels(tmp_path / "wheels", "torch-2.14.1-py3-none-any.whl")
    monkeypatch.setenv("TORCH_SOURCE", str(folder))
    assert cli.main(["--root", str(demo_project.root), "watch", "torch"]) == 0
    assert capsys.readouterr().out == (
        f"{folder} (TORCH_SOURCE) has no torch newer than [torch] newest, 2.14.1 (its newest: 2.14.1)\n"
    )
    _wheels(folder, "torch-2.15.0+cpu-py3-none-any.whl", "torch-2.16.0rc1-py3-none-any.whl")
    assert cli.main(["--root", str(demo_project.root), "watch", "torch"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(
        f"torch 2.15.0 is out ({folder} (TORCH_SOURCE)); [torch] newest of overlay/sets.toml is 2.14.1"
    )
    assert "TORCH_VERSION=2.15.0 nox -s prove" in out, "a release candidate is not a release"


def test_an_unproven_floor_is_stated_with_why_and_claimed_nowhere():
    """A floor the proofs cannot judge yet stays declared (lint still holds it to Requires-Dist), but no wheel, no
    status and no workflow cell claims it."""
    text = TORCH_TABLE.format(floor="2.0.0") + '[torch.unproven]\ndefault = "torch 2.0.0: no DTensor there"\n'
    axis = _parse(text)
    assert axis.of_set("default") == ("2.13.0", "2.14.1") and axis.floors["default"] == "2.0.0"
    assert axis.cells(["default"]) == [{"set": "default", "torch": t} for t in ("2.13.0", "2.14.1")]
    for bad, why in (('default = ""', "must map set names to why"), ('other = "x"', "names no set 'other'")):
        with pytest.raises(ConfigError, match=why):
            _parse(TORCH_TABLE.format(floor="2.0.0") + f"[torch.unproven]\n{bad}\n")
