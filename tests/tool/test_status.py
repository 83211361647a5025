"""`patchwheel status --python` on real environments: the probe runs none of the environment's
code (no .pth file), reads only files inside the package's site folder, and whatever the interpreter prints, the
command ends with a report or with one clear error (exit 2), never a traceback nor exit 1 ("a known bug applies")."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from cyclonedx.model.bom import Bom
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from uv import find_uv_bin

from patchwheel import cli
from patchwheel.wheels import build as build_mod

INFO = "demo-1.0.0+fixed.dist-info"


def _venv(folder: Path) -> tuple[Path, Path]:
    """A real virtual environment (this interpreter's version, no pip): its python and its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    purelib = sysconfig.get_path("purelib", vars={"base": str(folder), "platbase": str(folder)})
    return folder / "bin" / "python", Path(purelib)


def _install(python: Path, wheel: Path) -> None:
    cmd = [find_uv_bin(), "pip", "install", "-q", "--offline", "--no-deps", "--python", str(python), str(wheel)]
    subprocess.run(cmd, check=True)


@pytest.fixture
def fixed_env(demo_project, tmp_path) -> tuple[Path, Path]:
    """A venv with demo 1.0.0+fixed installed (built from the demo project): (its python, its site-packages)."""
    dist = tmp_path / "dist"
    (built,) = build_mod.build(demo_project.load(), dist, log=lambda m: None)
    python, site = _venv(tmp_path / "venv")
    _install(python, dist / built.filename)
    return python, site


def _status(demo, capsys, python, *more: str) -> tuple[int, str, str]:
    rc = cli.main(["--root", str(demo.root), "status", "--python", str(python), *more])
    out, err = capsys.readouterr()
    return rc, out, err


def _demo_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("  demo "))


def test_status_reads_a_fixed_build_in_a_venv(demo_project, fixed_env, capsys):
    python, _ = fixed_env
    rc, out, err = _status(demo_project, capsys, python)
    assert rc == 0, out + err
    assert out.startswith(f"environment: {python}\n"), out
    assert "+fixed build of 1.0.0" in _demo_line(out) and _demo_line(out).endswith("1 fix(es), INTACT")
    assert "0001-greet-comma.patch" in out
    _sbom_says_what_status_says(demo_project, fixed_env, capsys)  # (on the same environment: one install)


def _sbom_says_what_status_says(demo_project, fixed_env, capsys):
    """The SBOM an installed +fixed build carries (PEP 770: RECORD lists it, so the environment's own metadata
    reader finds it) says what `status --json` reports: CycloneDX's model, read from the installed file, finds the
    upstream wheel as the ancestor with the sha256 status reports, and the patches status lists, in order."""
    python, site = fixed_env
    rc, out, err = _status(demo_project, capsys, python, "--json")
    assert rc == 0, err
    [demo] = [p for p in json.loads(out)["packages"] if p["package"] == "demo"]
    listed = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(*m.distribution('demo').files, sep='\\n')"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert f"{INFO}/sboms/patchwheel.cdx.json" in listed
    raw = (site / INFO / "sboms" / "patchwheel.cdx.json").read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(raw) is None
    component = Bom.from_json(json.loads(raw)).metadata.component  # type: ignore[attr-defined]
    assert (component.name, component.version) == ("demo", demo["version"])
    [ancestor] = component.pedigree.ancestors
    assert (ancestor.version, [h.content for h in ancestor.hashes]) == (
        demo["upstream"]["version"],
        [demo["upstream"]["sha256"]],
    )
    named = [p.value.split(" sha256:") for p in component.properties if p.name == "patchwheel:patch"]
    assert named == [[p["name"], p["sha256"]] for p in demo["patches"]]
    assert [p.type.value for p in component.pedigree.patches] == ["unofficial"]  # the demo patch is Pending


def test_the_environment_s_pth_files_do_not_run(demo_project, fixed_env, capsys, tmp_path):
    """A .pth line that starts with `import` is code, run by `site` at start-up: the probe must not run it. Its
    path lines still count (an environment may reach packages through them), read as text."""
    python, site = fixed_env
    marker = tmp_path / "marker"
    (site / "aaa-evil.pth").write_text(f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n")
    rc, out, err = _status(demo_project, capsys, python)
    assert not marker.exists(), "the probe ran a .pth file of the environment it inspects"
    assert rc == 0 and _demo_line(out).endswith("INTACT"), out + err
    # the same build reached through a path line of a .pth file, in a venv without it
    other_python, other_site = _venv(tmp_path / "other")
    extra = tmp_path / "extra"
    (site / "aaa-evil.pth").unlink()
    site.rename(extra)
    (other_site / "extra.pth").write_text(f"# a comment\n{extra}\nimport os; os.system('touch {marker}')\n")
    rc, out, err = _status(demo_project, capsys, other_python)
    assert rc == 0 and _demo_line(out).endswith("INTACT"), out + err
    assert not marker.exists()


def _edit_manifest(site: Path, edit) -> None:
    path = site / INFO / "overlay-fixes.json"
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))


def test_manifest_paths_stay_inside_the_site_folder(demo_project, fixed_env, capsys, tmp_path):
    """A manifest naming files outside its site folder (absolute, '..', a symbolic link out) made the probe read
    them; with their true sha256 listed they were reported INTACT. Now each is a problem, and none is read."""
    python, site = fixed_env
    secret = tmp_path / "secret"
    secret.write_bytes(b"not the package's")
    sha = hashlib.sha256(secret.read_bytes()).hexdigest()
    (site / "demo" / "link.py").symlink_to(secret)
    up = "../" * len(site.relative_to(tmp_path).parts) + "secret"
    assert (site / up).resolve() == secret
    bad = {str(secret): sha, up: sha, "demo/link.py": sha}
    _edit_manifest(site, lambda m: {**m, "patched_files": {**m["patched_files"], **bad}})
    rc, out, err = _status(demo_project, capsys, python)
    assert rc == 1, out + err
    assert _demo_line(out).endswith("DAMAGED")
    problems = [line.strip() for line in out.splitlines() if line.strip().startswith("problem: ")]
    assert problems == [
        f"problem: the manifest names {str(secret)!r}, not a plain relative path: not read",
        f"problem: the manifest names {up!r}, not a plain relative path: not read",
        f"problem: the manifest names 'demo/link.py', a link out of {site}: not read",
    ], out


@pytest.mark.parametrize(
    "content,why",
    [
        ("{not json", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"upstream": 1, "patches": []}', "'upstream' is not an object with a version and a sha256"),
        ('{"upstream": {"version": "1.0.0", "sha256": "ab"}, "patches": [1]}', "'patches' is not a list of objects"),
        (
            '{"upstream": {"version": "1.0.0", "sha256": "ab"}, "patches": [{"name": "x", "subject": 2}]}',
            "'subject' of patch 1 is not a string",
        ),
        (
            '{"upstream": {"version": "1.0.0", "sha256": "ab"}, "patches": [], "patched_files": []}',
            "'patched_files' is not an object of paths and digests",
        ),
    ],
)
def test_a_damaged_manifest_is_a_problem_not_a_crash(demo_project, fixed_env, capsys, content, why):
    python, site = fixed_env
    (site / INFO / "overlay-fixes.json").write_text(content)
    rc, out, err = _status(demo_project, capsys, python)
    assert (rc, err) == (1, ""), out + err
    assert _demo_line(out).endswith("+fixed build (its overlay-fixes.json cannot be read), DAMAGED"), out
    assert f"problem: overlay-fixes.json is damaged: {why}" in out, out


def _fake_python(tmp_path: Path, stdout: str, stderr: str = "") -> Path:
    """An "interpreter" that prints what it is given, whatever it is asked to run."""
    (tmp_path / "out").write_text(stdout)
    (tmp_path / "err").write_text(stderr)
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\ncat '{tmp_path / 'out'}'\ncat '{tmp_path / 'err'}' >&2\n")
    fake.chmod(0o755)
    return fake


def _report(**demo) -> str:
    packages = [
        {"package": "transformers", "installed": False},
        {"package": "accelerate", "installed": False},
        {"package": "demo", **demo},
    ]
    return json.dumps({"python": "/x/bin/python", "packages": packages})


PATCH = {"name": "0001-x.patch", "subject": "X", "upstream_status": "Pending", "upstream_issue": "https://x/1"}
FIXED = {"installed": True, "version": "1.0.0+fixed", "fixed": True, "patches": [PATCH], "problems": []}


@pytest.mark.parametrize(
    "stdout,why",
    [
        ("{}", "no 'python'"),
        ("[]", "not a JSON object"),
        ("null", "not a JSON object"),
        ('{"python": "p", "packages": {}}', "'packages' is not a list"),
        ('{"python": "p", "packages": [{}]}', "packages [None], asked for ['transformers', 'accelerate', 'demo']"),
        (_report(installed=True), "demo: no 'version'"),
        (_report(installed=True, version="1.0.0"), "demo: no 'fixed'"),
        (_report(installed=True, version=1, fixed=False, problems=[]), "demo: 'version' is not a string"),
        (_report(installed="yes"), "demo: 'installed' is not true or false"),
        (_report(**FIXED), "demo: no 'upstream'"),
        (_report(**{**FIXED, "upstream": {"version": "1.0.0"}}), "demo: 'upstream' has no 'sha256'"),
        (
            _report(**{**FIXED, "upstream": {"version": "1", "sha256": "ab"}, "patches": [{}]}),
            "demo: patch 1 has no 'name'",
        ),
        (
            _report(**{**FIXED, "upstream": {"version": "1", "sha256": "ab"}, "problems": "x"}),
            "demo: 'problems' is not a list of strings",
        ),
    ],
)
def test_a_report_of_an_unexpected_shape_is_one_error(demo_project, tmp_path, capsys, stdout, why):
    """Before: a KeyError or TypeError traceback, exit 1 (which says "a known bug applies")."""
    fake = _fake_python(tmp_path, stdout)
    rc, out, err = _status(demo_project, capsys, fake)
    assert (rc, out) == (2, ""), out + err
    first, fix = err.splitlines()
    assert first == f"error: {fake} printed a status report of an unexpected shape: {why}", err
    assert fix.startswith("  fix: "), err


@pytest.mark.parametrize(
    "stdout,stderr,said",
    [
        (
            "",
            "Traceback (most recent call last):\n  File x\nSyntaxError: invalid syntax\n",
            "SyntaxError: invalid syntax",
        ),
        ("not json\n", "", "not json"),
        ("", "", "(it printed nothing)"),
    ],
)
def test_an_interpreter_that_cannot_run_the_probe_is_one_error(demo_project, tmp_path, capsys, stdout, stderr, said):
    """Its last line, not a traceback's tail of 400 characters."""
    fake = _fake_python(tmp_path, stdout, stderr)
    rc, out, err = _status(demo_project, capsys, fake)
    assert (rc, out) == (2, ""), out + err
    first, fix = err.splitlines()
    assert first == f"error: {fake} could not run the status probe: {said}", err
    assert "Python 3.8 or newer" in fix
