"""What a patch may hold, and what the tool reads back from the trees it applies patches to: no symbolic link,
submodule or file mode reaches a tree; no file outside a apply tree is read; and what lint reads of a patch is
exactly what ``git apply`` applies."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import CORE, INIT, TRAILERS, edit_greet, git_patch, make_patch
from patchwheel import gitops, series
from patchwheel.errors import PatchwheelError
from patchwheel.wheels import apply, vendored
from patchwheel.wheels import build as build_mod

FILES = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
SECRET = b"the contents of a file outside the project\n"


def _problems(demo) -> list[str]:
    return series.lint_line(demo.load().line("demo"), demo.root)


def _build(demo):
    return build_mod.build(demo.load(), demo.root / "dist", log=lambda m: None)


def _git_patch(change: Callable[[Path], None], subject: str = "Change it") -> bytes:
    return git_patch(FILES, change, subject, TRAILERS)


# --- item 2: symbolic links, submodules and modes ---------------------------------------------------------------


def _link(target: Path) -> Callable[[Path], None]:
    return lambda repo: (repo / "src" / "demo" / "link.py").symlink_to(target)


def _gitlink(repo: Path) -> None:
    """A repository inside the work tree: `git add` records it as a submodule entry (a gitlink)."""
    nested = repo / "src" / "demo" / "vendor"
    nested.mkdir()
    gitops.git(nested, "init", "-q")
    gitops.commit(nested, "nested")


def _executable(repo: Path) -> None:
    (repo / "src" / "demo" / "tool.py").write_bytes(b"print('hi')\n")
    (repo / "src" / "demo" / "tool.py").chmod(0o755)


def _chmod(repo: Path) -> None:
    (repo / "src" / "demo" / "core.py").chmod(0o755)
    (repo / "src" / "demo" / "core.py").write_bytes(edit_greet(dict(FILES))["src/demo/core.py"])


MODES = [
    # (what the change makes, the file, the header line git writes, what lint says of it)
    ("link", "src/demo/link.py", "new file mode 120000", "is a symbolic link (new file mode 120000)"),
    ("gitlink", "src/demo/vendor", "new file mode 160000", "is a submodule (new file mode 160000)"),
    ("executable", "src/demo/tool.py", "new file mode 100755", "is executable (new file mode 100755)"),
    ("chmod", "src/demo/core.py", "new mode 100755", "changes its mode (old mode 100644, new mode 100755)"),
]


@pytest.mark.parametrize("kind,path,header,said", MODES, ids=[m[0] for m in MODES])
def test_lint_refuses_links_submodules_and_modes(demo_project, tmp_path, kind, path, header, said):
    change = {"link": _link(tmp_path / "secret"), "gitlink": _gitlink, "executable": _executable, "chmod": _chmod}
    patch = _git_patch(change[kind])
    assert f"\n{header}\n".encode() in patch
    demo_project.set_series(("0001-x.patch", patch))
    assert _problems(demo_project) == [
        f"{demo_project.patch_dir / '0001-x.patch'}: {path} {said}: a patch may only create, change or delete regular "
        "files (mode 100644), as the wheel holds them: make it a regular file"
    ]
    with pytest.raises(PatchwheelError, match="patch series demo/1.0.0 is not valid"):
        _build(demo_project)


@pytest.mark.parametrize("mode,said", [("100755", "is executable"), ("120000", "is a symbolic link")])
def test_lint_refuses_a_change_to_a_file_that_is_not_regular(demo_project, mode, said):
    """The index line of a changed file gives its mode: a change to an executable or to a link's target."""
    patch = make_patch(FILES, edit_greet, "Greet with a comma", TRAILERS)
    changed = re.sub(rb"(\nindex [0-9a-f]+\.\.[0-9a-f]+) 100644\n", rb"\1 " + mode.encode() + b"\n", patch)
    assert changed != patch
    demo_project.set_series(("0001-x.patch", changed))
    assert _problems(demo_project) == [
        f"{demo_project.patch_dir / '0001-x.patch'}: src/demo/core.py {said} (mode {mode} on its index line): a patch "
        "may only create, change or delete regular files (mode 100644), as the wheel holds them: make it a regular file"
    ]


def test_a_link_in_a_patch_never_brings_its_target_into_the_overlay(demo_project, tmp_path):
    """The issue's reproduction: a patch creating a link to a secret; `vendor` wrote the secret into overlay/."""
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    demo_project.set_series(("0001-x.patch", _git_patch(_link(secret))))  # vendors, as `nox -s vendor -- --force`
    with pytest.raises(PatchwheelError, match=r"src/demo/link.py is a symbolic link \(new file mode 120000\)"):
        vendored.write(demo_project.load(), force=True, log=lambda m: None)
    project = demo_project.root / "overlay"
    assert not any(SECRET in p.read_bytes() for p in project.rglob("*") if p.is_file() and not p.is_symlink())
    assert not (project / "demo" / "1.0.0" / "demo" / "link.py").exists()


@pytest.mark.parametrize("where", ["file", "folder"])
def test_an_apply_tree_is_read_without_following_links(tmp_path, where):
    """However a link got into a apply tree, reading the tree back never reads what it points to."""
    outside = tmp_path / "outside"
    (outside / "demo").mkdir(parents=True)
    (outside / "secret").write_bytes(SECRET)
    (outside / "demo" / "core.py").write_bytes(SECRET)
    with apply.ApplyTree(FILES) as tree:
        if where == "file":
            (tree.root / "src" / "demo" / "core.py").unlink()
            (tree.root / "src" / "demo" / "core.py").symlink_to(outside / "secret")
        else:
            shutil.rmtree(tree.root / "src" / "demo")
            (tree.root / "src" / "demo").symlink_to(outside / "demo")
        with pytest.raises(PatchwheelError) as err:
            tree.read(["src/demo/core.py"])
    assert (
        err.value.message
        == {
            "file": "src/demo/core.py in the apply tree is a symbolic link: refusing to read through it",
            "folder": "src/demo in the apply tree is a symbolic link: refusing to read src/demo/core.py through it",
        }[where]
    )
    assert "a patch may only create regular files" in err.value.hint


def test_an_apply_tree_reads_files_and_absent_files(tmp_path):
    with apply.ApplyTree(FILES) as tree:
        os.mkfifo(tree.root / "src" / "demo" / "fifo.py")
        got = tree.read(["src/demo/core.py", "src/demo/missing.py", "src/demo/core.py/under-a-file", "src"])
        assert got == {
            "src/demo/core.py": CORE,
            "src/demo/missing.py": None,
            "src/demo/core.py/under-a-file": None,
            "src": None,
        }
        with pytest.raises(PatchwheelError, match="src/demo/fifo.py in the apply tree is not a regular file"):
            tree.read(["src/demo/fifo.py"])


@pytest.mark.parametrize("rel", ["demo/core.py", "demo/extra.py"])
def test_vendor_does_not_read_through_a_link_in_the_overlay(demo_project, tmp_path, rel):
    """A link committed into overlay/ (a file the series makes, or one it does not): vendor kept "edits" by
    reading them, and so wrote the link's target into overlay/ as a regular file."""
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    module = demo_project.root / "overlay" / "demo" / "1.0.0" / rel
    module.unlink(missing_ok=True)
    module.symlink_to(secret)
    with pytest.raises(PatchwheelError) as err:
        vendored.write(demo_project.load(), log=lambda m: None)
    assert err.value.message == f"overlay/demo/1.0.0/{rel} is a symbolic link: vendor does not read through links"
    assert module.is_symlink()
    vendored.write(demo_project.load(), force=True, log=lambda m: None)  # --force replaces it by what vendor makes
    assert not module.is_symlink() and vendored.overlay_problems(demo_project.load()) == []


# --- item 3: what lint reads is what git applies -----------------------------------------------------------------

UTIL = {"src/demo/util.py": b'"""demo helpers."""\n\nNAME = "demo"\n'}
SWAP = {"src/demo/core.py": edit_greet(dict(FILES))["src/demo/core.py"].replace(b"a + b", b"a - b")}


def _plain_diff() -> bytes:
    """A plain (not git) diff that changes core.py after 0001: add() subtracts."""
    after = {**FILES, "src/demo/core.py": edit_greet(dict(FILES))["src/demo/core.py"]}
    patch = make_patch(after, lambda f: {**f, **SWAP}, "Swap", TRAILERS)
    return patch[patch.index(b"\n--- a/") + 1 :]


def _two_patches(demo, hidden: Callable[[bytes], bytes]) -> None:
    """0001 edits core.py; 0002 adds util.py, and ``hidden`` adds something to it."""
    util = make_patch(FILES, lambda f: {**f, **UTIL}, "Name", TRAILERS)
    demo.set_series(
        ("0001-greet-comma.patch", make_patch(FILES, edit_greet, "Greet with a comma", TRAILERS)),
        ("0002-util.patch", hidden(util)),
    )


def _line_of(demo, text: str) -> int:
    """The line number of ``text`` in 0002-util.patch (the last line that is ``text``)."""
    lines = (demo.patch_dir / "0002-util.patch").read_text().split("\n")
    return len(lines) - lines[::-1].index(text)


def test_a_diff_after_the_signature_is_refused(demo_project):
    """The issue's reproduction: a plain diff after the `-- ` signature, against a file 0001 touches, passed lint and
    the build applied it (add() subtracted in the wheel)."""
    _two_patches(demo_project, lambda p: p + b"-- \n2.39.5\n\n" + _plain_diff())
    n = _line_of(demo_project, "--- a/src/demo/core.py")
    assert _problems(demo_project) == [
        f"{demo_project.patch_dir / '0002-util.patch'}: malformed diff: src/demo/util.py: line {n} "
        "('--- a/src/demo/core.py') follows its last hunk: git apply reads on there and applies any diff it finds"
    ]
    with pytest.raises(PatchwheelError, match="patch series demo/1.0.0 is not valid"):
        _build(demo_project)


def test_a_signature_alone_is_accepted(demo_project):
    _two_patches(demo_project, lambda p: p + b"-- \n2.39.5\n\n")
    assert _problems(demo_project) == []


EXTRA = "+NAME = 'other'"


@pytest.mark.parametrize("how", ["hunk-too-long", "between-files", "short-hunk"])
def test_text_outside_the_counted_hunks_is_refused(demo_project, how):
    def hidden(p: bytes) -> bytes:
        if how == "hunk-too-long":  # a line the hunk header does not count
            return p + EXTRA.encode() + b"\n"
        if how == "between-files":  # a plain diff between two git sections
            two = make_patch(FILES, lambda f: {**f, **UTIL, "src/demo/more.py": b"X = 1\n"}, "Two", TRAILERS)
            at = two.index(b"diff --git a/src/demo/util.py")
            return two[:at] + _plain_diff() + two[at:]
        assert b"\n@@ -0,0 +1,3 @@\n" in p
        return p.replace(b"\n@@ -0,0 +1,3 @@\n", b"\n@@ -0,0 +1,4 @@\n")  # counts a line that is not there

    _two_patches(demo_project, hidden)
    follows = ": git apply reads on there and applies any diff it finds"
    if how == "hunk-too-long":
        said = f"src/demo/util.py: line {_line_of(demo_project, EXTRA)} ({EXTRA!r}) follows its last hunk{follows}"
    elif how == "between-files":
        n = _line_of(demo_project, "--- a/src/demo/core.py")
        said = f"src/demo/more.py: line {n} ('--- a/src/demo/core.py') follows its hunks{follows}"
    else:
        said = "src/demo/util.py: hunk #1 (@@ -0,0 +1,4 @@) has 0 old and 3 new lines where its header counts 0 and 4"
    assert _problems(demo_project) == [f"{demo_project.patch_dir / '0002-util.patch'}: malformed diff: {said}"]


def test_git_apply_must_name_the_files_lint_reads(demo_project):
    """A diff hidden where the parser does not look for one (the mail headers): `git apply --numstat` names a file
    the parser does not, and lint says so."""

    def in_headers(p: bytes) -> bytes:
        head, _, rest = p.partition(b"\n\n")
        return head + b"\n" + _plain_diff() + b"\n" + rest

    _two_patches(demo_project, in_headers)
    assert b"\n--- a/src/demo/core.py\n" in (demo_project.patch_dir / "0002-util.patch").read_bytes().split(b"\n\n")[0]
    (problem,) = _problems(demo_project)
    assert problem == (
        "0002-util.patch: git apply reads other changes than lint: git apply changes src/demo/core.py (+1 -1), "
        "src/demo/util.py (+3 -0); lint reads src/demo/util.py (+3 -0): regenerate the patch with "
        "`git format-patch` (`nox -s refresh`); a patch holds its message, then its diff, and nothing else"
    )
    with pytest.raises(PatchwheelError, match="git apply reads other changes than lint"):
        _build(demo_project)


def test_git_apply_that_cannot_read_a_patch_is_a_lint_problem(demo_project, monkeypatch):
    """Where git stops on a patch the parser takes (a disagreement too), lint says what git said."""
    _two_patches(demo_project, lambda p: p)
    monkeypatch.setattr(gitops, "numstat", lambda raw: "error: corrupt patch at line 7\nmore")
    assert _problems(demo_project) == [
        "0001-greet-comma.patch: git apply cannot read it (error: corrupt patch at line 7): regenerate it with "
        "`git format-patch`",
        "0002-util.patch: git apply cannot read it (error: corrupt patch at line 7): regenerate it with "
        "`git format-patch`",
    ]


def test_numstat_does_not_depend_on_the_folder_lint_runs_in(demo_project, tmp_path, monkeypatch):
    """Run in a subfolder of a work tree, plain `git apply --numstat` names no file at all (it leaves out paths
    outside the current folder): the check runs in a folder of its own, with the tool's git environment."""
    patch = make_patch(FILES, lambda f: {**edit_greet(f), **UTIL}, "Two files", TRAILERS)
    sub = tmp_path / "work" / "sub"
    sub.mkdir(parents=True)
    gitops.git(tmp_path / "work", "init", "-q")
    plain = subprocess.run(["git", "apply", "--numstat", "-"], cwd=sub, input=patch, capture_output=True)
    assert (plain.returncode, plain.stdout) == (0, b"")
    monkeypatch.chdir(sub)
    gitops.numstat.cache_clear()
    assert gitops.numstat(patch) == ((1, 1, "src/demo/core.py"), (3, 0, "src/demo/util.py"))
