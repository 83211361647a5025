"""Upstream's signatures, kept (issue 44, item 7): lint refuses a patch that changes a signature of what it touches or
removes a module-level name, unless the patch declares it (``API-Change: <module>.<name>: <why>``), and refuses a
declaration of a change the patch does not make.

On a synthetic pristine wheel (demo 1.0.0 with the module below), independent of the real patches: each kind of
change T1 made or could have made (a parameter added, a module-level name removed, a default changed, a kind changed,
a class's bases changed, a decorator changed), refused with the patch's name, both signatures and the fix, and
accepted with the trailer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from conftest import INIT, TRAILERS, git_patch, make_patch, make_wheel
from patchwheel import cli, config, lint, series, signatures
from patchwheel.maint import lintall

PRISTINE = b'''"""demo core."""

import os
from os import path as ospath

LIMIT = 3


def greet(name, punctuation="!"):
    return "hello " + name + punctuation


def add(a, b):
    return a + b


class Base:
    pass


class Mixin:
    pass


class Greeter(Base):
    kind = "plain"

    def __init__(self, name):
        self.name = name

    def say(self, loud=False):
        return greet(self.name).upper() if loud else greet(self.name)

    @staticmethod
    def make(name):
        return Greeter(name)
'''
FILES = {"src/demo/core.py": PRISTINE, "src/demo/__init__.py": INIT}


@pytest.fixture
def demo(demo_project):
    """The demo project, its pinned wheel's core.py the module above (the series: one patch that greets with a comma,
    which keeps every signature)."""
    whl = make_wheel(demo_project.upstream.parent, {"demo/__init__.py": INIT, "demo/core.py": PRISTINE})
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    page = demo_project.index / "demo" / "index.html"
    page.write_text(f'<a href="../../upstream/{whl.name}#sha256={sha}">{whl.name}</a>\n')
    demo_project.sha256 = sha
    demo_project.write_pins(sha)
    demo_project.set_series(("0001-greet-comma.patch", _patch(_replace(b'"hello "', b'"hello, "'))))
    return demo_project


def _replace(old: bytes, new: bytes):
    def edit(files: dict[str, bytes]) -> dict[str, bytes]:
        assert old in files["src/demo/core.py"], old
        files["src/demo/core.py"] = files["src/demo/core.py"].replace(old, new, 1)
        return files

    return edit


def _patch(edit, *declared: str, subject: str = "Change the demo", files=None) -> bytes:
    """A real format-patch of ``edit``, with an ``API-Change`` trailer for each of ``declared`` (repeated keys)."""
    trailers = dict(TRAILERS)
    if declared:  # one trailer line per name: the last key's value carries the rest as its own lines
        trailers["API-Change"] = "\nAPI-Change: ".join(f"{name}: the test changes it on purpose" for name in declared)
    return make_patch(files or FILES, edit, subject, trailers)


def _problems(demo) -> list[str]:
    """What lint's signature check says of the demo's line (`patchwheel lint` lists it under the line's key, with
    the line's other problems: :func:`test_lint_prints_it_under_the_line_and_fails`)."""
    return lint.signature_problems(lintall.Generated()(demo.load().line("demo", "1.0.0")))


#: (what changes, the edit, the name, what the message says differs, pristine's signature, +fixed's)
CHANGES = [
    (
        "a parameter added (as T1 did)",
        _replace(b'def greet(name, punctuation="!"):', b'def greet(name, punctuation="!", device_mesh=None):'),
        "demo.core.greet",
        "adds the parameter device_mesh",
        "def greet(name, punctuation='!')",
        "def greet(name, punctuation='!', device_mesh=None)",
    ),
    (
        "a module-level name removed",
        _replace(b"\n\ndef add(a, b):\n    return a + b\n", b""),
        "demo.core.add",
        None,
        "def add(a, b)",
        None,
    ),
    (
        "a default changed",
        _replace(b'punctuation="!"', b'punctuation="?"'),
        "demo.core.greet",
        "the default of punctuation: '!' -> '?'",
        "def greet(name, punctuation='!')",
        "def greet(name, punctuation='?')",
    ),
    (
        "a kind changed (positional -> keyword-only)",
        _replace(b"def add(a, b):", b"def add(a, *, b):"),
        "demo.core.add",
        "b: positional or keyword -> keyword-only",
        "def add(a, b)",
        "def add(a, *, b)",
    ),
    (
        "a class's bases changed",
        _replace(b"class Greeter(Base):", b"class Greeter(Base, Mixin):"),
        "demo.core.Greeter",
        "bases (Base) -> (Base, Mixin)",
        "class Greeter(Base)",
        "class Greeter(Base, Mixin)",
    ),
    (
        "a method's parameter removed",
        _replace(b"def say(self, loud=False):", b"def say(self):"),
        "demo.core.Greeter.say",
        "removes the parameter loud",
        "def say(self, loud=False)",
        "def say(self)",
    ),
    (
        "a decorator changed (staticmethod -> classmethod)",
        _replace(b"@staticmethod\n    def make(name):", b"@classmethod\n    def make(cls, name):"),
        "demo.core.Greeter.make",
        "decorators [staticmethod] -> [classmethod]; adds the parameter cls",
        "@staticmethod def make(name)",
        "@classmethod def make(cls, name)",
    ),
]


@pytest.mark.parametrize("what,edit,name,said,before,after", CHANGES, ids=[c[0] for c in CHANGES])
def test_a_change_is_refused_naming_the_patch_both_signatures_and_the_fix(demo, what, edit, name, said, before, after):
    demo.set_series(("0001-change-it.patch", _patch(edit)))
    (problem,) = _problems(demo)
    advice = (
        "keep upstream's signature (callers, wrappers and overrides written for the release rely on it), or, if the "
        f"change is intended, declare it in the patch's trailers: `API-Change: {name}: <why>` (and list it in "
        "docs/fixes.md)"
    )
    if after is None:
        assert problem == (
            f"0001-change-it.patch: removes {name}, a module-level name of pristine demo 1.0.0: pristine `{before}`, "
            f"+fixed: no such name: {advice}"
        )
    else:
        assert problem == (
            f"0001-change-it.patch: changes the signature of {name} ({said}): pristine `{before}`, +fixed "
            f"`{after}`: {advice}"
        )


@pytest.mark.parametrize("what,edit,name,said,before,after", CHANGES, ids=[c[0] for c in CHANGES])
def test_the_same_change_declared_is_accepted(demo, what, edit, name, said, before, after):
    demo.set_series(("0001-change-it.patch", _patch(edit, name)))
    assert series.lint_line(demo.load().line("demo"), demo.root) == []
    assert _problems(demo) == []


def test_today_s_demo_series_keeps_every_signature(demo):
    """A fix inside a function's body changes no signature: nothing to declare."""
    assert _problems(demo) == []


def test_new_names_are_fine(demo):
    """A private helper, a new class, a new method and a new module-level constant: nothing of pristine's is lost."""
    edit = _replace(
        b"class Base:\n    pass\n",
        b"class Base:\n    pass\n\n    def extra(self):\n        return 1\n\n\nclass Fresh(Base):\n    pass\n\n\n"
        b"def _helper(x, *, y=2):\n    return x\n\n\nNEW = 1\n",
    )
    demo.set_series(("0001-add-names.patch", _patch(edit)))
    assert _problems(demo) == []


def test_an_unknown_name_in_the_trailer_is_refused(demo):
    """A declaration of a change that did not happen would hide the next change of that name."""
    demo.set_series(("0001-greet-comma.patch", _patch(_replace(b'"hello "', b'"hello, "'), "demo.core.greet")))
    assert _problems(demo) == [
        "0001-greet-comma.patch: declares `API-Change: demo.core.greet`, which the series does not change (pristine "
        "demo 1.0.0 and +fixed agree): remove the trailer (a declaration of a change that did not happen would hide "
        "the next one)"
    ]
    demo.set_series(("0001-greet-comma.patch", _patch(_replace(b'"hello "', b'"hello, "'), "demo.core.nothing")))
    assert [p.split(", which")[0] for p in _problems(demo)] == [
        "0001-greet-comma.patch: declares `API-Change: demo.core.nothing`"
    ]


def test_a_declaration_lists_what_the_patch_does_change(demo):
    """Declared under another spelling (the qualified name without its module), the change is refused and the
    declaration too, which names the name the check wants."""
    edit = _replace(b"def add(a, b):", b"def add(a, b, c=0):")
    demo.set_series(("0001-change-it.patch", _patch(edit, "demo.add")))
    problems = _problems(demo)
    assert len(problems) == 2, problems
    assert problems[0].startswith("0001-change-it.patch: changes the signature of demo.core.add (adds the parameter c)")
    assert problems[1].endswith("; the names this patch changes: demo.core.add"), problems[1]


def test_each_difference_is_attributed_to_the_patch_that_made_it(demo):
    """Two patches, the second changing a signature: the message names the second; the first's trailer would not
    cover it (it is told to move), and the second's does."""
    first = _patch(_replace(b'"hello "', b'"hello, "'), subject="Greet with a comma")
    after_first = {**FILES, "src/demo/core.py": FILES["src/demo/core.py"].replace(b'"hello "', b'"hello, "')}
    second = _patch(_replace(b"def add(a, b):", b"def add(a, b, c=0):"), files=after_first)
    demo.set_series(("0001-greet-comma.patch", first), ("0002-add-more.patch", second))
    (problem,) = _problems(demo)
    assert problem.startswith("0002-add-more.patch: changes the signature of demo.core.add (adds the parameter c)")

    first = _patch(_replace(b'"hello "', b'"hello, "'), "demo.core.add", subject="Greet with a comma")
    demo.set_series(("0001-greet-comma.patch", first), ("0002-add-more.patch", second))
    problems = _problems(demo)
    assert problems[0].startswith("0002-add-more.patch: changes the signature of demo.core.add"), problems
    assert problems[1] == (
        "0001-greet-comma.patch: declares `API-Change: demo.core.add`, but 0002-add-more.patch makes that change, "
        "not this patch: move the trailer to that patch"
    )

    second = _patch(_replace(b"def add(a, b):", b"def add(a, b, c=0):"), "demo.core.add", files=after_first)
    demo.set_series(
        ("0001-greet-comma.patch", _patch(_replace(b'"hello "', b'"hello, "'))), ("0002-add-more.patch", second)
    )
    assert _problems(demo) == []


def test_two_patches_changing_one_name_each_declare_it(demo):
    """The first patch declares its change of greet; a later one that changes greet again, silently, is refused: a
    declaration covers its own patch's change only."""
    first = _patch(
        _replace(b'def greet(name, punctuation="!"):', b'def greet(name, punctuation="!", a=1):'), "demo.core.greet"
    )
    later = {**FILES, "src/demo/core.py": PRISTINE.replace(b'punctuation="!"):', b'punctuation="!", a=1):')}
    second = _patch(_replace(b", a=1):", b", a=1, b=2):"), files=later)
    demo.set_series(("0001-greet-more.patch", first), ("0002-greet-even-more.patch", second))
    (problem,) = _problems(demo)
    assert problem.startswith(
        "0002-greet-even-more.patch: changes the signature of demo.core.greet (adds the parameters a, b): pristine "
        "`def greet(name, punctuation='!')`, +fixed `def greet(name, punctuation='!', a=1, b=2)`"
    ), problem


def test_a_change_a_later_patch_undoes_is_no_change(demo):
    first = _patch(_replace(b"def add(a, b):", b"def add(a, b, c=0):"), subject="Add more")
    later = {**FILES, "src/demo/core.py": PRISTINE.replace(b"def add(a, b):", b"def add(a, b, c=0):")}
    second = _patch(_replace(b"def add(a, b, c=0):", b"def add(a, b):"), files=later, subject="Add less")
    demo.set_series(("0001-add-more.patch", first), ("0002-add-less.patch", second))
    assert _problems(demo) == []


def test_several_names_take_one_trailer_each(demo):
    """Repeated ``API-Change`` keys are each read (the other trailers stay one per key): two names changed, one
    declared, the other refused; both declared, accepted."""
    edit = lambda f: _replace(b"def add(a, b):", b"def add(a, b, c=0):")(  # noqa: E731
        _replace(b'punctuation="!"', b'punctuation="?"')(f)
    )
    demo.set_series(("0001-change-it.patch", _patch(edit, "demo.core.add")))
    (problem,) = _problems(demo)
    assert problem.startswith("0001-change-it.patch: changes the signature of demo.core.greet"), problem
    demo.set_series(("0001-change-it.patch", _patch(edit, "demo.core.add", "demo.core.greet")))
    patch = series.parse_series(demo.load().line("demo"))[0]
    assert [name for name, _ in series.api_changes(patch)] == ["demo.core.add", "demo.core.greet"]
    assert series.lint_line(demo.load().line("demo"), demo.root) == []
    assert _problems(demo) == []


@pytest.mark.parametrize(
    "extra,said",
    [
        ("Drop-When: demo>=2.0.0", "trailer 'Drop-When:' is given 2 times: give it once"),
        ("API-Change: demo.core.add: one\nAPI-Change: demo.core.add: two", "API-Change names demo.core.add twice"),
        ("API-Change: add changes", "API-Change 'add changes' must be '<module>.<name>: <why>'"),
        ("API-Change: add: no module", "API-Change 'add: no module' must be '<module>.<name>: <why>'"),
    ],
)
def test_a_repeated_or_malformed_trailer_is_refused(demo, extra, said):
    """A key given twice kept one value and lost the other, silently; only API-Change (one per name) and
    Mutant-Survives (one per hunk) repeat."""
    trailers = {**TRAILERS, "Guard-Test": TRAILERS["Guard-Test"] + "\n" + extra}
    demo.set_series(("0001-x.patch", make_patch(FILES, _replace(b'"hello "', b'"hello, "'), "X", trailers)))
    problems = series.lint_line(demo.load().line("demo"), demo.root)
    assert any(p.startswith("0001-x.patch: ") and said in p for p in problems), problems


def test_a_deleted_module_is_refused_and_accepted_declared(demo):
    files = {**FILES, "src/demo/extra.py": b"def old(a):\n    return a\n"}
    whl = make_wheel(
        demo.upstream.parent,
        {"demo/__init__.py": INIT, "demo/core.py": PRISTINE, "demo/extra.py": files["src/demo/extra.py"]},
    )
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    (demo.index / "demo" / "index.html").write_text(
        f'<a href="../../upstream/{whl.name}#sha256={sha}">{whl.name}</a>\n'
    )
    demo.write_pins(sha)

    def delete(repo: Path) -> None:
        (repo / "src" / "demo" / "extra.py").unlink()

    demo.set_series(("0001-drop-extra.patch", git_patch(files, delete, "Drop extra", TRAILERS)))
    (problem,) = _problems(demo)
    assert problem.startswith("0001-drop-extra.patch: deletes the module demo.extra of pristine demo 1.0.0: keep it"), (
        problem
    )
    declared = {**TRAILERS, "API-Change": "demo.extra: nothing imports it"}
    demo.set_series(("0001-drop-extra.patch", git_patch(files, delete, "Drop extra", declared)))
    assert _problems(demo) == []


def test_lint_prints_it_under_the_line_and_fails(demo, capsys):
    """`patchwheel lint` (`nox -s lint`; follow and derive ask lintall.problems): the problem under the line."""
    demo.set_series(("0001-change-it.patch", _patch(CHANGES[0][1])))
    capsys.readouterr()
    assert cli.main(["--root", str(demo.root), "lint"]) == 1
    out = capsys.readouterr().out
    assert "demo/1.0.0: FAILED" in out
    assert "  - 0001-change-it.patch: changes the signature of demo.core.greet (adds the parameter device_mesh)" in out
    assert "overlay/: ok" in out, "pristine + series made once, for both checks"
    assert any("demo.core.greet" in p for p in lintall.problems(demo.load()))


def test_the_series_states_by_git_where_the_undo_in_memory_cannot(demo, monkeypatch):
    """The states one patch at a time come from undoing the +fixed files in memory; where that fails (a rename, a
    hunk it cannot place), ``git apply`` makes them: the same verdict."""
    first = _patch(_replace(b'"hello "', b'"hello, "'), subject="Greet with a comma")
    after_first = {**FILES, "src/demo/core.py": FILES["src/demo/core.py"].replace(b'"hello "', b'"hello, "')}
    second = _patch(_replace(b"def add(a, b):", b"def add(a, b, c=0):"), files=after_first)
    demo.set_series(("0001-greet-comma.patch", first), ("0002-add-more.patch", second))
    in_memory = _problems(demo)
    monkeypatch.setattr(signatures, "undo_series", lambda patches, files: None)
    assert _problems(demo) == in_memory and in_memory[0].startswith("0002-add-more.patch: ")


def test_the_api_of_a_module_is_kept_in_the_tools_cache_by_its_sha256(demo, monkeypatch):
    """Read once per module: a damaged or foreign record is read again, never believed."""
    demo.set_series(("0001-change-it.patch", _patch(CHANGES[0][1])))
    expected = _problems(demo)
    records = Path(config.cache_dir()) / "records" / "api"
    assert records.is_dir() and len(list(records.iterdir())) == 2  # pristine's core.py and +fixed's
    for record in records.iterdir():
        record.write_text("{")  # damaged
    assert _problems(demo) == expected
    for record in records.iterdir():  # another module's API under this key: no match
        data = json.loads(record.read_text())
        record.write_text(json.dumps({**data, "sha256": "0" * 64, "api": {}}))
    assert _problems(demo) == expected
    calls: list[bytes] = []
    real = signatures.module_api

    def counted(source: bytes) -> signatures.Api:
        calls.append(source)
        return real(source)

    monkeypatch.setattr(signatures, "module_api", counted)
    assert _problems(demo) == expected and calls == [], "the records, rewritten, are read"


# --- one module's API ---------------------------------------------------------------------------------------------


def test_module_api_reads_every_binding_and_signature():
    source = b"""
import a.b
from c import d as e
from .f import *
if X:
    def g(p, /, q, *r, s, t=1, **u): ...
else:
    def g(p): ...
try:
    import h
except ImportError:
    h = None
with open(x) as (w1, w2):
    pass
for loop_var in ():
    pass

@dataclass(frozen=True)
class K(Base, metaclass=M):
    field_a: int
    field_b: str = "x"
    shared: ClassVar[int] = 0

    async def run(self, *, n=2): ...

    class Inner:
        def deep(self): ...

    if Y:
        attr = 1
"""
    api = signatures.module_api(source)
    assert set(api) == {
        "a", "e", "* from .f", "g", "h", "w1", "w2", "loop_var", "K", "K.field_a", "K.field_b", "K.shared",
        "K.run", "K.Inner", "K.Inner.deep", "K.attr",
    }  # fmt: skip
    assert signatures.render(api["g"]) == "def g(p, /, q, *r, s, t=1, **u) / def g(p)"
    assert signatures.render(api["K"]) == (
        "@dataclass(frozen=True) class K(Base, metaclass=M) with fields (field_a, field_b='x')"
    )
    assert signatures.render(api["K.run"]) == "async def run(self, *, n=2)"
    assert api["h"] == [] and signatures.render(api["h"]) == "a name bound by an assignment or an import"


def test_annotations_are_not_compared_and_a_name_bound_without_a_def_only_stays_bound():
    before = signatures.module_api(b"from x import f\n\ndef g(a: int = 1) -> int: ...\n")
    after = signatures.module_api(b"def f(z): ...\n\ndef g(a: str = 1) -> str: ...\n")
    assert signatures.differences("m", before, after) == {}


def test_a_dataclass_field_added_changes_its_init():
    before = signatures.module_api(b"@dataclass\nclass P:\n    a: int = 1\n")
    after = signatures.module_api(b"@dataclass\nclass P:\n    a: int = 1\n    b: int = 2\n")
    (change,) = signatures.differences("m", before, after).values()
    assert change.name == "m.P" and signatures.what_differs(change) == "its dataclass fields (its __init__)"


def test_a_star_import_removed_is_a_module_level_name_removed():
    (change,) = signatures.differences("m", signatures.module_api(b"from .x.y import *\n"), {}).values()
    assert change.name == "m.* from .x.y" and not change.member and change.after is None


def test_a_member_of_a_removed_class_is_left_to_the_class():
    before = signatures.module_api(b"class C:\n    def m(self): ...\n")
    assert list(signatures.differences("m", before, {})) == ["m.C"]
    assert sorted(signatures.differences("m", before, {}, every=True)) == ["m.C", "m.C.m"]


def test_the_new_patch_template_names_the_trailer():
    from patchwheel.maint import refresh

    assert "API-Change: <module>.<name>: <why>" in refresh.TEMPLATE


def test_a_module_ast_cannot_read_is_a_problem_not_a_pass(demo):
    demo.set_series(("0001-break-it.patch", _patch(_replace(b"def add(a, b):", b"def add(a, b:"))))
    assert _problems(demo) == [
        "demo/core.py (+fixed) is not Python that ast can read ('(' was never closed, line 13): the signature check "
        "cannot compare it"
    ]
