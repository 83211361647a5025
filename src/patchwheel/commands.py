"""The pipeline's commands (build, lint, bump, status, vendor, diagnose): each parses nothing
and decides only its exit status; the work is one call into the library. cli.py holds the parser."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from . import config, draft
from .errors import ConfigError
from .probes import status
from .wheels import buildno

if TYPE_CHECKING:
    from .wheels.distdir import DistWheel


def root(args) -> Path:
    return Path(args.root).resolve()


def cmd_build(args) -> int:
    from .wheels.build import build
    from .wheels.distdir import dist_wheels

    project = config.load(root(args))
    dist = (Path(args.dist) if args.dist else root(args) / "dist").resolve()
    built = build(project, dist, select=args.lines, clean=args.clean)
    wheels = dist_wheels(dist)
    kept = f" (and kept {len(wheels) - len(built)} of the previous build)" if len(wheels) > len(built) else ""
    print(f"wrote {len(built)} wheel(s){kept}, simple index and pins to {dist}/")
    for name in sorted(project.sets):
        print(_consumer_line(name, project.sets[name], wheels, dist))
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
    drafts = " ".join(f"{w.package}=={w.upstream_version}" for w in wheels if draft.is_draft_wheel(w.filename))
    if drafts and any(f"{pkg}=={ver}" in drafts.split() for pkg, ver in members.items()):
        return f"  consumers ({name}): none while {drafts} is a draft (its wheel is for the proofs only)"
    have = {(w.package, w.upstream_version) for w in wheels}
    missing = " ".join(f"{pkg}=={ver}" for pkg, ver in members.items() if (pkg, ver) not in have)
    return f"  consumers ({name}): not in {dist}/ yet, it lacks {missing} (nox -s build -- {missing})"


def cmd_lint(args) -> int:
    """Everything lint checks (:mod:`maint.lintall`), printed part by part as each is checked."""
    from .maint import lintall

    project = config.load(root(args))
    bad = 0
    for part in lintall.parts(project, project.select(args.lines) if args.lines else None):
        print("\n".join(part.lines()))
        bad += len(part.problems)
    return 1 if bad else 0


def cmd_bump(args) -> int:
    project = config.load(root(args))
    for line in project.select(args.lines):
        buildno.bump(project, line)
    return 0


def _interpreter(python: str) -> str:
    """--python checked before it is run: a missing or non-executable path ended in a subprocess traceback."""
    hint = "pass the python of the environment, e.g. .venv/bin/python"
    path = python if os.sep in python else shutil.which(python)
    if path is None:
        raise ConfigError(f"no interpreter named {python} on PATH", hint)
    if not os.path.exists(path):
        raise ConfigError(f"no interpreter at {python}", hint)
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise ConfigError(f"{python} is not executable", hint)
    return path


def _run(cmd: list[str]) -> int:
    return _spawn(cmd).returncode


def _spawn(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, **kw)
    except OSError as exc:  # e.g. an executable text file with no #! line
        raise ConfigError(
            f"cannot run {cmd[0]}: {exc.strerror or exc}", "pass the python of the environment, e.g. .venv/bin/python"
        ) from exc


def cmd_verify(args) -> int:
    """``patchwheel verify WHEEL...``: exit 0 when each wheel is its rebuild's bytes, 1 when one differs, 2 when one
    could not be checked (each wheel is tried; what is printed names the file, never a URL's query or password)."""
    from .errors import PatchwheelError
    from .wheels.reproduce import verify_wheel

    differ = unchecked = 0
    for source in args.wheels:
        try:
            outcome = verify_wheel(root(args), source, commit=args.commit)
        except PatchwheelError as exc:
            unchecked += 1
            print(f"error: {exc}", file=sys.stderr)  # as the command line prints an error
            continue
        if outcome.verified:
            print(f"verified: {outcome.name} is, byte for byte, the build of commit {outcome.commit[:12]}")
            continue
        differ += 1
        print(f"NOT verified: {outcome.name} differs from the build of commit {outcome.commit[:12]}:")
        for line in outcome.differ:
            print(f"  - {line}")
        if outcome.report:
            print("diffoscope:\n" + outcome.report)
        print("do not publish or install this file")
    if len(args.wheels) > 1:
        print(f"{len(args.wheels) - differ - unchecked} of {len(args.wheels)} wheel(s) verified")
    return 1 if differ else 2 if unchecked else 0


def cmd_status(args) -> int:
    import json

    from . import knownbugs
    from .matrix.table import Matrix

    project = config.load(root(args))
    names = list(status.PACKAGES) + [p for p in project.packages() if p not in status.PACKAGES]
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
            raise ConfigError(
                f"{args.python} could not run the status probe: {said[-1] if said else '(it printed nothing)'}", hint
            ) from None
        if (why := status.report_problem(rep, names)) is not None:
            raise ConfigError(f"{args.python} printed a status report of an unexpected shape: {why}", hint)
    else:
        rep = status.report(names)
    knownbugs.annotate(project, Matrix.load(project.matrix_json), rep)
    rep["torch_note"] = status.torch_note(rep)  # information only: the exit status does not change
    if args.json:
        print(json.dumps(rep, indent=2))
    else:
        print(status.render(rep))
        if extra := knownbugs.render(rep):
            print(extra)
    damaged = any(p.get("problems") for p in rep["packages"])
    return 1 if damaged or knownbugs.affected(rep) else 0


def _overlay_problems(project: config.Project, lines: list | None) -> int:
    """The vendored modules against pristine + series (every line when ``lines`` is None), printed; how many differ."""
    from .maint import lintall

    part = lintall.overlay_part(project, lines)
    print("\n".join(part.lines()))
    return len(part.problems)


def cmd_vendor(args) -> int:
    from .wheels import vendored

    project = config.load(root(args))
    lines = project.select(args.lines) if args.lines else None
    if args.check:
        return 1 if _overlay_problems(project, lines) else 0
    changed = vendored.write(project, lines, force=args.force)
    print(f"overlay/: {len(changed)} path(s) written or removed" if changed else "overlay/: up to date")
    return 0


def cmd_diagnose(args) -> int:
    import json

    from .probes import diagnose as diagnose_probe

    memory = {}
    for item in args.max_memory or []:
        device, sep, size = item.partition("=")
        if not sep or not size:
            raise ConfigError(f"--max-memory {item!r} is not DEVICE=SIZE", "e.g. --max-memory 0=20GiB cpu=64GiB")
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
