"""What the build costs per release line, against the physical limit measured in the same run (bench.py's item 8).

    python bench/buildcost.py [--root CHECKOUT] [--repeat 5]

* per line: `build_line` into a fresh folder, warm cache: CPU (user+sys of this process and its children: git) and
  wall, median of ``--repeat``;
* the physical limit of a line: hash the pinned wheel, read its central directory, copy every member raw into a new
  zip (no inflating, no patching): what no build of that wheel can go below; the ratio build / limit;
* a one-line build (`build(select=[transformers==X])` with every other line's wheel in dist/) against one line's
  work (the same build into an empty dist/), median of ``--repeat`` pairs, run alternately.

``--root`` measures another checkout's tool (e.g. a worktree of main, for the figure before a change); the pinned
wheels come from the shared cache either way.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import resource
import shutil
import statistics
import struct
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any


def cpu_now() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measured(fn) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call."""
    c, t = cpu_now(), time.perf_counter()
    fn()
    return cpu_now() - c, time.perf_counter() - t


def copy_raw(wheel: Path, sha256: str, dest: Path) -> None:
    """The physical limit of a rewrite: hash the pinned wheel once, read its central directory once, and copy
    every member's local header and compressed bytes, then a central directory pointing at them."""
    blob = wheel.read_bytes()
    if hashlib.sha256(blob).hexdigest() != sha256:
        raise SystemExit(f"{wheel}: not the pinned file")
    central = []
    with zipfile.ZipFile(io.BytesIO(blob)) as zf, open(dest, "wb") as fh:
        for zi in zf.infolist():
            at = zi.header_offset
            name_len, extra_len = struct.unpack_from("<2H", blob, at + 26)
            end = at + 30 + name_len + extra_len + zi.compress_size
            offset = fh.tell()
            fh.write(blob[at:end])
            name = zi.filename.encode()
            central.append(
                struct.pack(
                    "<4s4B4HL2L5H2L",
                    b"PK\x01\x02",
                    20,
                    zi.create_system,
                    20,
                    0,
                    zi.flag_bits,
                    zi.compress_type,
                    0,
                    0,
                    zi.CRC,
                    zi.compress_size,
                    zi.file_size,
                    len(name),
                    0,
                    0,
                    0,
                    0,
                    zi.external_attr,
                    offset,
                )
                + name
            )
        start = fh.tell()
        fh.write(b"".join(central))
        fh.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(central), len(central), fh.tell() - start, start, 0))


def fresh(p: Path) -> Path:
    shutil.rmtree(p, ignore_errors=True)
    p.mkdir(parents=True)
    return p


def rows(root: Path, repeat: int, tmp: Path) -> list[tuple[str, str, str]]:
    if str(root / "src") not in sys.path:
        sys.path.insert(0, str(root / "src"))
    from patchwheel import config
    from patchwheel.wheels import build as build_mod
    from patchwheel.wheels import fetch

    project = config.load(root)
    quiet: dict[str, Any] = {"log": lambda m: None}
    out = []
    for line in project.all_lines():
        wheel = fetch.fetch(line.package, line.wheel)
        build_mod.build_line(line, fresh(tmp / "w"), **quiet)  # warm: the audit of a new pinned wheel, once
        runs = [measured(lambda ln=line: build_mod.build_line(ln, fresh(tmp / "w"), **quiet)) for _ in range(repeat)]
        sha = line.wheel.sha256
        limit = [measured(lambda w=wheel, h=sha: copy_raw(w, h, tmp / "raw.whl")) for _ in range(repeat)]
        cpu, wall = statistics.median(c for c, _ in runs), statistics.median(w for _, w in runs)
        lim_cpu, lim_wall = statistics.median(c for c, _ in limit), statistics.median(w for _, w in limit)
        out.append(
            (
                f"build of {line.key}, warm: CPU / wall (limit: hash, central directory, raw copy)",
                f"{cpu:.3f} s / {wall:.3f} s",
                f"limit {lim_cpu:.3f} s / {lim_wall:.3f} s, {cpu / lim_cpu:.1f}x its CPU; median of {repeat}",
            )
        )
    newest = project.line("transformers", project.sets["latest"]["transformers"])
    select = [f"{newest.package}=={newest.version}"]
    full = tmp / "full"
    build_mod.build(project, fresh(full) / "dist", **quiet)
    pairs = []
    for _ in range(repeat):
        one = measured(lambda: build_mod.build(project, full / "dist", select=select, **quiet))
        alone = measured(lambda: build_mod.build(project, fresh(tmp / "alone") / "dist", select=select, **quiet))
        pairs.append((one, alone))
    ratio = statistics.median(one[0] / alone[0] for one, alone in pairs)
    out.append(
        (
            f"`build {select[0]}` with the other lines in dist/, against the same build into an empty dist/",
            f"{ratio:.2f}x CPU",
            f"CPU {statistics.median(o[0] for o, _ in pairs):.3f} s against "
            f"{statistics.median(a[0] for _, a in pairs):.3f} s (wall {statistics.median(o[1] for o, _ in pairs):.3f} "
            f"s against {statistics.median(a[1] for _, a in pairs):.3f} s); median of {repeat} pairs; target: 1.2x",
        )
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        found = rows(args.root.resolve(), args.repeat, Path(tmp))
    print("| measurement | result | note |\n|---|---|---|")
    for r in found:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
