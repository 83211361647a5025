"""One policy in every door of the carry engine (issue 46): `rebase`, `derive` and `follow` each stop, with the one
exit status of "stopped, a maintainer takes it from here" (1) and nothing written, where the policy
(:func:`matrix.checks.decide`) says a maintainer must judge. rebase kept rules of its own: it dropped a patch whose
proof passes without checking Drop-When, and one whose text is upstream while its proof still fails. The proof runs
are faked; the text check, the judging and the command line are real."""

from __future__ import annotations

import pytest

from conftest import CORE, INIT, TRAILERS, Prover, edit_greet, make_patch, proofs, tree
from patchwheel import cli, config

FIX = CORE.replace(b'"hello " + name', b'"hello, " + name')

#: door -> (the release it carries the demo's line 1.0.0 onto, its command line after --root)
DOORS = {
    "rebase": ("1.1.0", ["rebase", "demo", "1.1.0"]),
    "derive": ("0.9.0", ["derive", "demo==0.9.0"]),
    "follow": ("1.1.0", ["follow", "demo"]),
}

#: case -> (the release's core.py, the proofs that pass from a release, what the stop says)
CASES = {
    "a proof that passes before its Drop-When": (
        CORE,
        True,
        "its proof passes on demo {release}, before its Drop-When (demo>=9)",
    ),
    "a text upstream whose proof still fails": (
        FIX,
        False,
        "upstream has its text, but its proof still fails (BugSymptom)",
    ),
}


def one_patch_dropped_from_9(demo) -> None:
    """The demo's one line is what the set ``latest`` names; its patch says Drop-When demo>=9, which no release
    here meets."""
    (demo.root / "overlay" / "sets.toml").write_text('[set.latest]\ndemo = "1.0.0"\n')
    files = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
    patch = make_patch(files, edit_greet, "Greet with a comma", {**TRAILERS, "Drop-When": "demo>=9"})
    demo.set_series(("0001-greet-comma.patch", patch))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("door", sorted(DOORS))
def test_each_door_stops_where_the_policy_stops(demo_project, monkeypatch, tmp_path, capsys, door, case):
    release, command = DOORS[door]
    core, passes, said = CASES[case]
    one_patch_dropped_from_9(demo_project)
    demo_project.add_release(release, core)
    proofs(monkeypatch, tmp_path, passes_from={"tests/proof/test_demo.py": release} if passes else None)
    before = tree(demo_project.root)
    assert cli.main(["--root", str(demo_project.root), *command]) == 1, "stopped: a maintainer takes it from here"
    out = capsys.readouterr().out
    assert "0001-greet-comma.patch: " + said.format(release=release) in out, out
    assert "STOPPED" in out and "a maintainer takes it from here" in out, out
    assert tree(demo_project.root) == before, "nothing of the project written"
    assert not (demo_project.root / ".rebase").exists(), "no work folder: it stopped before carrying"


@pytest.mark.parametrize(("door", "most"), [("rebase", 1), ("derive", 2), ("follow", 2)])
def test_each_door_loads_the_configuration_once_or_twice(demo_project, monkeypatch, tmp_path, door, most):
    """Issue 46: config.load ran 7 times in one follow, 6 in one derive. Now once for the command, and once in the
    scratch copy where the door works in one (follow, derive); each step passes on the project it changed."""
    release, command = DOORS[door]
    one_patch_dropped_from_9(demo_project)
    demo_project.add_release(release, b"# a new first line\n" + CORE)  # carried with an offset
    proofs(monkeypatch, tmp_path)
    monkeypatch.setattr("patchwheel.maint.proving.setruns.prove_set", Prover())
    loads: list[str] = []
    real_load = config.load

    def counted(root):
        loads.append(str(root))
        return real_load(root)

    monkeypatch.setattr(config, "load", counted)
    assert cli.main(["--root", str(demo_project.root), *command]) == 0
    assert len(loads) <= most, loads
    assert release in [ln.version for ln in real_load(demo_project.root).lines["demo"]]


def test_a_text_only_rebase_stops_at_a_text_upstream_with_the_one_exit_status(demo_project, monkeypatch, capsys):
    """`rebase --text-only` runs no proof, so it cannot judge a patch whose text the release already has: it stops
    there as every door stops (exit 1, why and the commands, nothing written, no work folder left to go on with). It
    exited 2, a refused command, and left a folder whose `--continue` failed with a false message."""
    one_patch_dropped_from_9(demo_project)
    demo_project.add_release("1.1.0", FIX)
    before = tree(demo_project.root)
    root = ["--root", str(demo_project.root)]
    assert cli.main([*root, "rebase", "demo", "1.1.0", "--text-only"]) == 1
    out = capsys.readouterr().out
    assert "STOPPED" in out and "its text is already in demo 1.1.0" in out, out
    assert tree(demo_project.root) == before, "nothing written, no work folder"
