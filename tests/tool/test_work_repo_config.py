"""The work repository's own git configuration (`.rebase/<pkg>-<version>/repo/.git/config`) is part of the work
folder, so nothing in it is the tool's to run (issue 45, items 3/4, follow-up): `commit.gpgSign` with a
`gpg.program`, a filter driver named by `.git/info/attributes`, an `include.path` pulling those in from another file
each had `derive ... --continue` and `rebase ... --continue` run the program they name. The tool reads the
repository's settings through git before it runs anything else there and refuses every one it did not write (an
allow-list: what `git init` writes, and the settings the tool pins on every git command line, which win anyway),
naming the key and how to drop it. Hooks (in `.git/hooks/` or a `core.hooksPath`) already ran nowhere: the tool
pins `core.hooksPath` to /dev/null."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import tree
from test_work_folder import (
    CONTINUE,
    _clear,
    _run,
    a_pipe,
    derive_waiting,
    everything,
    holding_a_pipe,
    rebase_continue,
    rebase_waiting,
)


def _program(tmp_path: Path, name: str) -> str:
    """A program that notes ``name`` in tmp_path/ran (the event the test looks for), then passes its input on."""
    script = tmp_path / f"{name}.sh"
    script.write_text(f'#!/bin/sh\necho {name} >> "{tmp_path / "ran"}"\nexec cat\n')
    script.chmod(0o755)
    return str(script)


def _config(repo: Path, text: str) -> None:
    with (repo / ".git" / "config").open("a") as fh:
        fh.write(text)


def plant(repo: Path, tmp_path: Path, how: str) -> str | None:
    """Plant a program the work repository's git would run, as ``how`` names; the setting the tool must refuse
    (as ``git config --list`` spells its key), or None where it runs nothing anyway."""
    if how == "gpg":
        _config(repo, f"[commit]\n\tgpgSign = true\n[gpg]\n\tprogram = {_program(tmp_path, 'gpg')}\n")
        return "commit.gpgsign"
    if how == "include":
        other = tmp_path / "elsewhere.gitconfig"
        other.write_text(f"[commit]\n\tgpgSign = true\n[gpg]\n\tprogram = {_program(tmp_path, 'included')}\n")
        _config(repo, f"[include]\n\tpath = {other}\n")
        return "include.path"
    if how == "filter":
        (repo / ".git" / "info").mkdir(exist_ok=True)
        (repo / ".git" / "info" / "attributes").write_text("* filter=planted\n")
        _config(
            repo,
            f'[filter "planted"]\n\tclean = {_program(tmp_path, "clean")}\n\tsmudge = {_program(tmp_path, "smudge")}\n',
        )
        return "filter.planted.clean"
    if how == "editors":
        prog = _program(tmp_path, "editor")
        _config(
            repo,
            f"[core]\n\teditor = {prog}\n\tpager = {prog}\n\tsshCommand = {prog}\n"
            f"[sequence]\n\teditor = {prog}\n[diff]\n\texternal = {prog}\n",
        )
        return "core.editor"
    assert how == "hooks"
    hooks = tmp_path / "hooks"
    for folder in (hooks, repo / ".git" / "hooks"):
        folder.mkdir(exist_ok=True)
        for hook in ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout", "post-rewrite"):
            (folder / hook).write_text(f'#!/bin/sh\necho {hook} >> "{tmp_path / "ran"}"\n')
            (folder / hook).chmod(0o755)
    _config(repo, f"[core]\n\thooksPath = {hooks}\n")
    return None  # core.hooksPath is pinned to /dev/null on git's command line: nothing to refuse


def _ran(tmp_path: Path) -> str:
    ran = tmp_path / "ran"
    return ran.read_text() if ran.exists() else ""


@pytest.mark.parametrize("how", ["gpg", "include", "filter", "editors", "hooks"])
def test_rebase_continue_runs_no_program_the_work_repository_names(demo_project, tmp_path, how):
    work = rebase_waiting(demo_project)
    key = plant(work / "repo", tmp_path, how)
    before_work, before = everything(work), tree(demo_project.root)
    rc, out, err = _run("--root", str(demo_project.root), *CONTINUE["rebase"])
    assert _ran(tmp_path) == "", f"--continue ran a program the work repository's git config names: {_ran(tmp_path)}"
    if key is None:
        assert rc == 0, (rc, out, err)
        return
    assert rc == 2, (rc, out, err)
    _clear(err)
    assert key in err and f"git -C {work / 'repo'} config --unset-all" in err and str(work) in err, err
    assert everything(work) == before_work and tree(demo_project.root) == before


def test_derive_continue_runs_no_program_the_work_repository_names(demo_project, monkeypatch, tmp_path, scratch_temp):
    """All of them at once, in a derive's folder (which --continue copies into a scratch copy first): refused
    before the copy, every key named, the folder left as it was."""
    work = derive_waiting(demo_project, monkeypatch, tmp_path)
    keys = [plant(work / "repo", tmp_path, how) for how in ("gpg", "include", "filter", "editors", "hooks")]
    before_work, before = everything(work), tree(demo_project.root)
    rc, out, err = _run("--root", str(demo_project.root), *CONTINUE["derive"])
    assert _ran(tmp_path) == "", f"--continue ran a program the work repository's git config names: {_ran(tmp_path)}"
    assert rc == 2, (rc, out, err)
    _clear(err)
    for key in filter(None, keys):
        assert key in err, (key, err)
    assert "nox -s derive -- demo==0.9.0 --abort" in err.splitlines()[-1], err
    assert str(scratch_temp) not in err, "the error names the scratch copy, not the maintainer's folder"
    assert everything(work) == before_work and tree(demo_project.root) == before


def test_settings_git_init_writes_and_the_pinned_ones_are_kept(demo_project, tmp_path):
    """What git init writes (and a maintainer's `core.fsmonitor`, which the tool's own command line overrides)
    does not stop --continue."""
    work = rebase_waiting(demo_project)
    _config(work / "repo", "[core]\n\tfsmonitor = false\n\tsymlinks = true\n\tignorecase = false\n")
    rc, out, err = _run("--root", str(demo_project.root), *CONTINUE["rebase"])
    assert rc == 0, (rc, out, err)


def test_a_config_git_cannot_read_is_one_clear_error(demo_project, tmp_path):
    work = rebase_waiting(demo_project)
    _config(work / "repo", "[core\n")
    rc, out, err = _run("--root", str(demo_project.root), *CONTINUE["rebase"])
    assert rc == 2, (rc, out, err)
    _clear(err)
    assert "bad config line" in err and str(work) in err.splitlines()[-1], err


def test_a_named_pipe_as_the_work_repository_s_config_is_never_opened(demo_project, tmp_path):
    """A named pipe in place of the work repository's ``.git/config`` hung --continue: git reads its config first,
    and a pipe's reader waits for a writer. The test holds the pipe's writer itself
    (:func:`test_work_folder.holding_a_pipe`), so a command that opens it is seen, and not left hanging."""
    work = rebase_waiting(demo_project)
    release = a_pipe(work / "repo" / ".git" / "config", tmp_path)
    opened_by, proc, out, err = holding_a_pipe(release, lambda: rebase_continue(demo_project))
    assert opened_by == ["the test"], f"the command opened the named pipe .git/config (alone, it would hang): {err}"
    assert proc.returncode == 2, (proc.returncode, out, err)
    _clear(err)
    assert ".git/config" in err and "not a regular file" in err, err
