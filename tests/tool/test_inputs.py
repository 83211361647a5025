"""Input from outside the project, on the synthetic demo package: the user's git configuration, paths and
digests from patches, wheels and the index, typos in the overlay configuration, non-ASCII patch subjects, temporary
folders, wheel file names."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest

from conftest import CORE, INIT, TRAILERS, edit_greet, make_patch, make_wheel
from patchwheel import gitops, names, series
from patchwheel.config import Artifact, BuildRecord
from patchwheel.errors import PatchwheelError
from patchwheel.maint.upstream import textcheck
from patchwheel.wheels import apply, distdir, fetch, rewrite
from patchwheel.wheels import build as build_mod

FILES = {"src/demo/core.py": CORE, "src/demo/__init__.py": INIT}


def _build(demo):
    return build_mod.build(demo.load(), demo.root / "dist", log=lambda m: None)


def _plain_git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """git as a user would run it in their shell: with their environment (HOME, XDG_CONFIG_HOME, language...)."""
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, "GIT_CEILING_DIRECTORIES": str(cwd.parent)},
        capture_output=True,
        text=True,
    )


def _user_config(tmp_path: Path, monkeypatch, text: str, where: str) -> None:
    """Install ``text`` as the user's global git configuration, in ~/.gitconfig or $XDG_CONFIG_HOME/git/config."""
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    (xdg / "git").mkdir(parents=True)
    home.mkdir()
    (home / ".gitconfig" if where == "home" else xdg / "git" / "config").write_text(text)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))


# --- 1. one git environment -------------------------------------------------------------------------------------


def test_every_git_call_gets_the_one_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'apply.ignorewhitespace'='change'")
    monkeypatch.setenv("LANGUAGE", "de")
    monkeypatch.setenv("TZ", "Europe/Berlin")
    assert apply.git_env is gitops.git_env  # mutants.py and the apply step use the same function
    env = gitops.git_env(tmp_path / "tree")
    assert not {"GIT_DIR", "GIT_CONFIG_PARAMETERS", "LANGUAGE"} & set(env)
    assert (env["GIT_CEILING_DIRECTORIES"], env["GIT_CONFIG_NOSYSTEM"], env["GIT_CONFIG_GLOBAL"]) == (
        str(tmp_path),
        "1",
        os.devnull,
    )
    assert (env["LC_ALL"], env["TZ"], env["GIT_AUTHOR_NAME"], env["GIT_COMMITTER_EMAIL"]) == (
        "C",
        "UTC",
        gitops.IDENTITY[0],
        gitops.IDENTITY[1],
    )
    rc, out = gitops.try_git(tmp_path, "config", "--list", "--show-scope")
    assert rc == 0 and out.splitlines() == [
        "command\tcore.hookspath=/dev/null",
        "command\tcore.excludesfile=/dev/null",
        "command\tcore.attributesfile=/dev/null",
        "command\tcore.fsmonitor=false",
    ]


@pytest.mark.parametrize("where", ["home", "xdg"])
def test_user_git_config_cannot_make_a_patch_apply_with_fuzz(demo_project, tmp_path, monkeypatch, where):
    # A patch made on a tree whose context line differs from the release's only in whitespace.
    base = {**FILES, "src/demo/core.py": CORE.replace(b"def add(a, b):", b"def add(a,  b):")}
    patch = make_patch(base, edit_greet, "Greet with a comma", TRAILERS)
    demo_project.set_series(("0001-greet-comma.patch", patch))
    plain = tmp_path / "plain"
    (plain / "src" / "demo").mkdir(parents=True)
    (plain / "src" / "demo" / "core.py").write_bytes(CORE)
    patch_file = demo_project.patch_dir / "0001-greet-comma.patch"
    _user_config(tmp_path, monkeypatch, "", where)
    assert _plain_git(plain, "apply", "--check", str(patch_file)).returncode != 0  # strict: it does not apply
    _user_config(tmp_path / "fuzzy", monkeypatch, "[apply]\n\tignoreWhitespace = change\n", where)
    assert _plain_git(plain, "apply", "--check", str(patch_file)).returncode == 0  # the user's config fuzzes
    with pytest.raises(
        PatchwheelError,
        match="patch does not apply to demo 1.0.0: 0001-greet-comma.patch: "
        r"src/demo/core.py: hunk #1 \(@@ -2,7 \+2,7 @@\) does not apply",
    ):
        _build(demo_project)


def test_too_old_git_is_refused(monkeypatch):
    """git before 2.32 ignores GIT_CONFIG_GLOBAL (and so would read the user's configuration) without a word."""
    real = subprocess.run

    def old_git(cmd, **kw):
        res = real(cmd, **kw)
        if cmd == ["git", "--version"]:
            res.stdout = "git version 2.30.1\n"
        return res

    gitops._check_version.cache_clear()
    monkeypatch.setattr(subprocess, "run", old_git)
    try:
        with pytest.raises(PatchwheelError, match="git version 2.30.1 is too old: patchwheel needs git 2.32 or newer"):
            gitops.git_env(Path("/tmp/tree"))
    finally:
        gitops._check_version.cache_clear()


HOOK = "#!/bin/sh\necho 'a user hook ran' >&2\nexit 1\n"


@pytest.mark.parametrize("how", ["core.hooksPath", "init.templateDir", "GIT_TEMPLATE_DIR"])
def test_user_hooks_do_not_run(tmp_path, monkeypatch, how):
    hooks = tmp_path / "template" / "hooks"
    hooks.mkdir(parents=True)
    for name in ("prepare-commit-msg", "commit-msg", "pre-commit", "post-commit", "applypatch-msg", "pre-applypatch"):
        (hooks / name).write_text(HOOK)
        (hooks / name).chmod(0o755)
    if how == "GIT_TEMPLATE_DIR":
        _user_config(tmp_path, monkeypatch, "", "home")
        monkeypatch.setenv("GIT_TEMPLATE_DIR", str(hooks.parent))
    else:
        value = hooks if how == "core.hooksPath" else hooks.parent
        section, key = how.split(".")
        _user_config(tmp_path, monkeypatch, f"[{section}]\n\t{key} = {value}\n", "home")
    plain = tmp_path / "plain"
    plain.mkdir()
    assert _plain_git(plain, "init", "-q").returncode == 0
    res = _plain_git(
        plain, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-q", "--allow-empty", "--no-verify", "-m", "x"
    )
    assert res.returncode != 0 and "a user hook ran" in res.stderr  # --no-verify does not stop them all
    repo = gitops.temp_repo(FILES)
    try:
        gitops.write_files(repo, edit_greet(dict(FILES)))
        gitops.git(repo, "add", "-A")
        gitops.commit(repo, "Greet with a comma")
        mbox = repo.parent / "0001.patch"
        mbox.write_bytes(gitops.format_patch(repo))
        gitops.git(repo, "reset", "-q", "--hard", "HEAD~1")
        gitops.am(repo, mbox)
        assert gitops.git(repo, "log", "--format=%s").decode().split("\n")[:2] == ["Greet with a comma", "pristine"]
    finally:
        shutil.rmtree(repo.parent)


def test_user_ignore_and_attributes_files_do_not_reach_temp_repositories(tmp_path, monkeypatch):
    _user_config(tmp_path, monkeypatch, "", "xdg")
    xdg = Path(os.environ["XDG_CONFIG_HOME"])
    (xdg / "git" / "ignore").write_text("*.py\n")
    (xdg / "git" / "attributes").write_text("*.py -diff\n")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "core.py").write_bytes(CORE)
    _plain_git(plain, "init", "-q")
    assert _plain_git(plain, "check-ignore", "core.py").returncode == 0  # plain git ignores it
    assert "core.py: diff: unset" in _plain_git(plain, "check-attr", "diff", "core.py").stdout
    patch = make_patch(FILES, edit_greet, "Greet with a comma", TRAILERS)
    assert b'+    return "hello, " + name' in patch and b"GIT binary patch" not in patch


def test_git_messages_are_parsed_in_english(demo_project, tmp_path, monkeypatch):
    for name in ("LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("LANGUAGE", "de")
    if _plain_git(tmp_path, "apply", "--check", "/nonexistent").stderr.startswith("error:"):
        pytest.skip("this git speaks no German here, so the language cannot be shown to matter")
    patches = series.parse_series(demo_project.load().line("demo"))
    (result,) = textcheck.classify(patches, FILES, {**FILES, "src/demo/core.py": b"# one\n# two\n" + CORE})
    assert (result.status, result.detail) == ("offset", "hunk #1 at 4 (+2)")
    hi = CORE.replace(b'"hello " + name', b'"hi " + name')
    with pytest.raises(PatchwheelError, match=r"src/demo/core.py: hunk #1 \(@@ -2,7 \+2,7 @@\) does not apply"):
        apply.apply_series(patches, lambda p: {**FILES, "src/demo/core.py": hi}.get(p), where="demo 1.0.0")


# --- 2. paths from patches, wheels and the index are input ------------------------------------------------------

EXTRA = b"ANSWER = 42\n"
UNSAFE = [
    ("src/demo/../../../evil.txt", "has a '..' component"),
    ("/etc/evil.py", "is absolute"),
    ("src/demo\\..\\evil.py", "contains a backslash"),
    ("src/demo/.git/config", "has a '.git' component"),
    ("src/demo//evil.py", "has an empty component"),
    ("src/demo/./evil.py", "has a '.' component"),
]


def _creating_patch() -> bytes:
    return make_patch(FILES, lambda f: {**f, "src/demo/extra.py": EXTRA}, "Add extra", TRAILERS)


@pytest.mark.parametrize("bad,reason", UNSAFE)
@pytest.mark.parametrize("where", ["everywhere", "diff --git"])
def test_lint_refuses_unsafe_patch_paths(demo_project, bad, reason, where):
    patch = _creating_patch()
    if where == "everywhere":
        patch = patch.replace(b"src/demo/extra.py", bad.encode())
        where = "+++"
    else:
        patch = patch.replace(
            b"diff --git a/src/demo/extra.py b/src/demo/extra.py", f"diff --git a/{bad} b/{bad}".encode()
        )
    demo_project.set_series(("0001-x.patch", patch))
    (problem,) = series.lint_line(demo_project.load().line("demo"), demo_project.root)
    assert f"0001-x.patch: path {bad!r} (its '{where}' line) {reason}" in problem, problem
    with pytest.raises(PatchwheelError, match="is not valid"):
        _build(demo_project)


def _rename_patch() -> bytes:
    def rename(files):
        return {**files, "src/demo/core.py": None, "src/demo/renamed.py": edit_greet(dict(files))["src/demo/core.py"]}

    patch = make_patch(FILES, rename, "Rename core", TRAILERS)
    assert b"rename from src/demo/core.py\nrename to src/demo/renamed.py\n" in patch
    return patch


def test_rename_headers_are_checked(demo_project):
    demo_project.set_series(("0001-x.patch", _rename_patch()))
    assert series.lint_line(demo_project.load().line("demo"), demo_project.root) == []
    evil = _rename_patch().replace(b"rename to src/demo/renamed.py", b"rename to src/demo/../../evil.py")
    demo_project.set_series(("0001-x.patch", evil))
    (problem,) = series.lint_line(demo_project.load().line("demo"), demo_project.root)
    assert "0001-x.patch: path 'src/demo/../../evil.py' (its 'rename to' line) has a '..' component" in problem
    other = _rename_patch().replace(b"rename to src/demo/renamed.py", b"rename to src/demo/other.py")
    demo_project.set_series(("0001-x.patch", other))
    (problem,) = series.lint_line(demo_project.load().line("demo"), demo_project.root)
    assert "its 'rename to' line names 'src/demo/other.py', its +++ line 'src/demo/renamed.py'" in problem


def test_diff_git_line_must_name_the_paths_of_its_section(demo_project):
    patch = _creating_patch().replace(
        b"diff --git a/src/demo/extra.py b/src/demo/extra.py", b"diff --git a/src/demo/core.py b/src/demo/core.py"
    )
    demo_project.set_series(("0001-x.patch", patch))
    (problem,) = series.lint_line(demo_project.load().line("demo"), demo_project.root)
    assert (
        "malformed diff: its 'diff --git' line names 'src/demo/core.py' and 'src/demo/core.py', its ---/+++ "
        "lines 'src/demo/extra.py' and 'src/demo/extra.py'" in problem
    ), problem


def test_wheel_path_never_leaves_the_package(demo_project):
    line = demo_project.load().line("demo")
    assert line.wheel_path("src/demo/core.py") == "demo/core.py"
    for bad, _ in UNSAFE:
        assert line.wheel_path(bad) is None, bad
    assert line.wheel_path("src/demo/../../../evil.txt") is None


def _republish(demo, files: dict[str, bytes]) -> Path:
    """Replace demo 1.0.0 on the index (and its pin) with a wheel holding ``files``."""
    whl = make_wheel(demo.upstream.parent, files)
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    (demo.index / "demo" / "index.html").write_text(
        f'<a href="../../upstream/{whl.name}#sha256={sha}">{whl.name}</a>\n'
    )
    demo.write_pins(sha)
    return whl


@pytest.mark.parametrize(
    "member,reason",
    [
        ("../evil.txt", "has a '..' component"),
        ("demo/../../evil.txt", "has a '..' component"),
        ("/tmp/evil.txt", "is absolute"),
        ("demo\\evil.txt", "contains a backslash"),
        ("demo/.git/hooks/post-checkout", "has a '.git' component"),
    ],
)
def test_upstream_wheel_with_an_unsafe_member_is_refused(demo_project, member, reason):
    whl = _republish(demo_project, {"demo/__init__.py": INIT, "demo/core.py": CORE, member: b"x"})
    with pytest.raises(PatchwheelError, match="zip slip") as err:
        rewrite.read(whl)
    assert f"{whl}: member {member!r} {reason}" in err.value.message
    with pytest.raises(PatchwheelError, match=re.escape(f"member {member!r}")):
        _build(demo_project)


@pytest.mark.parametrize("digest", ["../../../escaped", "UPPER", "short", "long"])
def test_index_digest_must_be_64_lower_case_hex_digits(demo_project, digest):
    sha = demo_project.sha256
    digest = {"UPPER": sha.upper(), "short": sha[:-1], "long": sha + "0"}.get(digest, digest)
    page = demo_project.index / "demo" / "index.html"
    page.write_text(page.read_text().replace(f"#sha256={sha}", f"#sha256={digest}"))
    with pytest.raises(PatchwheelError, match=f"lists demo-1.0.0-py3-none-any.whl with the digest 'sha256={digest}'"):
        fetch.project_links("demo")
    with pytest.raises(PatchwheelError, match="not 64 lower-case hex digits"):
        fetch.fetch("demo", Artifact(demo_project.upstream.name, sha))
    assert fetch.releases("demo") == []  # the newer-release listing skips such a link
    assert not demo_project.cache.exists()


def test_fetch_checks_the_digest_before_making_a_cache_folder(demo_project):
    page = demo_project.index / "demo" / "index.html"
    page.write_text(page.read_text().replace(f"#sha256={demo_project.sha256}", ""))  # no digest listed
    with pytest.raises(PatchwheelError, match="sha256 '../../escaped' is not 64 lower-case hex digits"):
        fetch.fetch("demo", Artifact(demo_project.upstream.name, "../../escaped"))
    assert not (demo_project.cache.parent / "escaped").exists() and not demo_project.cache.exists()


def test_fetch_checks_the_file_name_before_making_a_cache_path(demo_project):
    name = "../" + demo_project.upstream.name
    page = demo_project.index / "demo" / "index.html"  # an index that lists the file under that name
    page.write_text(
        page.read_text() + f'<a href="../../upstream/{demo_project.upstream.name}'
        f'#sha256={demo_project.sha256}">{name}</a>\n'
    )
    with pytest.raises(PatchwheelError, match=f"file name {name!r} is not a plain file name"):
        fetch.fetch("demo", Artifact(name, demo_project.sha256))
    assert not demo_project.cache.exists()


@pytest.mark.parametrize(
    "filename",
    ["../demo-1.0.0-py3-none-any.whl", "sub/demo-1.0.0-py3-none-any.whl", "sub\\demo-1.0.0-py3-none-any.whl"],
)
def test_pinned_file_name_must_be_a_plain_file_name(demo_project, filename):
    pins = demo_project.root / "overlay" / "demo" / "pins.toml"
    pins.write_text(pins.read_text().replace(demo_project.upstream.name, filename.replace("\\", "\\\\")))
    with pytest.raises(PatchwheelError, match="is not a plain file name"):
        demo_project.load()


def test_pinned_wheel_name_must_be_a_wheel_file_name(demo_project):
    pins = demo_project.root / "overlay" / "demo" / "pins.toml"
    pins.write_text(pins.read_text().replace(demo_project.upstream.name, "demo-1.0.0-py3-none.whl"))
    with pytest.raises(PatchwheelError, match="'demo-1.0.0-py3-none.whl' is not a valid wheel file name"):
        demo_project.load()


# --- 3. typos in the overlay configuration ----------------------------------------------------------------------


def test_unknown_pins_key_is_refused_with_a_suggestion(demo_project):
    pins = demo_project.root / "overlay" / "demo" / "pins.toml"
    pins.write_text(pins.read_text().replace('local-label = "fixed"', 'local_label = "fixed.2"'))
    with pytest.raises(PatchwheelError) as err:
        demo_project.load()
    assert err.value.message == (
        f"{pins}: unknown key 'local_label' (did you mean 'local-label'?); known keys: "
        "package, local-label, import-name, source-root, release, retired"
    )
    pins.write_text('colour = "blue"\n' + pins.read_text().replace("local_label", "local-label"))
    with pytest.raises(PatchwheelError, match=r"unknown key 'colour'; known keys: package, local-label"):
        demo_project.load()


def test_unknown_release_key_is_refused_with_a_suggestion(demo_project):
    pins = demo_project.root / "overlay" / "demo" / "pins.toml"
    pins.write_text(pins.read_text() + 'sdsit = { filename = "demo-1.0.0.tar.gz", sha256 = "' + "0" * 64 + '" }\n')
    with pytest.raises(
        PatchwheelError,
        match=r"release '1.0.0': unknown key 'sdsit' \(did you mean 'sdist'\?\); "
        "known keys: wheel, sdist",
    ):
        demo_project.load()


def test_unknown_sets_key_is_refused_with_a_suggestion(demo_project):
    sets = demo_project.root / "overlay" / "sets.toml"
    sets.write_text('[sets.default]\ndemo = "1.0.0"\n')
    with pytest.raises(PatchwheelError) as err:
        demo_project.load()
    assert err.value.message == f"{sets}: unknown key 'sets' (did you mean 'set'?); known keys: set, suite, torch"
    sets.write_text('set = "default"\n')
    with pytest.raises(PatchwheelError, match=r"sets.toml: 'set' must be a table of sets"):
        demo_project.load()


@pytest.mark.parametrize("name", ["../evil", "a/b", ".hidden", ""])
def test_a_set_name_must_be_a_plain_file_name_part(demo_project, name):
    """A set names dist/pins-<name>.txt: a name with a path in it would write outside dist/."""
    sets = demo_project.root / "overlay" / "sets.toml"
    sets.write_text(f'[set."{name}"]\ndemo = "1.0.0"\n')
    with pytest.raises(PatchwheelError, match=r"is not a plain name"):
        demo_project.load()
    sets.write_text('[set."v1.0"]\ndemo = "1.0.0"\n')
    assert demo_project.load().sets == {"v1.0": {"demo": "1.0.0"}}


# --- 4. non-ASCII subjects ---------------------------------------------------------------------------------------

SUBJECT = "Grüße aus Köln: greet with a comma, über a subject long enough that git folds its header line"


def test_non_ascii_subject_is_decoded(demo_project):
    patch = make_patch(FILES, edit_greet, SUBJECT, TRAILERS)
    assert b"Subject: =?UTF-8?q?Gr=C3=BC=C3=9Fe" in patch and b"\n =?UTF-8?q?" in patch  # encoded and folded
    demo_project.set_series(("0001-greet-comma.patch", patch))
    (parsed,) = series.parse_series(demo_project.load().line("demo"))
    assert parsed.subject == SUBJECT
    (carried,) = textcheck.classify([parsed], FILES, FILES)  # git am + format-patch (LC_ALL=C) keep the bytes
    assert (carried.status, carried.rebased) == ("clean", patch)
    (built,) = _build(demo_project)
    manifest = distdir.wheel_manifest(demo_project.root / "dist" / built.filename)
    assert manifest["patches"][0]["subject"] == SUBJECT


# --- 5. temporary folders ----------------------------------------------------------------------------------------


def test_scratch_tree_that_fails_leaves_nothing(scratch_temp):
    inside_a_repo = {".git/HEAD": b"ref: refs/heads/main\n", ".git/objects/.keep": b"", ".git/refs/.keep": b""}
    with pytest.raises(PatchwheelError, match="is inside a git work tree"):
        apply.ApplyTree(inside_a_repo)
    assert list(scratch_temp.iterdir()) == []


def test_temp_repo_that_fails_leaves_nothing(scratch_temp):
    with pytest.raises(PatchwheelError, match="git add -A failed"):
        gitops.temp_repo({".git/index": b"not an index"})
    assert list(scratch_temp.iterdir()) == []


# --- 6. wheel file names -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("filename", ["demo1.0.0.whl", "demo-1.0.0-py3-none.whl", "demo-1.0.0-py3-none-any.zip"])
def test_wheel_names_refuse_what_is_not_a_wheel_file_name(demo_project, filename):
    line = dataclasses.replace(demo_project.load().line("demo"), wheel=Artifact(filename, demo_project.sha256))
    with pytest.raises(PatchwheelError, match=f"'{filename}' is not a valid wheel file name"):
        rewrite.wheel_names(line)


def test_wheel_names_keep_upstreams_tags_and_carry_our_build_tag(demo_project):
    """Upstream's build tag numbers upstream's builds: ours replaces it (none without a build record), or a build 2
    of ours would sort below upstream's 7."""
    line = dataclasses.replace(
        demo_project.load().line("demo"), wheel=Artifact("demo-1.0.0-7-py2.py3-none-any.whl", "0"), build=None
    )
    names = rewrite.wheel_names(line)
    assert names == rewrite.WheelNames(
        "demo", "demo-1.0.0.dist-info", "demo-1.0.0+fixed.dist-info", "demo-1.0.0+fixed-py2.py3-none-any.whl"
    )
    third = dataclasses.replace(line, build=BuildRecord(3, "0" * 64))
    assert rewrite.wheel_names(third).filename == "demo-1.0.0+fixed-3_000000000000-py2.py3-none-any.whl"
    with pytest.raises(PatchwheelError, match="is not version 1.0.0"):
        rewrite.wheel_names(dataclasses.replace(line, wheel=Artifact("demo-1.0.1-py3-none-any.whl", "0")))


# --- values matched whole: a `$` matches before a final newline, which reached file names and METADATA ----------


@pytest.mark.parametrize("label", ["fixed\n", "fixed\r", "\nfixed", "fix ed", "fixed.\n2"])
def test_a_local_label_with_a_newline_or_space_is_refused(demo_project, label):
    pins = demo_project.root / "overlay" / "demo" / "pins.toml"
    pins.write_text(pins.read_text().replace('local-label = "fixed"', f"local-label = {json.dumps(label)}"))
    with pytest.raises(PatchwheelError, match="is not a PEP 440 local label"):
        demo_project.load()


def test_a_pinned_sha256_with_a_final_newline_is_refused(demo_project):
    pins = demo_project.root / "overlay" / "demo" / "pins.toml"
    pins.write_text(pins.read_text().replace(f'"{demo_project.sha256}"', json.dumps(demo_project.sha256 + "\n")))
    with pytest.raises(PatchwheelError, match="is not 64 hex digits"):
        demo_project.load()


@pytest.mark.parametrize(
    "pattern, value",
    [
        (names.SHA256, "0" * 64 + "\n"),
        (series.SLUG, "greet\n"),
        (series.PATCH_NAME, "0001-greet.patch\n"),
    ],
)
def test_validating_patterns_do_not_take_a_final_newline(pattern, value):
    assert pattern.match(value) is None and pattern.match(value.strip()) is not None


def test_no_pattern_in_the_tool_ends_with_a_dollar_that_takes_a_newline():
    """`$` (without re.M) also matches before a final newline: a pattern that validates input ends with `\\Z`."""
    found = []
    for path in sorted((Path(series.__file__).parent).rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"""re\.(compile|match|fullmatch|search)\(r?["'][^"']*\$["']""", line) and "re.M" not in line:
                found.append(f"{path.name}:{n}: {line.strip()}")
    assert found == []


# --- bounded decompression: a wheel whose digest matches the index may still hold a zip bomb ------------------------


def _lie_about_size(whl: Path, member: str, declared: int) -> None:
    """Rewrite the uncompressed size a member declares, in its local header and its central directory entry, as a
    crafted bomb does."""
    data = bytearray(whl.read_bytes())
    with zipfile.ZipFile(whl) as zf:
        offset = zf.getinfo(member).header_offset
    struct.pack_into("<I", data, offset + 22, declared)  # local header: uncompressed size
    at = data.find(b"PK\x01\x02")
    while data[at + 46 : at + 46 + struct.unpack_from("<H", data, at + 28)[0]] != member.encode():
        at = data.find(b"PK\x01\x02", at + 46)
    struct.pack_into("<I", data, at + 24, declared)  # central directory: uncompressed size
    whl.write_bytes(bytes(data))


def test_a_member_over_the_size_limit_is_refused_before_it_is_inflated(demo_project, monkeypatch):
    whl = _republish(demo_project, {"demo/__init__.py": INIT, "demo/core.py": CORE, "demo/big.bin": b"\0" * 4096})
    monkeypatch.setattr(rewrite, "MAX_MEMBER_SIZE", 1024)
    inflated = []

    def inflate(*args):
        inflated.append(args)
        return b""

    monkeypatch.setattr(rewrite, "_inflate", inflate)
    with pytest.raises(PatchwheelError) as err:
        rewrite.read(whl)
    assert err.value.message == (
        f"{whl}: demo/big.bin declares 4096 bytes uncompressed, over the limit of 1024 bytes for one member"
    )
    assert all(a[1].filename != "demo/big.bin" for a in inflated)


def test_members_over_the_total_size_limit_are_refused(demo_project, monkeypatch):
    whl = _republish(demo_project, {"demo/__init__.py": INIT, "demo/core.py": CORE, "demo/big.bin": b"\0" * 4096})
    monkeypatch.setattr(rewrite, "MAX_TOTAL_SIZE", 4096)
    with pytest.raises(
        PatchwheelError,
        match=r"its members declare \d+ bytes uncompressed in all, over the limit of "
        r"4096 bytes",
    ):
        rewrite.read(whl)


def test_a_member_that_inflates_past_its_declared_size_stops_there(demo_project, monkeypatch):
    """The bomb lies: it declares 100 bytes and inflates to 1 MiB. Inflating stops one byte past the declared size."""
    whl = _republish(demo_project, {"demo/__init__.py": INIT, "demo/core.py": CORE, "demo/big.bin": b"\0" * (1 << 20)})
    _lie_about_size(whl, "demo/big.bin", 100)
    with pytest.raises(PatchwheelError) as err:
        rewrite.read(whl)
    assert err.value.message == f"{whl}: demo/big.bin inflates to more than the 100 bytes it declares"
