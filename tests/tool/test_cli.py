"""The command line: each verb takes only its own options, and the old spellings of the matrix commands still
work for one release, saying so."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchwheel import cli


def main(capsys, root: Path, *args: str) -> tuple[int, str, str]:
    code = cli.main(["--root", str(root), *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["upstream", "run", "--line", "demo/1.0.0"], "unrecognized arguments: --line"),
        (["upstream", "run", "--transitions"], "unrecognized arguments: --transitions"),
        (["watch", "list", "demo==1.2.0"], "unrecognized arguments: demo==1.2.0"),
        (["upstream", "run", "--every", "--text-only"], "--every runs proofs on every selected release"),
    ],
)
def test_each_verb_takes_only_its_own_options(demo_project, capsys, args, message):
    """The verbs replace the modes whose options were checked by hand: an option of another verb is an error."""
    code: object
    try:
        code, _, err = main(capsys, demo_project.root, *args)
    except SystemExit as exc:  # argparse's own refusal
        code, err = exc.code, capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not (demo_project.root / "patches" / "STATUS.json").exists()


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (["upstream", "--list-new"], ["watch", "list"]),
        (
            ["upstream", "--line", "a/1", "a==2", "--fragment", "f"],
            ["watch", "cell", "--line", "a/1", "a==2", "--fragment", "f"],
        ),
        (["upstream", "--merge", "f1", "f2", "--cells", "c"], ["watch", "merge", "f1", "f2", "--cells", "c"]),
        (["upstream", "--check", "--transitions"], ["upstream", "check", "--transitions"]),
        (["upstream", "--rerender"], ["upstream", "rerender"]),
        (["upstream", "a==2", "--every"], ["upstream", "run", "a==2", "--every"]),
        (["upstream"], ["upstream", "run"]),
        (["--root", "r", "upstream", "--rerender"], ["--root", "r", "upstream", "rerender"]),
        (["upstream", "check"], ["upstream", "check"]),
        (["build", "--clean"], ["build", "--clean"]),
        (["upstream", "--merge=f1", "--cells", "c"], ["watch", "merge", "f1", "--cells", "c"]),
        (
            ["upstream", "--line", "a/1", "a==2", "--fragment=f"],
            ["watch", "cell", "--line", "a/1", "a==2", "--fragment", "f"],
        ),
        (["upstream", "--help"], ["upstream", "--help"]),
    ],
)
def test_the_old_spellings_still_work_for_one_release(capsys, old, new):
    assert cli.modernize(old) == new
    said = capsys.readouterr().err
    assert ("the old spelling goes in the next release" in said) == (old != new), said
