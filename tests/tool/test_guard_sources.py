"""Each patch's guards include guards mined from public code, and each of those names the code it stands for
(docs/proof-contract.md#guards-mined-from-public-code): among the guard tests of the modules in a patch's
``Guard-Test`` trailer, at least :data:`MINIMUM` have a docstring that says "Stands for" and cites public code as
``<owner>/<repository> <path>`` (a commit or a date where the pattern has changed since).

What this checks, and what it cannot: that every patch names at least three guards for which someone wrote down
the public code they stand for, in a form a reviewer can look up. It reads the test files (``ast``, nothing is
imported or run). It cannot check that the cited file exists (the suite runs offline), that the guard does what the
cited code does, or that the guard reaches the patched code: those are the review's, and the guard's own run (a
guard that observes nothing is an error; one whose scenario never reaches the patch compares equal and proves
little). A guard whose citation is written otherwise is not counted: write it in the form above.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from patchwheel import config, series

ROOT = Path(__file__).resolve().parents[2]
#: Guards citing public code that each patch's Guard-Test modules must hold.
MINIMUM = 3
#: What a citation looks like: a GitHub repository, whitespace (a docstring may wrap there), a path in it.
CITATION = re.compile(
    r"(?<![\w./-])(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)\s+"
    r"(?P<path>(?:[\w.-]+/)+[\w.-]+|[\w.-]+\.(?:py|md|rst|toml|ya?ml|sh|txt|json|ipynb))(?![\w/-])"
)
#: The words that introduce the sources (any case): a repository/path pair elsewhere in a docstring is not a source.
STANDS_FOR = re.compile(r"stands for", re.I)
#: Patches whose guards are mined on other branches of issue 44 (T3: issue44-t3; accelerate: issue44-mineacc):
#: each is listed until its guards cite public code, and an entry whose patch passes fails this test, so that the
#: list only shrinks. (package, slug) -> why it is pending.
PENDING: dict[tuple[str, str], str] = {}


def citations(docstring: str | None) -> list[tuple[str, str]]:
    """The (repository, path) pairs a guard's docstring cites after "Stands for"; none without those words."""
    text = inspect.cleandoc(docstring or "")
    said = STANDS_FOR.search(text)
    return [(m["repo"], m["path"]) for m in CITATION.finditer(text, said.end())] if said else []


def guard_tests(module: Path) -> dict[str, list[tuple[str, str]]]:
    """Each guard test of a module (a ``test_*`` function, in a class or not) and the public code it cites."""
    tree = ast.parse(module.read_text(), str(module))
    return {
        node.name: citations(ast.get_docstring(node))
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
    }


def cited_guards(modules: list[str], root: Path = ROOT) -> list[str]:
    """``module::test`` of each guard test among ``modules`` that cites public code."""
    return [
        f"{name}::{test}"
        for name in modules
        if (root / name).is_file()
        for test, cited in guard_tests(root / name).items()
        if cited
    ]


def _patches() -> list[tuple[str, str, str, list[str]]]:
    project = config.load(ROOT)
    return [
        (line.key, line.package, series.slug_of(patch.name), series.guard_modules(patch))
        for line in project.all_lines()
        for patch in series.parse_series(line)
    ]


@pytest.mark.parametrize(
    ("line", "package", "slug", "modules"), _patches(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_each_patch_has_guards_that_cite_public_code(line, package, slug, modules):
    cited = cited_guards(modules)
    pending = PENDING.get((package, slug))
    if pending is None:
        assert len(cited) >= MINIMUM, (
            f"{line} {slug}: its Guard-Test modules ({', '.join(modules)}) hold {len(cited)} guard(s) that cite the "
            f"public code they stand for, {MINIMUM} needed: mine how public code calls, wraps, overrides, "
            "subclasses, copies or monkeypatches what the patch touches, and say in each guard's docstring "
            '"Stands for ... (<owner>/<repository> <path>)" (docs/proof-contract.md#guards-mined-from-public-code)'
        )
    else:
        assert len(cited) < MINIMUM, (
            f"{line} {slug} is listed as pending ({pending}) but {len(cited)} of its guards cite public code: "
            "remove it from PENDING"
        )


def test_pending_names_only_patches_that_exist():
    known = {(package, slug) for _, package, slug, _ in _patches()}
    assert not set(PENDING) - known, f"PENDING names patches no line carries: {sorted(set(PENDING) - known)}"


@pytest.mark.parametrize(
    ("docstring", "cited"),
    [
        (
            "Stands for TRL's wrapper (huggingface/trl trl/models/modeling_base.py).",
            [("huggingface/trl", "trl/models/modeling_base.py")],
        ),
        (  # wrapped where the docstring wraps, and two sources
            "Stands for LLaMA-Factory's load (hiyouga/LLaMA-Factory\n    src/llamafactory/model/loader.py) and"
            " axolotl's (axolotl-ai-cloud/axolotl src/axolotl/loaders/model.py).",
            [
                ("hiyouga/LLaMA-Factory", "src/llamafactory/model/loader.py"),
                ("axolotl-ai-cloud/axolotl", "src/axolotl/loaders/model.py"),
            ],
        ),
        (
            "Stands for the recipe (huggingface/accelerate src/accelerate/big_modeling.py, 1a2b3c4).",
            [("huggingface/accelerate", "src/accelerate/big_modeling.py")],
        ),
        ("A Llama loaded with device_map='auto' (huggingface/trl trl/trainer/utils.py).", []),  # no "Stands for"
        (
            "Ordinary loads; this one stands for PEFT's (huggingface/peft src/peft/auto.py).",
            [("huggingface/peft", "src/peft/auto.py")],
        ),
        ("Stands for what users do: a load with device_map='auto' and/or max_memory.", []),  # no source
        ("Stands for the scenario of tests/guards/test_t1_warmup.py.", []),  # a path alone is no repository
    ],
)
def test_what_counts_as_a_citation(docstring, cited):
    assert citations(docstring) == cited


def test_a_module_without_citations_counts_nothing(tmp_path):
    guards = tmp_path / "tests" / "guards"
    guards.mkdir(parents=True)
    (guards / "test_a.py").write_text(
        'def test_x(observe):\n    """A scenario next to the bug."""\n\n\n'
        'def test_y(observe):\n    """Stands for PEFT\'s loader (huggingface/peft src/peft/auto.py)."""\n\n\n'
        "class TestGroup:\n"
        '    def test_z(self, observe):\n        """Stands for NeMo\'s (NVIDIA/NeMo nemo/core/classes/common.py)."""\n'
    )
    assert cited_guards(["tests/guards/test_a.py", "tests/guards/missing.py"], tmp_path) == [
        "tests/guards/test_a.py::test_y",
        "tests/guards/test_a.py::test_z",
    ]
