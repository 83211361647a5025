"""`patchwheel lint`: every problem of a release line that the suite refuses, in one list.

The series and its patch files (names, trailers, what git applies: :func:`series.lint_line`), the committed
matrix against the trailers (:meth:`Matrix.problems`), and the build record (:func:`buildno.problem`); the
upstream signatures the series keeps (:func:`signature_problems`). `follow` asks the same of the tree it is about
to write."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from packaging.version import Version

from . import draft, series, signatures, torchaxis, writeback
from .config import LATEST, Project, ReleaseLine
from .errors import PatchwheelError
from .matrix import checks as matrix_checks
from .matrix.table import Matrix
from .names import VENDOR_RECORD
from .series import PATCH_NAME
from .wheels import buildno, fetch, rewrite, vendored


def record_problems(project: Project, line: ReleaseLine, matrix: Matrix | None) -> list[str]:
    """The first kind of problem what the tree records of a line has (its series and the stubs it names, else the
    matrix, else its build record); none: []. Part of :func:`patchwheel.maint.lintall.line_problems`."""
    problems, patches = series.lint_series(line, project.root)
    problems += stub_problems(project, line)
    if not problems and matrix is not None:
        problems = matrix_checks.problems(matrix, line.key, patches)  # each patch parsed once, by the lint
    if not problems and (why := buildno.problem(line) or buildno.history_problem(line, project.root)):
        problems = [why]
    return problems


def signature_problems(made: vendored.Vendored, reader: signatures.ApiReader | None = None) -> list[str]:
    """The upstream signatures and names the line's series changes or removes without its patch declaring it
    (``API-Change``), and declarations of changes it does not make (:mod:`signatures`): ``made`` is the line's
    pristine + series (:func:`vendored.generate`, which the overlay check compares with overlay/)."""
    return signatures.series_problems(made.line, list(made.series), made.pristine, made.modules, reader)


def stub_problems(project: Project, line: ReleaseLine) -> list[str]:
    """The test files a patch names (Proof-Test, Feature-Test, Guard-Test) that are still the stub `nox -s new`
    wrote (:data:`draft.STUB_MARK` on a line)."""
    out = []
    try:
        patches = [series.parse_patch(line.patch_dir / name) for name in series.series_names(line)]
    except (PatchwheelError, OSError):
        return []  # the series' own problems say what to fix first
    for patch in patches:
        named = [f for key in ("Proof-Test", "Feature-Test") for f, _ in series.test_refs(patch.trailers.get(key))]
        for rel in draft.stub_files(project.root, sorted({*named, *series.guard_modules(patch)})):
            out.append(f"{patch.name}: {rel} is still the stub `nox -s new` wrote ({draft.STUB_MARK}): write it")
    return out


def suite_problems(project: Project) -> list[str]:
    """What ``[suite]`` of overlay/sets.toml must name, since the default suite proves only those sets (the daily
    sets workflow proves every set): the set ``latest``, and for each package the newest line of each of its major
    versions (transformers 4.x and 5.x), which are the lines most users run."""
    if project.suite is None:  # no [suite]: the default suite proves every set
        return []
    where = f"{project.sets_file.relative_to(project.root)}: [suite] sets"
    out = []
    if LATEST in project.sets and LATEST not in project.suite:
        out.append(f"{where} leaves out {LATEST}, what new users install: add it")
    proven = {(pkg, v) for name in project.suite for pkg, v in project.sets[name].items()}
    for pkg in project.packages():
        newest = {Version(line.version).major: line for line in project.lines[pkg]}  # oldest first: the newest stays
        for major, line in sorted(newest.items()):
            if (pkg, line.version) not in proven:
                naming = sorted(n for n, m in project.sets.items() if m.get(pkg) == line.version)
                out.append(
                    f"{where} proves no set naming {line.key}, the newest line of {pkg} {major}.x: add "
                    + (f"{' or '.join(naming)} to it" if naming else "a set naming it to overlay/sets.toml and to it")
                )
    return out


def torch_problems(project: Project) -> list[str]:
    """``[torch]`` of overlay/sets.toml against the pinned wheels: each set's floor is the oldest torch its
    releases declare (their METADATA, read from the sha256-verified wheels), and none of its torch releases is one
    they refuse. A project with no [torch] states nothing of torch, and nothing is checked."""
    if project.torch is None:
        return []
    out = []
    for name, members in project.sets.items():
        out += torchaxis.floor_problems(name, project.torch, set_metadata(project, members))
    return out


def set_metadata(project: Project, members: dict[str, str]) -> dict[str, str]:
    """``pkg==version`` -> the METADATA of its pinned upstream wheel (sha256-verified, from the cache), for each
    member of a set."""
    out = {}
    for pkg, version in members.items():
        line = project.line(pkg, version)
        with zipfile.ZipFile(fetch.fetch(line.package, line.wheel)) as zf:
            info = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            out[f"{pkg}=={version}"] = rewrite.read_member(zf, info).decode("utf-8", "replace")
    return out


def set_floor(project: Project, members: dict[str, str]) -> str:
    """The torch floor a set of these members has: the oldest torch their releases declare (what lint holds
    ``[torch.floor]`` to, and what `follow` and `derive` write when they change a set)."""
    return torchaxis.declared_floor(
        [r for text in set_metadata(project, members).values() for r in torchaxis.declared(text)]
    )


def tree_problems(project: Project) -> list[str]:
    """Every file and folder under patches/ and overlay/ that is not one lint knows: a hidden file there (a
    ``.gitattributes`` that shows changed patches as binary in a pull request, a ``.gitignore`` that hides a line's
    files from git), a link, a stray note, a folder of no release line. Walked on disk, links not followed."""
    root = project.root
    lines = {(line.package, line.version): line for line in project.all_lines()}
    out: list[str] = []
    if os.path.lexists(root / writeback.LEGACY_JOURNAL):
        out.append(
            f"{writeback.LEGACY_JOURNAL} is not the tool's: patchwheel keeps a write-back's journal in its own folder "
            "(under .git/) and reads none from the tree; a commit or an older patchwheel left this one: remove it"
        )

    for top in ("patches", "overlay"):
        base = root / top
        if base.is_symlink():
            out.append(f"{top} is a link: lint, build and git would read another tree")
            continue
        for folder, dirs, files in os.walk(base):
            here = Path(folder)
            for name in sorted(dirs) + sorted(files):
                path = here / name
                rel = path.relative_to(root)
                why = None
                if name.startswith("."):
                    why = "starts with '.': a hidden file changes what git shows or tracks; remove it"
                elif path.is_symlink():
                    why = "is a link: remove it (a line holds regular files only)"
                else:
                    why = _unknown(project, lines, rel.parts, path.is_dir())
                    if why:
                        why += ": remove it, or move it out of patches/ and overlay/"
                if why:
                    out.append(f"{rel.as_posix()} {why}")
                    if name in dirs:
                        dirs.remove(name)  # one line for a folder, not one per file in it
    return out


def _unknown(project: Project, lines: dict, parts: tuple[str, ...], is_dir: bool) -> str | None:
    """Why a path under patches/ or overlay/ (its parts from the root) is not one lint knows; None: it is."""
    top, rest = parts[0], parts[1:]
    matrix = project.matrix_json  # the committed matrix and its Markdown beside it
    own = {"patches": (matrix.name, matrix.with_suffix(".md").name), "overlay": ("sets.toml", "NOTICE")}[top]
    if len(rest) == 1:
        if is_dir:
            return None if rest[0] in project.lines else "is not a package of this project"
        return None if rest[0] in own else f"is not {own[0]}, {own[1]} or a package's folder"
    package, version, inner = rest[0], rest[1], rest[2:]
    if package not in project.lines:
        return "is not a package of this project"
    if top == "overlay" and version == "pins.toml" and not inner and not is_dir:
        return None
    line = lines.get((package, version))
    if line is None or not (inner or is_dir):
        if top == "overlay" and not (inner or is_dir):
            return "is not pins.toml or a release line's folder"
        return f"is not a release line of {package}"
    if not inner:
        return None
    if top == "patches":
        ok = len(inner) == 1 and not is_dir and (inner[0] == "series" or PATCH_NAME.match(inner[0]) is not None)
        return None if ok else "is not the series or a patch file"
    if inner[0] == line.import_name and (is_dir or len(inner) > 1):
        return None
    if len(inner) == 1 and not is_dir and inner[0] in ("LICENSE", VENDOR_RECORD):
        return None
    return f"is not LICENSE, {VENDOR_RECORD} or a module under {line.import_name}/"
