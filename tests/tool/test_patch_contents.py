"""What a patch may hold, and what the tool reads back from the trees it applies patches to (issue 25, items 2 and
3): no symbolic link, submodule or file mode reaches a tree; no file outside a scratch tree is read; and what lint
reads of a patch is exactly what ``git apply`` applies."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from patchwheel import apply, gitops, patches, vendored
from patchwheel import build as build_mod
from patchwheel.errors import PatchwheelError

from conftest import CORE, INIT, TRAILERS, edit_greet, make_patch

FILES = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}
SECRET = b"the contents of a file outside the project\n"


def _problems(demo) -> list[str]:
    return patches.lint_line(demo.load().line("demo"), demo.root)


def _build(demo):
    return build_mod.build(demo.load(), demo.root / "dist", log=lambda m: None)


def _git_patch(change: Callable[[Path], None], subject: str = "Change it") -> bytes:
    """A real format-patch of what ``change`` does to a repository holding FILES (links and modes included)."""
    repo = gitops.scratch_repo(FILES)
    try:
        change(repo)
        gitops.git(repo, "add", "-A")
        body = "\n".join(f"{k}: {v}" for k, v in TRAILERS.items())
        gitops.commit(repo, f"{subject}\n\nWhy the change is needed.\n\n{body}\n")
        return gitops.format_patch(repo)
    finally:
        shutil.rmtree(repo.parent)


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
    overlay = demo_project.root / "overlay"
    assert not any(SECRET in p.read_bytes() for p in overlay.rglob("*") if p.is_file() and not p.is_symlink())
    assert not (overlay / "demo" / "1.0.0" / "demo" / "link.py").exists()


@pytest.mark.parametrize("where", ["file", "folder"])
def test_a_scratch_tree_is_read_without_following_links(tmp_path, where):
    """However a link got into a scratch tree, reading the tree back never reads what it points to."""
    outside = tmp_path / "outside"
    (outside / "demo").mkdir(parents=True)
    (outside / "secret").write_bytes(SECRET)
    (outside / "demo" / "core.py").write_bytes(SECRET)
    with apply.ScratchTree(FILES) as tree:
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
            "file": "src/demo/core.py in the scratch tree is a symbolic link: refusing to read through it",
            "folder": "src/demo in the scratch tree is a symbolic link: refusing to read src/demo/core.py through it",
        }[where]
    )
    assert "a patch may only create regular files" in err.value.hint


def test_a_scratch_tree_reads_files_and_absent_files(tmp_path):
    with apply.ScratchTree(FILES) as tree:
        os.mkfifo(tree.root / "src" / "demo" / "fifo.py")
        got = tree.read(["src/demo/core.py", "src/demo/missing.py", "src/demo/core.py/under-a-file", "src"])
        assert got == {
            "src/demo/core.py": CORE,
            "src/demo/missing.py": None,
            "src/demo/core.py/under-a-file": None,
            "src": None,
        }
        with pytest.raises(PatchwheelError, match="src/demo/fifo.py in the scratch tree is not a regular file"):
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
    assert not module.is_symlink() and vendored.check(demo_project.load()) == []
