"""``patchwheel verify``: is this +fixed wheel the build of the published series? Rebuild it and compare.

A wheel says what it was built from in its SBOM (:mod:`sbom`): its package, its upstream release, its build number
and the digest of the build's inputs. The wheel's bytes follow from those inputs alone, so they cannot name the
commit of this repository they were built at (every later commit would give the name other bytes); the repository
records the build instead: the commit that wrote that number and digest into ``overlay/<pkg>/pins.toml``
(:func:`find_commit`). verify exports that commit's tree, exactly as git stores it (no checkout, no filter, no
configuration of the user, nothing changed in the repository), runs that tree's own tool to build the one line,
and compares the two files' sha256: equal is "verified"; else it names the members that differ (and shows
diffoscope's report where diffoscope is installed). The rebuild fetches the pinned upstream wheel, sha256-verified,
like any build.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .. import gitops
from ..config import BuildRecord
from ..errors import ConfigError, DistError, FetchError, PatchwheelError
from ..names import SHA256, path_problem
from ..reporter import CONSOLE
from ..urls import redact
from . import buildno, rewrite, sbom
from .distdir import wheel_sbom
from .fetch import sha256_file

#: A package name as the SBOM must give it (it is printed, and goes into the rebuild's command line).
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")
#: Lines of diffoscope's report shown (the whole report can run to thousands of lines).
DIFFOSCOPE_LINES = 200


@dataclass(frozen=True)
class Claim:
    """What a wheel's SBOM says it was built from."""

    filename: str
    package: str
    version: str  # upstream's
    number: int
    inputs: str


@dataclass(frozen=True)
class Outcome:
    name: str  # the wheel's file name (from a URL: its path's, never its query)
    verified: bool
    commit: str
    differ: list[str]  # the members that differ ("name: why"); empty when verified
    report: str = ""  # diffoscope's, where installed


def claim_of(wheel: Path) -> Claim:
    """The build the wheel's SBOM names, its package and versions checked to be names and versions (they are
    printed, and go into a command line); an error that says why when it has none this tool can read."""
    hint = "verify reads the SBOM a +fixed wheel carries (.dist-info/sboms/); pass a wheel that `nox -s build` made"
    try:
        bom = sbom.loads(wheel_sbom(wheel))
        props = sbom.properties(bom)
        component = bom["metadata"]["component"]
        [ancestor] = component["pedigree"]["ancestors"]
        number, inputs = props[sbom.BUILD][0], props[sbom.INPUTS][0]
        claim = Claim(wheel.name, component["name"], ancestor["version"], int(number), inputs)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise ConfigError(
            f"{wheel.name} is not a readable wheel ({exc})",
            "a download cut short, or a page saved under a wheel's name: fetch the file again",
        ) from exc
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ConfigError(f"{wheel.name} has no SBOM that names its build ({exc})", hint) from exc
    if (
        not isinstance(claim.package, str)
        or not _NAME.fullmatch(claim.package)
        or not isinstance(claim.version, str)
        or not _is_version(claim.version)
        or not isinstance(claim.inputs, str)
        or not SHA256.match(claim.inputs)
    ):
        raise ConfigError(f"{wheel.name}'s SBOM names no package, version and inputs digest this tool wrote", hint)
    if claim.number == 0:
        raise ConfigError(
            f"{wheel.name} is a draft's build (number 0): for the proofs only, never recorded nor published",
            "verify is for published builds: write the draft's message, then build and verify the line's number",
        )
    return claim


def _is_version(text: str) -> bool:
    try:
        return str(Version(text)) == text
    except InvalidVersion:
        return False


def fetch_wheel(source: str, folder: Path, log=CONSOLE) -> Path:
    """The wheel to verify: a file, or a URL (http, https, file) downloaded into ``folder`` under the file name of
    its path (never its query, which may hold a signature)."""
    parts = urllib.parse.urlsplit(source)
    if parts.scheme not in ("http", "https", "file"):
        path = Path(source)
        if not path.is_file():
            raise ConfigError(f"{source} is not a file", "pass a wheel file or its http(s):// or file:// URL")
        return path
    name = urllib.parse.unquote(parts.path.rsplit("/", 1)[-1])
    if path_problem(name) or not name.endswith(".whl") or "/" in name:
        raise ConfigError(f"{redact(source)} does not name a wheel file", "pass the URL of a .whl file")
    if parts.scheme == "file":
        path = Path(urllib.parse.unquote(parts.path))
        if not path.is_file():
            raise ConfigError(f"{redact(source)} is not a file", "pass a wheel file or its URL")
        return path
    from . import fetch

    dest = folder / name
    try:
        with open(dest, "xb") as out:
            fetch.download(source, name, out, log)
    except FetchError as exc:
        hint = "check the wheel's URL (and its credentials), or download it and pass the file"
        raise FetchError(exc.message, hint) from None
    return dest


def find_commit(root: Path, claim: Claim) -> str:
    """The commit of the checkout at ``root`` that recorded the claimed build: the oldest commit of HEAD's history
    (never a branch being merged) whose ``overlay/<pkg>/pins.toml`` holds that number with that digest for the
    release, of the newest run of commits that hold it."""
    from ..config import build_record

    found = None
    for sha, record in buildno.recorded(claim.package, claim.version, root, merging=False):  # newest first
        if (record.number, record.inputs) == (claim.number, claim.inputs):
            found = sha
        elif found is not None:
            break
    if found is not None:
        return found
    said = (
        f"no commit of {root} records build {claim.number} of {claim.package} {claim.version} "
        f"(inputs {claim.inputs[:12]}…)"
    )
    code, top = gitops.try_git(root, "rev-parse", "--show-toplevel")
    if code != 0 or Path(top.strip()).resolve() != root.resolve():
        raise ConfigError(f"{said}: {root} is not a git clone of the project", "run verify in a git clone of it")
    pins = root / "overlay" / claim.package / "pins.toml"
    try:
        recorded_here = pins.is_file() and build_record(pins, claim.version) == BuildRecord(claim.number, claim.inputs)
    except PatchwheelError:
        recorded_here = False
    if recorded_here:
        raise ConfigError(
            f"{said}: the record is in {pins.relative_to(root)}, not committed yet",
            "commit it, then verify (a wheel is verified against the commit that recorded its build)",
        )
    shallow = gitops.try_git(root, "rev-parse", "--is-shallow-repository")[1].strip() == "true"
    raise ConfigError(
        f"{said}: this checkout's history does not hold the build of {claim.filename}",
        ("deepen it (git fetch --unshallow), or " if shallow else "")
        + "fetch the branch that published it, or pass the commit with --commit",
    )


def export_tree(root: Path, commit: str, dest: Path) -> None:
    """The tree of ``commit``, its files as git stores them, into ``dest`` (a new folder): nothing is checked out,
    no filter or attribute runs, the user's git configuration is not read. A link or a submodule is refused (a
    build reads regular files only; no link is followed)."""
    listing = gitops.git(root, "ls-tree", "-r", "-z", "--full-tree", commit).split(b"\0")
    blobs: list[tuple[str, str, bool]] = []
    for row in filter(None, listing):
        meta, _, path = row.decode(errors="replace").partition("\t")
        mode, kind, sha = meta.split()
        if kind != "blob" or mode not in ("100644", "100755") or "\ufffd" in path or path_problem(path):
            raise DistError(f"commit {commit[:12]} holds {path!r} ({mode} {kind})", "verify exports regular files only")
        blobs.append((path, sha, mode == "100755"))
    out = gitops.git(root, "cat-file", "--batch", input="".join(f"{sha}\n" for _, sha, _ in blobs).encode())
    at = 0
    for path, sha, executable in blobs:
        end = out.index(b"\n", at)
        head = out[at:end].split()
        if head[0].decode() != sha or head[1] != b"blob":
            raise DistError(f"git cat-file gave {head!r} for {path}", "report this")
        size = int(head[2])
        data = out[end + 1 : end + 1 + size]
        at = end + 1 + size + 1
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if executable:
            target.chmod(0o755)


def members_that_differ(given: Path, rebuilt: Path) -> list[str]:
    """The members whose content differs between two wheels (each read as the build reads a wheel: bounded, its
    paths checked), one "name: how" each; the zip itself when the members are equal but the files are not."""
    a = {e.name: e.data for e in rewrite.read(given)}
    b = {e.name: e.data for e in rewrite.read(rebuilt)}
    out = [f"{n}: only in the given wheel" for n in sorted(a.keys() - b.keys())]
    out += [f"{n}: missing from the given wheel" for n in sorted(b.keys() - a.keys())]
    out += [f"{n}: content differs" for n in sorted(a.keys() & b.keys()) if a[n] != b[n]]
    if not out and list(a) != list(b):
        out.append("(the zip): the same members in another order")
    if not out:
        out.append("(the zip): the same members, stored otherwise (times, attributes or compression)")
    return out


def diffoscope(given: Path, rebuilt: Path) -> str:
    """diffoscope's text report of the two wheels, where it is installed ("" where not)."""
    exe = shutil.which("diffoscope")
    if exe is None:
        return ""
    try:
        ran = subprocess.run(
            [exe, "--text", "-", str(given), str(rebuilt)], capture_output=True, text=True, check=False, timeout=600
        )
    except subprocess.TimeoutExpired:
        return "(diffoscope gave no report within 10 minutes)"
    lines = ran.stdout.splitlines()
    more = [f"… {len(lines) - DIFFOSCOPE_LINES} more lines"] if len(lines) > DIFFOSCOPE_LINES else []
    return "\n".join(lines[:DIFFOSCOPE_LINES] + more)


def verify_wheel(root: Path, source: str, *, commit: str | None = None, log=CONSOLE) -> Outcome:
    """Rebuild the wheel at ``source`` from the commit that recorded its build (or ``commit``) and compare."""
    with tempfile.TemporaryDirectory(prefix="patchwheel-verify-") as tmp:
        work = Path(tmp)
        given = fetch_wheel(source, work, log)
        claim = claim_of(given)
        if commit is None:
            sha = find_commit(root, claim)
        else:
            code, out = gitops.try_git(root, "rev-parse", "--verify", "-q", f"{commit}^{{commit}}")  # never an option
            if code != 0:
                raise ConfigError(
                    f"{commit} is not a commit of {root}", "pass a commit, branch or tag of this checkout"
                )
            sha = out.strip()
        by = "recorded by" if commit is None else "rebuilt at --commit's"
        log(f"{given.name}: build {claim.number} of {claim.package} {claim.version}, {by} commit {sha[:12]}")
        tree = work / "tree"
        export_tree(root, sha, tree)
        if not (tree / "src" / "patchwheel").is_dir():
            raise ConfigError(f"commit {sha[:12]} holds no src/patchwheel/", "pass a commit of this project")
        log(f"rebuilding {claim.package}=={claim.version} with the tool of commit {sha[:12]}")
        env = {**os.environ, "PYTHONPATH": str(tree / "src")}
        cmd = [sys.executable, "-m", "patchwheel", "--root", str(tree), "build", f"{claim.package}=={claim.version}"]
        ran = subprocess.run(
            [*cmd, "--dist", str(work / "dist")], cwd=tree, env=env, capture_output=True, text=True, check=False
        )
        if ran.returncode != 0:
            said = (ran.stderr.strip() or ran.stdout.strip()).splitlines()
            raise DistError(
                f"the rebuild of {claim.package}=={claim.version} at commit {sha[:12]} failed: "
                + ("\n  ".join(said[-6:]) or f"exit {ran.returncode}"),
                "run that build yourself in a checkout of the commit to see why",
            )
        rebuilt = work / "dist" / claim.filename
        if not rebuilt.is_file():
            made = sorted(p.name for p in (work / "dist").glob("*.whl"))
            return Outcome(given.name, False, sha, [f"(the name): the rebuild made {', '.join(made) or 'no wheel'}"])
        if sha256_file(given) == sha256_file(rebuilt):
            return Outcome(given.name, True, sha, [])
        return Outcome(given.name, False, sha, members_that_differ(given, rebuilt), diffoscope(given, rebuilt))
