"""A new fix, in the order docs/adding-a-fix.md gives: `new` writes every file the later steps need (as stubs lint
refuses), the build takes the draft series so that its proof can run before the message is written, and no build
number is recorded for a draft (its inputs change when the message is written)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from patchwheel import cli, draft, series
from patchwheel.errors import PatchwheelError
from patchwheel.wheels import build as build_mod
from patchwheel.wheels import buildno, distdir

STUBS = [
    "tests/proof/test_add_swap.py",
    "tests/guards/test_add_swap.py",
    "upstream-pr/demo/add-swap/expect.toml",
    "upstream-pr/demo/add-swap/tests/test_add_swap.py",
]


def _new(demo, *extra: str) -> None:
    core = demo.root / "overlay" / "demo" / "1.0.0" / "demo" / "core.py"
    core.write_bytes(core.read_bytes().replace(b"return a + b", b"return b + a"))
    assert cli.main(["--root", str(demo.root), "new", "demo", "1.0.0", "add-swap", *extra]) == 0


def _write_message(demo) -> None:
    """What a maintainer does with the template: every TODO line written, in the .patch file itself."""
    path = demo.patch_dir / "0002-add-swap.patch"
    text = path.read_text()
    text = re.sub(r"Subject: TODO[^\n]*(\n [^\n]*)*", "Subject: Add with the operands swapped", text)
    text = re.sub(r"\nTODO: the problem[^\n]*", "\nadd() takes its operands in the wrong order.", text)
    text = re.sub(r"\nTODO: the root cause[^\n]*", "\nSwap them. Nothing else changes.", text)
    text = re.sub(r"\nTODO: keep each upstream signature[^\n]*", "", text)  # add(a, b) keeps its signature
    text = re.sub(r"Upstream-Issue: TODO [^\n]*", "Upstream-Issue: https://github.com/example/demo/issues/2", text)
    assert "TODO" not in text
    path.write_text(text)
    # then, as the page says: re-export (index lines), rewrite the overlay's record, record the build number
    assert cli.main(["--root", str(demo.root), "rebase", "demo", "1.0.0", "--reexport"]) == 0


def _record(demo):
    return tomllib.loads((demo.root / "overlay" / "demo" / "pins.toml").read_text())["release"]["1.0.0"].get("build")


def _lint(demo, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["--root", str(demo.root), "lint", "demo"])
    return code, capsys.readouterr().out


def test_new_writes_every_file_the_later_steps_need_as_stubs(demo_project, capsys):
    _new(demo_project)
    out = capsys.readouterr().out
    for rel in STUBS:
        path = demo_project.root / rel
        assert path.is_file(), rel
        assert draft.STUB_MARK in path.read_text(), f"{rel} is obviously a draft"
        assert f"wrote the stub {rel}" in out
    patch = series.parse_series(demo_project.load().line("demo"))[1]
    assert patch.trailers["Guard-Test"] == "tests/guards/test_add_swap.py", "the guard file the message names exists"
    assert "docs/adding-a-fix.md" in out


def test_new_keeps_what_exists_and_writes_a_features_proposal(demo_project, capsys):
    kept = demo_project.root / "tests" / "guards" / "test_add_swap.py"
    kept.write_text("# mine\n")
    _new(demo_project, "--feature")
    assert kept.read_text() == "# mine\n"
    assert "kept tests/guards/test_add_swap.py (it exists)" in capsys.readouterr().out
    folder = demo_project.root / "upstream-pr" / "demo" / "add-swap"
    assert sorted(p.name for p in folder.iterdir()) == ["proposal.md"]


def test_a_draft_builds_for_the_proofs_and_says_so(demo_project):
    _new(demo_project)
    said: list[str] = []
    (built,) = build_mod.build(demo_project.load(), demo_project.root / "dist", log=said.append)
    assert len(built.patches) == 2
    assert re.fullmatch(r"demo-1\.0\.0\+fixed-0_draft_[0-9a-f]{12}-py3-none-any\.whl", built.filename)
    assert draft.is_draft_wheel(built.filename)
    assert len([m for m in said if "a draft" in m]) == 1, said
    dist = demo_project.root / "dist"
    assert (dist / "drafts" / built.filename).is_file(), "in dist/drafts/, where no publish glob takes it"
    index = "".join(page.read_text() for page in (dist / "simple").rglob("*.html"))
    assert (dist / "simple").is_dir() and built.filename not in index, "not in the index"
    assert not (dist / "constraints-default.txt").exists() and not (dist / "pins-default.txt").exists()
    line = demo_project.load().line("demo")
    found = distdir.current_wheel(line, dist, "hint")
    assert found == dist / "drafts" / built.filename, "the +fixed proofs and guards take it"


def _upload_globs() -> list[str]:
    """What the publish commands of docs/publishers.md upload: the dist/ arguments of its `twine upload` lines."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "publishers.md").read_text()
    commands = [ln.split() for ln in page.splitlines() if ln.startswith("twine upload ")]
    assert commands, "docs/publishers.md shows how to upload"
    return [word for words in commands for word in words if word.startswith("dist/")]


def test_the_documented_upload_never_takes_a_draft(demo_project):
    """After `new` and a build, dist/ held `demo-1.0.0+fixed-0_draft_...whl` beside the published wheels, and the
    upload docs/publishers.md shows (`twine upload ... dist/*.whl`) took it: a draft of a fix whose message is the
    template, published under a +fixed name. Drafts are written into dist/drafts/, which that glob does not reach."""
    _new(demo_project)
    (built,) = build_mod.build(demo_project.load(), demo_project.root / "dist", log=lambda m: None)
    globs = _upload_globs()
    taken = sorted(p.name for pattern in globs for p in demo_project.root.glob(pattern))
    assert built.filename not in taken, f"{' '.join(globs)} uploads the draft {built.filename}"
    assert (demo_project.root / "dist" / "drafts" / built.filename).is_file()


def _second_line(demo) -> None:
    """A line demo 1.1.0 with 1.0.0's series, its build recorded (as test_dist's two lines)."""
    import hashlib

    from conftest import CORE

    demo.add_release("1.1.0", b"# moved\n" + CORE)
    whl = demo.upstream.parent / "demo-1.1.0-py3-none-any.whl"
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    pins = demo.root / "overlay" / "demo" / "pins.toml"
    pins.write_text(
        pins.read_text() + f'\n[release."1.1.0"]\nwheel = {{ filename = "{whl.name}", sha256 = "{sha}" }}\n'
    )
    new_dir = demo.root / "patches" / "demo" / "1.1.0"
    new_dir.mkdir()
    for f in demo.patch_dir.iterdir():
        (new_dir / f.name).write_bytes(f.read_bytes())
    demo.vendor()
    assert cli.main(["--root", str(demo.root), "bump", "demo==1.1.0"]) == 0


def test_a_draft_stays_in_dist_drafts_until_its_message_is_written(demo_project):
    """A build of another line keeps the draft in dist/drafts/ (checked as any kept wheel); the build after the
    message is written puts the line's numbered wheel into dist/ and leaves no drafts/ folder."""
    _second_line(demo_project)
    _new(demo_project)
    dist = demo_project.root / "dist"
    (draft_build, _) = build_mod.build(demo_project.load(), dist, log=lambda m: None)
    build_mod.build(demo_project.load(), dist, select=["demo==1.1.0"], log=lambda m: None)
    assert sorted(p.name for p in (dist / "drafts").iterdir()) == [draft_build.filename]
    assert not draft.is_draft_wheel(" ".join(p.name for p in dist.glob("*.whl")))
    assert [w.filename for w in distdir.dist_wheels(dist)][0] == draft_build.filename, "build.json lists it"
    _write_message(demo_project)
    (done,) = build_mod.build(demo_project.load(), dist, select=["demo==1.0.0"], log=lambda m: None)
    assert (dist / done.filename).is_file() and not (dist / "drafts").exists()


def test_what_no_build_wrote_in_dist_drafts_is_refused(demo_project, capsys):
    """dist/drafts/ is the build's like the rest of dist/: a file put there would go with the next swap. A draft is
    not on the index, so no core metadata file of it is the build's either."""
    _new(demo_project)
    dist = demo_project.root / "dist"
    (built,) = build_mod.build(demo_project.load(), dist, log=lambda m: None)
    (dist / "drafts" / "notes.txt").write_text("mine")
    (dist / f"{built.filename}.metadata").write_text("Metadata-Version: 2.1\n")
    assert cli.main(["--root", str(demo_project.root), "build"]) == 2
    assert f"holds what no build wrote: {built.filename}.metadata, drafts/notes.txt" in capsys.readouterr().err
    assert (dist / "drafts" / "notes.txt").read_text() == "mine"


def test_a_draft_an_earlier_build_left_in_dist_moves_to_drafts(demo_project):
    """dist/ as a build before this change left it, the draft beside the published wheels: the next build, of
    another line, keeps the draft and puts it into dist/drafts/."""
    _second_line(demo_project)
    _new(demo_project)
    dist = demo_project.root / "dist"
    (draft_build, _) = build_mod.build(demo_project.load(), dist, log=lambda m: None)
    (dist / "drafts" / draft_build.filename).rename(dist / draft_build.filename)
    (dist / "drafts").rmdir()
    build_mod.build(demo_project.load(), dist, select=["demo==1.1.0"], log=lambda m: None)
    assert (dist / "drafts" / draft_build.filename).is_file() and not (dist / draft_build.filename).exists()


def test_lint_refuses_a_draft_then_each_stub_until_written(demo_project, capsys):
    _new(demo_project)
    code, out = _lint(demo_project, capsys)
    assert code == 1 and "TODO line(s) of the template" in out
    _write_message(demo_project)
    code, out = _lint(demo_project, capsys)
    assert code == 1
    for rel in STUBS[:2]:
        assert f"{rel} is still the stub `nox -s new` wrote" in out, out
    (demo_project.root / STUBS[0]).write_text("def test_greet():\n    pass\n")
    (demo_project.root / STUBS[1]).write_text(
        'import pytest\n\npytestmark = pytest.mark.guard(package="demo")\n\n\ndef test_x(observe):\n    pass\n'
    )
    code, out = _lint(demo_project, capsys)
    assert code == 1
    for rel in STUBS[2:]:
        assert f"{rel.removeprefix('upstream-pr/demo/add-swap/')} is still the stub" in out, out


def test_a_draft_is_never_given_a_build_number(demo_project):
    before = _record(demo_project)
    _new(demo_project)
    assert _record(demo_project) == before, "new records nothing for a draft"
    line = demo_project.load().line("demo")
    with pytest.raises(PatchwheelError, match="is a draft: the message of 0002-add-swap.patch"):
        buildno.bump(demo_project.load(), line)
    with pytest.raises(PatchwheelError, match="TODO line"):  # publishing: what the suite's lint asks first
        series.checked_series(line)


def test_the_number_after_the_message_is_the_next_one(demo_project, capsys):
    """In a checkout with history: the build recorded before `new` is N; the first record after the message is
    written is N + 1 (new and its template spent none)."""
    root = demo_project.root
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-C", str(root)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "start"], check=True)
    number = _record(demo_project)["number"]
    _new(demo_project)
    core = root / "overlay" / "demo" / "1.0.0" / "demo" / "core.py"
    core.write_bytes(core.read_bytes().replace(b"return b + a", b"return b + a  # swapped"))
    assert cli.main(["--root", str(root), "refresh", "demo", "1.0.0", "add-swap"]) == 0, "refresh of a draft"
    assert _record(demo_project)["number"] == number
    capsys.readouterr()
    _write_message(demo_project)
    assert f"build {number + 1} recorded" in capsys.readouterr().out
    assert _record(demo_project)["number"] == number + 1
    (built,) = build_mod.build(demo_project.load(), root / "dist", log=lambda m: None)
    assert f"-{number + 1}_" in built.filename and not draft.is_draft_wheel(built.filename)


def test_a_proof_selection_reads_a_draft_series():
    """The proof framework maps a test to its patch through the series: a draft's Proof-Test counts too."""
    conftest = (Path(__file__).resolve().parents[1] / "proof" / "conftest.py").read_text()
    series = conftest[conftest.index("def _series(") :].split("\ndef ", 1)[0]
    assert "parse_series(line)" in series


def test_status_reads_a_draft_series(demo_project):
    """The proof sessions run `patchwheel status` first (which known bugs apply): it reads a draft too."""
    from patchwheel import knownbugs

    _new(demo_project)
    found = knownbugs.for_package(demo_project.load(), None, "demo", "1.0.0")
    assert [b["fix"] for b in found["bugs"]] == ["greet-comma", "add-swap"]


def test_rerender_lists_a_new_patch():
    """patches/MATRIX.md names every patch: a new one gets its row (no cells until a run judges it), and a line
    with no newer release lists exactly its series (a patch removed or renumbered there is not left behind)."""
    from patchwheel.matrix.table import LineMatrix, Matrix, Release, Row

    def patch(name: str) -> series.Patch:
        trailers = {"Proof-Test": f"tests/proof/test_{name[5:]}.py", "Drop-When": "proof-passes-upstream"}
        return series.Patch(Path(f"{name}.patch"), name, "", trailers, (), b"")

    newest = LineMatrix("demo/2.0.0", [], [], [Row("0001-gone.patch", "gone", None, None, None)])
    older = LineMatrix(
        "demo/1.0.0",
        [],
        [Release("1.1.0", "demo-1.1.0-py3-none-any.whl", "0" * 64)],
        [Row("0001-a.patch", "a", None, None, None)],
    )
    matrix = Matrix("2.13.0", [older, newest])
    lines = {"demo/2.0.0": [patch("0001-b"), patch("0002-c")], "demo/1.0.0": [patch("0001-a"), patch("0002-d")]}
    matrix.rerendered(lines.get)
    assert [r.name for r in newest.patches] == ["0001-b.patch", "0002-c.patch"]
    assert [r.name for r in older.patches] == ["0001-a.patch", "0002-d.patch"]
    assert older.patches[1].cells == {} and older.patches[1].proof_test == "tests/proof/test_d.py"
