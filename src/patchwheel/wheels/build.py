"""The main job: pinned upstream wheel + patch series -> verified +fixed wheel, for every release line.

Named steps, as in pypa/vendoring's sync: lint -> fetch -> apply -> rewrite -> verify, per release line; then
index -> pins -> swap into dist/. Everything is written into a staging folder beside dist/ and swapped in
only after every step passed, so a failure leaves dist/ exactly as it was.

Building some lines keeps the wheels of the others (each kept on this tool's record of the bytes it built from the
line's inputs as they are now, :mod:`records`, or else rebuilt and kept only when the bytes are the same), and the
index, pins and build.json always describe every wheel in dist/.
A build replaces only a dist/ it made (:mod:`distdir`). How the staging folder is claimed, swept and swapped in
while dist/ is being served: see :mod:`staging`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from .. import draft
from ..config import Project, ReleaseLine
from ..errors import DistError, PatchwheelError
from ..names import DIST_RECORD
from ..probes import manifest as fixes
from ..reporter import CONSOLE
from ..series import Patch, checked_series, series_names
from . import buildno, records, rewrite, sbom, staging, vendored
from . import fetch as fetch_mod
from .apply import apply_line
from .distdir import DistWheel, check_dist_path, read_previous, wheel_file, wheel_manifest, wheel_sbom
from .index import core_metadata, write_simple
from .verify import verify

_CLEAN_HINT = "rebuild with --clean (nox -s build -- --clean): it makes every selected line again and replaces dist/"


@dataclass
class Built:
    line: ReleaseLine
    filename: str
    sha256: str
    patches: list[Patch]
    seconds: float


def _line_fields(line: ReleaseLine) -> tuple[str, str, str, str]:
    return line.package, line.version, line.fixed_version, line.wheel.sha256


def _dist_wheel(b: Built) -> DistWheel:
    """A wheel this build made, as build.json records it."""
    patches = tuple(p.name for p in b.patches)
    return DistWheel(b.filename, b.sha256, *_line_fields(b.line), patches, b.line.proven_torch)


def manifest_for(line: ReleaseLine, patches: list[Patch], patched_files: dict[str, bytes | None]) -> dict:
    """What the wheel records about itself (read back by ``patchwheel status``; the format is :mod:`manifest`'s)."""
    upstream = {"version": line.version, "wheel": line.wheel.filename, "sha256": line.wheel.sha256}
    entries = [fixes.patch_entry(p.name, p.subject, p.sha256, p.trailers) for p in patches]
    return fixes.make(line.package, line.fixed_version, upstream, entries, patched_files, line.proven_torch)


def build_line(line: ReleaseLine, out_dir: Path, *, log=CONSOLE) -> Built:
    """One line's +fixed wheel, verified. Each member of the pinned wheel is inflated at most once, and only those
    the build changes or reads: the others are copied raw, their RECORD rows taken from upstream's RECORD, which the
    first build from that pinned wheel audits whole (:mod:`records`; until then every member is inflated once)."""
    t0 = time.perf_counter()
    # lint, the series read and parsed once (what git reads in each patch: checked as it applies them); a draft's
    # messages (new's template) are not judged: built for the proofs, named as a draft, never recorded
    patches = checked_series(line, messages=lambda series: not buildno.draft_names(series), numstat=False)
    names = rewrite.wheel_names(line, patches)
    if drafts := buildno.draft_names(patches):
        log(
            f"a draft: the message of {drafts[0]} is the template `nox -s new` wrote; built for the proofs as "
            f"{names.tag} into the dist folder's drafts/ (no upload of its *.whl takes it), left out of the "
            "index and pins; `nox -s lint` refuses it until it is written"
        )
    else:
        buildno.require_number(line, patches)  # the wheel's name must be the series' own
    upstream_wheel, blob = fetch_mod.fetch_verified(line.package, line.wheel, log=log)  # fetch
    record = f"{names.old_distinfo}/RECORD"
    if records.audited(line.wheel.sha256):
        touched = {w for p in patches for t in p.touched if (w := line.wheel_path(t)) is not None}
        wanted = (
            touched
            | {f"{line.import_name}/__init__.py", record}
            | {f"{names.old_distinfo}/{n}" for n in ("METADATA", "WHEEL")}
        )
        entries = rewrite.scan(upstream_wheel, blob, wanted.__contains__)
        rows = rewrite.record_rows(rewrite.inflated(upstream_wheel, next(e for e in entries if e.name == record)))
    else:
        entries = rewrite.scan(upstream_wheel, blob, lambda name: True)
        if (audited := rewrite.audit(entries, record)) is not None:
            records.remember_audited(line.wheel.sha256)
        rows = audited or {}
    files = rewrite.Members(upstream_wheel, entries)
    patched = apply_line(line, patches, files)  # apply
    manifest = manifest_for(line, patches, patched)  # rewrite
    bom = rewrite.sbom_of(line, patches, manifest, files[f"{names.old_distinfo}/METADATA"], names)
    new_entries = rewrite.plan(line, entries, patched, manifest, rows, names, bom)[1]
    dest = wheel_file(out_dir, names.filename)  # a draft's into drafts/: for the proofs, never uploaded
    dest.parent.mkdir(exist_ok=True)
    rewrite.write(new_entries, dest)
    built = dest.read_bytes()
    in_wheel: dict[str, bytes | None] = {}
    verify(
        line, dest, upstream_wheel, patches, entries, built_bytes=built, upstream_rows=rows, files=in_wheel, names=names
    )
    vendored.check_wheel(line, dest, patched, in_wheel)  # the patched files, as the wheel holds them
    sha = hashlib.sha256(built).hexdigest()
    records.remember_built(line, names.filename, sha, buildno.inputs_digest(line, patches))
    return Built(line, names.filename, sha, patches, time.perf_counter() - t0)


def pins_text(set_name: str, wheels: list[DistWheel], hashed: bool) -> str:
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


def _check_stale(previous: list[DistWheel] | None, built: list[Built], dist: Path) -> None:
    """A wheel name that dist/ already holds must keep its bytes: same name, other patch set is refused."""
    old = {w.filename: w for w in previous or []}
    for b in built:
        prev = old.get(b.filename)
        if prev and prev.sha256 != b.sha256:
            raise DistError(
                f"{wheel_file(dist, b.filename)} was built from another patch set "
                f"({', '.join(prev.patches) or 'no patches'}; now "
                f"{', '.join(p.name for p in b.patches) or 'no patches'}). dist/ was left as it was",
                "if that wheel was never published, rerun with --clean to replace dist/; if it was, the index "
                "will refuse a different file under the same name: give the line its next build number "
                f"(nox -s bump -- {b.line.package}=={b.line.version}) and rebuild",
            )


def _keep(
    project: Project, lines: list[ReleaseLine], previous: list[DistWheel] | None, dist: Path, stage: Path, log
) -> list[DistWheel]:
    """The wheels of the lines this run does not rebuild, from dist/: a build of one line must not wipe the others
    Each is checked against build.json (present, its sha256), then against the record this tool kept in its own
    cache when it built that wheel (:mod:`records`: the sha256 it made from the line's inputs as they are now), as
    the staging folder holds it (:func:`_stage`). A wheel with a matching record is kept; one without is made
    again there from the
    pinned upstream wheel and the line's series, and kept only when that gives the same name and bytes: build.json
    is no proof, whoever changed a wheel can change it too. Wheels of lines that are no longer pinned
    are dropped, as a full build drops them."""
    rebuilt = {(line.package, Version(line.version)) for line in lines}
    pinned = {(line.package, Version(line.version)): line for line in project.all_lines()}
    checked: list[tuple[DistWheel, ReleaseLine]] = []
    recorded: dict[str, bool] = {}  # a record of this tool's cache names its bytes (records.built_matches)
    outdated: list[tuple[DistWheel, ReleaseLine]] = []
    for w in previous or []:
        if w.key in rebuilt:
            continue
        line = pinned.get(w.key)
        if line is None:
            log(f"dropped {w.filename}: {w.package} {w.upstream_version} is no longer pinned in overlay/")
            continue
        source = _source(dist, w.filename)
        if not source.is_file():
            raise DistError(f"dist/ is damaged: {source} is missing (build.json lists it)", _CLEAN_HINT)
        staged = wheel_file(stage, w.filename)
        staged.parent.mkdir(exist_ok=True)
        _stage(source, staged)
        got = fetch_mod.sha256_file(staged)  # what is hashed is what the new dist/ holds
        if got != w.sha256:
            raise DistError(f"dist/ is damaged: {source} has sha256 {got}, build.json records {w.sha256}", _CLEAN_HINT)
        recorded[w.filename] = w.filename == rewrite.wheel_names(line).filename and records.built_matches(
            line, w.filename, got
        )
        (outdated if not recorded[w.filename] and _outdated(w, line, source) else checked).append((w, line))
    if outdated:
        paths = [f"{dist}/{w.filename}" for w, _ in outdated]
        one = len(paths) == 1
        again = " ".join(f"{line.package}=={line.version}" for line in [*lines, *(line for _, line in outdated)])
        raise DistError(
            f"{', '.join(paths)} {'was' if one else 'were'} built from other pins or patches than overlay/ and "
            f"patches/ hold now, so {'it' if one else 'they'} cannot be checked by a rebuild; dist/ was left as it was",
            f"build {'that line' if one else 'those lines'} too (nox -s build -- {again}), or pass --clean: dist/ "
            "then holds only the lines built",
        )
    kept = []
    for w, line in checked:
        source = _source(dist, w.filename)
        if recorded[w.filename]:
            log(f"kept {w.filename} (this tool built it from the same inputs: its record in the tool's cache)")
            names = tuple(series_names(line))  # as the record's inputs name them (lint passed when it was made)
            kept.append(DistWheel(w.filename, w.sha256, *_line_fields(line), names, line.proven_torch))
            continue
        wheel_file(stage, w.filename).unlink()  # (the rebuild writes its own file there, never through the link)
        try:
            b = build_line(line, stage, log=lambda m: log(f"      {m}"))
        except PatchwheelError as exc:
            raise DistError(f"cannot check the kept {source} by a rebuild: {exc.message}", exc.hint) from exc
        if (b.filename, b.sha256) != (w.filename, w.sha256):
            gives = b.sha256[:16] + "…" if b.filename == w.filename else b.filename
            raise DistError(
                f"{source} differs from a rebuild from its pinned upstream wheel and patches/{line.key}/ (sha256 "
                f"{w.sha256[:16]}…, the rebuild gives {gives}): it was changed after it was built, or built by "
                "another version of patchwheel; dist/ was left as it was",
                f"find out how it changed; then {_CLEAN_HINT}",
            )
        log(f"kept {w.filename} (a rebuild from the pinned wheel and the series gives the same bytes)")
        kept.append(_dist_wheel(b))
    return kept


def _source(dist: Path, filename: str) -> Path:
    """A kept wheel in dist/: a draft's in drafts/, or beside the others where a build before drafts/ existed put
    it (it goes into drafts/ with this build)."""
    path = wheel_file(dist, filename)
    return dist / filename if not path.is_file() and (dist / filename).is_file() else path


def _stage(source: Path, staged: Path) -> None:
    """A kept wheel into the staging folder: a hard link where the filesystem has them (nothing is copied; every
    write of the build makes a new file, :func:`zipwrite.write`), else a copy."""
    try:
        os.link(source, staged, follow_symlinks=False)
    except OSError:
        shutil.copyfile(source, staged, follow_symlinks=False)


def _outdated(w: DistWheel, line: ReleaseLine, path: Path) -> bool:
    """Whether a kept wheel was built from other pins or another series than the overlay's now: as build.json
    records it, or as the wheel's own manifest does (it has each patch's sha256, so a patch edited under its name
    counts too). A manifest that cannot be read tells nothing: the rebuild then finds that the wheel differs."""
    try:
        series = checked_series(line, messages=False)
    except PatchwheelError:  # that line's series is broken: its own build will say how
        return True
    if (
        w.upstream_sha256 not in (None, line.wheel.sha256)
        or w.fixed_version != line.fixed_version
        or list(w.patches) != [p.name for p in series]
        or w.proven_torch != line.proven_torch
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
    project: Project, dist: Path, *, select: list[str] | None = None, clean: bool = False, log=CONSOLE
) -> list[Built]:
    """Build the selected release lines (default: all) into ``dist`` atomically; the other lines' wheels in dist/
    are kept unless ``clean``."""
    dist = dist.resolve()
    check_dist_path(dist, project.root)
    lines = project.select(select or [])
    read_previous(dist, project.root)  # a folder the tool did not make is refused before anything is made beside it
    dist.parent.mkdir(parents=True, exist_ok=True)
    with staging.exclusive(dist, log):
        staging.sweep(dist, log)
        previous = read_previous(dist, project.root)  # again, now that no other build can be swapping it
        return _build_locked(project, dist, lines, None if clean else previous, clean, log)


def _build_locked(
    project: Project, dist: Path, lines: list[ReleaseLine], previous: list[DistWheel] | None, clean: bool, log
) -> list[Built]:
    build_id, lock_fd = staging.claim(dist)
    stage, lock = staging.leftover(dist, "partial", build_id), staging.leftover(dist, "partial", build_id, ".lock")
    try:
        kept = _keep(project, lines, previous, dist, stage, log)
        built = []
        for i, line in enumerate(lines, 1):
            log(f"[{i}/{len(lines)}] {line.package} {line.version} -> {line.fixed_version}")
            b = build_line(line, stage, log=lambda m: log(f"      {m}"))
            log(f"      {b.filename}  sha256:{b.sha256[:16]}…  {len(b.patches)} patch(es), verified, {b.seconds:.2f} s")
            built.append(b)
        _check_stale(previous, built, dist)
        wheels = sorted(kept + [_dist_wheel(b) for b in built], key=lambda w: w.key)
        published = [w for w in wheels if not draft.is_draft_wheel(w.filename)]  # a draft is for the proofs only
        for w in published:  # each wheel's SBOM beside it, as the wheel holds it (PEP 770's detached copy)
            (stage / (w.filename + sbom.DETACHED)).write_bytes(wheel_sbom(wheel_file(stage, w.filename)))
        on_index = {w.filename: w.sha256 for w in published}  # index, each wheel's METADATA beside it (PEP 658)
        write_simple(stage, on_index, core_metadata(stage, on_index))
        by_key = {(w.package, w.upstream_version): w for w in published}
        for set_name, members in project.sets.items():  # pins
            chosen = [by_key[(pkg, ver)] for pkg, ver in members.items() if (pkg, ver) in by_key]
            if len(chosen) == len(members):
                (stage / f"constraints-{set_name}.txt").write_text(pins_text(set_name, chosen, hashed=False))
                (stage / f"pins-{set_name}.txt").write_text(pins_text(set_name, chosen, hashed=True))
        (stage / DIST_RECORD).write_text(json.dumps({"wheels": [w.record() for w in wheels]}, indent=2) + "\n")
        staging.swap_in(stage, dist, staging.leftover(dist, "old", build_id))
    finally:
        shutil.rmtree(stage, ignore_errors=True)  # after an exchange: the previous dist/
        lock.unlink(missing_ok=True)
        os.close(lock_fd)
    return built
