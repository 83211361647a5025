"""The command line: each verb takes only its own options; the old spellings of the matrix commands, kept for one
release, are gone (CHANGELOG.md lists each with what replaced it)."""

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
    ("old", "message"),
    [
        (["upstream", "--list-new"], "required: verb"),  # now `watch list`
        (
            ["upstream", "--line", "a/1", "a==2", "--fragment", "f"],
            "choose from 'run', 'check', 'rerender'",
        ),  # `watch cell`
        (["upstream", "--merge", "f1", "--cells", "c"], "choose from 'run', 'check', 'rerender'"),  # `watch merge`
        (["upstream", "--check", "--transitions"], "required: verb"),  # `upstream check`
        (["upstream", "--rerender"], "required: verb"),  # `upstream rerender`
        (["upstream", "a==2"], "invalid choice: 'a==2' (choose from 'run', 'check', 'rerender')"),  # `upstream run`
        (["rebase", "demo", "1.0.0", "--refresh"], "unrecognized arguments: --refresh"),  # `rebase --reexport`
    ],
)
def test_the_retired_spellings_are_refused_with_the_verbs_there_are(demo_project, capsys, old, message):
    """A retired spelling is an argparse refusal (that of `upstream` shows its verbs), and does nothing."""
    with pytest.raises(SystemExit) as exc:
        main(capsys, demo_project.root, *old)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err, err
    assert old[0] != "upstream" or "{run,check,rerender}" in err, err
    assert not (demo_project.root / "patches" / "STATUS.json").exists() and not (demo_project.root / ".rebase").exists()
