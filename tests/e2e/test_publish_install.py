"""End to end: publish the +fixed wheels to a real pypiserver on 127.0.0.1, install them into a fresh virtual
environment with pip (public dependencies from the normal index), then ask that environment which fixes it
carries and run the proof test of the transformers line's first fix inside it. The set installed is ``latest``:
what new users install (``PATCHWHEEL_E2E_SET`` picks another).

The server binds to 127.0.0.1 on a free port, needs htpasswd credentials to upload and never overwrites.

``PATCHWHEEL_TORCH_SITE`` (set by ``nox -s e2e``: the site folder of the suite's shared torch environment) gives the
consumer environment torch as a user who has it already: a .pth file puts that folder on its path before pip runs,
so pip finds torch installed and installs everything else. Without it, pip installs torch too (7 s more here).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import venv
from pathlib import Path

import pytest
from passlib.apache import HtpasswdFile

ROOT = Path(__file__).resolve().parents[2]
DIST = Path(os.environ.get("PATCHWHEEL_DIST", ROOT / "dist"))
TORCH = f"torch=={os.environ.get('TORCH_VERSION', '2.13.0')}"
USER, PASSWORD = "publisher", "s3cret-for-tests"
sys.path.insert(0, str(ROOT / "src"))

from patchwheel import config  # noqa: E402
from patchwheel.series import parse_series  # noqa: E402
from patchwheel.wheels.fetch import sha256_file  # noqa: E402
from patchwheel.wheels.rewrite import wheel_names  # noqa: E402

SET = os.environ.get("PATCHWHEEL_E2E_SET", "latest")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Seconds before a server that neither answers nor exits counts as hung: a backstop, not a guess of how long it
#: takes to start (about a second, several on a loaded machine).
HANG = 600


def _serving(proc: subprocess.Popen, url: str) -> bool:
    """True once pypiserver answers on ``url``; False if it exited (it could not bind the port) or hung."""
    deadline = time.monotonic() + HANG
    while True:
        try:
            urllib.request.urlopen(url + "/simple/", timeout=2).close()
            return True
        except OSError:
            if proc.poll() is not None:
                return False
            if time.monotonic() > deadline:
                proc.kill()
                return False
            time.sleep(0.3)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("pypiserver")
    packages = base / "packages"
    packages.mkdir()
    ht = HtpasswdFile(str(base / "htpasswd"), new=True)
    ht.set_password(USER, PASSWORD)
    ht.save()
    # The port is free when chosen but not held: another process (a session running beside this one) may take it
    # before pypiserver binds it. Then pypiserver exits, and it starts again on another port.
    for _attempt in range(3):
        port = _free_port()
        log = (base / "server.log").open("w")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pypiserver",
                "run",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--passwords",
                str(base / "htpasswd"),
                "--authenticate",
                "update",
                "--hash-algo",
                "sha256",
                str(packages),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        if _serving(proc, url):
            break
        proc.wait()
        log.close()
    else:
        pytest.fail(f"pypiserver did not start:\n{(base / 'server.log').read_text()}")
    try:
        yield {"url": url, "packages": packages, "log": base / "server.log"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _twine(url, files, user=USER, password=PASSWORD):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "twine",
            "upload",
            "--non-interactive",
            "--disable-progress-bar",
            "--repository-url",
            f"{url}/",
            "-u",
            user,
            "-p",
            password,
            *map(str, files),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _wheels():
    project = config.load(ROOT)
    names = [wheel_names(project.line(pkg, ver)).filename for pkg, ver in project.sets[SET].items()]
    wheels = [DIST / n for n in names]
    missing = [w for w in wheels if not w.is_file()]
    if missing:
        pytest.fail(f"{missing} not built: run `nox -s build` first (the e2e session does)")
    return project, wheels


def test_publish_refuses_overwrite_and_bad_credentials_then_pip_installs_fixed(server, tmp_path):
    project, wheels = _wheels()
    url, packages = server["url"], server["packages"]

    res = _twine(url, wheels)
    assert res.returncode == 0, res.stdout + res.stderr
    served = {p.name: sha256_file(p) for p in packages.iterdir()}
    assert served == {w.name: sha256_file(w) for w in wheels}

    def refusals() -> int:
        return server["log"].read_text().count("since it already exists")

    # Re-upload of the same files: refused (no overwrite). pypiserver answers twine with 400 (pypi.org's code)
    # and logs why.
    res = _twine(url, wheels)
    assert res.returncode != 0 and refusals() == 1, res.stdout + res.stderr
    # A different file under a published name: refused, and the published file is untouched.
    impostor = tmp_path / wheels[0].name
    shutil.copy(wheels[0], impostor)
    with impostor.open("ab") as fh:
        fh.write(b"\0")
    res = _twine(url, [impostor])
    assert res.returncode != 0 and refusals() == 2, res.stdout
    # Bad credentials: refused.
    other = tmp_path / "other" / wheels[1].name.replace("+fixed", "+fixed.1")
    other.parent.mkdir()
    shutil.copy(wheels[1], other)
    res = _twine(url, [other], password="wrong")
    assert res.returncode != 0 and ("403" in res.stdout + res.stderr or "401" in res.stdout + res.stderr), (
        res.stdout + res.stderr
    )
    assert {p.name: sha256_file(p) for p in packages.iterdir()} == served, "nothing replaced, nothing added"

    # A consumer environment that already has the pristine release (it satisfies ==X and would be kept).
    env_dir = tmp_path / "consumer"
    venv.create(env_dir, with_pip=True)
    py = str(env_dir / "bin" / "python")
    if torch_site := os.environ.get("PATCHWHEEL_TORCH_SITE"):
        purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        site = Path(subprocess.run([py, "-c", purelib], check=True, capture_output=True, text=True).stdout.strip())
        (site / "shared-torch.pth").write_text(torch_site + "\n")
    tline = project.line("transformers", project.sets[SET]["transformers"])
    first = parse_series(tline)[0]  # its proof runs in the consumer environment below
    # --no-compile: pip would compile all of torch's 2 GB ahead (20 s here); the proof run below compiles what it
    # imports, once, as bytecode writing is on for it.
    pip = [py, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-compile"]
    # Before: the set's pristine releases with their dependencies, as a user who runs them has them (made by uv from
    # the package index; torch is the consumer's own, left to pip's command below). pip then resolves the +fixed
    # pins alone: with nothing installed it also read the index's pages of every dependency, 20 s of its CPU.
    excludes = tmp_path / "excludes.txt"
    excludes.write_text("torch\n")
    uv = [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--python", py, "--excludes", str(excludes)]
    subprocess.run(uv + [f"{pkg}=={ver}" for pkg, ver in project.sets[SET].items()] + ["pytest"], check=True)

    pins = [f"{pkg}=={project.line(pkg, ver).fixed_version}" for pkg, ver in project.sets[SET].items()]
    res = subprocess.run(
        pip + ["--extra-index-url", f"{url}/simple/", *pins, TORCH, "pytest"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]

    status = subprocess.run(
        [sys.executable, "-m", "patchwheel", "status", "--python", py],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    print(status.stdout)
    assert status.returncode == 0, status.stdout + status.stderr
    for ver in project.sets[SET].values():
        assert f"+fixed build of {ver}" in status.stdout
    assert first.name in status.stdout and "INTACT" in status.stdout

    pytest_cmd = [py, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(ROOT / first.test_module)]
    run = dict(capture_output=True, text=True, cwd=ROOT, timeout=600, env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})
    proof = subprocess.run(pytest_cmd, **run)  # type: ignore[call-overload]
    print(proof.stdout[-2000:])
    # The whole summary line: a failure, an error, an xfail, an xpass or a deselection would add a term to it. The
    # proof contract fails a skip that its test's marker does not allow.
    counts = re.search(r"^(\d+) passed(?:, (\d+) skipped)?(?:, \d+ warnings?)? in [\d.]+s", proof.stdout, re.M)
    assert proof.returncode == 0 and counts, proof.stdout[-3000:] + proof.stderr[-2000:]
    assert int(counts.group(1)) > 0, proof.stdout[-3000:]
    assert f"carrying {first.name}: passed" in proof.stdout


def _builds_of(line, tmp_path: Path) -> Path:
    """The line's next build, made as a maintainer makes it: a copy of the project whose last patch has a reworded
    message (the smallest change of a series), `vendor`, `bump`, `build`. Returns the wheel."""
    project = tmp_path / "project"
    for part in (f"overlay/{line.package}", f"patches/{line.package}", "tests/proof", "tests/guards"):
        shutil.copytree(ROOT / part, project / part)
    last = project / "patches" / line.package / line.version / parse_series(line)[-1].name
    text = last.read_text()
    subject_end = text.index("\n\n", text.index("\nSubject: ")) + 2
    last.write_text(
        text[:subject_end] + "This message was reworded after the first build was published.\n" + text[subject_end:]
    )
    tool = [sys.executable, "-m", "patchwheel", "--root", str(project)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for step in (["vendor", line.key.replace("/", "==")], ["bump", line.key.replace("/", "==")]):
        subprocess.run(tool + step, check=True, capture_output=True, env=env)
    dist = tmp_path / "dist"
    subprocess.run(
        tool + ["build", line.key.replace("/", "=="), "--dist", str(dist)], check=True, capture_output=True, env=env
    )
    (wheel,) = dist.glob("*.whl")
    return wheel


def _installed_build(python: str, package: str) -> str | None:
    """The Build line of the installed distribution's WHEEL file: the build tag (None: a wheel without one)."""
    code = f"import importlib.metadata as m; print(m.distribution({package!r}).read_text('WHEEL'))"
    wheel = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout
    found = re.search(r"^Build: (\S+)$", wheel, re.M)
    return found.group(1) if found else None


def test_pip_and_uv_install_the_newest_build_and_hashed_pins_the_file_they_name(server, tmp_path):
    """A series change is published as the next build of the same version (`…+fixed-N_<inputs digest>-…`):
    `==X+fixed` gets it from pip and from uv, and the hash-locked pins of the build before keep installing exactly
    that file."""
    project = config.load(ROOT)
    line = project.line("accelerate", project.sets[SET]["accelerate"])
    first = DIST / wheel_names(line).filename
    assert line.build and first.is_file(), "the committed line records its build, and dist/ has it"
    number = line.build.number
    committed_tag = f"{number}_{line.build.inputs[:12]}"
    second = _builds_of(line, tmp_path)
    match = re.fullmatch(
        rf"{line.package}-{re.escape(line.fixed_version)}-{number + 1}_([0-9a-f]{{12}})-py3-none-any\.whl", second.name
    )
    assert match, second.name
    second_tag = f"{number + 1}_{match[1]}"
    url, packages = server["url"], server["packages"]
    res = _twine(url, [w for w in (first, second) if not (packages / w.name).is_file()])
    assert res.returncode == 0, res.stdout + res.stderr
    index = ["--index-url", f"{url}/simple/", "--no-deps"]

    env_dir = tmp_path / "pip-consumer"
    venv.create(env_dir, with_pip=True)
    py = str(env_dir / "bin" / "python")
    pip = [py, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-compile", *index]
    subprocess.run(pip + [f"{line.package}=={line.fixed_version}"], check=True, capture_output=True)
    assert _installed_build(py, line.package) == second_tag
    pinned = next(ln for ln in (DIST / f"pins-{SET}.txt").read_text().splitlines() if ln.startswith(line.package))
    assert f"# {first.name}" in pinned
    (tmp_path / "pins.txt").write_text(pinned + "\n")
    subprocess.run(pip + ["--force-reinstall", "-r", str(tmp_path / "pins.txt")], check=True, capture_output=True)
    assert _installed_build(py, line.package) == committed_tag, "the hash-locked pin installs the file it names"

    uv_env = tmp_path / "uv-consumer"
    uv = [sys.executable, "-m", "uv"]
    subprocess.run(uv + ["venv", "--python", sys.executable, str(uv_env)], check=True, capture_output=True)
    uv_py = str(uv_env / "bin" / "python")
    install = uv + ["pip", "install", "--python", uv_py, "--no-cache", *index]
    subprocess.run(install + [f"{line.package}=={line.fixed_version}"], check=True, capture_output=True)
    assert _installed_build(uv_py, line.package) == second_tag
