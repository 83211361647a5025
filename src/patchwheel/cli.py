"""Thin command line: the parser and the entry point; every command is one call into the library
(commands.py for the pipeline's, maint_commands.py for the maintenance tools')."""

from __future__ import annotations

import argparse
import sys

from .commands import (
    cmd_build,
    cmd_bump,
    cmd_diagnose,
    cmd_guards,
    cmd_lint,
    cmd_requirements,
    cmd_status,
    cmd_vendor,
)
from .errors import PatchwheelError
from .maint_commands import (
    cmd_export,
    cmd_follow,
    cmd_mutants,
    cmd_new,
    cmd_rebase,
    cmd_refresh,
    cmd_upstream_check,
    cmd_upstream_rerender,
    cmd_upstream_run,
    cmd_upstream_suite,
    cmd_watch_cell,
    cmd_watch_list,
    cmd_watch_merge,
)
from .matrix import WHERE

#: The spellings of the matrix commands before they became verbs, and what each is now (for one release).
OLD_SPELLINGS = {
    "--list-new": ("watch", "list"),
    "--fragment": ("watch", "cell"),
    "--merge": ("watch", "merge"),
    "--check": ("upstream", "check"),
    "--rerender": ("upstream", "rerender"),
}


def modernize(argv: list[str]) -> list[str]:
    """``upstream --check ...`` and the other old spellings as the verbs they are now, with a line on standard
    error that says so; ``upstream <releases>`` is ``upstream run <releases>``. Other command lines pass as they
    are."""
    at = 0
    while at < len(argv) and argv[at].startswith("--root"):  # the one option before the command
        at += 1 if "=" in argv[at] else 2
    if argv[at : at + 1] != ["upstream"] or argv[at + 1 : at + 2] in (["run"], ["check"], ["rerender"]):
        return argv
    head, rest = argv[:at], argv[at + 1 :]
    flag = next((f for f in OLD_SPELLINGS if f in rest), None)
    command, verb = OLD_SPELLINGS[flag] if flag else ("upstream", "run")
    if flag in ("--check", "--rerender", "--list-new", "--merge"):  # a mode: the flag itself goes
        rest = [a for a in rest if a != flag]
    old = f"upstream {flag}" if flag else "upstream [releases]"
    print(f"patchwheel: `{old}` is now `{command} {verb}`; the old spelling goes in the next release", file=sys.stderr)
    return head + [command, verb] + rest


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(modernize(list(sys.argv[1:] if argv is None else argv)))
    try:
        return args.func(args)
    except PatchwheelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # only build promises something about dist/ (it swaps dist/ in one step, at its end)
        print("interrupted; dist/ is unchanged" if args.cmd == "build" else "interrupted", file=sys.stderr)
        return 130


def parser() -> argparse.ArgumentParser:
    """The command line: every command, its options and the function that runs it."""
    ap = argparse.ArgumentParser(prog="patchwheel", description=__doc__)
    ap.add_argument("--root", default=".", help="project root (holds overlay/ and patches/)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build +fixed wheels, a PEP 503 index and consumer pins into dist/")
    b.add_argument("lines", nargs="*", help="pkg or pkg==version (default: every release line)")
    b.add_argument("--dist", help="output folder (default: <root>/dist)")
    b.add_argument("--clean", action="store_true", help="replace dist/ even if it holds another patch set")
    b.set_defaults(func=cmd_build)
    li = sub.add_parser("lint", help="check series and patch files (trailers, names, files)")
    li.add_argument("lines", nargs="*")
    li.set_defaults(func=cmd_lint)
    bu = sub.add_parser(
        "bump",
        help="record a changed series under the line's next wheel build number (refresh, new and rebase do it)",
    )
    bu.add_argument("lines", nargs="*", help="pkg or pkg==version (default: every release line)")
    bu.set_defaults(func=cmd_bump)
    s = sub.add_parser(
        "status",
        help="which transformers/accelerate are installed, which fixes they carry, and which known bugs affect them"
        " (exit 1: a known bug applies or a patched file was changed)",
    )
    s.add_argument("--python", help="interpreter of the environment to inspect (default: this one)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_status)
    r = sub.add_parser("requirements", help="pip requirement lines for a consumer set (used by noxfile.py)")
    r.add_argument("flavor", choices=("pristine", "fixed"))
    r.add_argument("--set", default="default")
    r.add_argument("-o", "--output", help="write the lines to this file")
    r.set_defaults(func=cmd_requirements)
    g = sub.add_parser("guards", help="the guard modules of a consumer set's patches (used by noxfile.py)")
    g.add_argument("--set", default="default")
    g.set_defaults(func=cmd_guards)
    u = sub.add_parser("upstream", help="the patch x release matrix, by text and by behaviour: run, check, rerender")
    uv = u.add_subparsers(dest="verb", required=True)
    ur = uv.add_parser("run", help=f"judge newer releases and merge them into {WHERE}")
    ur.add_argument("releases", nargs="*", help="e.g. transformers==4.53.3 'accelerate>=1.10' (default: all newer)")
    ur.add_argument(
        "--behaviour",
        action="append",
        help="run proofs on exactly these releases (default: where a verdict can change, bisecting between them; "
        "the other cells are inferred)",
    )
    ur.add_argument("--every", action="store_true", help="run proofs on every selected release: nothing inferred")
    ur.add_argument("--text-only", action="store_true", help="skip the proof tests")
    ur.add_argument("--workers", type=int, default=2)
    ur.set_defaults(func=cmd_upstream_run)
    uc = uv.add_parser("check", help="compare a fresh run with the committed matrix (exit 1 where it is stale)")
    uc.add_argument("releases", nargs="*", help="e.g. transformers==4.54.0 (default: all newer)")
    uc.add_argument(
        "--transitions",
        action="store_true",
        help="select the smallest set of releases covering every Drop-When transition of the committed matrix",
    )
    uc.add_argument("--behaviour", action="append", help="run proofs on exactly these releases")
    uc.add_argument("--text-only", action="store_true", help="skip the proof tests")
    uc.add_argument("--workers", type=int, default=2)
    uc.set_defaults(func=cmd_upstream_check)
    ue = uv.add_parser("rerender", help=f"rewrite {WHERE} with the current trailers and flags, running nothing")
    ue.set_defaults(func=cmd_upstream_rerender)
    w = sub.add_parser("watch", help="the upstream watch's three steps in CI: list, cell, merge")
    wv = w.add_subparsers(dest="verb", required=True)
    wl = wv.add_parser("list", help="the (line, release) cells newer than the committed matrix, as JSON")
    wl.set_defaults(func=cmd_watch_list)
    wc = wv.add_parser("cell", help="check one cell (text and proofs) into a fragment file")
    wc.add_argument("release", nargs="*", help="the cell's release, e.g. transformers==5.25.0")
    wc.add_argument("--line", help="the release line, e.g. transformers/5.24.0")
    wc.add_argument("--fragment", metavar="FILE", help="the fragment to write")
    wc.add_argument("--workers", type=int, default=2)
    wc.set_defaults(func=cmd_watch_cell)
    wm = wv.add_parser("merge", help=f"merge the cells' fragments into {WHERE}")
    wm.add_argument("fragments", nargs="+", metavar="FRAGMENT")
    wm.add_argument("--cells", metavar="FILE", help="the cells `watch list` printed: all it merges")
    wm.set_defaults(func=cmd_watch_merge)
    fo = sub.add_parser(
        "follow",
        help="carry each package's newest line onto the newer upstream releases, where nothing needs judgement "
        "(exit 1: a package stopped, with the commands a maintainer runs)",
    )
    fo.add_argument("packages", nargs="*", help="e.g. transformers (default: every package)")
    fo.add_argument("--report", metavar="FILE", help="also write what it did as Markdown (a pull request's body)")
    fo.add_argument(
        "--pending", action="store_true", help="print the packages with a newer release, as JSON; change nothing"
    )
    fo.set_defaults(func=cmd_follow)
    ve = sub.add_parser(
        "vendor", help="write overlay/<pkg>/<version>/: the fixed modules, from the pinned wheel and the series"
    )
    ve.add_argument("lines", nargs="*", help="pkg or pkg==version (default: every release line)")
    ve.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs, naming it")
    ve.add_argument("--force", action="store_true", help="overwrite modules edited by hand (the edits are lost)")
    ve.set_defaults(func=cmd_vendor)
    rb = sub.add_parser("rebase", help="write patches/<pkg>/<version>/ from the newest line of <pkg>")
    rb.add_argument("package")
    rb.add_argument("version")
    rb.add_argument("--continue", dest="cont", action="store_true", help="go on after resolving a conflict")
    rb.add_argument("--text-only", action="store_true", help="do not drop patches whose proof passes upstream")
    rb.add_argument("--refresh", action="store_true", help="re-export the existing line's patches (after hand edits)")
    rb.set_defaults(func=cmd_rebase)
    rf = sub.add_parser(
        "refresh", help="fold the edits of overlay/<pkg>/<version>/ into one patch (message and trailers kept)"
    )
    rf.add_argument("package")
    rf.add_argument("version")
    rf.add_argument("patch", help="its slug, file name or number, e.g. name-meta-tensors or 0002")
    rf.set_defaults(func=cmd_refresh)
    nw = sub.add_parser("new", help="make the edits of overlay/<pkg>/<version>/ a new patch, with a test stub")
    nw.add_argument("package")
    nw.add_argument("version")
    nw.add_argument("slug", help="the patch's name, e.g. fix-warmup-tp-plan")
    nw.add_argument("--feature", action="store_true", help="a capability (Feature-Test), not a bug fix")
    nw.set_defaults(func=cmd_new)
    ex = sub.add_parser(
        "export", help="a patch as what a contributor sends upstream: mbox with upstream's test, PR.md (ISSUE.md)"
    )
    ex.add_argument("patch", help="slug or file name, e.g. prepare-refuses-dtensor-ddp")
    ex.add_argument(
        "--author", help='"Name <email>" of the exported commit (default: git config user.name and user.email)'
    )
    ex.add_argument("--out", help="folder (default: <root>/export)")
    ex.set_defaults(func=cmd_export)
    dg = sub.add_parser("diagnose", help="load a checkpoint with device_map='auto' and say why generate() may stall")
    dg.add_argument("checkpoint")
    dg.add_argument("--python", help="interpreter of the environment to use (default: this one)")
    dg.add_argument("--max-memory", nargs="*", help="DEVICE=SIZE, as from_pretrained's max_memory (0=20GiB cpu=8GiB)")
    dg.add_argument("--offload-folder")
    dg.set_defaults(func=cmd_diagnose)
    mu = sub.add_parser("mutants", help="revert each patch hunk alone and run its proof: which hunk does no test need?")
    mu.add_argument("lines", nargs="*", help="pkg or pkg==version (default: every release line)")
    mu.add_argument("--out", help="also write the Markdown table to this file")
    mu.set_defaults(func=cmd_mutants)
    us = sub.add_parser("upstream-suite", help="upstream's own tests on the pristine release and the +fixed build")
    us.add_argument("lines", nargs="*", help="pkg or pkg==version (default: every release line)")
    us.add_argument("--dist", help="folder holding the +fixed wheels (default: <root>/dist)")
    us.add_argument("--out", help="keep the junit reports, logs and summary.json here")
    us.set_defaults(func=cmd_upstream_suite)
    return ap


if __name__ == "__main__":
    sys.exit(main())
