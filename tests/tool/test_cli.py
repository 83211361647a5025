"""The command line: each verb takes only its own options; the old spellings of the matrix commands, kept for one
release, are gone (CHANGELOG.md lists each with what replaced it)."""

from __future__ import annotations

import argparse
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
        (["matrix", "run", "--line", "demo/1.0.0"], "unrecognized arguments: --line"),
        (["matrix", "run", "--transitions"], "unrecognized arguments: --transitions"),
        (["watch", "list", "demo==1.2.0"], "unrecognized arguments: demo==1.2.0"),
        (["matrix", "run", "--every", "--text-only"], "--every runs proofs on every selected release"),
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
    assert not (demo_project.root / "patches" / "MATRIX.json").exists()


#: argparse's refusal of a retired verb (`upstream` is `matrix` since issue 46): it lists the verbs there are.
NO_UPSTREAM = "invalid choice: 'upstream'"


@pytest.mark.parametrize(
    ("old", "message"),
    [
        (["upstream", "--list-new"], NO_UPSTREAM),  # now `watch list`
        (["upstream", "--line", "a/1", "a==2", "--fragment", "f"], NO_UPSTREAM),  # `watch cell`
        (["upstream", "--merge", "f1", "--cells", "c"], NO_UPSTREAM),  # `watch merge`
        (["upstream", "--check", "--transitions"], NO_UPSTREAM),  # `matrix check`
        (["upstream", "--rerender"], NO_UPSTREAM),  # `matrix rerender`
        (["upstream", "a==2"], NO_UPSTREAM),  # `matrix run`
        (["upstream", "run"], NO_UPSTREAM),  # `matrix run`
        (["upstream", "check"], NO_UPSTREAM),  # `matrix check`
        (["matrix", "--check"], "required: verb"),
        (["matrix", "a==2"], "invalid choice: 'a==2' (choose from 'run', 'check', 'rerender')"),  # `matrix run`
        (["rebase", "demo", "1.0.0", "--refresh"], "unrecognized arguments: --refresh"),  # `rebase --reexport`
    ],
)
def test_the_retired_spellings_are_refused_with_the_verbs_there_are(demo_project, capsys, old, message):
    """A retired spelling is an argparse refusal that shows the verbs there are (`matrix` among them, and its own),
    and does nothing."""
    with pytest.raises(SystemExit) as exc:
        main(capsys, demo_project.root, *old)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err, err
    assert old[0] not in ("upstream", "matrix") or "matrix" in err, err
    assert not (demo_project.root / "patches" / "MATRIX.json").exists() and not (demo_project.root / ".rebase").exists()


#: What `--help` must not import: the library behind the commands (which reads TOML, parses requirements and
#: markers, inspects code), each a cost every proof and guard session paid at each start of the tool.
HEAVY = (
    "inspect",
    "tomllib",
    "packaging.markers",
    "packaging.requirements",
    "packaging.specifiers",
    "email.parser",
    "patchwheel.torchaxis",
    "patchwheel.config",
    "patchwheel.commands",
    "patchwheel.maint_commands",
    "patchwheel.matrix.table",
)


@pytest.mark.parametrize("argv", [["--help"], ["build", "--help"], ["matrix", "run", "--help"], ["prove", "-h"]])
def test_help_imports_no_heavy_module(argv):
    """`python -m patchwheel --help` (and a command's own) loads the parser alone: the modules it imports are
    listed by a fresh interpreter, not timed (`--help` took 0.37 s of CPU when the parser imported every command's
    module, and torchaxis compiled packaging's regular expressions at import)."""
    import json
    import subprocess
    import sys

    probe = (
        "import json, runpy, sys\n"
        "try:\n"
        "    runpy.run_module('patchwheel', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    src = str(Path(cli.__file__).parents[1])
    res = subprocess.run(
        [sys.executable, "-c", probe, *argv], capture_output=True, text=True, env={"PYTHONPATH": src}, check=True
    )
    imported = set(json.loads(res.stdout.splitlines()[-1]))
    assert "patchwheel.cli" in imported and sorted(imported & set(HEAVY)) == []


def test_each_command_names_a_function_there_is():
    """The parser names each command's function as text (imported when the command runs): every one exists."""

    def below(parser: argparse.ArgumentParser, dest: str) -> list[argparse.ArgumentParser]:
        actions = [a for a in parser._actions if a.dest == dest and isinstance(a.choices, dict)]
        return [p for a in actions for p in a.choices.values()]  # type: ignore[union-attr]

    subparsers = below(cli.parser(), "cmd")
    while subparsers:
        sub = subparsers.pop()
        verbs = below(sub, "verb")
        subparsers += verbs
        if not verbs:
            assert callable(cli.function(sub.get_default("func"))), sub.prog
