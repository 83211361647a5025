"""The tree's shape, checked: three layers (the build pipeline, the maintenance tools, the command line), imports
that never run back up and never go round in a circle (not even those made only for type checking), the
stand-alone probes standing alone, each project rule in one place (the committed matrix's files, the patch-name
rule), and errors of several kinds under one base.

Modules are grouped by job (wheels/, matrix/, probes/, series.py, maint/<verb>/), not by size: there is no line cap."""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path

from patchwheel import errors

SRC = Path(__file__).resolve().parents[2] / "src" / "patchwheel"
CLI = {"cli", "commands", "maint_commands", "__main__"}
LAYERS = ("pipeline", "maint", "cli")


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    return ".".join(part for part in rel.parts if part != "__init__") or "patchwheel"


def layer(module: str) -> str:
    if module == "maint" or module.startswith("maint."):
        return "maint"
    return "cli" if module in CLI else "pipeline"


def imports(path: Path, *, type_only: bool) -> set[str]:
    """The project modules ``path`` imports (relative imports, resolved), with or without those made only for type
    checking (``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text())
    package = module_name(path).split(".")[:-1] if path.name != "__init__.py" else module_name(path).split(".")
    skipped: set[int] = set()
    if not type_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not node.level or id(node) in skipped:
            continue
        base = package[: len(package) - node.level + 1] if node.level > 1 else package
        stem = ".".join([*base, *(node.module.split(".") if node.module else [])])
        for alias in node.names:
            candidate = f"{stem}.{alias.name}" if stem else alias.name
            out.add(candidate if _exists(candidate) else stem)
    return {m for m in out if m and _exists(m)}


def _exists(module: str) -> bool:
    path = SRC.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def test_no_import_runs_back_up_a_layer():
    upward = [
        f"{name} ({layer(name)}) imports {dep} ({layer(dep)})"
        for name, path in modules().items()
        for dep in imports(path, type_only=True)
        if LAYERS.index(layer(dep)) > LAYERS.index(layer(name))
    ]
    assert upward == []


def test_no_import_goes_round_in_a_circle():
    graph = {name: imports(path, type_only=True) - {name} for name, path in modules().items()}
    seen: dict[str, str] = {}  # module -> "open" while its imports are walked, "done" after
    circles: list[str] = []

    def walk(node: str, trail: list[str]) -> None:
        seen[node] = "open"
        for dep in sorted(graph.get(node, ())):
            if seen.get(dep) == "open":
                circles.append(" -> ".join(trail[trail.index(dep) :] + [node, dep]) if dep in trail else dep)
            elif dep not in seen:
                walk(dep, [*trail, node])
        seen[node] = "done"

    for name in sorted(graph):
        if name not in seen:
            walk(name, [])
    assert circles == []


#: The doors of the carry engine (maint.carry): the commands that carry a release line onto another release.
DOORS = {"maint.rebase", "maint.follow.follow", "maint.follow.derive"}


def test_the_carry_engine_sits_below_its_doors():
    """Issue 46: `rebase`, `derive` and `follow` are doors of one carry engine (maint.carry: the policy, the work
    folder, the carry by text, the scratch copy). The engine imports no door and no door imports another (rebase
    reached into follow for its work folder, derive into follow and rebase): what they share is the engine's."""
    found = modules()
    assert DOORS <= set(found) and "maint.carry" in found, sorted(found)
    wrong = [
        f"{name} imports {dep}"
        for name, path in found.items()
        for dep in imports(path, type_only=True)
        if dep in DOORS | {"maint.follow"} and (name.startswith("maint.carry") or name in DOORS)
    ]
    assert wrong == []


def test_the_probes_stand_alone():
    """probes/ runs by file path inside another interpreter (`status --python`, `diagnose --python`), where no
    patchwheel is installed: a probe imports nothing of the package; the status probe nothing but the standard
    library (the diagnose probe also imports what it diagnoses)."""
    probes = {name: path for name, path in modules().items() if name.startswith("probes.")}
    assert {"probes.status", "probes.diagnose"} <= set(probes), sorted(probes)
    for name, path in probes.items():
        tree = ast.parse(path.read_text())
        nodes = list(ast.walk(tree))
        found = {a.name.split(".")[0] for n in nodes if isinstance(n, ast.Import) for a in n.names}
        found |= {(n.module or "").split(".")[0] for n in nodes if isinstance(n, ast.ImportFrom) and not n.level}
        # another probe only, from beside it (the status probe carries the wheel manifest's one definition)
        relative = [
            ast.unparse(n)
            for n in nodes
            if isinstance(n, ast.ImportFrom)
            and n.level
            and not (n.level == 1 and n.module is None and all(f"probes.{a.name}" in probes for a in n.names))
        ]
        probed = {"accelerate", "transformers", "torch"} if name == "probes.diagnose" else set()
        allowed = sys.stdlib_module_names | probed
        assert relative == [] and found <= allowed, (name, relative, found - allowed)


def test_the_committed_matrix_is_named_in_two_modules_at_most():
    naming = [name for name, path in modules().items() if re.search(r"MATRIX\.(json|md|\*)", path.read_text())]
    assert len(naming) <= 2 and "matrix.table" in naming, naming


def test_the_patch_name_rule_is_written_once():
    writing = [name for name, path in modules().items() if r"\d{4}" in path.read_text()]
    assert writing == ["series"]


def test_errors_come_in_kinds_under_one_base():
    kinds = [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.PatchwheelError) and cls is not errors.PatchwheelError
    ]
    assert len(kinds) >= 3, kinds


def test_files_are_replaced_whole_in_one_place():
    """Every file the tool replaces (pins, sets, the matrix, build records, the write-back journal, the watch's
    fragments) goes through atomic.replace_text: a temporary file renamed over the target, removed on failure. Six
    hand-written copies of that once differed (a fixed temporary name, a mode lost, no clean-up)."""
    src = Path(__file__).resolve().parents[2] / "src" / "patchwheel"
    renames = {
        p.relative_to(src).as_posix()
        for p in src.rglob("*.py")
        if re.search(r"os\.replace\(tmp, |tmp\.replace\(", p.read_text())
    }
    other = {  # renames of another kind, each its own
        "wheels/fetch.py": "a download, hashed as it streams, renamed into the cache once its sha256 is the pin's",
        "maint/proving/proofenv.py": "an environment folder, built aside and renamed into place",
        "maint/carry/engine.py": "a new line's series folder, renamed into place whole",
        "maint/export/exportfolder.py": "an export folder, renamed into place whole",
        "maint/refresh.py": "several patch files, all staged before any is renamed",
    }
    assert renames == {"atomic.py", *other}, renames


def test_the_overlay_toml_files_have_one_writer():
    """pins.toml was written by buildno, rebase and scratch, sets.toml by scratch: configfiles is now their one
    writer (config reads them)."""
    src = Path(__file__).resolve().parents[2] / "src" / "patchwheel"
    # a write whose target names the pins or the sets file (not dist/'s consumer pins-<set>.txt, another file)
    writes = re.compile(
        r"(_write_checked|replace_text|write_text|write_bytes|open)\((?!.*pins_text).*\b(pins|pins_file|sets_file)\b(?!-)"
    )
    writers = {
        p.relative_to(src).as_posix()
        for p in src.rglob("*.py")
        if any(writes.search(line) for line in p.read_text().splitlines())
    }
    assert writers <= {"configfiles.py"}, writers


def test_the_wheel_manifest_has_one_definition():
    """overlay-fixes.json was made by build, dumped by rewrite, parsed by verify, distdir and status, each with its
    own json call: manifest.py now defines it (name, schema, keys, bytes, reading) and the others call it."""
    src = Path(__file__).resolve().parents[2] / "src" / "patchwheel"
    naming = {p.relative_to(src).as_posix() for p in src.rglob("*.py") if "overlay-fixes" in p.read_text()}
    # (the package's docstring names the files it writes: its public surface)
    assert naming - {"__init__.py"} == {"probes/manifest.py"}, naming
    users = {
        p.relative_to(src).as_posix()
        for p in src.rglob("*.py")
        if re.search(
            r"^\s*from \.+(probes)? import manifest as fixes$|^\s*from \.+(probes\.)?manifest import",
            p.read_text(),
            re.M,
        )
    }
    assert users == {
        "wheels/build.py",
        "wheels/rewrite.py",
        "wheels/verify.py",
        "wheels/distdir.py",
        "probes/status.py",
    }, users
    for name in users:
        text = (src / name).read_text()
        assert "json.loads(" not in text or name == "wheels/distdir.py", (
            f"{name} parses JSON itself"
        )  # build.json: its own
        assert "sort_keys=True" not in text, f"{name} writes JSON itself"
    # names.py imported the stand-alone probe for the file's name: the probe is the command line's alone
    probe_users = {m for m, path in modules().items() if "probes.status" in imports(path, type_only=True)}
    assert probe_users == {"commands"}, probe_users
    others = "".join(p.read_text() for p in src.rglob("*.py") if p.relative_to(src).as_posix() != "probes/manifest.py")
    assert not re.search(r"\"schema\": \d", others), "the format's version is manifest.SCHEMA"


def _called(node: ast.AST) -> str | None:
    """The name of the function ``node`` calls (``f(...)``, ``mod.f(...)``); None when it is not a call."""
    if not isinstance(node, ast.Call):
        return None
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)


def test_environment_names_are_made_in_one_place():
    """proofenv, upstream_suite, upstream_test and setruns (through fixed_env's purpose) each joined package
    versions into an environment's folder name their own way: proofenv.env_name makes every name, and only
    proofenv names the envs/ folders (the base's and the one per torch)."""
    naming = {name for name, path in modules().items() if '"envs"' in path.read_text()}
    assert naming == {"maint.proving.proofenv"}, naming
    for module, path in modules().items():
        tree = ast.parse(path.read_text())
        made = {  # the local names given an env_name(...) (or release_env_path(...)) result
            t.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and _called(node.value) in ("env_name", "release_env_path")
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        for call in (n for n in ast.walk(tree) if _called(n) == "env_on_base"):
            assert isinstance(call, ast.Call)
            name = call.args[1] if len(call.args) > 1 else next(k.value for k in call.keywords if k.arg == "name")
            inner = name.value if isinstance(name, ast.Attribute) else name  # release_env_path(...).name
            ok = _called(inner) in ("env_name", "release_env_path") or (
                isinstance(inner, ast.Name) and inner.id in made
            )
            assert ok, f"{module}:{call.lineno}: an environment named by hand ({ast.unparse(name)}): use env_name"


def test_lint_has_one_entry_point():
    """Lint was four functions (patches.lint_line, lint.line_problems, submission.lint_line, follow.lint) and
    `patchwheel lint` checked more than follow's: maint.lintall is the one entry point, which `patchwheel lint`,
    `vendor --check`, follow and derive call; the parts are called from there (the series' from lint.py), the
    signature check too (issue 44), so that every line gets it wherever lint runs."""
    parts = {
        "lint_line": {"lint"},
        "record_problems": {"maint.lintall"},
        "upstream_pr_problems": {"maint.lintall", "maint.export.submission"},
        "suite_problems": {"maint.lintall"},
        "torch_problems": {"maint.lintall"},
        "tree_problems": {"maint.lintall"},
        "overlay_problems": {"maint.lintall"},
        "signature_problems": {"maint.lintall"},
    }
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            called = _called(node)
            if called not in parts:
                continue
            assert module in parts[called], f"{module} calls {ast.unparse(node)[:60]}: call maint.lintall instead"


def test_advice_names_commands_a_fresh_clone_runs():
    """What a message tells a user to run works from a fresh clone, where the README's commands made a venv with nox
    alone: `nox -s <session>`, not `patchwheel <verb>` or `python -m patchwheel` (no such command there) for a verb
    that has a session. (The watch's verbs run in CI's own environment; docstrings describe, they advise nothing.)"""
    noxfile = (SRC.parents[1] / "noxfile.py").read_text()
    sessions = set(re.findall(r"^def (\w+)\(session", noxfile, re.M))
    # (a comment the tool writes into sets.toml, "Made by `patchwheel derive`", names what wrote it: no advice)
    advice = re.compile(r"(?<!Made by )(?:`|\()(?:python3? -m )?patchwheel (\w[\w-]*)")
    found = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found += [f"{name}: {m[0]}" for m in advice.finditer(node.value) if m[1].replace("-", "_") in sessions]
    assert sessions >= {"build", "lint", "status", "vendor", "new"} and found == [], found


def test_no_two_modules_share_a_file_name():
    """A module is named for its job, so that its file name alone says which one is meant: three `run.py` were
    once renamed on import (`from .upstream import run as upstream`), each meaning another verb."""
    by_name: dict[str, list[str]] = {}
    for name, path in modules().items():
        if path.name != "__init__.py":
            by_name.setdefault(path.name, []).append(name)
    assert {file: names for file, names in by_name.items() if len(names) > 1} == {}


def test_each_lint_part_is_defined_once():
    """A function that lists problems (``*_problems``) has one definition: ``line_problems`` was defined three times
    (lint.py, maint/lintall.py, maint/export/submission.py), each checking another part of a line under one name."""
    defined: dict[str, list[str]] = {}
    for name, path in modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.endswith("_problems"):
                defined.setdefault(node.name, []).append(name)
    assert "line_problems" in defined and {f: m for f, m in defined.items() if len(m) > 1} == {}
