"""Thin command line: every command is one call into the library."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from . import buildno, config, patches, status, trailers
from .errors import ConfigError, PatchwheelError
from .matrix import WHERE

if TYPE_CHECKING:
    from .distdir import DistWheel


def _root(args) -> Path:
    return Path(args.root).resolve()


def cmd_build(args) -> int:
    from .build import build
    from .distdir import dist_wheels

    overlay = config.load(_root(args))
    dist = (Path(args.dist) if args.dist else _root(args) / "dist").resolve()
    built = build(overlay, dist, select=args.lines, clean=args.clean)
    wheels = dist_wheels(dist)
    kept = f" (and kept {len(wheels) - len(built)} of the previous build)" if len(wheels) > len(built) else ""
    print(f"wrote {len(built)} wheel(s){kept}, simple index and pins to {dist}/")
    for name in sorted(overlay.sets):
        print(_consumer_line(name, overlay.sets[name], wheels, dist))
    return 0


def _consumer_line(name: str, members: dict[str, str], wheels: list[DistWheel], dist: Path) -> str:
    """The install line of one consumer set, naming only files that exist: a set whose lines are not all in dist/
    has no constraints file, so say which lines it lacks instead."""
    constraints = dist / f"constraints-{name}.txt"
    if constraints.is_file():
        return (
            f"  consumers ({name}): pip install --extra-index-url file://{dist}/simple -c {constraints} "
            "transformers accelerate"
        )
    have = {(w.package, w.upstream_version) for w in wheels}
    missing = " ".join(f"{pkg}=={ver}" for pkg, ver in members.items() if (pkg, ver) not in have)
    return f"  consumers ({name}): not in {dist}/ yet, it lacks {missing} (patchwheel build {missing})"


def cmd_lint(args) -> int:
    from .lint import line_problems
    from .maint import submission
    from .matrix import Matrix

    overlay = config.load(_root(args))
    matrix = Matrix.load(overlay.status_json)
    newest = {overlay.lines[pkg][-1].key for pkg in overlay.packages()}
    bad = 0
    for line in overlay.select(args.lines):
        problems = line_problems(overlay, line, matrix)
        if not problems and line.key in newest:  # what export sends upstream: upstream-pr/<pkg>/<slug>/
            problems = submission.line_problems(overlay.root, line)
        n = len(patches.series_names(line)) if not problems else "?"
        print(f"{line.key}: {'ok' if not problems else 'FAILED'} ({n} patch(es))")
        for p in problems:
            print(f"  - {p}")
        bad += len(problems)
    return 1 if bad else 0


def cmd_bump(args) -> int:
    overlay = config.load(_root(args))
    for line in overlay.select(args.lines):
        buildno.bump(overlay, line)
    return 0


def _interpreter(python: str) -> str:
    """--python checked before it is run: a missing or non-executable path ended in a subprocess traceback."""
    hint = "pass the python of the environment, e.g. .venv/bin/python"
    path = python if os.sep in python else shutil.which(python)
    if path is None:
        raise PatchwheelError(f"no interpreter named {python} on PATH", hint)
    if not os.path.exists(path):
        raise PatchwheelError(f"no interpreter at {python}", hint)
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise PatchwheelError(f"{python} is not executable", hint)
    return path


def _run(cmd: list[str]) -> int:
    return _spawn(cmd).returncode


def _spawn(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, **kw)
    except OSError as exc:  # e.g. an executable text file with no #! line
        raise PatchwheelError(
            f"cannot run {cmd[0]}: {exc.strerror or exc}", "pass the python of the environment, e.g. .venv/bin/python"
        ) from exc


def cmd_status(args) -> int:
    import json

    from . import knownbugs
    from .matrix import Matrix

    overlay = config.load(_root(args))
    names = list(status.PACKAGES) + [p for p in overlay.packages() if p not in status.PACKAGES]
    if args.python:  # run the stdlib-only probe inside that environment (a venv python is a symlink: no shortcut)
        python = _interpreter(args.python)
        # -I: no PYTHON* variables, user site or script folder; -S: no site start-up, so no .pth file runs
        probe = [python, "-I", "-S", status.__file__, "--json", *names]
        ran = _spawn(probe, capture_output=True, text=True, errors="replace")  # (anything may come back)
        hint = "pass the python of an environment (Python 3.8 or newer), e.g. .venv/bin/python"
        try:
            rep = json.loads(ran.stdout)
        except ValueError:
            said = (ran.stderr.strip() or ran.stdout.strip()).splitlines()
            raise PatchwheelError(
                f"{args.python} could not run the status probe: {said[-1] if said else '(it printed nothing)'}", hint
            ) from None
        if (why := status.report_problem(rep, names)) is not None:
            raise PatchwheelError(f"{args.python} printed a status report of an unexpected shape: {why}", hint)
    else:
        rep = status.report(names)
    knownbugs.annotate(overlay, Matrix.load(overlay.status_json), rep)
    if args.json:
        print(json.dumps(rep, indent=2))
    else:
        print(status.render(rep))
        if extra := knownbugs.render(rep):
            print(extra)
    damaged = any(p.get("problems") for p in rep["packages"])
    return 1 if damaged or knownbugs.affected(rep) else 0


def cmd_requirements(args) -> int:
    """Requirement lines for one consumer set: the verified pristine wheels, or the +fixed pins."""
    from . import fetch

    overlay = config.load(_root(args))
    if args.set not in overlay.sets:
        raise PatchwheelError(f"unknown set {args.set!r}", f"sets in overlay/sets.toml: {', '.join(overlay.sets)}")
    out = []
    for pkg, version in overlay.sets[args.set].items():
        line = overlay.line(pkg, version)
        if args.flavor == "pristine":  # the exact pinned upstream file, sha256-verified, from the cache
            out.append(str(fetch.fetch(line.package, line.wheel, log=lambda m: print(m, file=sys.stderr))))
        else:
            out.append(f"{line.package}=={line.fixed_version}")
    text = "\n".join(out) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        print(text, end="")
    return 0


def cmd_guards(args) -> int:
    """The guard modules of a consumer set: every Guard-Test of the patches its release lines carry."""
    from . import patches

    overlay = config.load(_root(args))
    if args.set not in overlay.sets:
        raise PatchwheelError(f"unknown set {args.set!r}", f"sets in overlay/sets.toml: {', '.join(overlay.sets)}")
    modules = set()
    for pkg, version in overlay.sets[args.set].items():
        for patch in patches.load_series(overlay.line(pkg, version)):
            modules.update(trailers.guard_modules(patch))
    print("\n".join(sorted(modules)))
    return 0


def _releases_and_proofs(args):
    """The release selection and the releases to run proofs on, from `upstream run`'s options."""
    from .maint.selection import Selection

    if args.text_only and args.behaviour:
        raise ConfigError(
            "--behaviour selects releases for proof runs, and --text-only runs none", "leave out one of them"
        )
    if getattr(args, "every", False) and (args.behaviour or args.text_only):
        raise ConfigError("--every runs proofs on every selected release", "leave out --behaviour/--text-only")
    behaviour = None if args.text_only else Selection.parse(args.behaviour or args.releases)
    return Selection.parse(args.releases), behaviour


def cmd_upstream_run(args) -> int:
    from .maint import upstream

    overlay = config.load(_root(args))
    selection, behaviour = _releases_and_proofs(args)
    bisect = not (args.behaviour or args.every)
    upstream.run(overlay, selection, behaviour, workers=args.workers, bisect=bisect)
    return 0


def cmd_upstream_check(args) -> int:
    from . import matrix_checks
    from .maint import upstream
    from .matrix import Matrix

    overlay = config.load(_root(args))
    if args.transitions:
        if args.releases:
            raise ConfigError("--transitions selects the releases itself", "leave out the releases, or it")
        args.releases = matrix_checks.transition_releases(Matrix.require(overlay.status_json))
        if not args.releases:
            print("the committed matrix has no Drop-When transition: nothing to check")
            return 0
        print(f"the releases of every Drop-When transition: {' '.join(args.releases)}")
    args.every = False
    selection, behaviour = _releases_and_proofs(args)
    diffs, releases = upstream.check(overlay, selection, behaviour, workers=args.workers)
    for d in diffs:
        print(f"stale: {d}")
    if diffs:
        print(f"the committed matrix is stale: run `nox -s upstream` and commit {WHERE}")
        return 1
    print(f"the committed matrix agrees with a fresh run on {releases} release(s)")
    return 0


def cmd_upstream_rerender(args) -> int:
    from .maint import upstream

    overlay = config.load(_root(args))
    upstream.rerender(overlay)
    print(f"wrote {overlay.status_json} and {overlay.status_json.with_suffix('.md')}")
    return 0


def cmd_watch_list(args) -> int:
    from .maint import watch

    print(json.dumps(watch.list_new(config.load(_root(args)))))
    return 0


def cmd_watch_cell(args) -> int:
    from .maint import watch

    if not args.line or not args.fragment or len(args.release) != 1 or not args.release[0].count("=="):
        raise ConfigError(
            "`watch cell` checks one cell", "name it: --line transformers/5.24.0 transformers==5.25.0 --fragment F"
        )
    pkg, _, release = args.release[0].partition("==")
    if canonicalize_name(pkg) != canonicalize_name(args.line.split("/")[0]):
        raise ConfigError(f"{args.release[0]} is not a release of the line {args.line}", "name one of its")
    try:
        release = str(Version(release))
    except InvalidVersion as exc:
        raise ConfigError(f"{release!r} is not a version", "write e.g. transformers==5.24.0") from exc
    watch.write_fragment(config.load(_root(args)), args.line, release, Path(args.fragment), args.workers)
    return 0


def cmd_watch_merge(args) -> int:
    from .maint import watch

    if not args.cells:
        raise ConfigError(
            "`watch merge` needs --cells: the list step's cells, which are all it merges",
            "save what `patchwheel watch list` printed in the same run, and pass it: --cells cells.json",
        )
    overlay = config.load(_root(args))
    matrix, attention = watch.merge(overlay, [Path(f) for f in args.fragments], Path(args.cells))
    matrix.save(overlay.status_json)
    print(f"wrote {overlay.status_json} and {overlay.status_json.with_suffix('.md')}")
    for line in attention:
        print(f"needs a maintainer: {line}")
    if attention:
        print("no pull request: rebase first, then run the watch again")
        return 1
    return 0


def cmd_follow(args) -> int:
    from .maint import follow, followreport, setruns

    overlay = config.load(_root(args))
    if args.pending:
        if args.report:
            raise PatchwheelError("--pending changes nothing and writes no report", "leave out --report")
        print(json.dumps([pkg for pkg, releases in follow.pending(overlay, args.packages).items() if releases]))
        return 0
    results = follow.follow(overlay, args.packages, setruns.prove_set)
    for done in results:
        for line in followreport.summary(done):
            print(line)
    if args.report:
        body = "\n".join(followreport.markdown(done) for done in results if done.releases)
        Path(args.report).write_text(body or "Nothing new upstream.\n")
    return 1 if any(done.stop for done in results) else 0


def cmd_vendor(args) -> int:
    from . import vendored

    overlay = config.load(_root(args))
    lines = overlay.select(args.lines) if args.lines else None
    if args.check:
        problems = vendored.check(overlay, lines)
        for problem in problems:
            print(f"  - {problem}")
        n = len(lines) if lines is not None else len(overlay.all_lines())
        print(f"overlay/: {'FAILED' if problems else 'ok'} ({n} release line(s) compared with pristine + series)")
        return 1 if problems else 0
    changed = vendored.write(overlay, lines, force=args.force)
    print(f"overlay/: {len(changed)} path(s) written or removed" if changed else "overlay/: up to date")
    return 0


def cmd_rebase(args) -> int:
    from .maint import rebase

    overlay = config.load(_root(args))
    if args.refresh:
        return rebase.refresh(overlay, args.package, args.version)
    if args.cont:
        code = rebase.resume(overlay, args.package, args.version)
    else:
        code = rebase.start(overlay, args.package, args.version, behaviour=not args.text_only)
    if code == 0:
        print("next: prove the line both ways (add a set to overlay/sets.toml, then `nox -s proof`)")
    return code


def cmd_refresh(args) -> int:
    from .maint import refresh

    return refresh.refresh(config.load(_root(args)), args.package, args.version, args.patch)


def cmd_new(args) -> int:
    from .maint import refresh

    return refresh.new(config.load(_root(args)), args.package, args.version, args.slug, feature=args.feature)


def cmd_export(args) -> int:
    from .maint import export

    export.export(config.load(_root(args)), args.patch, Path(args.out) if args.out else None, author=args.author)
    return 0


def cmd_diagnose(args) -> int:
    import json

    from . import diagnose_probe

    memory = {}
    for item in args.max_memory or []:
        device, sep, size = item.partition("=")
        if not sep or not size:
            raise PatchwheelError(f"--max-memory {item!r} is not DEVICE=SIZE", "e.g. --max-memory 0=20GiB cpu=64GiB")
        memory[device] = size
    cmd = [
        _interpreter(args.python) if args.python else sys.executable,
        "-I",
        diagnose_probe.__file__,
        args.checkpoint,
        json.dumps(memory),
        args.offload_folder or "",
    ]
    return _run(cmd)


def cmd_mutants(args) -> int:
    from .maint import mutants

    return mutants.run(config.load(_root(args)), args.lines, Path(args.out) if args.out else None)


def cmd_upstream_suite(args) -> int:
    from .maint import upstream_suite

    overlay = config.load(_root(args))
    dist = (Path(args.dist) if args.dist else _root(args) / "dist").resolve()
    return upstream_suite.run(overlay, args.lines, dist, Path(args.out).resolve() if args.out else None)


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
