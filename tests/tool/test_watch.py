"""Every cell of the matrix judged, and the upstream watch that keeps it so in CI: the bisection over real (demo)
releases, the listing of new cells, one fragment per cell, the merge into patches/STATUS.* with its verdict on what
needs a maintainer, and the workflows that run those commands. Proof runs are faked (a verdict per release);
everything else (index, wheels, text check, the CLI) is real."""

from __future__ import annotations

import json
import re
import shlex
import threading
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from patchwheel import cli
from patchwheel.maint import proofenv, upstream, watch

from conftest import CORE, INIT, TRAILERS, edit_greet, make_patch, stub_proof_runs

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
    return json.loads((demo.root / "patches" / "STATUS.json").read_text())


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
    code, out, err = main(capsys, demo_project.root, "upstream")
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
    md = (demo_project.root / "patches" / "STATUS.md").read_text()
    assert "C ·" not in md and "C (✗)" in md and "C (✓)" in md and "C ✓" in md
    assert "/9" in err and "ETA" in err  # progress: releases done of the total, with an ETA


def test_every_runs_each_release_and_infers_nothing(demo_project, monkeypatch, tmp_path, capsys):
    releases(demo_project, "1.1.0", "1.2.0", "1.3.0")
    runs = fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert main(capsys, demo_project.root, "upstream", "--every")[0] == 0
    assert sorted(runs) == ["1.1.0", "1.2.0", "1.3.0"]
    assert not any("inferred_from" in c for c in row(demo_project).values())


def test_merging_a_run_reinfers_the_cells_beside_it(demo_project, monkeypatch, tmp_path, capsys):
    """A later run of one release that contradicts an inferred neighbourhood turns the cells it no longer supports
    back to unjudged, rather than leaving a wrong inference in the matrix."""
    releases(demo_project, "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0")
    fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert main(capsys, demo_project.root, "upstream")[0] == 0
    assert {v: "inferred_from" in c for v, c in row(demo_project).items()} == {
        "1.1.0": False,
        "1.2.0": True,
        "1.3.0": True,
        "1.4.0": True,
        "1.5.0": False,
    }
    fake_proofs(monkeypatch, tmp_path, fixed_from="1.3.0")  # say 1.3.0 is found to pass after all
    assert main(capsys, demo_project.root, "upstream", "--behaviour", "demo==1.3.0", "demo==1.3.0")[0] == 0
    cells = row(demo_project)
    assert cells["1.3.0"]["behaviour"] == "passes" and "inferred_from" not in cells["1.3.0"]
    assert cells["1.2.0"]["behaviour"] is None and cells["1.4.0"]["behaviour"] is None
    assert "C ·" in (demo_project.root / "patches" / "STATUS.md").read_text()


def test_transitions_select_where_drop_when_changes(demo_project, monkeypatch, tmp_path, capsys):
    releases(demo_project, *(f"1.{i}.0" for i in range(1, 6)))
    fake_proofs(monkeypatch, tmp_path, fixed_from="1.4.0")
    assert main(capsys, demo_project.root, "upstream")[0] == 0
    matrix = status(demo_project)
    matrix["lines"][0]["patches"][0]["drop_when"] = "proof-passes-upstream"
    assert upstream.transition_releases(matrix) == ["demo==1.4.0"]
    matrix["lines"][0]["patches"][0]["drop_when"] = "demo>=1.2.0"
    assert upstream.transition_releases(matrix) == ["demo==1.2.0"]


# --- the watch: list, fragment, merge ------------------------------------------------------------------------------


def dropped_by_its_proof(demo) -> None:
    """The demo patch with ``Drop-When: proof-passes-upstream`` (its own says demo>=1.1.0: droppable already)."""
    files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
    trailers = {**TRAILERS, "Drop-When": "proof-passes-upstream"}
    demo.set_series(("0001-greet-comma.patch", make_patch(files, edit_greet, "Greet with a comma", trailers)))


def watch_setup(demo, monkeypatch, tmp_path, capsys, fixed_from: str | None) -> Path:
    """A committed matrix over 1.1.0, then upstream publishes 1.2.0 and the cell job writes its fragment."""
    dropped_by_its_proof(demo)
    releases(demo, "1.1.0")
    fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert main(capsys, demo.root, "upstream")[0] == 0
    releases(demo, "1.2.0")
    code, out, _ = main(capsys, demo.root, "upstream", "--list-new")
    assert code == 0 and json.loads(out) == [{"line": "demo/1.0.0", "package": "demo", "release": "1.2.0"}]
    fake_proofs(monkeypatch, tmp_path, fixed_from=fixed_from)
    fragment = tmp_path / "fragments" / "demo-1.0.0-1.2.0.json"
    code, _, err = main(
        capsys, demo.root, "upstream", "--line", "demo/1.0.0", "demo==1.2.0", "--fragment", str(fragment)
    )
    assert code == 0, err
    return fragment


def test_watch_merges_a_new_release_and_lists_nothing_after(demo_project, monkeypatch, tmp_path, capsys):
    fragment = watch_setup(demo_project, monkeypatch, tmp_path, capsys, fixed_from=None)
    code, out, err = main(capsys, demo_project.root, "upstream", "--merge", str(fragment))
    assert code == 0, out + err
    cells = row(demo_project)
    assert cells["1.2.0"]["behaviour"] == "fails" and cells["1.1.0"]["behaviour"] == "fails"
    assert "1.2.0" in (demo_project.root / "patches" / "STATUS.md").read_text()
    assert json.loads(main(capsys, demo_project.root, "upstream", "--list-new")[1]) == []


def test_watch_fails_with_rebase_commands_where_a_patch_becomes_droppable(demo_project, monkeypatch, tmp_path, capsys):
    fragment = watch_setup(demo_project, monkeypatch, tmp_path, capsys, fixed_from="1.2.0")
    code, out, _ = main(capsys, demo_project.root, "upstream", "--merge", str(fragment))
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
    assert main(capsys, demo_project.root, "upstream")[0] == 0
    demo_project.add_release("1.2.0", CORE.replace(b'"hello " + name', b'f"hello {name}"'))  # the patched line changed
    fragment = tmp_path / "f.json"
    assert (
        main(capsys, demo_project.root, "upstream", "--line", "demo/1.0.0", "demo==1.2.0", "--fragment", str(fragment))[
            0
        ]
        == 0
    )
    code, out, _ = main(capsys, demo_project.root, "upstream", "--merge", str(fragment))
    assert code == 1 and "0001-greet-comma.patch stops applying on demo 1.2.0 (text: conflict" in out


def test_merge_refuses_a_fragment_of_another_patch_series(demo_project, monkeypatch, tmp_path, capsys):
    from conftest import other_patch_set

    fragment = watch_setup(demo_project, monkeypatch, tmp_path, capsys, fixed_from=None)
    before = (demo_project.root / "patches" / "STATUS.json").read_bytes()
    other_patch_set(demo_project)
    code, _, err = main(capsys, demo_project.root, "upstream", "--merge", str(fragment))
    assert code == 2 and "was judged with another patch series of demo/1.0.0" in err
    assert (demo_project.root / "patches" / "STATUS.json").read_bytes() == before  # nothing half-written


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--merge", "missing.json"], "cannot read the fragment missing.json"),
        (["--fragment", "f.json", "demo==1.2.0"], "--fragment checks one cell"),
        (["--line", "demo/1.0.0", "demo==0.9.0", "--fragment", "f.json"], "is not newer than the line"),
        (["--line", "nope", "demo==1.2.0", "--fragment", "f.json"], "is not a release of the line nope"),
        (["--list-new", "--merge", "f.json"], "cannot be combined"),
        (["--list-new", "demo==1.2.0"], "--list-new takes no releases"),
    ],
)
def test_watch_commands_refuse_bad_input(demo_project, capsys, args, message):
    code, _, err = main(capsys, demo_project.root, "upstream", *args)
    assert code == 2 and err.startswith("error: ") and message in err and "\n  fix: " in err, err


def test_merge_refuses_a_file_that_is_not_a_fragment(demo_project, tmp_path, capsys, monkeypatch):
    releases(demo_project, "1.1.0")
    fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert main(capsys, demo_project.root, "upstream")[0] == 0
    status_json = demo_project.root / "patches" / "STATUS.json"
    code, _, err = main(capsys, demo_project.root, "upstream", "--merge", str(status_json))
    assert code == 2 and "is not a fragment of this tool" in err


# --- the workflows run the commands that exist ---------------------------------------------------------------------


def workflow(name: str) -> dict:
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


def patchwheel_commands(doc: dict) -> list[list[str]]:
    out = []
    for job in doc["jobs"].values():
        for step in job.get("steps", []):
            script = step.get("run", "").replace("\\\n", " ")
            for line in script.splitlines():
                if "python -m patchwheel" in line:
                    words = shlex.split(line.split("python -m patchwheel", 1)[1].split(")")[0])
                    out.append(words)
    return out


def test_upstream_watch_runs_real_commands_with_the_cells_list_new_emits():
    doc = workflow("upstream-watch.yml")
    commands = patchwheel_commands(doc)
    assert [c[:2] for c in commands] == [["upstream", "--list-new"], ["upstream", "--line"], ["upstream", "--merge"]]
    for words in commands:
        cli.parser().parse_args(words)  # every option the workflow passes exists (argparse exits otherwise)
    keys = {"line", "package", "release"}  # what --list-new emits per cell (tested above)
    cell = doc["jobs"]["cell"]
    used = set(re.findall(r"\bmatrix\.(\w+)", json.dumps(cell)))
    assert used <= keys, used - keys
    assert doc["jobs"]["merge"]["needs"] == ["list", "cell"]
    assert set(doc[True]) == {"schedule", "workflow_dispatch"}  # yaml reads the key `on` as True


def test_ci_workflow_runs_ci_run_on_pushes_and_pull_requests():
    doc = workflow("ci.yml")
    steps = doc["jobs"]["ci"]["steps"]
    assert steps[-1]["run"] == "bash .ci/run"
    assert {"push", "pull_request"} <= set(doc[True])


def test_reinfer_does_not_infer_across_a_release_where_the_text_changes(demo_project, monkeypatch, tmp_path, capsys):
    """A merged run leaves 1.1.0 and 1.4.0 run and agreeing, but the patched code changed at 1.3.0 (a probe, never
    run): the cells between stay unjudged, as the bisection would have run 1.3.0."""
    releases(demo_project, "1.1.0", "1.2.0")
    demo_project.add_release("1.3.0", b"# moved\n" + CORE)
    demo_project.add_release("1.4.0", b"# moved\n" + CORE)
    fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert (
        main(capsys, demo_project.root, "upstream", "--behaviour", "demo==1.1.0", "--behaviour", "demo==1.4.0")[0] == 0
    )
    cells = row(demo_project)
    assert cells["1.2.0"]["text"] == "clean" and cells["1.3.0"]["text"] == "offset"
    assert cells["1.2.0"]["behaviour"] is None and cells["1.3.0"]["behaviour"] is None
    runs = fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert main(capsys, demo_project.root, "upstream")[0] == 0  # the bisection runs the probe
    assert "1.3.0" in runs and row(demo_project)["1.2.0"].get("inferred_from") == ["1.1.0", "1.3.0"]


def test_merge_keeps_a_run_verdict_over_a_new_inference():
    def cell(behaviour, inferred=None):
        c = {"text": "clean", "behaviour": behaviour, "behaviour_detail": behaviour, "drop_when_met": None}
        return {**c, "inferred_from": inferred} if inferred else c

    def line(cells):
        return {
            "line": "demo/1.0.0",
            "companions": [],
            "releases": [{"version": v, "wheel": "w", "sha256": "s", "yanked": False} for v in cells],
            "patches": [{"name": "p", "drop_when": "proof-passes-upstream", "cells": cells}],
        }

    old = {"lines": [line({"1.1": cell("fails"), "1.3": cell("passes"), "1.5": cell("fails")})]}
    new = line({"1.1": cell("fails"), "1.3": cell("fails", ["1.1", "1.5"]), "1.5": cell("fails")})
    merged = upstream.merge(old, [new], torch="2.13.0")
    got = merged["lines"][0]["patches"][0]["cells"]["1.3"]
    assert got["behaviour"] == "passes" and "inferred_from" not in got
    assert old["lines"][0]["patches"][0]["cells"]["1.3"]["behaviour"] == "passes"  # the input is not changed


def test_merge_refuses_fragments_of_another_torch(demo_project, monkeypatch, tmp_path, capsys):
    fragment = watch_setup(demo_project, monkeypatch, tmp_path, capsys, fixed_from=None)
    data = json.loads(fragment.read_text())
    fragment.write_text(json.dumps({**data, "torch": "9.9.9"}))
    code, _, err = main(capsys, demo_project.root, "upstream", "--merge", str(fragment))
    assert code == 2 and "judged with torch 9.9.9, the committed matrix with torch" in err


def test_attention_is_for_the_newest_line_and_names_a_proof_that_cannot_judge():
    def ln(key, behaviour, text="clean"):
        cells = {"1.2.0": {"text": text, "behaviour": behaviour, "drop_when_met": None}}
        return {"line": key, "patches": [{"name": "p.patch", "cells": cells}]}

    committed: dict = {"lines": []}
    old_line = ln("demo/1.0.0", "passes", text="conflict")
    assert watch.attention(committed, [old_line], newest={"demo/1.1.0"}) == []
    (msg,) = watch.attention(committed, [ln("demo/1.1.0", "error")], newest={"demo/1.1.0"})
    assert msg.startswith("demo/1.1.0 p.patch: its proof cannot judge demo 1.2.0")


def test_list_new_lists_a_late_patch_release_of_an_older_series(demo_project, monkeypatch, tmp_path, capsys):
    releases(demo_project, "1.1.0", "2.0.0")
    fake_proofs(monkeypatch, tmp_path, fixed_from=None)
    assert main(capsys, demo_project.root, "upstream")[0] == 0
    releases(demo_project, "1.1.1")  # published after 2.0.0
    code, out, _ = main(capsys, demo_project.root, "upstream", "--list-new")
    assert json.loads(out) == [{"line": "demo/1.0.0", "package": "demo", "release": "1.1.1"}]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--line", "demo/1.0.0"], "--line names the line of one --fragment"),
        (["--transitions"], "--transitions selects the releases of a staleness check"),
        (["--line", "demo/1.0.0", "demo==x.y", "--fragment", "f.json"], "'x.y' is not a version"),
    ],
)
def test_upstream_refuses_options_that_would_be_ignored(demo_project, capsys, args, message):
    code, _, err = main(capsys, demo_project.root, "upstream", *args)
    assert code == 2 and message in err, err
    assert not (demo_project.root / "patches" / "STATUS.json").exists()


def test_progress_without_rich_prints_plain_lines(tmp_path):
    """`patchwheel lint` and `export` import the upstream module in nox's own interpreter, which has no rich."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['rich'] = None\n"
        "from patchwheel.maint import upstream\n"
        "with upstream.Progress('x', 2, out=sys.stdout) as p:\n"
        "    p.step('one')\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("[1/2 ") and "ETA" in res.stdout and res.stdout.rstrip().endswith("] one")
