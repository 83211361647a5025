"""The main job: pinned upstream wheel + patch series -> verified +fixed wheel, for every release line.

Named steps, as in pypa/vendoring's sync: lint -> fetch -> apply -> rewrite -> verify, per release line; then
index -> pins -> publish into dist/. Everything is written into a staging folder beside dist/ and swapped in
only after every step passed, so a failure leaves dist/ exactly as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from . import fetch as fetch_mod
from . import rewrite
from .apply import apply_series
from .config import Overlay, ReleaseLine
from .errors import PatchwheelError
from .index import write_simple
from .patches import Patch, load_series
from .verify import verify

BUILD_MANIFEST = "build.json"


@dataclass
class Built:
    line: ReleaseLine
    filename: str
    sha256: str
    patches: list[Patch]
    seconds: float


def manifest_for(line: ReleaseLine, patches: list[Patch], patched_files: dict[str, bytes | None]) -> dict:
    """What the wheel records about itself (read back by ``patchwheel status``)."""
    return {
        "schema": 1,
        "package": line.package,
        "version": line.fixed_version,
        "upstream": {"version": line.version, "wheel": line.wheel.filename, "sha256": line.wheel.sha256},
        "patches": [{
            "name": p.name, "subject": p.subject, "sha256": p.sha256,
            "upstream_status": p.trailers.get("Upstream-Status"), "upstream_issue": p.trailers.get("Upstream-Issue"),
            "proof_test": p.trailers.get("Proof-Test"), "feature_test": p.trailers.get("Feature-Test"),
            "drop_when": p.trailers.get("Drop-When"),
        } for p in patches],
        "patched_files": {path: hashlib.sha256(data).hexdigest()
                          for path, data in sorted(patched_files.items()) if data is not None},
    }


def build_line(line: ReleaseLine, out_dir: Path, *, log=print) -> Built:
    t0 = time.perf_counter()
    patches = load_series(line)                                                    # lint
    upstream_wheel = fetch_mod.fetch(line.package, line.wheel, log=log)             # fetch
    entries = rewrite.read(upstream_wheel)
    by_name = {e.name: e.data for e in entries}

    def read_upstream(upstream_path: str) -> bytes | None:
        wheel_path = line.wheel_path(upstream_path)
        return by_name.get(wheel_path) if wheel_path else None

    result = apply_series(patches, read_upstream, where=f"{line.package} {line.version}")   # apply
    patched = {line.wheel_path(p): d for p, d in result.items()}
    manifest = manifest_for(line, patches, patched)                                 # rewrite
    names, new_entries = rewrite.plan(line, entries, patched, manifest)
    dest = out_dir / names.filename
    rewrite.write(new_entries, dest)
    verify(line, dest, upstream_wheel, patches)                                     # verify
    sha = fetch_mod.sha256_file(dest)
    return Built(line, names.filename, sha, patches, time.perf_counter() - t0)


def pins_text(set_name: str, built: list[Built], hashed: bool) -> str:
    """Consumer pins for one set.

    pip switches on hash-checking for *every* requirement as soon as one line (even in a constraints file) has a
    hash, and then refuses unhashed public dependencies. So two files: constraints without hashes (the index's
    ``#sha256=`` fragments are still checked on download), and hash-locked pins for fully locked installs.
    """
    if hashed:
        head = [f"# patchwheel hash-locked pins for the consumer set '{set_name}' (overlay/sets.toml).",
                "# For a fully hash-locked requirements file, or on their own with --no-deps:",
                "#   pip install --no-deps --extra-index-url <index> -r <this file>"]
        body = [f"{b.line.package}=={b.line.fixed_version} --hash=sha256:{b.sha256}" for b in built]
    else:
        head = [f"# patchwheel constraints for the consumer set '{set_name}' (overlay/sets.toml).",
                "#   pip install --extra-index-url <index> -c <this file> transformers accelerate",
                "# Both pins matter: a bare or ranged name would pick the newest public release."]
        body = [f"{b.line.package}=={b.line.fixed_version}  # sha256:{b.sha256}" for b in built]
    return "\n".join(head + body) + "\n"


def _read_previous(dist: Path) -> dict | None:
    if not dist.exists():
        return None
    mf = dist / BUILD_MANIFEST
    if not mf.is_file():
        if any(dist.iterdir()):
            raise PatchwheelError(f"{dist} exists and was not made by patchwheel (no {BUILD_MANIFEST})",
                                  f"move it away or pass --dist to build elsewhere")
        return None
    return json.loads(mf.read_text())


def _check_stale(previous: dict | None, built: list[Built], dist: Path) -> None:
    """A wheel name that dist/ already holds must keep its bytes: same name, other patch set is refused."""
    if not previous:
        return
    old = {w["filename"]: w for w in previous.get("wheels", [])}
    for b in built:
        prev = old.get(b.filename)
        if prev and prev["sha256"] != b.sha256:
            raise PatchwheelError(
                f"{dist}/{b.filename} was built from another patch set "
                f"({', '.join(prev.get('patches', [])) or 'no patches'}; now "
                f"{', '.join(p.name for p in b.patches) or 'no patches'}). dist/ was left as it was",
                "if that wheel was never published, rerun with --clean to replace dist/; if it was, the index "
                "will refuse a different file under the same name: change local-label in "
                f"overlay/{b.line.package}/pins.toml (e.g. 'fixed.2') and rebuild",
            )


def build(overlay: Overlay, dist: Path, *, select: list[str] | None = None, clean: bool = False,
          log=print) -> list[Built]:
    """Build the selected release lines (default: all) into ``dist`` atomically."""
    dist = dist.resolve()
    lines = overlay.select(select or [])
    previous = None if clean else _read_previous(dist)
    dist.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dist.name}.partial-", dir=dist.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; dist/ is meant to be served
    try:
        built = []
        for i, line in enumerate(lines, 1):
            log(f"[{i}/{len(lines)}] {line.package} {line.version} -> {line.fixed_version}")
            b = build_line(line, staging, log=lambda m: log(f"      {m}"))
            log(f"      {b.filename}  sha256:{b.sha256[:16]}…  {len(b.patches)} patch(es), "
                f"verified, {b.seconds:.2f} s")
            built.append(b)
        _check_stale(previous, built, dist)
        write_simple(staging, {b.filename: b.sha256 for b in built})                 # index
        by_key = {(b.line.package, b.line.version): b for b in built}
        for set_name, members in overlay.sets.items():                               # pins
            chosen = [by_key[(pkg, ver)] for pkg, ver in members.items() if (pkg, ver) in by_key]
            if len(chosen) == len(members):
                (staging / f"constraints-{set_name}.txt").write_text(pins_text(set_name, chosen, hashed=False))
                (staging / f"pins-{set_name}.txt").write_text(pins_text(set_name, chosen, hashed=True))
        (staging / BUILD_MANIFEST).write_text(json.dumps({"wheels": [
            {"filename": b.filename, "sha256": b.sha256, "upstream_sha256": b.line.wheel.sha256,
             "patches": [p.name for p in b.patches]} for b in built]}, indent=2) + "\n")
        _publish(staging, dist)                                                       # publish
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return built


def _publish(staging: Path, dist: Path) -> None:
    old = None
    if dist.exists():
        old = dist.with_name(f".{dist.name}.old-{os.getpid()}")
        os.replace(dist, old)
    os.replace(staging, dist)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    staging.mkdir()  # so the caller's cleanup has something to remove


def wheel_manifest(path: Path) -> dict:
    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/" + rewrite.MANIFEST_NAME))
        return json.loads(zf.read(name))
