"""The main job: pinned upstream wheel + patch series -> verified +fixed wheel, for every release line.

Named steps, as in pypa/vendoring's sync: lint -> fetch -> apply -> rewrite -> verify, per release line; then
index -> pins -> publish into dist/. Everything is written into a staging folder beside dist/ and swapped in
only after every step passed, so a failure leaves dist/ exactly as it was.

Building some lines keeps the wheels of the others (each rebuilt from its pinned upstream wheel and series, and
kept only when the bytes are the same), and the index, pins and build.json always describe every wheel in dist/.
A build replaces only a dist/ it made. How the staging folder is claimed, swept and swapped in while dist/ is
being served: see :mod:`patchwheel.publish`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from . import buildno, publish, rewrite, vendored
from . import fetch as fetch_mod
from .apply import apply_line
from .config import Overlay, ReleaseLine
from .errors import ConfigError, PatchwheelError
from .index import write_simple
from .names import DIST_RECORD, FIXES_MANIFEST, SHA256, wheel_name_version
from .patches import Patch, load_series
from .verify import verify

_CLEAN_HINT = "rebuild with --clean (patchwheel build --clean): it makes every selected line again and replaces dist/"
#: The files a build writes into dist/ besides the wheels build.json lists (and the simple/ index).
_PINS_FILE = re.compile(r"^(constraints|pins)-[^/]+\.txt$")
_REPLACES = "a build replaces the whole --dist folder"


@dataclass
class Built:
    line: ReleaseLine
    filename: str
    sha256: str
    patches: list[Patch]
    seconds: float


@dataclass(frozen=True)
class Published:
    """One wheel as build.json records it: built by this run, or kept from the previous build of dist/."""

    filename: str
    sha256: str
    package: str
    upstream_version: str
    fixed_version: str
    upstream_sha256: str | None
    patches: tuple[str, ...]

    @classmethod
    def of(cls, b: Built) -> Published:
        return cls(
            b.filename,
            b.sha256,
            b.line.package,
            b.line.version,
            b.line.fixed_version,
            b.line.wheel.sha256,
            tuple(p.name for p in b.patches),
        )

    @property
    def key(self) -> tuple[str, Version]:
        """The release line it belongs to; versions compared as versions ("1.0" is "1.0.0")."""
        return self.package, Version(self.upstream_version)

    def record(self) -> dict:
        return {
            "filename": self.filename,
            "sha256": self.sha256,
            "package": self.package,
            "upstream_version": self.upstream_version,
            "fixed_version": self.fixed_version,
            "upstream_sha256": self.upstream_sha256,
            "patches": list(self.patches),
        }


def manifest_for(line: ReleaseLine, patches: list[Patch], patched_files: dict[str, bytes | None]) -> dict:
    """What the wheel records about itself (read back by ``patchwheel status``)."""
    return {
        "schema": 1,
        "package": line.package,
        "version": line.fixed_version,
        "upstream": {"version": line.version, "wheel": line.wheel.filename, "sha256": line.wheel.sha256},
        "patches": [
            {
                "name": p.name,
                "subject": p.subject,
                "sha256": p.sha256,
                "upstream_status": p.trailers.get("Upstream-Status"),
                "upstream_issue": p.trailers.get("Upstream-Issue"),
                "proof_test": p.trailers.get("Proof-Test"),
                "feature_test": p.trailers.get("Feature-Test"),
                "drop_when": p.trailers.get("Drop-When"),
            }
            for p in patches
        ],
        "patched_files": {
            path: hashlib.sha256(data).hexdigest() for path, data in sorted(patched_files.items()) if data is not None
        },
    }


def build_line(line: ReleaseLine, out_dir: Path, *, log=print) -> Built:
    t0 = time.perf_counter()
    patches = load_series(line)  # lint
    buildno.check(line)  # the wheel's name must be the series' own
    upstream_wheel = fetch_mod.fetch(line.package, line.wheel, log=log)  # fetch
    entries = rewrite.read(upstream_wheel)
    patched = apply_line(line, patches, {e.name: e.data for e in entries})  # apply
    manifest = manifest_for(line, patches, patched)  # rewrite
    names, new_entries = rewrite.plan(line, entries, patched, manifest)
    dest = out_dir / names.filename
    rewrite.write(new_entries, dest)
    verify(line, dest, upstream_wheel, patches, entries)  # verify: by reverse-apply, and against overlay/ (vendored)
    vendored.check_wheel(line, dest, patched)
    sha = fetch_mod.sha256_file(dest)
    return Built(line, names.filename, sha, patches, time.perf_counter() - t0)


def pins_text(set_name: str, wheels: list[Published], hashed: bool) -> str:
    """Consumer pins for one set.

    pip switches on hash-checking for *every* requirement as soon as one line (even in a constraints file) has a
    hash, and then refuses unhashed public dependencies. So two files: constraints without hashes (the index's
    ``#sha256=`` fragments are still checked on download), and hash-locked pins for fully locked installs.
    """
    if hashed:
        head = [
            f"# patchwheel hash-locked pins for the consumer set '{set_name}' (overlay/sets.toml).",
            "# For a fully hash-locked requirements file, or on their own with --no-deps:",
            "#   pip install --no-deps --extra-index-url <index> -r <this file>",
        ]
        body = [f"{w.package}=={w.fixed_version} --hash=sha256:{w.sha256}  # {w.filename}" for w in wheels]
    else:
        head = [
            f"# patchwheel constraints for the consumer set '{set_name}' (overlay/sets.toml).",
            "#   pip install --extra-index-url <index> -c <this file> transformers accelerate",
            "# Both pins matter: a bare or ranged name would pick the newest public release.",
        ]
        body = [f"{w.package}=={w.fixed_version}  # {w.filename} sha256:{w.sha256}" for w in wheels]
    return "\n".join(head + body) + "\n"


def _home() -> Path | None:
    try:
        return Path.home().resolve()
    except (RuntimeError, KeyError):  # no HOME and no password entry
        return None


def _check_dist_path(dist: Path, root: Path) -> None:
    """dist/ must be a folder or a path that can become one, and never one whose replacement would take the
    project, the home folder or the whole file system with it (`--dist .` in a clone, `--dist /`). A
    file there ended in NotADirectoryError, and with --clean the build even replaced the file."""
    hint = f"pass --dist a folder of its own (it is made when missing), e.g. --dist {root / 'dist'}"
    if dist == Path(dist.anchor):
        raise PatchwheelError(f"--dist {dist} is the file system root: {_REPLACES}", hint)
    for what, folder in (("the project root", root), ("your home folder", _home())):
        if folder is not None and dist == folder:
            raise PatchwheelError(f"--dist {dist} is {what}: {_REPLACES}", hint)
        if folder is not None and dist in folder.parents:
            raise PatchwheelError(f"--dist {dist} holds {what} ({folder}): {_REPLACES}", hint)
    for path in (dist, *dist.parents):
        if path.is_dir():
            return
        if path.exists() or path.is_symlink():
            so = "" if path == dist else f", so {dist} cannot be made"
            raise PatchwheelError(
                f"{path} is a file, not a folder{so}",
                "pass --dist a folder (it is made when missing), e.g. --dist dist",
            )


def _damaged_manifest_hint(mf: Path) -> str:
    """What to do about a damaged build.json: not --clean, which would replace a folder nothing shows is the
    tool's."""
    return (
        f"a build replaces only a folder it made: if {mf.parent} is patchwheel's output, remove it (or move it "
        "aside) and build again; if not, pass --dist another folder"
    )


def _published_entry(mf: Path, i: int, raw: object) -> Published:
    """One build.json entry, checked; entries written before package and versions were recorded get them from
    the wheel's file name."""

    def damaged(why: str) -> PatchwheelError:
        return PatchwheelError(f"{mf} is damaged: wheel entry {i}: {why}", _damaged_manifest_hint(mf))

    if not isinstance(raw, dict):
        raise damaged("not an object")
    filename, sha256, patches = raw.get("filename"), raw.get("sha256"), raw.get("patches", [])
    if not isinstance(filename, str) or Path(filename).name != filename:
        raise damaged(f"filename {filename!r} is not a file name")
    try:
        package, fixed = wheel_name_version(filename)
        version = Version(fixed)
    except (ConfigError, InvalidVersion) as exc:
        raise damaged(str(exc).splitlines()[0]) from exc
    if not isinstance(sha256, str) or not SHA256.match(sha256):
        raise damaged(f"sha256 {sha256!r} is not 64 hex digits")
    if not isinstance(patches, list) or not all(isinstance(p, str) for p in patches):
        raise damaged("patches is not a list of names")
    derived = {"package": str(package), "upstream_version": version.public, "fixed_version": str(version)}
    fields = {key: raw.get(key, value) for key, value in derived.items()}
    upstream_sha256 = raw.get("upstream_sha256")
    for key, value in {**fields, "upstream_sha256": "" if upstream_sha256 is None else upstream_sha256}.items():
        if not isinstance(value, str):
            raise damaged(f"{key} {value!r} is not a string")
    try:
        Version(fields["upstream_version"])
    except InvalidVersion as exc:
        raise damaged(str(exc)) from exc
    return Published(
        filename,
        sha256,
        canonicalize_name(fields["package"]),
        fields["upstream_version"],
        fields["fixed_version"],
        upstream_sha256,
        tuple(patches),
    )


def published(dist: Path) -> list[Published]:
    """The wheels dist/build.json lists (none when there is no build.json). A damaged file is an error that says
    what to do, never a traceback."""
    mf = dist / DIST_RECORD
    if not mf.is_file():
        return []
    try:
        data = json.loads(mf.read_bytes())
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise PatchwheelError(f"{mf} is damaged: not JSON ({exc})", _damaged_manifest_hint(mf)) from exc
    wheels = data.get("wheels") if isinstance(data, dict) else None
    if not isinstance(wheels, list):
        raise PatchwheelError(f'{mf} is damaged: no "wheels" list', _damaged_manifest_hint(mf))
    return [_published_entry(mf, i, raw) for i, raw in enumerate(wheels, 1)]


def _listing(names: list[str], most: int = 8) -> str:
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def _not_written(dist: Path, wheels: list[Published]) -> list[str]:
    """What dist/ holds that no build wrote (a folder with a trailing /): the publish step replaces the whole
    folder, so any of it would be lost. A build writes build.json, the wheels it lists, the pins files and the
    simple/ index (an index.html per folder), and never a link."""
    own = {DIST_RECORD, *(w.filename for w in wheels)}
    found = []
    for entry in sorted(dist.iterdir()):
        if entry.name == "simple" and entry.is_dir() and not entry.is_symlink():
            found += [f"simple/{name}" for name in _not_written_index(entry)]
        elif entry.is_symlink() or not entry.is_file() or not (entry.name in own or _PINS_FILE.match(entry.name)):
            found.append(entry.name + ("/" if entry.is_dir() and not entry.is_symlink() else ""))
    return found


def _not_written_index(simple: Path) -> list[str]:
    found = []
    for entry in sorted(simple.iterdir()):
        if entry.is_symlink() or not entry.is_dir():
            if entry.name != "index.html" or entry.is_symlink() or not entry.is_file():
                found.append(entry.name)
            continue
        inside = [p.name for p in entry.iterdir()]
        page = entry / "index.html"
        if inside != ["index.html"] or page.is_symlink() or not page.is_file():
            found.append(f"{entry.name}/")
    return found


def _read_previous(dist: Path, root: Path) -> list[Published] | None:
    """The previous build in dist/ (None when there is no dist/ or it is empty), after checking that the tool
    made it: it has a sound build.json and nothing a build does not write. --clean replaces dist/ too, so it gets
    the same check (it once emptied any folder --dist named)."""
    if not dist.exists():
        return None
    held = sorted(p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in dist.iterdir())
    if not (dist / DIST_RECORD).is_file():
        if held:
            raise PatchwheelError(
                f"{dist} exists and was not made by patchwheel (no {DIST_RECORD}); it holds {_listing(held)}",
                f"{_REPLACES}: pass --dist a new or empty folder, e.g. --dist {root / 'dist'}, or move what this "
                "one holds elsewhere",
            )
        return None
    wheels = published(dist)
    if foreign := _not_written(dist, wheels):
        raise PatchwheelError(
            f"{dist} holds what no build wrote: {_listing(foreign)}",
            f"{_REPLACES}: move them elsewhere, or pass --dist another folder",
        )
    return wheels


def _check_stale(previous: list[Published] | None, built: list[Built], dist: Path) -> None:
    """A wheel name that dist/ already holds must keep its bytes: same name, other patch set is refused."""
    old = {w.filename: w for w in previous or []}
    for b in built:
        prev = old.get(b.filename)
        if prev and prev.sha256 != b.sha256:
            raise PatchwheelError(
                f"{dist}/{b.filename} was built from another patch set "
                f"({', '.join(prev.patches) or 'no patches'}; now "
                f"{', '.join(p.name for p in b.patches) or 'no patches'}). dist/ was left as it was",
                "if that wheel was never published, rerun with --clean to replace dist/; if it was, the index "
                "will refuse a different file under the same name: give the line its next build number "
                f"(python -m patchwheel bump {b.line.package}=={b.line.version}) and rebuild",
            )


def _keep(
    overlay: Overlay, lines: list[ReleaseLine], previous: list[Published] | None, dist: Path, staging: Path, log
) -> list[Published]:
    """The wheels of the lines this run does not rebuild, from dist/: a build of one line must not wipe the others
    (issue 11). Each is checked against build.json (present, its sha256), then made again into staging from the
    pinned upstream wheel and the line's series, and kept only when that gives the same name and bytes: build.json
    is no proof, whoever changed a wheel can change it too. Wheels of lines that are no longer pinned
    are dropped, as a full build drops them."""
    rebuilt = {(line.package, Version(line.version)) for line in lines}
    pinned = {(line.package, Version(line.version)): line for line in overlay.all_lines()}
    checked: list[tuple[Published, ReleaseLine]] = []
    outdated: list[tuple[Published, ReleaseLine]] = []
    for w in previous or []:
        if w.key in rebuilt:
            continue
        line = pinned.get(w.key)
        if line is None:
            log(f"dropped {w.filename}: {w.package} {w.upstream_version} is no longer pinned in overlay/")
            continue
        source = dist / w.filename
        if not source.is_file():
            raise PatchwheelError(f"dist/ is damaged: {source} is missing (build.json lists it)", _CLEAN_HINT)
        got = fetch_mod.sha256_file(source)
        if got != w.sha256:
            raise PatchwheelError(
                f"dist/ is damaged: {source} has sha256 {got}, build.json records {w.sha256}", _CLEAN_HINT
            )
        (outdated if _outdated(w, line, source) else checked).append((w, line))
    if outdated:
        paths = [f"{dist}/{w.filename}" for w, _ in outdated]
        one = len(paths) == 1
        again = " ".join(f"{line.package}=={line.version}" for line in [*lines, *(line for _, line in outdated)])
        raise PatchwheelError(
            f"{', '.join(paths)} {'was' if one else 'were'} built from other pins or patches than overlay/ and "
            f"patches/ hold now, so {'it' if one else 'they'} cannot be checked by a rebuild; dist/ was left as it was",
            f"build {'that line' if one else 'those lines'} too (patchwheel build {again}), or pass --clean: dist/ "
            "then holds only the lines built",
        )
    kept = []
    for w, line in checked:
        source = dist / w.filename
        try:
            b = build_line(line, staging, log=lambda m: log(f"      {m}"))
        except PatchwheelError as exc:
            raise PatchwheelError(f"cannot check the kept {source} by a rebuild: {exc.message}", exc.hint) from exc
        if (b.filename, b.sha256) != (w.filename, w.sha256):
            gives = b.sha256[:16] + "…" if b.filename == w.filename else b.filename
            raise PatchwheelError(
                f"{source} differs from a rebuild from its pinned upstream wheel and patches/{line.key}/ (sha256 "
                f"{w.sha256[:16]}…, the rebuild gives {gives}): it was changed after it was built, or built by "
                "another version of patchwheel; dist/ was left as it was",
                f"find out how it changed; then {_CLEAN_HINT}",
            )
        log(f"kept {w.filename} (a rebuild from the pinned wheel and the series gives the same bytes)")
        kept.append(Published.of(b))
    return kept


def _outdated(w: Published, line: ReleaseLine, path: Path) -> bool:
    """Whether a kept wheel was built from other pins or another series than the overlay's now: as build.json
    records it, or as the wheel's own manifest does (it has each patch's sha256, so a patch edited under its name
    counts too). A manifest that cannot be read tells nothing: the rebuild then finds that the wheel differs."""
    try:
        series = load_series(line)
    except PatchwheelError:  # that line's series is broken: its own build will say how
        return True
    if (
        w.upstream_sha256 not in (None, line.wheel.sha256)
        or w.fixed_version != line.fixed_version
        or list(w.patches) != [p.name for p in series]
    ):
        return True
    try:
        manifest = wheel_manifest(path)
        built = [(p["name"], p["sha256"]) for p in manifest["patches"]]
        upstream = manifest["upstream"]["sha256"]
    except (OSError, EOFError, RuntimeError, ValueError, KeyError, TypeError, StopIteration, zipfile.BadZipFile):
        return False
    return built != [(p.name, p.sha256) for p in series] or upstream != line.wheel.sha256


def build(
    overlay: Overlay, dist: Path, *, select: list[str] | None = None, clean: bool = False, log=print
) -> list[Built]:
    """Build the selected release lines (default: all) into ``dist`` atomically; the other lines' wheels in dist/
    are kept unless ``clean``."""
    dist = dist.resolve()
    _check_dist_path(dist, overlay.root)
    lines = overlay.select(select or [])
    _read_previous(dist, overlay.root)  # a folder the tool did not make is refused before anything is made beside it
    dist.parent.mkdir(parents=True, exist_ok=True)
    with publish.exclusive(dist, log):
        publish.sweep(dist, log)
        previous = _read_previous(dist, overlay.root)  # again, now that no other build can be swapping it
        return _build_locked(overlay, dist, lines, None if clean else previous, clean, log)


def _build_locked(
    overlay: Overlay, dist: Path, lines: list[ReleaseLine], previous: list[Published] | None, clean: bool, log
) -> list[Built]:
    build_id, lock_fd = publish.claim(dist)
    staging, lock = publish.leftover(dist, "partial", build_id), publish.leftover(dist, "partial", build_id, ".lock")
    try:
        kept = _keep(overlay, lines, previous, dist, staging, log)
        built = []
        for i, line in enumerate(lines, 1):
            log(f"[{i}/{len(lines)}] {line.package} {line.version} -> {line.fixed_version}")
            b = build_line(line, staging, log=lambda m: log(f"      {m}"))
            log(f"      {b.filename}  sha256:{b.sha256[:16]}…  {len(b.patches)} patch(es), verified, {b.seconds:.2f} s")
            built.append(b)
        _check_stale(previous, built, dist)
        wheels = sorted(kept + [Published.of(b) for b in built], key=lambda w: w.key)
        write_simple(staging, {w.filename: w.sha256 for w in wheels})  # index
        by_key = {(w.package, w.upstream_version): w for w in wheels}
        for set_name, members in overlay.sets.items():  # pins
            chosen = [by_key[(pkg, ver)] for pkg, ver in members.items() if (pkg, ver) in by_key]
            if len(chosen) == len(members):
                (staging / f"constraints-{set_name}.txt").write_text(pins_text(set_name, chosen, hashed=False))
                (staging / f"pins-{set_name}.txt").write_text(pins_text(set_name, chosen, hashed=True))
        (staging / DIST_RECORD).write_text(json.dumps({"wheels": [w.record() for w in wheels]}, indent=2) + "\n")
        publish.publish(staging, dist, publish.leftover(dist, "old", build_id))  # publish
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # after an exchange: the previous dist/
        lock.unlink(missing_ok=True)
        os.close(lock_fd)
    return built


def current_wheel(line: ReleaseLine, dist: Path, hint: str) -> Path:
    """The line's +fixed wheel in ``dist``, checked to carry the line's current patches: a wheel built before a
    patch changed is refused (``hint``: how the caller's user builds it)."""
    path = dist / rewrite.wheel_names(line).filename
    if not path.is_file():
        raise PatchwheelError(f"{path} does not exist", hint)
    built = [(p["name"], p["sha256"]) for p in wheel_manifest(path)["patches"]]
    if built != [(p.name, p.sha256) for p in load_series(line)]:
        raise PatchwheelError(f"{path} was built from other patches than patches/{line.key}/ holds now", hint)
    return path


def wheel_manifest(path: Path) -> dict:
    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/" + FIXES_MANIFEST))
        return json.loads(zf.read(name))
