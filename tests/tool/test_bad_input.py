"""Bad input, generated: malformed patches, series, pins and wheels thrown at `lint` and `build`.

Every example runs the command line in-process on a fresh copy of the demo project whose dist/ holds a good
build. Whatever hypothesis generates, the tool must either accept it (the input happened to be valid) or stop with
a clear error: exit status 1 (lint) or 2, the first line of stderr ``error: ...`` (lint: ``FAILED`` with its
problems), no Python traceback, and dist/ exactly as it was.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from conftest import CORE, INIT, make_wheel, run_cli
from patchwheel.wheels import staging

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Path components that must never reach the file system, and ordinary ones.
#: Components no path from a patch or a wheel may have: the tool must refuse them, not just survive them.
FORBIDDEN = ["..", ".git", "", ".", "/etc/passwd", "C:\\x", "a\\b"]
NASTY = st.sampled_from(FORBIDDEN + ["~", " "])
PLAIN = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=8)
PATHS = st.lists(st.one_of(NASTY, PLAIN), min_size=1, max_size=5).map("/".join)


def forbidden(path: str) -> bool:
    return path.startswith("/") or "\\" in path or "\x00" in path or any(c in FORBIDDEN for c in path.split("/"))


TEXT = st.text(max_size=40)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


_run = run_cli


@pytest.fixture
def good(demo_project):
    """The demo project with a good build in its dist/."""
    rc, _, err = _run("--root", str(demo_project.root), "build")
    assert rc == 0, err
    return demo_project


def _check(demo, mutate: Callable[[Path], bool | str | None]) -> None:
    """Copy the project, let ``mutate`` break it, then lint and build: accepted, or a clear error. When ``mutate``
    returns True the input is one the tool must refuse (a path leaving its tree): then both must fail ("build": only
    the build, which is what opens wheels)."""
    with tempfile.TemporaryDirectory(prefix="bad-input-") as tmp:
        root = Path(tmp) / "project"
        shutil.copytree(demo.root, root, symlinks=True)
        before = _snapshot(root / "dist")
        must_fail = mutate(root)
        for argv in (["lint"], ["build"]):
            if argv == ["lint"] and must_fail == "build":
                continue
            rc, out, err = _run("--root", str(root), *argv)
            note(f"{argv}: rc={rc}\nstdout: {out}\nstderr: {err}")
            assert "Traceback" not in out + err
            if rc == 0:
                assert not must_fail, f"{argv} accepted an input it must refuse"
                continue
            if argv == ["lint"] and rc == 1:
                assert "FAILED" in out and "\n  - " in out, out
                continue
            assert rc == 2, (rc, err)
            first = err.splitlines()[0] if err else ""
            assert first.startswith("error: ") and len(first) > len("error: ") + 10, err
            assert _snapshot(root / "dist") == before, "dist/ changed although the build failed"


def _patch_file(root: Path) -> Path:
    return root / "patches" / "demo" / "1.0.0" / "0001-greet-comma.patch"


@SETTINGS
@given(data=st.data())
def test_malformed_patches(good, data):
    def mutate(root: Path) -> bool:
        path = _patch_file(root)
        lines = path.read_bytes().split(b"\n")
        how = data.draw(
            st.sampled_from(["truncate", "replace-line", "insert", "header-path", "diff-path", "hunk-header", "bytes"])
        )
        note(how)
        if how == "truncate":
            lines = lines[: data.draw(st.integers(0, len(lines) - 1))]
        elif how == "replace-line":
            lines[data.draw(st.integers(0, len(lines) - 1))] = data.draw(TEXT).encode("utf-8", "surrogatepass")
        elif how == "insert":
            lines.insert(data.draw(st.integers(0, len(lines))), data.draw(TEXT).encode("utf-8", "surrogatepass"))
        elif how in ("header-path", "diff-path"):
            bad = "src/demo/" + data.draw(PATHS)
            prefix = (b"--- a/", b"+++ b/") if how == "header-path" else (b"diff --git ",)
            for i, line in enumerate(lines):
                if line.startswith(prefix):
                    lines[i] = (
                        (line[:6] + bad.encode()) if how == "header-path" else f"diff --git a/{bad} b/{bad}".encode()
                    )
        elif how == "hunk-header":
            for i, line in enumerate(lines):
                if line.startswith(b"@@ "):
                    a, b = data.draw(st.integers(0, 99)), data.draw(st.integers(0, 99))
                    lines[i] = f"@@ -{a},{b} +{b},{a} @@".encode()
        else:
            lines = [data.draw(st.binary(max_size=200))]
        path.write_bytes(b"\n".join(lines))
        return how in ("header-path", "diff-path") and forbidden(bad)

    _check(good, mutate)


@SETTINGS
@given(
    entries=st.lists(st.one_of(PLAIN, NASTY, st.just("0001-greet-comma.patch"), st.just("# comment"), TEXT), max_size=4)
)
def test_malformed_series(good, entries):
    def mutate(root: Path) -> None:
        series = root / "patches" / "demo" / "1.0.0" / "series"
        series.write_text("".join(f"{e}\n" for e in entries), errors="surrogatepass")

    _check(good, mutate)


PINS_KEYS = st.sampled_from(
    [
        "package",
        "local-label",
        "local_label",
        "import-name",
        "source-root",
        "release",
        "wheel",
        "sdist",
        "filename",
        "sha256",
        "build",
        "number",
        "series",
        "bogus",
    ]
)
PINS_VALUES = st.one_of(
    TEXT.map(lambda s: '"' + s.replace("\\", "").replace('"', "") + '"'),
    st.integers(-5, 5).map(str),
    st.sampled_from(
        [
            '"demo"',
            '"fixed"',
            '"1.0.0"',
            '{ filename = "x", sha256 = "y" }',
            "[]",
            '"../evil.whl"',
            '"' + "a" * 64 + '"',
            "{}",
            '{ number = 2, inputs = "' + "a" * 64 + '" }',
            '{ number = 0, inputs = "x" }',
            '{ number = 2.5, inputs = "' + "a" * 64 + '" }',
            "{ number = 1 }",
            "true",
        ]
    ),
)


@SETTINGS
@given(data=st.data())
def test_malformed_pins(good, data):
    def mutate(root: Path) -> None:
        pins = root / "overlay" / "demo" / "pins.toml"
        lines = pins.read_text().splitlines()
        how = data.draw(st.sampled_from(["set-key", "drop-line", "garbage", "sets"]))
        note(how)
        if how == "set-key":
            lines.insert(data.draw(st.integers(0, len(lines))), f"{data.draw(PINS_KEYS)} = {data.draw(PINS_VALUES)}")
        elif how == "drop-line":
            del lines[data.draw(st.integers(0, len(lines) - 1))]
        elif how == "garbage":
            lines[data.draw(st.integers(0, len(lines) - 1))] = data.draw(TEXT)
        else:
            (root / "overlay" / "sets.toml").write_text(
                f"[set.{data.draw(st.sampled_from(['default', 'x', '']))}]\n"
                f"{data.draw(PINS_KEYS)} = {data.draw(PINS_VALUES)}\n"
            )
            return
        pins.write_text("\n".join(lines) + "\n", errors="surrogatepass")

    _check(good, mutate)


@SETTINGS
@given(data=st.data())
def test_malformed_wheels(good, data):
    """A pinned upstream wheel that is damaged or hostile (the pin and the index agree on its sha256)."""

    def mutate(root: Path) -> str | None:
        how = data.draw(st.sampled_from(["truncated", "zip-slip", "no-metadata", "random"]))
        note(how)
        work = Path(tempfile.mkdtemp(prefix="bad-wheel-", dir=root))
        files = {"demo/__init__.py": INIT, "demo/core.py": CORE}
        if how == "zip-slip":  # (zipfile cuts a name at NUL, so none here)
            slip = data.draw(PATHS.filter(lambda p: p not in files and "\x00" not in p and forbidden(p)))
            files[slip] = b"x"
        whl = make_wheel(work, files, version="1.0.0")
        raw = whl.read_bytes()
        if how == "truncated":
            raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
        elif how == "no-metadata":
            raw = raw.replace(b"METADATA", b"METADATX")
        elif how == "random":
            raw = data.draw(st.binary(max_size=300))
        whl.write_bytes(raw)
        sha = hashlib.sha256(raw).hexdigest()
        page = good.index / "demo" / "index.html"
        page.write_text(f'<a href="{whl.as_uri()}#sha256={sha}">{whl.name}</a>\n')
        pins = root / "overlay" / "demo" / "pins.toml"
        pins.write_text(pins.read_text().replace(good.sha256, sha))
        return "build" if how == "zip-slip" else None  # (lint does not open wheels)

    original = (good.index / "demo" / "index.html").read_text()
    try:
        _check(good, mutate)
    finally:
        (good.index / "demo" / "index.html").write_text(original)


@SETTINGS
@given(data=st.data())
def test_links_modes_and_hidden_diffs(good, data):
    """A file mode other than 100644 (a link, a submodule, an executable, a mode change), and a diff where
    the parser does not read one (after the hunks, after a signature, in the mail headers) are refused by lint and
    the build, whatever the mode and wherever the diff."""

    def mutate(root: Path) -> bool:
        path = _patch_file(root)
        raw = path.read_bytes()
        section = raw[raw.index(b"\ndiff --git ") + 1 :]
        git_line, after_git_line = section.split(b"\n", 1)
        diff = section[section.index(b"\n--- a/") + 1 :]  # the section without its git headers: a plain diff
        how = data.draw(st.sampled_from(["mode", "mode-change", "after-hunks", "after-signature", "in-headers"]))
        mode = data.draw(st.sampled_from(["120000", "160000", "100755", "100600", "040000"]))
        text = data.draw(st.lists(st.sampled_from([b"", b"some text", b"-- ", b"2.39.5"]), max_size=3))
        hidden = b"".join(t + b"\n" for t in text) + diff
        note(f"{how} {mode} {text}")
        if how == "mode":
            header = data.draw(st.sampled_from([b"new file mode ", b"deleted file mode ", b"index-line"]))
            if header == b"index-line":
                raw = re.sub(rb"(\nindex [0-9a-f]+\.\.[0-9a-f]+) 100644\n", rb"\1 " + mode.encode() + b"\n", raw)
            else:
                raw = raw.replace(section, git_line + b"\n" + header + mode.encode() + b"\n" + after_git_line)
        elif how == "mode-change":
            change = b"old mode 100644\nnew mode " + mode.encode() + b"\n"
            raw = raw.replace(section, git_line + b"\n" + change + after_git_line)
        elif how == "after-hunks":
            raw += hidden
        elif how == "after-signature":
            raw += b"-- \n2.39.5\n\n" + hidden
        else:
            head, _, rest = raw.partition(b"\n\n")
            raw = head + b"\n" + hidden + b"\n" + rest
        path.write_bytes(raw)
        return True

    _check(good, mutate)


DIST_CASES = [
    "file system root",
    "project root",
    "above the project root",
    "home",
    "above home",
    "not made by the tool",
    "the tool's, with more in it",
    "the tool's, build.json damaged",
]


def _tree(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in sorted(folder.rglob("*"))}


@SETTINGS
@given(
    case=st.sampled_from(DIST_CASES),
    clean=st.booleans(),
    entries=st.lists(st.tuples(PLAIN, st.booleans()), min_size=1, max_size=3, unique_by=lambda e: e[0]),
    raw=st.one_of(st.integers(0, 500), st.binary(max_size=60)),
)
def test_dist_that_must_not_be_replaced(good, monkeypatch, case, clean, entries, raw):
    """A --dist whose replacement would lose what the tool did not make: `/`, the project root, the home
    folder or a folder above them, a folder of someone's files, the tool's dist/ with more put into it or with a
    damaged build.json. With or without --clean: exit status 2, one `error:` and one `fix:` line, and nothing
    changed or made anywhere. Every refusal comes before the lock of dist/ is taken, so reaching it fails the test
    (and keeps `/` safe whatever the code does)."""

    def never(*args, **kwargs):
        raise AssertionError(f"the build went on with --dist {case}")

    monkeypatch.setattr(staging, "exclusive", never)
    with tempfile.TemporaryDirectory(prefix="bad-dist-") as tmp:
        base = Path(tmp)
        root = base / "project"
        shutil.copytree(good.root, root, symlinks=True)
        home = base / "users" / "me"
        home.mkdir(parents=True)
        (home / ".profile").write_text("mine")
        monkeypatch.setenv("HOME", str(home))
        dist = {
            "file system root": Path("/"),
            "project root": root,
            "above the project root": base,
            "home": home,
            "above home": home.parent,
            "not made by the tool": base / "mine",
        }.get(case, root / "dist")
        # Files and empty folders of someone's: letters and digits (and .txt), no name a build writes.
        for name, nested in entries:
            if case == "not made by the tool":
                dist.mkdir(exist_ok=True)
                if nested:
                    (dist / name).mkdir()
                else:
                    (dist / name).write_text(name)
            elif case == "the tool's, with more in it":
                (dist / "simple" / name if nested else dist / f"{name}.txt").write_text(name)
        if case == "the tool's, build.json damaged":
            manifest = dist / "build.json"
            data = manifest.read_bytes()
            manifest.write_bytes(data[: raw % len(data)] if isinstance(raw, int) else raw)
        note(f"--dist {dist}, clean={clean}")
        before = _tree(base)
        rc, out, err = _run("--root", str(root), "build", "--dist", str(dist), *(["--clean"] if clean else []))
        note(f"rc={rc}\nstdout: {out}\nstderr: {err}")
        assert rc == 2 and "Traceback" not in out + err
        first, fix = err.splitlines()
        assert first.startswith("error: ") and fix.startswith("  fix: "), err
        said = {
            "file system root": "error: --dist / is the file system root: ",
            "project root": f"error: --dist {root} is the project root: ",
            "above the project root": f"error: --dist {base} holds the project root ({root}): ",
            "home": f"error: --dist {home} is your home folder: ",
            "above home": f"error: --dist {home.parent} holds your home folder ({home}): ",
            "not made by the tool": f"error: {dist} exists and was not made by patchwheel (no build.json); it holds ",
            "the tool's, with more in it": f"error: {dist} holds what no build wrote: ",
            "the tool's, build.json damaged": f"error: {dist}/build.json is damaged: ",
        }[case]
        assert first.startswith(said), err
        assert "--clean" not in fix, "the hint must not send the user to --clean, which replaces the folder"
        assert _tree(base) == before


# What the index links, what an interpreter prints for `status`, what a manifest names.

LINKS = st.sampled_from(["relative", "file", "dev-zero", "unreachable", "data", "ftp", "javascript", "mailto", "text"])


@SETTINGS
@given(kind=LINKS, text=TEXT)
def test_hostile_index_links(good, monkeypatch, kind, text):
    """The index page links the pinned wheel to anything: only http(s) and (from an index on disk) file links are
    downloaded, and no more than the size the server states. Each example has an empty cache, so the link is used."""
    whl = good.upstream
    href = {
        "relative": f"../../upstream/{whl.name}",
        "file": whl.as_uri(),
        "dev-zero": "file:///dev/zero",
        "unreachable": f"http://127.0.0.1:9/{whl.name}",  # port 9: nothing listens
        "data": "data:application/octet-stream;base64,AAAA",
        "ftp": f"ftp://127.0.0.1:9/{whl.name}",
        "javascript": "javascript:alert(1)",
        "mailto": "mailto:x@example.com",
        "text": text.replace('"', "").replace("#", ""),
    }[kind]
    note(f"href={href!r}")

    def mutate(root: Path) -> str | None:
        monkeypatch.setenv("PATCHWHEEL_CACHE", str(root / "empty-cache"))
        page = good.index / "demo" / "index.html"
        page.write_text(f'<a href="{href}#sha256={good.sha256}">{whl.name}</a>\n')
        return "build" if kind not in ("relative", "file", "text") else None

    original = (good.index / "demo" / "index.html").read_text()
    try:
        _check(good, mutate)
    finally:
        (good.index / "demo" / "index.html").write_text(original)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
FIELDS = ["python", "packages", "package", "installed", "version", "fixed", "problems", "patches", "upstream"]


def _valid_report() -> dict:
    patch = {"name": "0001-x.patch", "subject": "X", "upstream_status": "Pending", "upstream_issue": "https://x/1"}
    fixed = {"installed": True, "version": "1.0.0+fixed", "fixed": True, "patches": [patch], "problems": []}
    return {
        "python": "/x/bin/python",
        "packages": [
            {"package": "transformers", "installed": False},
            {"package": "accelerate", "installed": True, "version": "1.15.0", "fixed": False, "patches": []},
            {"package": "demo", **fixed, "upstream": {"version": "1.0.0", "sha256": "ab" * 32}},
        ],
    }


def _damage(value, data, depth=0):
    """``value`` with one field somewhere dropped or replaced by any JSON value."""
    if isinstance(value, dict) and value and (depth > 3 or data.draw(st.booleans())):
        key = data.draw(st.sampled_from(sorted(value)))
        if data.draw(st.booleans()):
            return {k: v for k, v in value.items() if k != key}
        if isinstance(value[key], (dict, list)) and data.draw(st.booleans()):
            return {**value, key: _damage(value[key], data, depth + 1)}
        return {**value, key: data.draw(JSON)}
    if isinstance(value, list) and value:
        i = data.draw(st.integers(0, len(value) - 1))
        return [*value[:i], _damage(value[i], data, depth + 1), *value[i + 1 :]]
    return data.draw(JSON) if not isinstance(value, dict) else {**value, data.draw(st.sampled_from(FIELDS)): None}


@SETTINGS
@given(data=st.data())
def test_unexpected_status_reports(good, data):
    """Whatever the interpreter named by --python prints, `status` ends with a report (exit 0 or 1) or with one error
    (exit 2: `error:` and `fix:`), never a traceback: exit 1 would say that a known bug applies."""
    how = data.draw(st.sampled_from(["damaged", "any-json", "text", "bytes"]))
    if how == "damaged":
        printed = json.dumps(_damage(_valid_report(), data)).encode()
    elif how == "any-json":
        printed = json.dumps(data.draw(JSON)).encode()
    elif how == "text":
        printed = data.draw(TEXT).encode()
    else:  # not UTF-8: b"\xff{}" ended in a UnicodeDecodeError traceback
        printed = data.draw(st.binary(max_size=20))
    note(f"printed: {printed!r}")
    with tempfile.TemporaryDirectory(prefix="bad-status-") as tmp:
        out_file = Path(tmp) / "out"
        out_file.write_bytes(printed)
        fake = Path(tmp) / "python"
        fake.write_text(f"#!/bin/sh\ncat '{out_file}'\n")
        fake.chmod(0o755)
        rc, out, err = _run("--root", str(good.root), "status", "--python", str(fake))
    note(f"rc={rc}\nstdout: {out}\nstderr: {err}")
    assert "Traceback" not in out + err
    if rc == 2:
        first, fix = err.splitlines()
        assert out == "" and first.startswith(f"error: {fake} ") and fix.startswith("  fix: "), err
    else:
        assert rc in (0, 1) and err == "" and out.startswith("environment: "), (rc, out, err)


@SETTINGS
@given(paths=st.lists(PATHS, min_size=1, max_size=3))
def test_manifest_paths(good, monkeypatch, paths):
    """A +fixed build whose manifest names any paths: a path that could leave the site folder is a problem (exit 1,
    DAMAGED) and is not read. (`status` on this interpreter, the build's wheel unpacked on its sys.path.)"""
    with tempfile.TemporaryDirectory(prefix="bad-manifest-") as tmp:
        site = Path(tmp) / "site"
        (wheel,) = (good.root / "dist").glob("demo-1.0.0+fixed-*.whl")
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(site)
        manifest = site / "demo-1.0.0+fixed.dist-info" / "overlay-fixes.json"
        m = json.loads(manifest.read_text())
        m["patched_files"].update({p: "0" * 64 for p in paths})
        manifest.write_text(json.dumps(m))
        monkeypatch.syspath_prepend(str(site))
        rc, out, err = _run("--root", str(good.root), "status")
    note(f"rc={rc}\nstdout: {out}\nstderr: {err}")
    assert "Traceback" not in out + err and err == ""
    assert rc == 1 and "DAMAGED" in out, out  # none of them has the digest 000…
    for path in paths:
        refused = f"problem: the manifest names {path!r}, not a plain relative path: not read"
        unsafe = path.startswith("/") or "\\" in path or any(c in ("", ".", "..") for c in path.split("/"))
        assert (refused in out) == unsafe, (path, out)


# --- values matched whole (issue: `$` took a final newline), generated ---------------------------------------------

LABEL_CHARS = st.sampled_from(list("abcz09.-_ +\n\r\t\x00Aé"))


@SETTINGS
@given(label=st.text(LABEL_CHARS, max_size=12))
def test_local_labels(good, label):
    """Any local-label: accepted only when it is a whole PEP 440 local label, and then the wheel's version is
    exactly `<version>+<label>`; otherwise a clear error (lint and build)."""
    from packaging.version import Version

    def mutate(root: Path) -> bool:
        pins = root / "overlay" / "demo" / "pins.toml"
        pins.write_text(pins.read_text().replace('local-label = "fixed"', f"local-label = {json.dumps(label)}"))
        return re.fullmatch(r"[a-z0-9]+(?:\.[a-z0-9]+)*", label) is None

    _check(good, mutate)
    if re.fullmatch(r"[a-z0-9]+(?:\.[a-z0-9]+)*", label):
        assert str(Version(f"1.0.0+{label}")) == f"1.0.0+{label}"


@SETTINGS
@given(slug=st.text(st.sampled_from(list("ab09.-_/ \nP")), max_size=14))
def test_slugs(slug):
    """A slug `new` takes: lower-case letters, digits, '.' and '-', starting with a letter or digit, whole; never a
    patch's number or file name, which `refresh` would take for that patch."""
    from patchwheel.series import SLUG

    accepted = SLUG.match(slug) is not None
    plain = re.fullmatch(r"[a-z0-9][a-z0-9.-]*", slug) is not None
    patchlike = re.match(r"\d{4}(-|$)", slug) is not None or slug.endswith(".patch")
    assert accepted == (plain and not patchlike), slug


@SETTINGS
@given(name=st.text(max_size=12), email=st.text(max_size=12))
def test_authors(demo_project, name, email):
    """An --author: accepted only as `Name <local@domain>` with no control character anywhere; what is accepted
    is what reaches the commit's From line."""
    from patchwheel.errors import PatchwheelError
    from patchwheel.maint.export import commit as export_commit

    given_author = f"{name} <{email}>"
    try:
        got = export_commit.author(demo_project.root, given_author)
    except PatchwheelError as exc:
        assert "is not 'Name <email>'" in exc.message
        return
    assert not re.search(r"[\x00-\x1f\x7f]", got), got
    assert re.fullmatch(r"[^<>]+ <[^<>\s@]+@[^<>\s@]+>", got), got
