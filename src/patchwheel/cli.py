"""Thin command line: the parser and the entry point; every command is one call into the library
(commands.py for the pipeline's, maint_commands.py for the maintenance tools')."""

from __future__ import annotations

import argparse
import functools
import importlib
import signal
import sys
from pathlib import Path

from .errors import PatchwheelError

# The parser names each command's function as "module.function" and imports it only when that command runs: `--help`
# (and a command's own `-h`) then imports none of the library (torchaxis, config, packaging's requirements, the
# matrix), which every proof and guard session would pay for at each start (a tool test checks it).


def _terminated(signum, frame) -> None:
    """SIGTERM (a CI runner's cancel, `kill`) ends the command as Ctrl-C does: what it made goes (a scratch copy, a
    half-staged folder), and a step that holds interrupts finishes first."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    from . import torchaxis

    torchaxis.use_suite_torch(Path(args.root))
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return function(args.func)(args)
    except PatchwheelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # only build promises something about dist/ (it swaps dist/ in one step, at its end)
        print("interrupted; dist/ is unchanged" if args.cmd == "build" else "interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def function(name: str):
    """The function of a command, named "module.function" (a module of this package), imported now."""
    module, _, func = name.rpartition(".")
    return getattr(importlib.import_module(f".{module}", __package__), func)


#: What each command does, as `patchwheel --help` lists it.
HELP = {
    "build": "build +fixed wheels, a PEP 503 index and consumer pins into dist/",
    "lint": "check series and patch files (trailers, names, files), the matrix, the build records, the sets' torch "
    "and the vendored modules in overlay/",
    "bump": "record a changed series under the line's next wheel build number (refresh, new and rebase do it)",
    "status": "which transformers/accelerate are installed, which fixes they carry, and which known bugs affect "
    "them (exit 1: a known bug applies or a patched file was changed)",
    "verify": "rebuild +fixed wheels (files or URLs) from the commit that recorded each build and compare: exit 0 "
    "verified, 1 one differs (its members named)",
    "prove": "prove a consumer set: its proofs on the pristine pins and on the +fixed builds (each after the "
    "status check), and its guards, pristine against +fixed (exit 1: a run failed)",
    "matrix": "the patch x release matrix, by text and by behaviour: run, check, rerender",
    "matrix run": "judge newer releases and merge them into the committed matrix",
    "matrix check": "compare a fresh run with the committed matrix (exit 1 where it is stale)",
    "matrix rerender": "rewrite the committed matrix with the current trailers and flags, running nothing",
    "watch": "the upstream watch's three steps in CI: list, cell, merge",
    "watch list": "the (line, release) cells newer than the committed matrix, as JSON",
    "watch cell": "check one cell (text and proofs) into a fragment file",
    "watch merge": "merge the cells' fragments into the committed matrix",
    "watch torch": "whether the torch source has a torch newer than [torch] newest of overlay/sets.toml (exit 1)",
    "follow": "carry each package's newest line onto the newer upstream releases, where nothing needs judgement "
    "(exit 1: a package stopped, with the commands a maintainer runs)",
    "derive": "make a release line for a release users run, from the line that carries most by itself, proven both "
    "ways (exit 1: it stopped, with the commands a maintainer runs)",
    "vendor": "write overlay/<pkg>/<version>/: the fixed modules, from the pinned wheel and the series",
    "rebase": "write patches/<pkg>/<version>/ from the newest line of <pkg>, judged by follow's policy, unproven "
    "(exit 1: it stopped, with the commands a maintainer runs)",
    "refresh": "fold the edits of overlay/<pkg>/<version>/ into one patch (message and trailers kept)",
    "new": "make the edits of overlay/<pkg>/<version>/ a new patch, with stubs of its proof, guards and upstream-pr/",
    "export": "a patch as what a contributor sends upstream: mbox with upstream's test, PR.md (ISSUE.md)",
    "tables": "write the fix tables of README.md and docs/fixes.md from the series and their trailers",
    "diagnose": "load a checkpoint with device_map='auto' and say why generate() may stall",
    "mutants": "revert each patch hunk alone and run its proof: which hunk does no test need?",
    "upstream-suite": "upstream's own tests on the pristine release and the +fixed build",
    "base-env": "make the test sessions' shared torch environment when missing; print its site-packages",
}
LINES_HELP = "pkg or pkg==version (default: every release line)"


def _command(subparsers, func: str, name: str, *, lines: bool = False, line: bool = False) -> argparse.ArgumentParser:
    """A subcommand whose arguments reach ``func``: with ``lines``, the release lines it works on (all by
    default); with ``line``, one line, as package and version."""
    command = subparsers.add_parser(name.split()[-1], help=HELP[name])
    command.set_defaults(func=func)
    if lines:
        command.add_argument("lines", nargs="*", help=LINES_HELP)
    if line:
        command.add_argument("package")
        command.add_argument("version")
    return command


def _verbs(subparsers, name: str):
    """A command made of verbs (``matrix run``): the subparsers of its verbs."""
    return subparsers.add_parser(name, help=HELP[name]).add_subparsers(dest="verb", required=True)


def _matrix_commands(sub) -> None:
    matrix = _verbs(sub, "matrix")
    run = _command(matrix, "maint_commands.cmd_matrix_run", "matrix run")
    run.add_argument("releases", nargs="*", help="e.g. transformers==4.53.3 'accelerate>=1.10' (default: all newer)")
    run.add_argument("--every", action="store_true", help="run proofs on every selected release: nothing inferred")
    run.add_argument(
        "--new-torch",
        action="store_true",
        help="judge the whole matrix again under this run's torch (TORCH_VERSION), replacing the committed one",
    )
    check = _command(matrix, "maint_commands.cmd_matrix_check", "matrix check")
    check.add_argument("releases", nargs="*", help="e.g. transformers==4.54.0 (default: all newer)")
    check.add_argument(
        "--transitions",
        action="store_true",
        help="select the smallest set of releases covering every Drop-When transition of the committed matrix",
    )
    for verb in (run, check):
        verb.add_argument(
            "--behaviour",
            action="append",
            help="run proofs on exactly these releases (default for run: where a verdict can change, bisecting "
            "between them; the other cells are inferred)",
        )
        verb.add_argument("--text-only", action="store_true", help="skip the proof tests")
        verb.add_argument("--workers", type=int, default=2)
    _command(matrix, "maint_commands.cmd_matrix_rerender", "matrix rerender")
    watch = _verbs(sub, "watch")
    _command(watch, "maint_commands.cmd_watch_list", "watch list")
    _command(watch, "maint_commands.cmd_watch_torch", "watch torch")
    cell = _command(watch, "maint_commands.cmd_watch_cell", "watch cell")
    cell.add_argument("release", nargs="*", help="the cell's release, e.g. transformers==5.25.0")
    cell.add_argument("--line", help="the release line, e.g. transformers/5.24.0")
    cell.add_argument("--fragment", metavar="FILE", help="the fragment to write")
    cell.add_argument("--workers", type=int, default=2)
    merge = _command(watch, "maint_commands.cmd_watch_merge", "watch merge")
    merge.add_argument("fragments", nargs="+", metavar="FRAGMENT")
    merge.add_argument("--cells", metavar="FILE", help="the cells `watch list` printed: all it merges")


def _maintenance_commands(sub) -> None:
    follow = _command(sub, "maint_commands.cmd_follow", "follow")
    follow.add_argument("packages", nargs="*", help="e.g. transformers (default: every package)")
    follow.add_argument("--report", metavar="FILE", help="also write what it did as Markdown (a pull request's body)")
    follow.add_argument("--pending", action="store_true", help="print the packages with a newer release, as JSON")
    derive = _command(sub, "maint_commands.cmd_derive", "derive")
    derive.add_argument("release", help="pkg==version, e.g. transformers==4.57.6")
    derive.add_argument(
        "--from", dest="source", metavar="VERSION", help="the line to carry (default: the one that applies best)"
    )
    derive.add_argument("--set", dest="set_name", help="the consumer set naming the line (default: v<major>.<minor>)")
    derive.add_argument(
        "--with",
        dest="companions",
        action="append",
        default=[],
        metavar="PKG==VERSION",
        help="a new set pairs the line with this line of another package (default: its newest), e.g. "
        "transformers==4.57.6 for a set of teams on transformers 4",
    )
    derive.add_argument(
        "--review",
        action="store_true",
        help="stop once every patch is carried, before the build and the proofs: each carried commit waits in the "
        "work repository for you to check (a 3-way merge is text) and amend, then --continue",
    )
    then = derive.add_mutually_exclusive_group()
    then.add_argument("--continue", dest="cont", action="store_true", help="go on after resolving a conflict")
    then.add_argument("--abort", action="store_true", help="drop the work folder a conflict left")
    derive.add_argument(
        "--new",
        action="append",
        default=[],
        metavar="SLUG",
        help="with --continue: a fix you committed in the work repository on top of the carried patches, as a new "
        "patch of the line (one --new a commit, in order)",
    )
    rebase = _command(sub, "maint_commands.cmd_rebase", "rebase", line=True)
    goon = rebase.add_mutually_exclusive_group()
    goon.add_argument("--continue", dest="cont", action="store_true", help="go on after resolving a conflict")
    goon.add_argument("--abort", action="store_true", help="drop the work folder a conflict left")
    rebase.add_argument(
        "--text-only", action="store_true", help="run no proof: drop nothing, stop where text is upstream"
    )
    rebase.add_argument("--reexport", action="store_true", help="re-export the line's patches (after hand edits)")
    refresh = _command(sub, "maint_commands.cmd_refresh", "refresh", line=True)
    refresh.add_argument("patch", help="its slug, file name or number, e.g. name-meta-tensors or 0002")
    new = _command(sub, "maint_commands.cmd_new", "new", line=True)
    new.add_argument("slug", help="the patch's name, e.g. fix-warmup-tp-plan")
    new.add_argument("--feature", action="store_true", help="a capability (Feature-Test), not a bug fix")
    export = _command(sub, "maint_commands.cmd_export", "export")
    export.add_argument("patch", help="slug or file name, e.g. prepare-refuses-dtensor-ddp")
    export.add_argument("--author", help='"Name <email>" of the commit (default: git config user.name, user.email)')
    export.add_argument("--out", help="folder (default: <root>/export)")
    tables = _command(sub, "maint_commands.cmd_tables", "tables")
    tables.add_argument("--check", action="store_true", help="write nothing; exit 1 when a table is stale, naming it")
    mutants = _command(sub, "maint_commands.cmd_mutants", "mutants", lines=True)
    mutants.add_argument("--out", help="also write the table to this file")
    mutants.add_argument("--patch", help="only the hunks of this patch (slug, file name or number), e.g. a new one")
    suite = _command(sub, "maint_commands.cmd_upstream_suite", "upstream-suite", lines=True)
    suite.add_argument("--dist", help="folder holding the +fixed wheels (default: <root>/dist)")
    suite.add_argument("--out", help="keep the junit reports, logs and summary.json here")
    _command(sub, "maint_commands.cmd_base_env", "base-env")
    _prove_command(sub)


def _prove_command(sub) -> None:
    prove = _command(sub, "maint_commands.cmd_prove", "prove")
    prove.add_argument("--set", required=True, help="the consumer set, e.g. latest (overlay/sets.toml)")
    chain = prove.add_mutually_exclusive_group()
    chain.add_argument("--pristine", action="store_true", help="only the proofs on the pristine pins")
    chain.add_argument("--fixed", action="store_true", help="only the proofs on the +fixed builds")
    chain.add_argument("--guards", action="store_true", help="only the guards, pristine against +fixed")
    prove.add_argument(
        "--package", action="append", default=[], help="only the proofs and guards of this package's line (repeatable)"
    )
    prove.add_argument("--dist", help="folder holding the +fixed wheels (default: <root>/dist)")
    prove.add_argument(
        "--fixed-env",
        metavar="DIR",
        help="make the +fixed builds' environment here (default: cached); a proof a companion's known bug masks is "
        "judged again in DIR-unmasked-<companion> beside it",
    )
    prove.add_argument("pytest", nargs="*", metavar="-- PYTEST-ARGS", help="passed to every pytest run, e.g. -- -k t3")


@functools.cache
def parser() -> argparse.ArgumentParser:
    """The command line: every command, its options and the function that runs it. Made once a process (20 ms:
    argparse looks up a translation of each of its messages), since parsing changes nothing in it."""
    ap = argparse.ArgumentParser(prog="patchwheel", description=__doc__)
    ap.add_argument("--root", default=".", help="project root (holds overlay/ and patches/)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    build = _command(sub, "commands.cmd_build", "build", lines=True)
    build.add_argument("--dist", help="output folder (default: <root>/dist)")
    build.add_argument("--clean", action="store_true", help="replace dist/ even if it holds another patch set")
    _command(sub, "commands.cmd_lint", "lint", lines=True)
    _command(sub, "commands.cmd_bump", "bump", lines=True)
    status = _command(sub, "commands.cmd_status", "status")
    status.add_argument("--python", help="interpreter of the environment to inspect (default: this one)")
    status.add_argument("--json", action="store_true")
    verify = _command(sub, "commands.cmd_verify", "verify")
    verify.add_argument(
        "wheels", nargs="+", metavar="wheel", help="a +fixed wheel: its file, or its http(s):// or file:// URL"
    )
    verify.add_argument("--commit", help="rebuild from this commit (default: the one that recorded the build)")
    vendor = _command(sub, "commands.cmd_vendor", "vendor", lines=True)
    vendor.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs, naming it")
    vendor.add_argument("--force", action="store_true", help="overwrite modules edited by hand (the edits are lost)")
    diagnose = _command(sub, "commands.cmd_diagnose", "diagnose")
    diagnose.add_argument("checkpoint")
    diagnose.add_argument("--python", help="interpreter of the environment to use (default: this one)")
    diagnose.add_argument("--max-memory", nargs="*", help="DEVICE=SIZE, as from_pretrained's (0=20GiB cpu=8GiB)")
    diagnose.add_argument("--offload-folder")
    _matrix_commands(sub)
    _maintenance_commands(sub)
    return ap


if __name__ == "__main__":
    sys.exit(main())
