"""Benchmarks, as ratios measured in one run (the README has the headline, docs/benchmarks.md all of them).

    nox -s bench            (or: python bench/bench.py, with setuptools and wheel installed)

1. wheel rewrite from a warm cache (the build's route) against the patched-sdist route: unpack the pinned sdist,
   apply the same series with git apply, `pip wheel --no-deps --no-build-isolation` it. Same series, same machine,
   same run; build isolation is off so the sdist route is not charged for installing setuptools.
2. `nox -s build` wall time, cold (empty download cache, no dist/) and warm.
3. the matrix check's text classification of a whole series against one release, from a warm cache.
4. runtime overhead of the fixes: `from_pretrained(ckpt, device_map="auto")` of a ~100 MB Llama checkpoint in a
   pristine and a +fixed environment (made once under bench/.venvs/, from the verified cache and dist/),
   alternating rounds, as the ratio of medians.
5. cost of the opt-in dispatch diagnosis (accelerate `ACCELERATE_DIAGNOSE_DISPATCH`): `dispatch_model` of a
   synthetic module with a 3,000-entry device map (21,000 tensors, all on cpu) in a pristine accelerate 1.15.0
   environment and a +fixed one (bench/.venvs/), the switch off and on, alternating rounds, ratios of medians.
6. the whole upstream matrix (`patchwheel matrix`: text for every cell, proofs where a verdict can change,
   bisection, the rest inferred) in a copy of the project, with both cores: warm (the wheels and environments
   cached) and, with --matrix cold, from an empty wheel, environment and uv cache as well.
7. from "a release is on the index" to "its line is proven and written": `patchwheel follow transformers` in a copy
   of the project one release back (its newest transformers line carried back onto the release before, the sets
   and the matrix as before the newest release), so the newest release is new to it again: wall and CPU time, and
   follow's timed steps (`--follow only`: this alone).
8. what the build costs per line, CPU and wall, against the physical limit measured in the same run (hash the
   pinned wheel, read its central directory, copy every member raw), and a one-line build with the other lines in
   dist/ against the same build into an empty dist/ (bench/buildcost.py, which also runs alone).
9. a mechanical derive (`patchwheel derive transformers==4.57.3`: carried from the line that applies best without a
   maintainer's step, judged, its matrix, lint, build, proven both ways with its guards) in a copy of the project:
   warm, and cold (empty wheel, environment and uv caches, as on a fresh machine), wall and CPU
   (`--derive only`: this alone; `--derive-spec` another release).
"""

from __future__ import annotations

import argparse
import json
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

from patchwheel import config, series  # noqa: E402
from patchwheel.maint.upstream import textcheck  # noqa: E402
from patchwheel.maint.workrepo import release_files  # noqa: E402
from patchwheel.wheels import build as build_mod  # noqa: E402
from patchwheel.wheels import fetch  # noqa: E402
from patchwheel.wheels.apply import git_env  # noqa: E402
from patchwheel.wheels.distdir import wheel_file  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import buildcost  # noqa: E402


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


_built: dict[Path, list] = {}


def _build(tmp: Path) -> list:
    """Every line of the overlay built once per run into tmp/dist."""
    if tmp not in _built:
        _built[tmp] = build_mod.build(config.load(ROOT), tmp / "dist", log=lambda m: None)
    return _built[tmp]


def load_overhead(tmp: Path, rounds: int) -> tuple[float, float]:
    project = config.load(ROOT)
    line = project.line("transformers", project.sets["default"]["transformers"])
    acc = project.line("accelerate", project.sets["default"]["accelerate"])
    pristine = _env("pristine", [str(fetch.fetch(ln.package, ln.wheel)) for ln in (line, acc)])
    built = _build(tmp)
    fixed = _env("fixed", [str(wheel_file(tmp / "dist", b.filename)) for b in built if b.line in (line, acc)])
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


def buffers_overhead(tmp: Path, rounds: int) -> tuple[float, float]:
    """`from_pretrained` of a model with 256 non-persistent buffers that its `_init_weights` sets
    (bench/buffers_load_time.py) on the `latest` set's pristine transformers and on its +fixed build: T5's cost on the
    ordinary path, alternating."""
    project = config.load(ROOT)
    lines = [project.line(pkg, project.sets["latest"][pkg]) for pkg in ("transformers", "accelerate")]
    pristine = _env("pristine-latest", [str(fetch.fetch(ln.package, ln.wheel)) for ln in lines])
    fixed = _env("fixed-latest", [str(wheel_file(tmp / "dist", b.filename)) for b in _build(tmp) if b.line in lines])
    script, ckpt = str(ROOT / "bench" / "buffers_load_time.py"), str(tmp / "tables")
    subprocess.run([pristine, script, "save", ckpt], check=True, capture_output=True)
    p: list[float] = []
    f: list[float] = []
    for _ in range(rounds):  # alternate, so drift hits both alike
        for py, out in ((pristine, p), (fixed, f)):
            res = subprocess.run([py, script, "time", ckpt, "5"], check=True, capture_output=True, text=True)
            out.append(float(res.stdout.strip().splitlines()[-1]))
    return statistics.median(p), statistics.median(f)


DISPATCH_ENTRIES = 3000
DISPATCH_SWITCH = "ACCELERATE_DIAGNOSE_DISPATCH"


def dispatch_times(pristine: str, fixed: str, rounds: int, repeat: int = 3) -> dict[str, float]:
    """`dispatch_model` times (bench/dispatch_time.py, the fastest of `repeat` calls per process) per patches:
    pristine, +fixed with the diagnosis switch off, +fixed with it on. The three alternate in every round, so drift
    hits them alike; the ratios are the medians of each round's own ratios (paired), the times the medians."""
    env = {k: v for k, v in os.environ.items() if k != DISPATCH_SWITCH}
    patches = (("pristine", pristine, env), ("off", fixed, env), ("on", fixed, {**env, DISPATCH_SWITCH: "1"}))
    times: dict[str, list[float]] = {name: [] for name, _, _ in patches}
    for _ in range(rounds):
        for name, py, e in patches:
            res = subprocess.run(
                [py, str(ROOT / "bench" / "dispatch_time.py"), str(DISPATCH_ENTRIES), str(repeat)],
                check=True,
                capture_output=True,
                text=True,
                env=e,
            )
            times[name].append(float(res.stdout.strip().splitlines()[-1]))
    result = {name: statistics.median(t) for name, t in times.items()}
    for name in ("off", "on"):
        result[f"{name}_ratio"] = statistics.median(f / p for f, p in zip(times[name], times["pristine"], strict=True))
    result["off_ratio_max"] = max(f / p for f, p in zip(times["off"], times["pristine"], strict=True))
    return result


def dispatch_overhead(tmp: Path, rounds: int) -> dict[str, float]:
    project = config.load(ROOT)
    acc = project.line("accelerate", project.sets["latest"]["accelerate"])
    pristine = _env("dispatch-pristine", [str(fetch.fetch(acc.package, acc.wheel))])
    fixed = _env("dispatch-fixed", [str(wheel_file(tmp / "dist", b.filename)) for b in _build(tmp) if b.line == acc])
    return dispatch_times(pristine, fixed, rounds)


def dispatch_rows(t: dict[str, float], rounds: int, version: str) -> list[tuple[str, str, str]]:
    what = f"`dispatch_model`, {DISPATCH_ENTRIES:,}-entry device map, {DISPATCH_ENTRIES * 7:,} tensors on cpu"
    return [
        (f"{what}: pristine accelerate {version}", f"{t['pristine'] * 1000:.0f} ms", f"median of {rounds} rounds"),
        (f"... {version}+fixed, diagnosis switch off", f"{t['off'] * 1000:.0f} ms", "same module, alternating"),
        (f"... {version}+fixed, `{DISPATCH_SWITCH}=1`", f"{t['on'] * 1000:.0f} ms", "same module, alternating"),
        (
            "dispatch ratio fixed (switch off) / pristine",
            f"{t['off_ratio']:.3f}",
            f"median of the {rounds} rounds' ratios (largest {t['off_ratio_max']:.3f}); target: at most 1.05",
        ),
        ("dispatch ratio fixed (switch on) / pristine", f"{t['on_ratio']:.3f}", "linear diagnosis"),
    ]


def matrix_run(tmp: Path, env: dict[str, str]) -> tuple[float, str]:
    """`patchwheel matrix` over every line and release, in a copy of the project (the committed matrix is left
    alone): its wall time, and what it judged."""
    root = tmp / "project"
    shutil.rmtree(root, ignore_errors=True)
    ignore = shutil.ignore_patterns("__pycache__", ".mypy_cache", "MATRIX.*")
    for part in ("overlay", "patches", "tests/proof"):
        shutil.copytree(ROOT / part, root / part, ignore=ignore)
    cmd = [sys.executable, "-m", "patchwheel", "--root", str(root), "matrix", "run", "--workers", "2"]
    t = time.perf_counter()
    subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **env}, check=True)
    seconds = time.perf_counter() - t
    matrix = json.loads((root / "patches" / "MATRIX.json").read_text())
    cells = [c for ln in matrix["lines"] for p in ln["patches"] for c in p["cells"].values()]
    run = {
        (ln["line"], v)
        for ln in matrix["lines"]
        for p in ln["patches"]
        for v, c in p["cells"].items()
        if c["behaviour"] not in (None, "n/a") and "inferred_from" not in c
    }
    inferred = sum("inferred_from" in c for c in cells)
    unjudged = sum(c["behaviour"] is None for c in cells)
    return (
        seconds,
        f"{len(cells)} cells: {len(run)} line x release proof runs, {inferred} inferred, {unjudged} unjudged",
    )


def _project_copy(root: Path) -> Path:
    """A copy of the project's files that the carry commands read and write (no caches), at ``root``, made anew."""
    from patchwheel.maint.carry.scratch import READS
    from patchwheel.writeback import WRITES

    shutil.rmtree(root, ignore_errors=True)
    for part in WRITES + READS:
        if (ROOT / part).is_dir():
            shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        elif (ROOT / part).is_file():
            shutil.copy(ROOT / part, root / part)
    return root


def follow_project(tmp: Path, package: str = "transformers") -> tuple[Path, str, str]:
    """A copy of the project one release back for ``package``: its newest line carried back onto the release before
    it (the same patches, with `carry.engine.carry_line`, so today's proofs and guards hold for it), the sets that named
    the newest line naming that one, the newest line removed and the newest release's columns left out of the
    matrix, as before that release was published. (The copy of the tree before the newest line was added, which
    this bench used before, pairs today's proofs with older patches: its proving step failed.) The root, the line
    carried back to and the release `follow` then finds new."""
    from packaging.version import Version

    from patchwheel.configfiles import remove_release, set_member
    from patchwheel.maint.carry import engine
    from patchwheel.wheels import vendored

    root = _project_copy(tmp / "follow-project")
    project = config.load(root)
    newest = project.line(package)
    back = [v for v, _, yanked in fetch.releases(package) if Version(v) < Version(newest.version) and not yanked][-1]
    if engine.carry_line(project, newest, back, dropped={}, by="derive", log=lambda m: None) is None:
        raise SystemExit(f"{newest.key} does not carry back onto {back} without a conflict")
    shutil.rmtree(newest.patch_dir)
    remove_release(project.pins_file(package), newest.version)
    for name, members in project.sets.items():
        if members.get(package) == newest.version:
            set_member(project.sets_file, name, package, back)
    vendored.write(config.load(root), log=lambda m: None)
    status = json.loads(project.matrix_json.read_text())
    status["lines"] = [ln for ln in status["lines"] if ln["line"] != newest.key]
    for ln in status["lines"]:
        if ln["line"].startswith(f"{package}/"):
            ln["releases"] = [r for r in ln["releases"] if r["version"] != newest.version]
            for row in ln["patches"]:
                row["cells"].pop(newest.version, None)
    project.matrix_json.write_text(json.dumps(status, indent=1) + "\n")
    return root, back, newest.version


def follow_run(tmp: Path, package: str = "transformers") -> tuple[float, float, str, list[str]]:
    """`patchwheel follow <package>` in :func:`follow_project`'s copy: the wall time, the CPU time (user + sys of
    the process and everything it waited for), what it said last, and its timed lines (``[  12.3s] ...``)."""
    root, _, _ = follow_project(tmp, package)
    cmd = [sys.executable, "-m", "patchwheel", "--root", str(root), "follow", package]
    before = _children_cpu()
    t = time.perf_counter()
    ran = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True)
    seconds, cpu = time.perf_counter() - t, _children_cpu() - before
    said = [ln for ln in ran.stdout.splitlines() if ln.startswith(f"{package}: ")]
    steps = [ln for ln in ran.stdout.splitlines() if ln.startswith("[")]
    return seconds, cpu, (said[-1] if said and ran.returncode == 0 else f"exit {ran.returncode}: {ran.stdout}"), steps


def derive_run(tmp: Path, spec: str, env: dict[str, str], name: str) -> tuple[float, float, str, list[str]]:
    """`patchwheel derive <spec>` in a copy of the project (its files only: what derive reads and writes), with
    ``env`` added (an empty cache for a cold run): the wall time, the CPU time (user + sys of the process and
    everything it waited for), what it said last, and its timed lines."""
    root = _project_copy(tmp / name)
    cmd = [sys.executable, "-m", "patchwheel", "--root", str(root), "derive", spec]
    before = _children_cpu()
    t = time.perf_counter()
    ran = subprocess.run(
        cmd, env={**os.environ, **env, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True
    )
    seconds, cpu = time.perf_counter() - t, _children_cpu() - before
    steps = [ln for ln in ran.stdout.splitlines() if ln.startswith("[")]
    what = steps[-1] if steps and ran.returncode == 0 else f"exit {ran.returncode}: {ran.stdout[-2000:]}"
    return seconds, cpu, what, steps


def derive_rows(tmp: Path, spec: str, which: str) -> list[tuple[str, str, str]]:
    rows = []
    cold = {"PATCHWHEEL_CACHE": str(tmp / "derive-cache"), "UV_CACHE_DIR": str(tmp / "derive-uv")}
    runs: list[tuple[str, dict[str, str]]] = [] if which == "warm" else [("cold", cold)]
    if which != "cold":
        runs.append(("warm", {}))
    for kind, env in runs:
        seconds, cpu, what, steps = derive_run(tmp, spec, env, f"derive-{kind}")
        print("\n".join(steps))
        note = "empty wheel, environment and uv caches" if kind == "cold" else "wheels and environments cached"
        rows.append((f"`patchwheel derive {spec}`, {kind} ({note})", f"{seconds:.0f} s, CPU {cpu:.0f} s", what))
    return rows


def _children_cpu() -> float:
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5, help="runs of the fast route")
    ap.add_argument("--sdist-repeat", type=int, default=2, help="runs of the slow sdist route")
    ap.add_argument("--nox", default=shutil.which("nox"), help="nox executable for the cold/warm build timing")
    ap.add_argument("--load-rounds", type=int, default=5, help="alternating rounds of the load-time comparison")
    ap.add_argument(
        "--matrix",
        choices=("warm", "cold", "both", "none"),
        default="warm",
        help="time the whole upstream matrix (warm: about 10 min on 2 cores; cold adds the downloads)",
    )
    ap.add_argument(
        "--dispatch-rounds",
        type=int,
        default=0,
        help="alternating rounds of the dispatch_model comparison (0: skip; 3 rounds take about 80 s)",
    )
    ap.add_argument(
        "--follow",
        choices=("warm", "none", "only"),
        default="warm",
        help="time `patchwheel follow transformers` from the tree one release back (about 2 min; only: nothing else)",
    )
    ap.add_argument(
        "--derive",
        choices=("warm", "cold", "both", "none", "only"),
        default="none",
        help="time a mechanical `patchwheel derive` in a copy of the project (only: cold then warm, nothing else)",
    )
    ap.add_argument("--derive-spec", default="transformers==4.57.3", help="the release --derive derives")
    args = ap.parse_args()
    if args.derive == "only":
        with tempfile.TemporaryDirectory() as tmp_name:
            rows = derive_rows(Path(tmp_name), args.derive_spec, "only")
        print("| measurement | result | note |\n|---|---|---|")
        for r in rows:
            print(f"| {r[0]} | {r[1]} | {r[2]} |")
        return 0
    if args.follow == "only":
        with tempfile.TemporaryDirectory() as tmp_name:
            seconds, cpu, what, steps = follow_run(Path(tmp_name))
        print("\n".join(steps) + f"\n\nfollow: {seconds:.1f} s wall, {cpu:.1f} s CPU; {what}")
        return 0
    project = config.load(ROOT)
    line = project.line("transformers", project.sets["default"]["transformers"])
    patches = series.parse_series(line)
    fetch.fetch(line.package, line.wheel)  # warm the cache: route 1 is timed from a warm cache
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        fast = timed(lambda: build_mod.build_line(line, _fresh(tmp / "w"), log=lambda m: None), args.repeat)
        slow = timed(lambda: sdist_route(line, patches, tmp / "s"), args.sdist_repeat)
        f, s = statistics.median(fast), statistics.median(slow)
        rows.append(("transformers wheel, warm cache: rewrite (this build)", f"{f:.2f} s", f"median of {len(fast)}"))
        rows.append(
            ("transformers wheel, warm cache: patched sdist + pip wheel", f"{s:.2f} s", f"median of {len(slow)}")
        )
        rows.append(("speed-up of the rewrite", f"{s / f:.1f}x", "target: at least 5x, rewrite at most 2 s"))
        rows += buildcost.rows(ROOT, args.repeat, tmp / "cost")
        target = {v: a for v, a, _ in fetch.releases(line.package)}["4.53.3"]
        touched = sorted({t for p in patches for t in p.touched})
        old = {k: v for k, v in release_files(line, touched).items() if v is not None}
        release_files(line, touched, target)  # warm the cache

        def classify():
            textcheck.classify(patches, old, release_files(line, touched, target))

        tc = statistics.median(timed(classify, args.repeat))
        rows.append(
            (
                f"text classification, {len(patches)}-patch {line.key} series vs 4.53.3, warm cache",
                f"{tc:.2f} s",
                f"median of {args.repeat}; target: at most 2 s",
            )
        )
        if args.nox:
            env = {**os.environ, "PATCHWHEEL_CACHE": str(tmp / "cold-cache")}
            dist = tmp / "dist"

            def nox_build() -> None:
                cmd = [args.nox, "-s", "build", "--", "--dist", str(dist)]
                subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)

            cold = timed(nox_build, 1)[0]
            warm = timed(
                nox_build,
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
            p, f = buffers_overhead(tmp, args.load_rounds)
            note = f"CPU time of a load, median of {args.load_rounds} rounds x 5 loads, alternating"
            what = "`from_pretrained` of 256 blocks with a non-persistent table each, 5.24.0"
            rows.append((what, f"{p * 1000:.0f} ms", note))
            rows.append(("... on 5.24.0+fixed (T5 copies and compares each table)", f"{f * 1000:.0f} ms", note))
            rows.append(("T5's load-time ratio fixed / pristine", f"{f / p:.3f}", "within noise: about 1"))
        if args.dispatch_rounds:
            acc_version = project.sets["latest"]["accelerate"]
            rows += dispatch_rows(dispatch_overhead(tmp, args.dispatch_rounds), args.dispatch_rounds, acc_version)
        if args.matrix in ("warm", "both"):
            seconds, what = matrix_run(tmp, {})
            rows.append(("whole upstream matrix, warm (wheels and environments cached)", f"{seconds:.0f} s", what))
        if args.matrix in ("cold", "both"):
            empty = {"PATCHWHEEL_CACHE": str(tmp / "matrix-cache"), "UV_CACHE_DIR": str(tmp / "matrix-uv")}
            seconds, what = matrix_run(tmp, empty)
            rows.append(("whole upstream matrix, cold (empty wheel, environment, uv caches)", f"{seconds:.0f} s", what))
        if args.follow == "warm":
            seconds, cpu, what, steps = follow_run(tmp)
            print("\n".join(steps))
            rows.append(
                (
                    "`patchwheel follow transformers`: a new release to a proven, written line, warm",
                    f"{seconds:.0f} s, CPU {cpu:.0f} s",
                    f"target: at most 2 min; {what}",
                )
            )
        if args.derive != "none":
            rows += derive_rows(tmp, args.derive_spec, args.derive)
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
