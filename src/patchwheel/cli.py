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

from . import buildno, config, patches, status
from .errors import PatchwheelError

if TYPE_CHECKING:
    from .build import Published


def _root(args) -> Path:
    return Path(args.root).resolve()


def cmd_build(args) -> int:
    from .build import build, published

    overlay = config.load(_root(args))
    dist = (Path(args.dist) if args.dist else _root(args) / "dist").resolve()
    built = build(overlay, dist, select=args.lines, clean=args.clean)
    wheels = published(dist)
    kept = f" (and kept {len(wheels) - len(built)} of the previous build)" if len(wheels) > len(built) else ""
    print(f"wrote {len(built)} wheel(s){kept}, simple index and pins to {dist}/")
    for name in sorted(overlay.sets):
        print(_consumer_line(name, overlay.sets[name], wheels, dist))
    return 0


def _consumer_line(name: str, members: dict[str, str], wheels: list[Published], dist: Path) -> str:
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
    import json

    from .maint import submission
    from .maint.upstream import matrix_problems

    overlay = config.load(_root(args))
    status_json = overlay.root / "patches" / "STATUS.json"
    matrix = json.loads(status_json.read_text()) if status_json.is_file() else {}
    newest = {overlay.lines[pkg][-1].key for pkg in overlay.packages()}
    bad = 0
    for line in overlay.select(args.lines):
        problems = patches.lint_line(line, _root(args))
        if not problems:
            problems = matrix_problems(line, patches.load_series(line), matrix)
        if not problems and (why := buildno.problem(line)):
            problems = [why]
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
    status_json = overlay.root / "patches" / "STATUS.json"
    matrix = json.loads(status_json.read_text()) if status_json.is_file() else {}
    knownbugs.annotate(overlay, matrix, rep)
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
            modules.update(patches.guard_modules(patch))
    print("\n".join(sorted(modules)))
    return 0


def cmd_upstream(args) -> int:
    from .maint import upstream, watch

    if args.cells and not args.merge:
        raise PatchwheelError(
            "--cells is the list of cells --merge takes", "add --merge FRAGMENT..., or leave out --cells"
        )
    if args.list_new or args.merge or args.fragment:
        return _watch(args, upstream, watch)
    if args.line:
        raise PatchwheelError("--line names the line of one --fragment", "add --fragment FILE, or leave out --line")
    if args.transitions and not args.check:
        raise PatchwheelError(
            "--transitions selects the releases of a staleness check", "add --check (nox -s upstream_check does)"
        )
    if args.text_only and args.behaviour:
        raise PatchwheelError(
            "--behaviour selects releases for proof runs, and --text-only runs none", "leave out one of them"
        )
    if args.every and (args.behaviour or args.text_only):
        raise PatchwheelError("--every runs proofs on every selected release", "leave out --behaviour/--text-only")
    overlay = config.load(_root(args))
    if args.transitions:
        if args.releases:
            raise PatchwheelError("--transitions selects the releases itself", "leave out the releases, or it")
        status_json = overlay.root / "patches" / "STATUS.json"
        if not status_json.is_file():
            raise PatchwheelError(f"{status_json} does not exist", "run `nox -s upstream` and commit the result")
        args.releases = upstream.transition_releases(json.loads(status_json.read_text()))
        if not args.releases:
            print("the committed matrix has no Drop-When transition: nothing to check")
            return 0
        print(f"the releases of every Drop-When transition: {' '.join(args.releases)}")
    behaviour = None if args.text_only else upstream.Selection.parse(args.behaviour or args.releases)
    return upstream.run(
        overlay,
        upstream.Selection.parse(args.releases),
        behaviour,
        check=args.check,
        workers=args.workers,
        rerender_only=args.rerender,
        bisect=not (args.behaviour or args.every),
    )


def _watch(args, upstream, watch) -> int:
    """The three steps of the upstream watch in CI (maint/watch.py)."""
    modes = [m for m in ("list_new", "merge", "fragment") if getattr(args, m)]
    others = [o for o in ("behaviour", "every", "text_only", "check", "rerender", "transitions") if getattr(args, o)]
    if len(modes) > 1 or others:
        flags = ", ".join("--" + o.replace("_", "-") for o in modes + others)
        raise PatchwheelError(f"{flags} cannot be combined", "use one of --list-new, --fragment, --merge alone")
    overlay = config.load(_root(args))
    if args.list_new:
        if args.releases or args.line:
            raise PatchwheelError("--list-new takes no releases or --line", "run it alone")
        print(json.dumps(watch.list_new(overlay)))
        return 0
    if args.fragment:
        if not args.line or len(args.releases) != 1 or not args.releases[0].count("=="):
            raise PatchwheelError(
                "--fragment checks one cell", "name it: --line transformers/5.23.0 transformers==5.24.0 --fragment F"
            )
        pkg, _, release = args.releases[0].partition("==")
        if canonicalize_name(pkg) != canonicalize_name(args.line.split("/")[0]):
            raise PatchwheelError(f"{args.releases[0]} is not a release of the line {args.line}", "name one of its")
        try:
            release = str(Version(release))
        except InvalidVersion as exc:
            raise PatchwheelError(f"{release!r} is not a version", "write e.g. transformers==5.24.0") from exc
        watch.write_fragment(overlay, args.line, release, Path(args.fragment), args.workers)
        return 0
    if args.releases or args.line:
        raise PatchwheelError("--merge takes fragment files only", "e.g. --merge fragments/*/*.json --cells cells.json")
    if not args.cells:
        raise PatchwheelError(
            "--merge needs --cells: the list step's cells, which are all it merges",
            "save what `patchwheel upstream --list-new` printed in the same run, and pass it: --cells cells.json",
        )
    matrix, attention = watch.merge(overlay, [Path(f) for f in args.merge], Path(args.cells))
    upstream.write_matrix(overlay.root / "patches" / "STATUS.json", matrix)
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


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
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
    u = sub.add_parser("upstream", help="patch x release matrix by text and by behaviour -> patches/STATUS.*")
    u.add_argument("releases", nargs="*", help="e.g. transformers==4.53.3 'accelerate>=1.10' (default: all newer)")
    u.add_argument(
        "--behaviour",
        action="append",
        help="run proofs on exactly these releases (default: where a verdict can change, bisecting between them; "
        "the other cells are inferred)",
    )
    u.add_argument("--every", action="store_true", help="run proofs on every selected release: nothing inferred")
    u.add_argument(
        "--transitions",
        action="store_true",
        help="select the smallest set of releases covering every Drop-When transition of the committed matrix",
    )
    u.add_argument("--list-new", action="store_true", help="the (line, release) cells newer than the matrix, as JSON")
    u.add_argument("--line", help="with --fragment: the release line, e.g. transformers/5.23.0")
    u.add_argument("--fragment", metavar="FILE", help="check one cell (--line and one pkg==release) into FILE")
    u.add_argument("--merge", nargs="+", metavar="FRAGMENT", help="merge fragments into patches/STATUS.*")
    u.add_argument(
        "--cells", metavar="FILE", help="with --merge: the cells --list-new printed; only fragments of those are merged"
    )
    u.add_argument("--text-only", action="store_true", help="skip the proof tests")
    u.add_argument("--check", action="store_true", help="compare with the committed matrix instead of writing")
    u.add_argument("--workers", type=int, default=2)
    u.add_argument(
        "--rerender",
        action="store_true",
        help="rewrite patches/STATUS.* with the current trailers and flags, running nothing",
    )
    u.set_defaults(func=cmd_upstream)
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
