"""The maintenance commands (upstream, watch, follow, rebase, refresh, new, export, tables, mutants,
upstream-suite): each decides only its exit status and what to print; the work is one call into patchwheel.maint.
cli.py holds the parser."""

from __future__ import annotations

import json
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from . import config
from .commands import root
from .errors import ConfigError
from .matrix.table import WHERE

#: The exit status of every door of the carry engine (rebase, derive, follow) that stopped where a maintainer takes
#: it from here (it printed why, and their commands); 2 is a refused command (bad input), 0 a line written.
STOPPED = 1


def _releases_and_proofs(args):
    """The release selection and the releases to run proofs on, from `matrix run`'s options."""
    from .maint.upstream.selection import Selection

    if args.text_only and args.behaviour:
        raise ConfigError(
            "--behaviour selects releases for proof runs, and --text-only runs none", "leave out one of them"
        )
    if getattr(args, "every", False) and (args.behaviour or args.text_only):
        raise ConfigError("--every runs proofs on every selected release", "leave out --behaviour/--text-only")
    behaviour = None if args.text_only else Selection.parse(args.behaviour or args.releases)
    return Selection.parse(args.releases), behaviour


def cmd_matrix_run(args) -> int:
    from .maint.upstream import matrixrun as upstream

    project = config.load(root(args))
    if args.new_torch and (args.releases or args.behaviour or args.text_only):
        raise ConfigError(
            "--new-torch judges the whole matrix again, and replaces it", "leave out the releases and --behaviour"
        )
    selection, behaviour = _releases_and_proofs(args)
    bisect = not (args.behaviour or args.every)
    lines = upstream.check_lines(project, selection, behaviour, workers=args.workers, bisect=bisect)
    upstream.record(project, lines, new_torch=args.new_torch)
    return 0


def cmd_matrix_check(args) -> int:
    from .maint.upstream import matrixrun as upstream
    from .matrix import checks as matrix_checks
    from .matrix.table import Matrix

    project = config.load(root(args))
    if args.transitions:
        if args.releases:
            raise ConfigError("--transitions selects the releases itself", "leave out the releases, or it")
        args.releases = matrix_checks.transition_releases(Matrix.require(project.matrix_json))
        if not args.releases:
            print("the committed matrix has no Drop-When transition: nothing to check")
            return 0
        print(f"the releases of every Drop-When transition: {' '.join(args.releases)}")
    args.every = False
    selection, behaviour = _releases_and_proofs(args)
    findings, releases = upstream.check(project, selection, behaviour, workers=args.workers)
    said = {"stale": "stale", "unjudged": "could not judge", "torch": "another torch"}
    for f in findings:
        print(f"{said[f.kind]}: {f.text}")
    kinds = {f.kind for f in findings}
    if "unjudged" in kinds:
        print(
            "some releases could not be judged, which says nothing of the matrix: make their environments (the "
            "package index, TORCH_SOURCE and TORCH_VERSION) and run the check again"
        )
    if "torch" in kinds:
        print(
            "a verdict differs under this run's torch, which is not a stale matrix: look at the proof under both "
            "torch releases before changing the patch or the matrix"
        )
    if "stale" in kinds:
        print(f"the committed matrix is stale: run `nox -s matrix` and commit {WHERE}")
    if findings:
        return 1
    print(f"the committed matrix agrees with a fresh run on {releases} release(s)")
    return 0


def cmd_matrix_rerender(args) -> int:
    from .maint.upstream import matrixrun as upstream

    project = config.load(root(args))
    upstream.rerender(project)
    print(f"wrote {project.matrix_json} and {project.matrix_json.with_suffix('.md')}")
    return 0


def cmd_watch_list(args) -> int:
    from .maint.upstream import watch

    print(json.dumps(watch.list_new(config.load(root(args)))))
    return 0


def cmd_watch_torch(args) -> int:
    """The newest torch release the torch source has for this Python, against [torch] newest: every set is to be
    proven on the newest torch, so a newer one is work for a maintainer (exit 1)."""
    from .maint.proving import proofenv, torchsource

    project = config.load(root(args))
    if project.torch is None:
        print(f"{project.sets_file} has no [torch]: nothing to watch")
        return 0
    src = torchsource.source(proofenv.pip_find_links())
    newest = max((Version(v.public) for v in torchsource.available(src)), default=None)
    if newest is None or newest <= Version(project.torch.newest):
        print(f"{src} has no torch newer than [torch] newest, {project.torch.newest} (its newest: {newest or 'none'})")
        return 0
    print(
        f"torch {newest} is out ({src}); [torch] newest of overlay/sets.toml is {project.torch.newest}: prove every "
        f'set on it (TORCH_VERSION={newest} nox -s prove), then write newest = "{newest}" and bump the lines '
        "(nox -s bump)"
    )
    return 1


def cmd_watch_cell(args) -> int:
    from .maint.upstream import watch

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
    watch.write_fragment(config.load(root(args)), args.line, release, Path(args.fragment), args.workers)
    return 0


def cmd_watch_merge(args) -> int:
    from .maint.upstream import watch

    if not args.cells:
        raise ConfigError(
            "`watch merge` needs --cells: the list step's cells, which are all it merges",
            "save what `patchwheel watch list` printed in the same run, and pass it: --cells cells.json",
        )
    project = config.load(root(args))
    matrix, attention = watch.merge(project, [Path(f) for f in args.fragments], Path(args.cells))
    matrix.save(project.matrix_json)
    print(f"wrote {project.matrix_json} and {project.matrix_json.with_suffix('.md')}")
    for line in attention:
        print(f"needs a maintainer: {line}")
    if attention:
        print("no pull request: rebase first, then run the watch again")
        return 1
    return 0


def cmd_follow(args) -> int:
    from .maint.follow import follow
    from .maint.follow import report as followreport
    from .maint.proving import setruns

    if args.pending and args.report:
        raise ConfigError("--pending changes nothing and writes no report", "leave out --report")
    project = config.load(root(args))
    if args.pending:  # what the watch's list job asks: which packages follow has work for
        waiting = follow.pending(project, args.packages)
        print(json.dumps([pkg for pkg, releases in waiting.items() if releases]))
        return 0
    results = follow.follow(project, args.packages, setruns.prove_set)
    for done in results:
        for line in followreport.summary(done):
            print(line)
    if args.report:
        body = "\n".join(followreport.markdown(done) for done in results if done.releases or done.stop)
        Path(args.report).write_text(body or "Nothing new upstream.\n")
    return STOPPED if any(done.stop for done in results) else 0


def cmd_prove(args) -> int:
    from .maint.proving import proofenv, setruns

    project = config.load(root(args))
    members = setruns.members_of(project, args.set, args.package)
    chains = [c for c in setruns.CHAINS if getattr(args, c)] or list(setruns.CHAINS)
    dist = (Path(args.dist) if args.dist else project.root / "dist").resolve()
    fixed_env = Path(args.fixed_env).resolve() if args.fixed_env else None
    if fixed_env is not None and ("fixed" in chains or "guards" in chains):  # refused before anything is made
        cache = project.cache.resolve()
        if fixed_env == cache or cache in fixed_env.parents:
            raise ConfigError(
                f"--fixed-env {fixed_env} is inside patchwheel's cache ({cache}): its environments are shared",
                "pass a folder of your own (it is made when missing), or leave --fixed-env out to use the cache's",
            )
        proofenv.check_replaceable(fixed_env, "--fixed-env")
    # one chain: its runs' output as it comes; several: side by side, a line per run
    options = setruns.Options(args.package, args.pytest, echo=len(chains) == 1, fixed_env=fixed_env)
    runs = setruns.prove(project, members, dist, chains, options, log=print)
    failed = [run for run in runs if not run.ok]
    for run in failed if len(chains) > 1 else ():
        print(f"\n{run.name}: FAILED ({run.summary})\n{run.tail}")
    print(f"set {args.set}: {'FAILED: ' + ', '.join(r.name for r in failed) if failed else 'proven'}")
    return 1 if failed else 0


def cmd_derive(args) -> int:
    from .maint.follow import derive
    from .maint.follow import report as followreport
    from .maint.proving import setruns

    project = config.load(root(args))
    if (args.cont or args.abort) and (args.source or args.set_name or args.companions or args.review):
        raise ConfigError(
            "--from, --set, --with and --review are the start's: a derive in progress keeps its own", "leave them out"
        )
    if args.new and not args.cont:
        raise ConfigError("--new names commits in the work folder of a derive in progress", "use it with --continue")
    if args.abort:
        print(f"removed {derive.abort(project, args.release)}")
        return 0
    if args.cont:
        done = derive.resume(project, args.release, setruns.prove_set, new=args.new)
    else:
        done = derive.derive(
            project,
            args.release,
            setruns.prove_set,
            source=args.source,
            set_name=args.set_name,
            companions=args.companions,
            review=args.review,
        )
    for line in followreport.derived(done):
        print(line)
    return STOPPED if done.stop else 0


def cmd_rebase(args) -> int:
    from .maint import rebase

    project = config.load(root(args))
    if args.reexport:
        rebase.reexport(project, args.package, args.version)
        return 0
    if (args.cont or args.abort) and args.text_only:
        raise ConfigError("--text-only is the start's: a rebase in progress keeps what it judged", "leave it out")
    if args.abort:
        print(f"removed {rebase.abort(project, args.package, args.version)}")
        return 0
    if args.cont:
        done = rebase.resume(project, args.package, args.version)
    else:
        done = rebase.start(project, args.package, args.version, behaviour=not args.text_only)
    if not done:
        return STOPPED  # it said why, with the commands
    print("next: the fix tables (`nox -s tables`); prove it both ways (a set in overlay/sets.toml, `nox -s prove`)")
    return 0


def cmd_refresh(args) -> int:
    from .maint import refresh

    refresh.refresh(config.load(root(args)), args.package, args.version, args.patch)
    return 0


def cmd_new(args) -> int:
    from .maint import refresh

    refresh.new(config.load(root(args)), args.package, args.version, args.slug, feature=args.feature)
    return 0


def cmd_export(args) -> int:
    from .maint.export import exportfolder as export

    export.export(config.load(root(args)), args.patch, Path(args.out) if args.out else None, author=args.author)
    return 0


def cmd_tables(args) -> int:
    """Write the fix tables of README.md and docs/fixes.md from the series (``--check``: exit 1 where one is stale,
    writing nothing)."""
    from .maint import fixtables

    project = config.load(root(args))
    if args.check:
        problems = fixtables.problems(project)
        print("\n".join(problems) if problems else "the fix tables: up to date")
        return 1 if problems else 0
    written = fixtables.write(project)
    print(
        f"wrote the fix tables of {', '.join(str(p.relative_to(project.root)) for p in written)}"
        if written
        else "the fix tables: up to date"
    )
    return 0


def cmd_mutants(args) -> int:
    from .maint.proving import mutants

    results = mutants.run(config.load(root(args)), args.lines, Path(args.out) if args.out else None, patch=args.patch)
    return mutants.exit_code(results)


def cmd_upstream_suite(args) -> int:
    from .maint.proving import suite as upstream_suite

    project = config.load(root(args))
    dist = (Path(args.dist) if args.dist else root(args) / "dist").resolve()
    ok = upstream_suite.run(project, args.lines, dist, Path(args.out).resolve() if args.out else None)
    return 0 if ok else 1


def cmd_base_env(args) -> int:
    """The shared torch environment of the test sessions, made when missing: its site-packages, on the last line."""
    from .maint.proving import proofenv

    print(proofenv.site_packages(proofenv.base_env(config.cache_dir())))
    return 0
