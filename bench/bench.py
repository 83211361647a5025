"""Benchmarks, as ratios measured in one run (results go into the README).

    nox -s bench            (or: python bench/bench.py, with setuptools and wheel installed)

1. wheel rewrite from a warm cache (the build's route) against the patched-sdist route: unpack the pinned sdist,
   apply the same series with git apply, `pip wheel --no-deps --no-build-isolation` it. Same series, same machine,
   same run; build isolation is off so the sdist route is not charged for installing setuptools.
2. `nox -s build` wall time, cold (empty download cache, no dist/) and warm.
3. the upstream check's text classification of a whole series against one release, from a warm cache.
4. runtime overhead of the fixes: `from_pretrained(ckpt, device_map="auto")` of a ~100 MB Llama checkpoint in a
   pristine and a +fixed environment (made once under bench/.venvs/, from the verified cache and dist/),
   alternating rounds, as the ratio of medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from patchwheel import build as build_mod  # noqa: E402
from patchwheel import (  # noqa: E402
    config,
    fetch,
    patches,
    textcheck,  # noqa: E402
)
from patchwheel.apply import git_env  # noqa: E402
from patchwheel.upstream import upstream_files  # noqa: E402


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def sdist_route(line, series, work: Path) -> None:
    sdist = fetch.fetch(line.package, line.sdist)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with tarfile.open(sdist) as tf:
        tf.extractall(work, filter="data")
    (src,) = [p for p in work.iterdir() if p.is_dir()]
    for p in series:
        subprocess.run(["git", "apply", str(p.path)], cwd=src, env=git_env(src), check=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(work / "out"),
            str(src),
        ],
        check=True,
        env={**os.environ, "PIP_NO_INDEX": "1"},
    )


def _env(name: str, wheels: list[str]) -> str:
    """A virtual environment under bench/.venvs/ with torch and the given wheels (made once, then reused)."""
    import venv

    path = ROOT / "bench" / ".venvs" / name
    py = path / "bin" / "python"
    marker = path / "installed.txt"
    want = "\n".join(wheels)
    if not (py.exists() and marker.is_file() and marker.read_text() == want):
        shutil.rmtree(path, ignore_errors=True)
        venv.create(path, with_pip=True)
        torch = f"torch=={os.environ.get('TORCH_VERSION', '2.13.0')}"
        subprocess.run([str(py), "-m", "pip", "install", "-q", *wheels, torch], check=True)
        marker.write_text(want)
    return str(py)


def load_overhead(tmp: Path, rounds: int) -> tuple[float, float]:
    overlay = config.load(ROOT)
    line = overlay.line("transformers", overlay.sets["default"]["transformers"])
    acc = overlay.line("accelerate", overlay.sets["default"]["accelerate"])
    pristine = _env("pristine", [str(fetch.fetch(ln.package, ln.wheel)) for ln in (line, acc)])
    built = build_mod.build(overlay, tmp / "dist", log=lambda m: None)
    fixed = _env("fixed", [str(tmp / "dist" / b.filename) for b in built if b.line in (line, acc)])
    ckpt = tmp / "ckpt"
    subprocess.run(
        [
            pristine,
            "-c",
            f"""
import torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=8000, hidden_size=512, intermediate_size=1376, num_hidden_layers=6,
                  num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=False)
LlamaForCausalLM(cfg).save_pretrained({str(ckpt)!r})
""",
        ],
        check=True,
        capture_output=True,
    )
    p: list[float] = []
    f: list[float] = []
    for _ in range(rounds):  # alternate, so drift hits both alike
        for py, out in ((pristine, p), (fixed, f)):
            res = subprocess.run(
                [py, str(ROOT / "bench" / "load_time.py"), str(ckpt), "5"], check=True, capture_output=True, text=True
            )
            out.append(float(res.stdout.strip().splitlines()[-1]))
    return statistics.median(p), statistics.median(f)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5, help="runs of the fast route")
    ap.add_argument("--sdist-repeat", type=int, default=2, help="runs of the slow sdist route")
    ap.add_argument("--nox", default=shutil.which("nox"), help="nox executable for the cold/warm build timing")
    ap.add_argument("--load-rounds", type=int, default=5, help="alternating rounds of the load-time comparison")
    args = ap.parse_args()
    overlay = config.load(ROOT)
    line = overlay.line("transformers", overlay.sets["default"]["transformers"])
    series = patches.load_series(line)
    fetch.fetch(line.package, line.wheel)  # warm the cache: route 1 is timed from a warm cache
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        fast = timed(lambda: build_mod.build_line(line, _fresh(tmp / "w"), log=lambda m: None), args.repeat)
        slow = timed(lambda: sdist_route(line, series, tmp / "s"), args.sdist_repeat)
        f, s = statistics.median(fast), statistics.median(slow)
        rows.append(("transformers wheel, warm cache: rewrite (this build)", f"{f:.2f} s", f"median of {len(fast)}"))
        rows.append(
            ("transformers wheel, warm cache: patched sdist + pip wheel", f"{s:.2f} s", f"median of {len(slow)}")
        )
        rows.append(("speed-up of the rewrite", f"{s / f:.1f}x", "target: at least 5x, rewrite at most 2 s"))
        target = {v: a for v, a, _ in fetch.releases(line.package)}["4.53.3"]
        touched = sorted({t for p in series for t in p.touched})
        old = {k: v for k, v in upstream_files(line.package, line.wheel, line, touched).items() if v is not None}
        upstream_files(line.package, target, line, touched)  # warm the cache

        def classify():
            textcheck.classify(series, old, upstream_files(line.package, target, line, touched))

        tc = statistics.median(timed(classify, args.repeat))
        rows.append(
            (
                f"text classification, {len(series)}-patch {line.key} series vs 4.53.3, warm cache",
                f"{tc:.2f} s",
                f"median of {args.repeat}; target: at most 2 s",
            )
        )
        if args.nox:
            env = {**os.environ, "PATCHWHEEL_CACHE": str(tmp / "cold-cache")}
            dist = tmp / "dist"
            cold = timed(
                lambda: subprocess.run(
                    [args.nox, "-s", "build", "--", "--dist", str(dist)],
                    cwd=ROOT,
                    env=env,
                    check=True,
                    capture_output=True,
                ),
                1,
            )[0]
            warm = timed(
                lambda: subprocess.run(
                    [args.nox, "-s", "build", "--", "--dist", str(dist)],
                    cwd=ROOT,
                    env=env,
                    check=True,
                    capture_output=True,
                ),
                3,
            )
            rows.append(("`nox -s build`, cold (empty cache: downloads the pinned wheels)", f"{cold:.2f} s", "1 run"))
            rows.append(
                (
                    "`nox -s build`, warm (every line built and verified, index, pins)",
                    f"{statistics.median(warm):.2f} s",
                    "median of 3",
                )
            )
        if args.load_rounds:
            p, f = load_overhead(tmp, args.load_rounds)
            rows.append(
                (
                    '`from_pretrained(device_map="auto")`, 100 MB Llama: pristine 4.50.3',
                    f"{p * 1000:.0f} ms",
                    f"median of {args.load_rounds} rounds x 5 loads",
                )
            )
            rows.append(("... the same on 4.50.3+fixed", f"{f * 1000:.0f} ms", "same checkpoint, alternating"))
            rows.append(("load-time ratio fixed / pristine", f"{f / p:.3f}", "within noise: about 1"))
    print(f"\nbenchmark on {os.cpu_count()} cores, Python {sys.version.split()[0]}\n")
    print("| measurement | result | note |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    return 0


def _fresh(p: Path) -> Path:
    shutil.rmtree(p, ignore_errors=True)
    p.mkdir(parents=True)
    return p


if __name__ == "__main__":
    sys.exit(main())
