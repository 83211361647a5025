"""Every cell of the matrix judged, and the upstream watch that keeps it so in CI: the bisection over real (demo)
releases, the listing of new cells, one fragment per cell, the merge into patches/MATRIX.* with its verdict on what
needs a maintainer (the workflows that run those commands: test_workflows.py). Proof runs are faked (a verdict
per release); everything else (index, wheels, text check, the CLI) is real."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from packaging.version import Version

from conftest import CORE, INIT, TRAILERS, edit_greet, make_patch, stub_proof_runs
from patchwheel import cli
from patchwheel.maint.proving import proofenv
from patchwheel.maint.upstream import watch
from patchwheel.matrix import checks as matrix_checks
from patchwheel.matrix.table import TEXT_CODE, VERDICTS, LineMatrix, Matrix

ROOT = Path(__file__).resolve().parents[2]


def fake_proofs(monkeypatch, tmp_path, fixed_from: str | None) -> list[str]:
    """Proofs fail on every demo release before ``fixed_from`` and pass from it on; the releases run, in order."""
    runs: list[str] = []
    lock = threading.Lock()

    def run_proof(env, root, proof, timeout=900, first_bug=False):
        version = Path(env).name.split("-", 1)[1]
        with lock:
            runs.append(version)
        if fixed_from is not None and Version(version) >= Version(fixed_from):
            return proofenv.ProofOutcome("passes", "1 passed")
        return proofenv.ProofOutcome("fails", "test_greet: BugSymptom: no comma")

    stub_proof_runs(monkeypatch, tmp_path, run_proof)
    return runs


def releases(demo, *versions: str) -> None:
    for v in versions:
        demo.add_release(v, CORE)


def status(demo) -> dict:
    return json.loads((demo.root / "patches" / "MATRIX.json").read_text())


def row(demo) -> dict:
    return status(demo)["lines"][0]["patches"][0]["cells"]


def main(capsys, root: Path, *args: str) -> tuple[int, str, str]:
    code = cli.main(["--root", str(root), *args])
    out, err = capsys.readouterr()
    return code, out, err


# --- every cell judged ---------------------------------------------------------------------------------------------


def test_bisection_judges_every_cell_and_runs_both_sides_of_the_fix(demo_project, monkeypatch, tmp_path, capsys):
    versions = [f"1.{i}.0" for i in range(1, 10)]
    releases(demo_project, *versions)
    runs = fake_proofs(monkeypatch, tmp_path, fixed_from="1.6.0")
    code, out, err = main(capsys, demo_project.root, "matrix", "run")
    assert code == 0, err
    cells = row(demo_project)
    assert [cells[v]["behaviour"] for v in versions] == ["fails"] * 5 + ["passes"] * 4
    assert {"1.5.0", "1.6.0", "1.1.0", "1.9.0"} <= set(runs)  # the ends, and both sides of the fix
    assert len(runs) == len(set(runs)) <= 2 + 3, runs  # the two ends, then at most log2(9) bisection steps
    inferred = {v for v in versions if "inferred_from" in cells[v]}
    assert inferred == set(versions) - set(runs)
    for v in inferred:
        left, right = cells[v]["inferred_from"]
        assert cells[left]["behaviour"] == cells[right]["behaviour"] == cells[v]["behaviour"]
    md = (demo_project.root / "patches" / "MATRIX.md").read_text()
    assert "C ·" not in md and "C (✗)" in md and "C (✓)" in md and "C ✓" in md
    assert "/9" in err and "ETA" in err  # progress: releases done of the total, with an ETA


def test_every_runs_each_release_and_infers_nothing(demo_project, monkeypatch, tmp_path, capsys):
    releases(demo_project, "1.1.0", "1.2.0", "1.3.0")
    runs = fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert main(capsys, demo_project.root, "matrix", "run", "--every")[0] == 0
    assert sorted(runs) == ["1.1.0", "1.2.0", "1.3.0"]
    assert not any("inferred_from" in c for c in row(demo_project).values())


def test_merging_a_run_reinfers_the_cells_beside_it(demo_project, monkeypatch, tmp_path, capsys):
    """A later run of one release that contradicts an inferred neighbourhood turns the cells it no longer supports
    back to unjudged, rather than leaving a wrong inference in the matrix."""
    releases(demo_project, "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0")
    fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert main(capsys, demo_project.root, "matrix", "run")[0] == 0
    assert {v: "inferred_from" in c for v, c in row(demo_project).items()} == {
        "1.1.0": False,
        "1.2.0": True,
        "1.3.0": True,
        "1.4.0": True,
        "1.5.0": False,
    }
    fake_proofs(monkeypatch, tmp_path, fixed_from="1.3.0")  # say 1.3.0 is found to pass after all
    assert main(capsys, demo_project.root, "matrix", "run", "--behaviour", "demo==1.3.0", "demo==1.3.0")[0] == 0
    cells = row(demo_project)
    assert cells["1.3.0"]["behaviour"] == "passes" and "inferred_from" not in cells["1.3.0"]
    assert cells["1.2.0"]["behaviour"] is None and cells["1.4.0"]["behaviour"] is None
    assert "C ·" in (demo_project.root / "patches" / "MATRIX.md").read_text()


def test_transitions_select_where_drop_when_changes(demo_project, monkeypatch, tmp_path, capsys):
    releases(demo_project, *(f"1.{i}.0" for i in range(1, 6)))
    fake_proofs(monkeypatch, tmp_path, fixed_from="1.4.0")
    assert main(capsys, demo_project.root, "matrix", "run")[0] == 0
    matrix = status(demo_project)
    matrix["lines"][0]["patches"][0]["drop_when"] = "proof-passes-upstream"
    assert matrix_checks.transition_releases(Matrix.from_json(matrix)) == ["demo==1.4.0"]
    matrix["lines"][0]["patches"][0]["drop_when"] = "demo>=1.2.0"
    assert matrix_checks.transition_releases(Matrix.from_json(matrix)) == ["demo==1.2.0"]


# --- the watch: list, fragment, merge ------------------------------------------------------------------------------


def dropped_by_its_proof(demo) -> None:
    """The demo patch with ``Drop-When: proof-passes-upstream`` (its own says demo>=1.1.0: droppable already)."""
    files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
    trailers = {**TRAILERS, "Drop-When": "proof-passes-upstream"}
    demo.set_series(("0001-greet-comma.patch", make_patch(files, edit_greet, "Greet with a comma", trailers)))


def listed(demo, release: str, line: str = "demo/1.0.0") -> dict[str, str]:
    """A cell as `watch list` prints it: the line, the release, and the release's wheel with its sha256."""
    wheel = demo.upstream.parent / f"demo-{release}-py3-none-any.whl"
    sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return {"line": line, "package": "demo", "release": release, "wheel": wheel.name, "sha256": sha256}


def list_cells(capsys, demo, tmp_path) -> list[dict]:
    """The list step: `watch list`, its output saved to tmp_path/cells.json as the merge job saves it."""
    code, out, err = main(capsys, demo.root, "watch", "list")
    assert code == 0, err
    (tmp_path / "cells.json").write_text(out)
    return json.loads(out)


def merge(capsys, demo, tmp_path, *fragments: Path) -> tuple[int, str, str]:
    """The merge step, with the list step's cells."""
    paths = [str(f) for f in fragments]
    return main(capsys, demo.root, "watch", "merge", *paths, "--cells", str(tmp_path / "cells.json"))


def watch_setup(demo, monkeypatch, tmp_path, capsys, fixed_from: str | None) -> Path:
    """A committed matrix over 1.1.0, then upstream publishes 1.2.0, the list step lists it and the cell job writes
    its fragment."""
    dropped_by_its_proof(demo)
    releases(demo, "1.1.0")
    fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert main(capsys, demo.root, "matrix", "run")[0] == 0
    releases(demo, "1.2.0")
    assert list_cells(capsys, demo, tmp_path) == [listed(demo, "1.2.0")]
    fake_proofs(monkeypatch, tmp_path, fixed_from=fixed_from)
    fragment = tmp_path / "fragments" / "demo-1.0.0-1.2.0.json"
    code, _, err = main(
        capsys, demo.root, "watch", "cell", "--line", "demo/1.0.0", "demo==1.2.0", "--fragment", str(fragment)
    )
    assert code == 0, err
    return fragment


def test_watch_merges_a_new_release_and_lists_nothing_after(demo_project, monkeypatch, tmp_path, capsys):
    fragment = watch_setup(demo_project, monkeypatch, tmp_path, capsys, fixed_from=None)
    code, out, err = merge(capsys, demo_project, tmp_path, fragment)
    assert code == 0, out + err
    cells = row(demo_project)
    assert cells["1.2.0"]["behaviour"] == "fails" and cells["1.1.0"]["behaviour"] == "fails"
    assert "1.2.0" in (demo_project.root / "patches" / "MATRIX.md").read_text()
    assert json.loads(main(capsys, demo_project.root, "watch", "list")[1]) == []


def test_watch_fails_with_rebase_commands_where_a_patch_becomes_droppable(demo_project, monkeypatch, tmp_path, capsys):
    fragment = watch_setup(demo_project, monkeypatch, tmp_path, capsys, fixed_from="1.2.0")
    code, out, _ = merge(capsys, demo_project, tmp_path, fragment)
    assert code == 1
    assert (
        "needs a maintainer: demo/1.0.0 0001-greet-comma.patch becomes droppable on demo 1.2.0 (its proof passes "
        "on the pristine release): rebase with `nox -s rebase -- demo 1.2.0`"
    ) in out
    assert "no pull request" in out


def test_watch_fails_where_a_patch_stops_applying(demo_project, monkeypatch, tmp_path, capsys):
    dropped_by_its_proof(demo_project)
    releases(demo_project, "1.1.0")
    fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert main(capsys, demo_project.root, "matrix", "run")[0] == 0
    demo_project.add_release("1.2.0", CORE.replace(b'"hello " + name', b'f"hello {name}"'))  # the patched line changed
    list_cells(capsys, demo_project, tmp_path)
    fragment = tmp_path / "f.json"
    assert (
        main(
            capsys,
            demo_project.root,
            "watch",
            "cell",
            "--line",
            "demo/1.0.0",
            "demo==1.2.0",
            "--fragment",
            str(fragment),
        )[0]
        == 0
    )
    code, out, _ = merge(capsys, demo_project, tmp_path, fragment)
    assert code == 1 and "0001-greet-comma.patch stops applying on demo 1.2.0 (text: conflict" in out


def test_merge_refuses_a_fragment_of_another_patch_series(demo_project, monkeypatch, tmp_path, capsys):
    from conftest import other_patch_set

    fragment = watch_setup(demo_project, monkeypatch, tmp_path, capsys, fixed_from=None)
    before = (demo_project.root / "patches" / "MATRIX.json").read_bytes()
    other_patch_set(demo_project)
    code, _, err = merge(capsys, demo_project, tmp_path, fragment)
    assert code == 2 and "was judged with another patch series of demo/1.0.0" in err
    assert (demo_project.root / "patches" / "MATRIX.json").read_bytes() == before  # nothing half-written


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["watch", "merge", "f.json"], "`watch merge` needs --cells: the list step's cells"),
        (["watch", "merge", "f.json", "--cells", "missing.json"], "cannot read the list of cells missing.json"),
        (["watch", "cell", "--fragment", "f.json", "demo==1.2.0"], "`watch cell` checks one cell"),
        (
            ["watch", "cell", "--line", "demo/1.0.0", "demo==0.9.0", "--fragment", "f.json"],
            "is not newer than the line",
        ),
        (
            ["watch", "cell", "--line", "nope", "demo==1.2.0", "--fragment", "f.json"],
            "is not a release of the line nope",
        ),
        (["watch", "cell", "--line", "demo/1.0.0", "demo==x.y", "--fragment", "f.json"], "'x.y' is not a version"),
    ],
)
def test_watch_commands_refuse_bad_input(demo_project, capsys, args, message):
    code, _, err = main(capsys, demo_project.root, *args)
    assert code == 2 and err.startswith("error: ") and message in err and "\n  fix: " in err, err


def test_merge_refuses_a_file_that_is_not_a_fragment(demo_project, tmp_path, capsys, monkeypatch):
    releases(demo_project, "1.1.0")
    fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert main(capsys, demo_project.root, "matrix", "run")[0] == 0
    matrix_json = demo_project.root / "patches" / "MATRIX.json"
    (tmp_path / "cells.json").write_text("[]")
    code, _, err = merge(capsys, demo_project, tmp_path, matrix_json)
    assert code == 2 and "is not a fragment of this tool" in err
    code, _, err = merge(capsys, demo_project, tmp_path, tmp_path / "missing.json")
    assert code == 2 and f"cannot read the fragment {tmp_path / 'missing.json'}" in err


# --- the workflows run the commands that exist ---------------------------------------------------------------------


def test_reinfer_does_not_infer_across_a_release_where_the_text_changes(demo_project, monkeypatch, tmp_path, capsys):
    """A merged run leaves 1.1.0 and 1.4.0 run and agreeing, but the patched code changed at 1.3.0 (a probe, never
    run): the cells between stay unjudged, as the bisection would have run 1.3.0."""
    releases(demo_project, "1.1.0", "1.2.0")
    demo_project.add_release("1.3.0", b"# moved\n" + CORE)
    demo_project.add_release("1.4.0", b"# moved\n" + CORE)
    fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert (
        main(capsys, demo_project.root, "matrix", "run", "--behaviour", "demo==1.1.0", "--behaviour", "demo==1.4.0")[0]
        == 0
    )
    cells = row(demo_project)
    assert cells["1.2.0"]["text"] == "clean" and cells["1.3.0"]["text"] == "offset"
    assert cells["1.2.0"]["behaviour"] is None and cells["1.3.0"]["behaviour"] is None
    runs = fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert main(capsys, demo_project.root, "matrix", "run")[0] == 0  # the bisection runs the probe
    assert "1.3.0" in runs and row(demo_project)["1.2.0"].get("inferred_from") == ["1.1.0", "1.3.0"]


def test_merge_refuses_fragments_of_another_torch(demo_project, monkeypatch, tmp_path, capsys):
    fragment = watch_setup(demo_project, monkeypatch, tmp_path, capsys, fixed_from=None)
    data = json.loads(fragment.read_text())
    for row in data["line"]["patches"]:  # every verdict of it judged on that torch, as its cell job would write
        for cell in row["cells"].values():
            if "torch" in cell:
                cell["torch"] = "9.9.9"
    fragment.write_text(json.dumps({**data, "torch": "9.9.9"}))
    code, _, err = merge(capsys, demo_project, tmp_path, fragment)
    assert code == 2 and "judged with torch 9.9.9, the committed matrix with torch" in err


def test_attention_is_for_the_newest_line_and_names_a_proof_that_cannot_judge():
    def ln(key, behaviour, text="clean"):
        cells = {"1.2.0": {"text": text, "behaviour": behaviour, "drop_when_met": None}}
        return LineMatrix.from_json({"line": key, "patches": [{"name": "p.patch", "cells": cells}]})

    committed = Matrix()
    old_line = ln("demo/1.0.0", "passes", text="conflict")
    assert watch.attention(committed, [old_line], newest={"demo/1.1.0"}) == []
    (msg,) = watch.attention(committed, [ln("demo/1.1.0", "error")], newest={"demo/1.1.0"})
    assert msg.startswith("demo/1.1.0 p.patch: its proof cannot judge demo 1.2.0")


def test_list_new_lists_a_late_patch_release_of_an_older_series(demo_project, monkeypatch, tmp_path, capsys):
    releases(demo_project, "1.1.0", "2.0.0")
    fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert main(capsys, demo_project.root, "matrix", "run")[0] == 0
    releases(demo_project, "1.1.1")  # published after 2.0.0
    assert list_cells(capsys, demo_project, tmp_path) == [listed(demo_project, "1.1.1")]


def forge(fragment: Path, edit) -> None:
    data = json.loads(fragment.read_text())
    edit(data)
    fragment.write_text(json.dumps(data))


def fake_release(data: dict) -> None:
    """The cell claims a release the list step never produced (9.9.9): on main it merged with exit 0."""
    data["line"]["releases"][0].update(version="9.9.9", wheel="demo-9.9.9-py3-none-any.whl")
    cells = data["line"]["patches"][0]["cells"]
    cells["9.9.9"] = cells.pop("1.2.0")


FORGERIES = {
    "fake-release": (fake_release, "line.releases[0].version: 9.9.9 is not a cell of the list for demo/1.0.0 (1.2.0)"),
    "other-wheel": (
        lambda d: d["line"]["releases"][0].update(sha256="0" * 64),
        f"line.releases[0].sha256: '{'0' * 64}' is not the listed ",
    ),
    "unknown-line": (
        lambda d: d["line"].update(line="demo/0.1.0"),
        "line.line: 'demo/0.1.0' is not a release line of this checkout (gone since the cell ran?)",
    ),
    "text": (
        lambda d: d["line"]["patches"][0]["cells"]["1.2.0"].update(text="<b>clean</b>"),
        "line.patches[0].cells['1.2.0'].text: '<b>clean</b>' is not a text result (clean, offset, 3-way, "
        "already-upstream, conflict)",
    ),
    "drop-when": (
        lambda d: d["line"]["patches"][0].update(drop_when="demo>=1.2.0"),
        "line.patches[0].drop_when: 'demo>=1.2.0' is not the drop_when of 0001-greet-comma.patch",
    ),
    "drop-when-met": (
        lambda d: d["line"]["patches"][0]["cells"]["1.2.0"].update(drop_when_met=True),
        "line.patches[0].cells['1.2.0'].drop_when_met: True is not what Drop-When says (None)",
    ),
    "companions": (lambda d: d["line"].update(companions=["torch==0"]), "line.companions: ['torch==0'] are not"),
    "torch": (lambda d: d.update(torch="<i>2</i>"), "torch: '<i>2</i>' is not a version"),
    "schema-bool": (lambda d: d.update(schema=True), "schema: True is not an integer"),
    "html-subject": (
        lambda d: d["line"]["patches"][0].update(subject="<img src=x onerror=alert(1)> | `x`"),
        "line.patches[0].subject: '<img src=x onerror=alert(1)> | `x`' is not the subject of 0001-greet-comma.patch",
    ),
    "verdict": (
        lambda d: d["line"]["patches"][0]["cells"]["1.2.0"].update(behaviour="maybe"),
        "line.patches[0].cells['1.2.0'].behaviour: 'maybe' is not a verdict (passes, fails, error)",
    ),
    "type": (lambda d: d["line"]["releases"][0].update(yanked="no"), "line.releases[0].yanked: 'no' is not a bool"),
    "extra-key": (lambda d: d["line"].update(notes="<b>hi</b>"), "line: unexpected key 'notes'"),
    "cells-list": (lambda d: d["line"]["patches"][0].update(cells=[]), "line.patches[0].cells: [] is not an object"),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_merge_refuses_a_forged_fragment_and_writes_nothing(demo_project, monkeypatch, tmp_path, capsys, forgery):
    edit, message = FORGERIES[forgery]
    fragment = watch_setup(demo_project, monkeypatch, tmp_path, capsys, fixed_from=None)
    forge(fragment, edit)
    before = {p.name: p.read_bytes() for p in (demo_project.root / "patches").glob("MATRIX.*")}
    code, out, err = merge(capsys, demo_project, tmp_path, fragment)
    assert (code, out) == (2, ""), out + err
    assert err.startswith(f"error: fragment {fragment}: {message}"), err
    assert len(err.splitlines()) == 2 and err.splitlines()[1].startswith("  fix: "), err
    assert {p.name: p.read_bytes() for p in (demo_project.root / "patches").glob("MATRIX.*")} == before


def test_merge_takes_one_fragment_a_cell(demo_project, monkeypatch, tmp_path, capsys):
    """A cell job that uploads a second fragment for another cell cannot replace that cell's own: both are refused."""
    fragment = watch_setup(demo_project, monkeypatch, tmp_path, capsys, fixed_from=None)
    twin = tmp_path / "other-cell" / fragment.name
    twin.parent.mkdir()
    twin.write_bytes(fragment.read_bytes())
    code, out, err = merge(capsys, demo_project, tmp_path, fragment, twin)
    assert (code, out) == (2, "")
    assert err.startswith(
        f"error: fragment {twin}: line.releases[0].version: demo/1.0.0 vs 1.2.0 is the cell of {fragment} too: "
        "one fragment a cell\n  fix: "
    ), err
    assert "1.2.0" not in (demo_project.root / "patches" / "MATRIX.md").read_text()


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ('{"line": "demo/1.0.0"}', "is {'line': 'demo/1.0.0'}, not a list"),
        (
            '[{"line": "demo/1.0.0"}]',
            "[0] is {'line': 'demo/1.0.0'}, not a cell (line, package, release, wheel, sha256",
        ),
        ("[1]", "[0] is 1, not a cell"),
        ("not json", "cannot read the list of cells"),
        (
            json.dumps([dict.fromkeys(watch.CELL_KEYS, "x") | {"line": "demo/0.1.0", "package": "demo"}]),
            "[0] names 'demo/0.1.0' ('demo'), not a line of this checkout",
        ),
        (
            json.dumps([dict.fromkeys(watch.CELL_KEYS, "x") | {"line": "demo/1.0.0", "package": "demo"}]),
            "[0]: release 'x' is not a version",
        ),
    ],
)
def test_merge_refuses_a_list_of_cells_it_cannot_read(demo_project, monkeypatch, tmp_path, capsys, cells, message):
    fragment = watch_setup(demo_project, monkeypatch, tmp_path, capsys, fixed_from=None)
    (tmp_path / "cells.json").write_text(cells)
    before = (demo_project.root / "patches" / "MATRIX.json").read_bytes()
    code, out, err = merge(capsys, demo_project, tmp_path, fragment)
    assert (code, out) == (2, "") and err.startswith("error: ") and message in err, err
    assert (demo_project.root / "patches" / "MATRIX.json").read_bytes() == before


def test_merge_refuses_a_verdict_on_a_feature(demo_project, monkeypatch, tmp_path, capsys):
    """A feature's cells are n/a (no proof judges it): a fragment that says its proof passes is refused."""
    files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
    feature = {**TRAILERS, "Feature-Test": "tests/proof/test_demo.py", "Drop-When": "demo>=9"}
    del feature["Proof-Test"]
    demo_project.set_series(
        ("0001-greet-comma.patch", make_patch(files, edit_greet, "Greet with a comma", TRAILERS)),
        (
            "0002-a-feature.patch",
            make_patch(files, lambda f: {**f, "src/demo/__init__.py": INIT + b"X = 1\n"}, "F", feature),
        ),
    )
    releases(demo_project, "1.1.0")
    fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert main(capsys, demo_project.root, "matrix", "run")[0] == 0
    releases(demo_project, "1.2.0")
    list_cells(capsys, demo_project, tmp_path)
    fragment = tmp_path / "f.json"
    args = ("watch", "cell", "--line", "demo/1.0.0", "demo==1.2.0", "--fragment", str(fragment))
    assert main(capsys, demo_project.root, *args)[0] == 0
    assert json.loads(fragment.read_text())["line"]["patches"][1]["cells"]["1.2.0"]["behaviour"] == "n/a"
    forge(fragment, lambda d: d["line"]["patches"][1]["cells"]["1.2.0"].update(behaviour="passes"))
    code, out, err = merge(capsys, demo_project, tmp_path, fragment)
    assert (code, out) == (2, "")
    assert err.startswith(
        f"error: fragment {fragment}: line.patches[1].cells['1.2.0'].behaviour: 'passes' is not n/a: "
        "0002-a-feature.patch is a feature, which no proof judges\n"
    ), err


# Any change to a genuine fragment, generated: refused with one error line and nothing written, unless it changes only
# what the merge cannot check (a detail's text, another valid verdict or text result, the yanked flag).
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
UNCHECKED = {
    "text_detail": lambda v: type(v) is str,
    "behaviour_detail": lambda v: type(v) is str,
    "yanked": lambda v: type(v) is bool,
    "text": lambda v: type(v) is str and v in TEXT_CODE,
    "behaviour": lambda v: type(v) is str and v in VERDICTS,
}


def _nodes(value, path=()):
    yield path, value
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        yield from _nodes(child, (*path, key))


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_merge_refuses_any_change_it_can_check(watched, data):
    demo, tmp_path, capsys, fragment = watched
    genuine = json.loads(fragment.read_text())
    nodes = list(_nodes(genuine))
    how = data.draw(st.sampled_from(["replace", "delete", "add-key"]), label="how")
    forged = copy.deepcopy(genuine)
    if how == "add-key":
        path = data.draw(st.sampled_from([path for path, value in nodes if isinstance(value, dict)]), label="path")
        target = genuine_value(forged, path)
        target[data.draw(st.text(max_size=6).filter(lambda k: k not in target), label="key")] = None
    else:
        path = data.draw(st.sampled_from([path for path, _ in nodes[1:]]), label="path")
        parent = genuine_value(forged, path[:-1])
        if how == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            how, new = "replace", data.draw(JSON, label="value")
            parent[path[-1]] = new
    may_pass = how == "replace" and (
        new == genuine_value(genuine, path) or UNCHECKED.get(path[-1], lambda v: False)(new)
    )
    forged_file = tmp_path / "forged.json"
    forged_file.write_text(json.dumps(forged))
    status = {p: p.read_bytes() for p in (demo.root / "patches").glob("MATRIX.*")}
    code, out, err = merge(capsys, demo, tmp_path, forged_file)
    note(f"rc={code}\nout={out}\nerr={err}")
    assert "Traceback" not in out + err
    if code in (0, 1):
        assert may_pass, "a forged fragment was merged"
        for p, data_ in status.items():
            p.write_bytes(data_)
        return
    assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 2, err
    assert err.splitlines()[1].startswith("  fix: ")
    assert {p: p.read_bytes() for p in status} == status


def genuine_value(genuine, path):
    return functools.reduce(lambda node, key: node[key], path, genuine)


@pytest.fixture
def watched(demo_project, monkeypatch, tmp_path, capsys):
    return demo_project, tmp_path, capsys, watch_setup(demo_project, monkeypatch, tmp_path, capsys, fixed_from=None)


# --- the workflows: pinned actions, no stored credentials, hashed installs where a token can write ------------------


def test_the_watch_and_follow_decide_a_cell_by_one_policy():
    """Where upstream has a patch's text but its proof still fails, or its Drop-When holds while it fails, the watch
    called the patch droppable and `follow` stopped: both now ask `matrix_checks.decide`, and the watch says it needs
    a maintainer, as follow stops there."""
    from patchwheel.maint.carry.policy import _SAID
    from patchwheel.matrix.checks import RULES, decide
    from patchwheel.matrix.table import Cell, LineMatrix, Matrix, Release, Row

    def line(cell: Cell) -> LineMatrix:
        row = Row("0001-x.patch", "x", "transformers>=9", None, "tests/proof/test_x.py", cells={"1.1.0": cell})
        return LineMatrix("demo/1.0.0", [], [Release("1.1.0", "w", "s")], [row])

    upstream_text = Cell("already-upstream", behaviour="fails", behaviour_detail="test_x: BugSymptom: seen")
    drop_when = Cell("clean", behaviour="fails", behaviour_detail="test_x: BugSymptom: seen", drop_when_met=True)
    for cell, rule in ((upstream_text, "fails-upstream-text"), (drop_when, "fails-drop-when")):
        assert decide(cell, feature=False).rule == rule and RULES[rule][0] == "stop"
        (said,) = watch.attention(Matrix("2.13.0", []), [line(cell)], {"demo/1.0.0"})
        assert said.startswith(f"demo/1.0.0 0001-x.patch needs a maintainer on demo 1.1.0 ({RULES[rule][1]})"), said
        assert "becomes droppable" not in said
    assert set(_SAID) == set(RULES), "follow words every rule of the policy, and no other"
    passes = Cell("clean", behaviour="passes", behaviour_detail="test_x: passed", drop_when_met=True)
    (said,) = watch.attention(Matrix("2.13.0", []), [line(passes)], {"demo/1.0.0"})
    assert "becomes droppable on demo 1.1.0 (its proof passes on the pristine release)" in said
