"""Build numbers: a changed series never gets a published wheel's file name (PEP 427 build tags)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from conftest import run_cli, serve_locally
from patchwheel.config import BuildRecord
from patchwheel.errors import PatchwheelError
from patchwheel.probes import status
from patchwheel.wheels import build as build_mod
from patchwheel.wheels import buildno

_run = run_cli


def _wheel_file(path, member: str) -> str:
    with zipfile.ZipFile(path) as zf:
        return zf.read(member).decode()


def test_a_reworded_patch_gets_the_next_build_number(demo_project, tmp_path):
    """A fresh clone building a series whose patch message was reworded made a file with other bytes under the
    published name. Now lint and the build refuse the old number, `bump` records the next one, and the build names
    the wheel by it (file name and WHEEL's Build line)."""
    root = str(demo_project.root)
    dist = demo_project.root / "dist"
    assert _run("--root", root, "build")[0] == 0
    digest = demo_project.load().line("demo").build.inputs[:12]
    first = dist / f"demo-1.0.0+fixed-1_{digest}-py3-none-any.whl"
    assert _wheel_file(first, "demo-1.0.0+fixed.dist-info/WHEEL").endswith(f"\nBuild: 1_{digest}\n")
    published = first.read_bytes()
    first_copy = tmp_path / first.name
    first_copy.write_bytes(published)

    patch = demo_project.patch_dir / "0001-greet-comma.patch"
    patch.write_bytes(patch.read_bytes().replace(b"Greet with a comma", b"Greet people with a comma"))
    demo_project.vendor()  # the overlay follows the series, as `nox -s vendor` makes it
    rc, out, _ = _run("--root", root, "lint")
    assert rc == 1, out
    assert (
        "the inputs of demo/1.0.0 (patches/demo/1.0.0/, its upstream pin or settings in overlay/demo/pins.toml, or "
        "the torch its sets are proven on, [torch] of overlay/sets.toml) changed since build 1 was recorded there"
    ) in out
    assert "run `nox -s bump -- demo==1.0.0` (build 2)" in out
    rc, _, err = _run("--root", root, "build")
    assert rc == 2 and "changed since build 1 was recorded there" in err, err
    assert first.read_bytes() == published and sorted(p.name for p in dist.glob("*.whl")) == [first.name]

    pins = demo_project.root / "overlay" / "demo" / "pins.toml"
    before = pins.read_text()
    rc, out, _ = _run("--root", root, "bump", "demo")
    assert rc == 0 and "demo/1.0.0: build 2 recorded" in out, out
    after = pins.read_text()
    record = demo_project.load().line("demo").build
    assert record == BuildRecord(2, buildno.inputs_digest(demo_project.load().line("demo")))
    assert [ln for ln in after.splitlines() if not ln.startswith("build =")] == [
        ln for ln in before.splitlines() if not ln.startswith("build =")
    ], "bump changes the build line alone"
    assert _run("--root", root, "lint")[0] == 0
    rc, out, _ = _run("--root", root, "bump", "demo")
    assert rc == 0 and "build 2 records these inputs already" in out and pins.read_text() == after

    assert _run("--root", root, "build")[0] == 0
    tag = f"2_{record.inputs[:12]}"
    second = dist / f"demo-1.0.0+fixed-{tag}-py3-none-any.whl"
    assert sorted(p.name for p in dist.glob("*.whl")) == [second.name]
    assert _wheel_file(second, "demo-1.0.0+fixed.dist-info/WHEEL").endswith(f"\nBuild: {tag}\n")
    assert f"# {second.name}" in (dist / "pins-default.txt").read_text()
    assert f"# {second.name} sha256:" in (dist / "constraints-default.txt").read_text()

    site = tmp_path / "site"  # installed: a pure wheel's files, as an installer lays them out
    zipfile.ZipFile(second).extractall(site)
    rep = status.report(["demo"], [str(site)])
    assert rep["packages"][0]["build"] == tag and rep["packages"][0]["problems"] == []
    assert f"+fixed build of 1.0.0 (build {tag}; upstream wheel sha256" in status.render(rep)
    zipfile.ZipFile(first_copy).extractall(tmp_path / "site1")
    rep = status.report(["demo"], [str(tmp_path / "site1")])
    assert rep["packages"][0]["build"] == f"1_{digest}" and f"(build 1_{digest}; upstream wheel" in status.render(rep)


def test_bump_writes_the_first_record_and_keeps_every_other_line(demo_project):
    pins = demo_project.root / "overlay" / "demo" / "pins.toml"
    text = pins.read_text()
    bare = "\n".join(ln for ln in text.splitlines() if not ln.startswith("build =")) + "\n"
    pins.write_text("# a comment the maintainer wrote\n" + bare + "# and one at the end\n")
    line = demo_project.load().line("demo")
    assert line.build is None
    assert "records no build number for its inputs" in (buildno.problem(line) or "")
    with pytest.raises(PatchwheelError, match="records no build number"):
        buildno.require_number(line)
    record = buildno.bump(demo_project.load(), line, log=lambda m: None)
    assert record == BuildRecord(1, buildno.inputs_digest(line))
    assert pins.read_text() == (
        "# a comment the maintainer wrote\n"
        + bare
        + f'build = {{ number = 1, inputs = "{record.inputs}" }}\n'
        + "# and one at the end\n"
    )
    assert buildno.problem(demo_project.load().line("demo")) is None


def test_the_digest_is_the_series_as_built(demo_project):
    """Comments in `series` change nothing in the wheel, so nothing in the digest; the order of patches does."""
    line = demo_project.load().line("demo")
    digest = buildno.inputs_digest(line)
    series = demo_project.patch_dir / "series"
    series.write_text("# a note\n\n" + series.read_text())
    assert buildno.inputs_digest(line) == digest
    (demo_project.patch_dir / "0001-greet-comma.patch").write_bytes(b"")
    assert buildno.inputs_digest(line) != digest


@pytest.mark.parametrize(
    ("record", "error"),
    [
        ("build = 2", "must be a table with exactly 'number' and 'inputs'"),
        ('build = { number = 2, inputs = "abc" }', "inputs 'abc' is not 64 lower-case hex digits"),
        (f'build = {{ number = 0, inputs = "{"a" * 64}" }}', "number 0 is not a whole number of 1 or more"),
        (f'build = {{ number = "2", inputs = "{"a" * 64}" }}', "number '2' is not a whole number of 1 or more"),
        (f'build = {{ number = 2, inputs = "{"a" * 64}", when = 1 }}', "exactly 'number' and 'inputs'"),
    ],
)
def test_a_bad_build_record_is_refused(demo_project, record, error):
    pins = demo_project.root / "overlay" / "demo" / "pins.toml"
    pins.write_text("\n".join(ln for ln in pins.read_text().splitlines() if not ln.startswith("build =")) + "\n")
    pins.write_text(pins.read_text() + record + "\n")
    rc, _, err = _run("--root", str(demo_project.root), "lint")
    assert rc == 2 and error in err and "nox -s bump --" in err, err


def test_another_upstream_pin_is_another_build(demo_project):
    """The wheel's bytes depend on more than the series: its manifest names the upstream wheel, and the rewrite drops
    upstream's own build tag from the name. A re-pinned upstream file (here upstream's build 1 of the same release)
    under the old record gave a wheel of the same name with other bytes, and lint said ok."""
    from conftest import CORE, INIT, make_wheel

    root = str(demo_project.root)
    assert _run("--root", root, "build")[0] == 0
    (demo_project.upstream.parent / "b1").mkdir()
    repinned = make_wheel(
        demo_project.upstream.parent / "b1", {"demo/__init__.py": INIT, "demo/core.py": CORE + b"\n"}, version="1.0.0"
    )
    tagged = repinned.with_name("demo-1.0.0-1-py3-none-any.whl")
    repinned.rename(tagged)
    sha = hashlib.sha256(tagged.read_bytes()).hexdigest()
    page = demo_project.index / "demo" / "index.html"
    page.write_text(page.read_text() + f'<a href="../../upstream/b1/{tagged.name}#sha256={sha}">{tagged.name}</a>\n')
    pins = demo_project.root / "overlay" / "demo" / "pins.toml"
    pins.write_text(pins.read_text().replace(demo_project.upstream.name, tagged.name).replace(demo_project.sha256, sha))
    rc, out, _ = _run("--root", root, "lint")
    assert rc == 1 and "the inputs of demo/1.0.0" in out and "(build 2)" in out, out
    assert _run("--root", root, "bump", "demo")[0] == 0
    demo_project.vendor()
    assert _run("--root", root, "build")[0] == 0
    digest = demo_project.load().line("demo").build.inputs[:12]
    assert sorted(p.name for p in (demo_project.root / "dist").glob("*.whl")) == [
        f"demo-1.0.0+fixed-2_{digest}-py3-none-any.whl"
    ]


@pytest.mark.parametrize("sub_table", [True, False])
def test_bump_writes_nothing_where_the_record_is_written_another_way(demo_project, sub_table):
    """A record the loader takes but bump cannot replace in place (a sub-table, dotted keys) would be there twice."""
    pins = demo_project.root / "overlay" / "demo" / "pins.toml"
    text = "\n".join(ln for ln in pins.read_text().splitlines() if not ln.startswith("build =")) + "\n"
    digest = "a" * 64
    if sub_table:
        text += f'\n[release."1.0.0".build]\nnumber = 1\ninputs = "{digest}"\n'
    else:
        text += f'build.number = 1\nbuild.inputs = "{digest}"\n'
    pins.write_text(text)
    assert demo_project.load().line("demo").build == BuildRecord(1, digest)
    rc, _, err = _run("--root", str(demo_project.root), "bump", "demo")
    assert rc == 2 and "is not one `build = { ... }` line the tool can replace; nothing was written" in err, err
    assert pins.read_text() == text


def _commit_all(root, message: str) -> None:
    import subprocess

    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    if not (root / ".git").exists():
        subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "-A", "overlay", "patches"], check=True)
    subprocess.run([*git, "commit", "-qm", message], check=True)


def test_a_build_number_set_back_under_new_inputs_is_refused_by_the_history(demo_project):
    """The digest check alone passed a record whose number was kept and whose digest was recomputed for new inputs
    (a changed patch): the build then made the published name with other bytes. lint compares each line's record
    with every commit that recorded it: one number, one set of inputs."""
    root = demo_project.root
    assert _run("--root", str(root), "bump", "demo")[0] == 0
    _commit_all(root, "build 1")
    line = demo_project.load().line("demo")
    published = line.build
    assert _run("--root", str(root), "lint")[0] == 0

    patch = demo_project.patch_dir / "0001-greet-comma.patch"
    patch.write_bytes(patch.read_bytes().replace(b"Greet with a comma", b"Greet people with a comma"))
    demo_project.vendor()
    digest = buildno.inputs_digest(demo_project.load().line("demo"))
    buildno.write_record(
        demo_project.root / "overlay" / "demo" / "pins.toml", "1.0.0", BuildRecord(published.number, digest)
    )
    assert buildno.problem(demo_project.load().line("demo")) is None  # the digest matches: only history tells
    rc, out, _ = _run("--root", str(root), "lint")
    assert rc == 1, out
    assert (
        f"demo/1.0.0 records build {published.number} for other inputs than commit "
    ) in out and "recorded for it: a published name would get other bytes; run `nox -s bump -- demo==1.0.0`" in out, out
    _commit_all(root, "the attack, committed")  # still refused: an older commit recorded the number
    assert _run("--root", str(root), "lint")[0] == 1
    rc, out, _ = _run("--root", str(root), "bump", "demo")  # bump knows the history too: the next number
    assert rc == 0 and f"build {published.number + 1} recorded" in out, out
    assert demo_project.load().line("demo").build == BuildRecord(published.number + 1, digest)
    rc, out, _ = _run("--root", str(root), "lint")
    assert rc == 0, out


def test_outside_git_the_history_is_not_asked(demo_project):
    assert buildno.history_problem(demo_project.load().line("demo"), demo_project.root) is None


def test_two_clones_that_change_a_line_differently_build_two_names(demo_project, tmp_path):
    """Each clone rewords another patch line and runs bump: both record build 2. The number is a local counter, so
    both built `demo-1.0.0+fixed-2-...whl`, with different bytes. The build tag carries the inputs digest too."""
    import dataclasses
    import shutil

    names = {}
    for clone, words in (("a", b"Greet people with a comma"), ("b", b"Greet everyone with a comma")):
        root = tmp_path / clone
        shutil.copytree(demo_project.root, root, symlinks=True)
        demo = dataclasses.replace(demo_project, root=root)
        assert _run("--root", str(root), "bump", "demo")[0] == 0
        patch = demo.patch_dir / "0001-greet-comma.patch"
        patch.write_bytes(patch.read_bytes().replace(b"Greet with a comma", words))
        demo.vendor()
        assert _run("--root", str(root), "bump", "demo")[0] == 0
        assert _run("--root", str(root), "build")[0] == 0
        line = demo.load().line("demo")
        (wheel,) = (root / "dist").glob("*.whl")
        assert line.build.number == 2
        assert wheel.name == f"demo-1.0.0+fixed-2_{line.build.inputs[:12]}-py3-none-any.whl"
        assert _wheel_file(wheel, "demo-1.0.0+fixed.dist-info/WHEEL").endswith(f"\nBuild: 2_{line.build.inputs[:12]}\n")
        names[clone] = (wheel.name, hashlib.sha256(wheel.read_bytes()).hexdigest())
    assert names["a"][0] != names["b"][0] and names["a"][1] != names["b"][1], names


def test_pip_and_uv_take_build_10_over_build_9(demo_project, tmp_path):
    """Build tags sort by their number as a number, then by the rest (PEP 427): `10_…` after `9_…`, whatever the
    digests, with pip and with uv, from one find-links folder holding both."""
    import shutil
    import subprocess
    import sys

    pins = demo_project.root / "overlay" / "demo" / "pins.toml"
    links = tmp_path / "links"
    links.mkdir()
    tags = []
    for number, words in ((9, b"Greet people with a comma"), (10, b"Greet everyone with a comma")):
        patch = demo_project.patch_dir / "0001-greet-comma.patch"
        patch.write_bytes(patch.read_bytes().replace(b"Greet with a comma", words))
        demo_project.vendor()
        buildno.write_record(
            pins, "1.0.0", BuildRecord(number, buildno.inputs_digest(demo_project.load().line("demo")))
        )
        (built,) = build_mod.build(demo_project.load(), tmp_path / f"dist{number}", log=lambda m: None)
        shutil.copy(tmp_path / f"dist{number}" / built.filename, links)
        tags.append(built.filename.split("-")[2])
        patch.write_bytes(patch.read_bytes().replace(words, b"Greet with a comma"))
    assert [t.split("_")[0] for t in tags] == ["9", "10"]
    from uv import find_uv_bin

    uv = find_uv_bin()

    pip = sys.executable  # (the test extra pins pip)
    for installer in (
        [pip, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"],
        [uv, "pip", "install", "-q", "--offline", "--no-cache", "--python", sys.executable],
    ):
        target = tmp_path / f"target-{len(list(tmp_path.glob('target-*')))}"
        subprocess.run(
            [*installer, "--no-index", "--find-links", str(links), "--target", str(target), "demo==1.0.0+fixed"],
            check=True,
            capture_output=True,
        )
        wheel = (target / "demo-1.0.0+fixed.dist-info" / "WHEEL").read_text()
        assert wheel.endswith(f"\nBuild: {tags[1]}\n"), (installer[0], wheel)


def test_bump_during_a_merge_counts_the_other_sides_numbers(demo_project):
    """One branch records builds 2 and 3 for two changes, the other build 2 for its own; while they are merged
    (before the merge commit), bump takes the number after both sides' (4), not 3, which the other side recorded
    for other inputs."""
    import subprocess

    root = demo_project.root
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    assert _run("--root", str(root), "bump", "demo")[0] == 0
    _commit_all(root, "build 1")
    subprocess.run([*git, "checkout", "-qb", "other"], check=True)
    patch = demo_project.patch_dir / "0001-greet-comma.patch"
    original = patch.read_bytes()

    def change(words: bytes, message: str) -> None:
        patch.write_bytes(original.replace(b"Greet with a comma", words))
        demo_project.vendor()
        assert _run("--root", str(root), "bump", "demo")[0] == 0
        _commit_all(root, message)

    change(b"Greet people with a comma", "build 2 on other")
    change(b"Greet all people with a comma", "build 3 on other")
    subprocess.run([*git, "checkout", "-q", "-"], check=True)
    change(b"Greet everyone with a comma", "build 2 here")
    merged = subprocess.run([*git, "merge", "--no-edit", "other"], capture_output=True, text=True)
    assert merged.returncode != 0  # both changed the patch and the record
    patch.write_bytes(original.replace(b"Greet with a comma", b"Greet all of them with a comma"))
    demo_project.vendor()
    subprocess.run([*git, "checkout", "--ours", str(root / "overlay" / "demo" / "pins.toml")], check=True)
    assert _run("--root", str(root), "bump", "demo")[0] == 0
    assert demo_project.load().line("demo").build.number == 4


def test_pip_and_uv_install_a_fixed_wheel_from_the_index_folder_whose_links_encode_the_plus(demo_project, tmp_path):
    """The index linked `../../demo-1.0.0+fixed-....whl` with a raw `+`, which object stores and some index servers
    read as a space (a wheel index published that way named `1.12.1 mkl` for `+mkl`). The link now says `%2B`, and
    real pip and uv still install `==1.0.0+fixed` from the folder (`--index-url file://.../simple`), the file's own
    bytes (its sha256 in the link). The link also names the sha256 of the wheel's METADATA, written beside it as
    `<wheel>.metadata` (PEP 658/714; what installers read of it: the HTTP test below)."""
    import subprocess
    import sys

    from uv import find_uv_bin

    dist = tmp_path / "dist"
    (built,) = build_mod.build(demo_project.load(), dist, log=lambda m: None)
    page = (dist / "simple" / "demo" / "index.html").read_text()
    encoded = built.filename.replace("+", "%2B")
    assert f'href="../../{encoded}#sha256={built.sha256}"' in page and "+" not in page.split('href="')[1].split('"')[0]
    # PEP 658/714: the wheel's METADATA beside it, its sha256 on the link under both attribute names
    metadata = dist / (built.filename + ".metadata")
    assert metadata.is_file(), sorted(p.name for p in dist.iterdir())
    assert metadata.read_bytes() == _wheel_file(dist / built.filename, "demo-1.0.0+fixed.dist-info/METADATA").encode()
    digest = hashlib.sha256(metadata.read_bytes()).hexdigest()
    assert f' data-core-metadata="sha256={digest}" data-dist-info-metadata="sha256={digest}">' in page, page
    pip = sys.executable  # (the test extra pins pip)
    index = (dist / "simple").as_uri()
    for installer in (
        [pip, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"],
        [find_uv_bin(), "pip", "install", "-q", "--offline", "--no-cache", "--python", sys.executable],
    ):
        target = tmp_path / f"target-{len(list(tmp_path.glob('target-*')))}"
        ran = subprocess.run(
            [*installer, "--index-url", index, "--no-deps", "--target", str(target), "demo==1.0.0+fixed"],
            capture_output=True,
            text=True,
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert (target / "demo-1.0.0+fixed.dist-info" / "overlay-fixes.json").is_file(), installer[0]


def test_pip_and_uv_resolve_the_fixed_wheel_over_http_from_its_core_metadata_and_hash(demo_project, tmp_path):
    """The index served no PEP 658 metadata, so pip and uv downloaded each wheel (10 MB for transformers) to resolve.
    dist/ served as files by a real static HTTP server: pip (`--dry-run --report`), `uv pip compile
    --generate-hashes` and `uv lock` with an explicit index resolve `==1.0.0+fixed` from the `.metadata` file alone
    (the request log holds no GET of the wheel), and name the wheel's own sha256, only that one; then pip and uv
    install it from the server (its link's `%2B` in the request), its SBOM with it."""
    import functools
    import http.server
    import json
    import os
    import re
    import subprocess
    import sys
    import tomllib
    from urllib.parse import unquote

    from uv import find_uv_bin

    dist = tmp_path / "dist"
    (built,) = build_mod.build(demo_project.load(), dist, log=lambda m: None)
    requests: list[str] = []

    class Files(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            requests.append(self.path)
            super().do_GET()

        def log_message(self, format, *args) -> None:  # noqa: A002 (http.server's signature)
            pass

    server = serve_locally(functools.partial(Files, directory=str(dist)))  # type: ignore[arg-type]
    url = f"http://127.0.0.1:{server.server_address[1]}/simple"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}  # no user's index or config
    env |= {"UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}

    def resolve(argv: list[str], cwd: Path = tmp_path) -> str:
        """``argv`` run against the server: its output; it read the wheel's .metadata and never GET the wheel."""
        requests.clear()
        ran = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        paths = [unquote(p.split("?")[0].split("#")[0]) for p in requests]  # '%2B' or '+': both decode to '+'
        assert f"/{built.filename}.metadata" in paths, (argv[:3], requests)
        assert not [p for p in paths if p.endswith(".whl")], (argv[:3], requests)
        return ran.stdout

    uv = find_uv_bin()
    try:
        report = tmp_path / "report.json"
        resolve(
            [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "--no-cache-dir", "install"]
            + ["--dry-run", "--no-deps", "--index-url", url]
            + ["--report", str(report), "demo==1.0.0+fixed"]
        )
        (item,) = json.loads(report.read_text())["install"]
        assert (item["metadata"]["version"], item["download_info"]["archive_info"]["hashes"]["sha256"]) == (
            "1.0.0+fixed",
            built.sha256,
        )

        (tmp_path / "requirements.in").write_text("demo==1.0.0+fixed\n")
        out = resolve(
            [uv, "pip", "compile", "--generate-hashes", "--no-cache", "--no-header", "--index-url", url]
            + ["--python", sys.executable, str(tmp_path / "requirements.in")]
        )
        assert re.findall(r"^\S+", out, re.M) == ["demo==1.0.0+fixed"], out
        assert re.findall(r"--hash=(\S+)", out) == [f"sha256:{built.sha256}"], out

        consumer = tmp_path / "consumer"
        consumer.mkdir()
        (consumer / "pyproject.toml").write_text(
            '[project]\nname = "consumer"\nversion = "0"\nrequires-python = ">=3.11"\n'
            'dependencies = ["demo==1.0.0+fixed"]\n\n'
            f'[[tool.uv.index]]\nname = "fixed"\nurl = "{url}"\nexplicit = true\n\n'
            '[tool.uv.sources]\ndemo = { index = "fixed" }\n'
        )
        resolve([uv, "lock", "--no-cache", "--python", sys.executable], cwd=consumer)
        (demo,) = [p for p in tomllib.loads((consumer / "uv.lock").read_text())["package"] if p["name"] == "demo"]
        assert (demo["version"], demo["source"]) == ("1.0.0+fixed", {"registry": url})
        ((wheel_url, sha),) = [(w["url"], w["hash"]) for w in demo["wheels"]]
        assert (unquote(wheel_url).rsplit("/", 1)[1], sha) == (built.filename, f"sha256:{built.sha256}")

        for installer in (  # and real installs from the server: the wheel, its '+' as '%2B' in the link
            [sys.executable, "-m", "pip", "--isolated", "--no-cache-dir", "install", "-q", "--no-compile"],
            [uv, "pip", "install", "-q", "--no-cache", "--python", sys.executable],
        ):
            target = tmp_path / f"target-{len(list(tmp_path.glob('target-*')))}"
            requests.clear()
            ran = subprocess.run(
                [*installer, "--index-url", url, "--no-deps", "--target", str(target), "demo==1.0.0+fixed"],
                capture_output=True,
                text=True,
                env=env,
            )
            assert ran.returncode == 0, ran.stdout + ran.stderr
            assert f"/{built.filename.replace('+', '%2B')}" in requests, (installer[0], requests)
            assert (target / "demo-1.0.0+fixed.dist-info" / "sboms" / "patchwheel.cdx.json").is_file(), installer[0]
    finally:
        server.shutdown()
        server.server_close()
