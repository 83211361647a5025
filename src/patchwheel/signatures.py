"""Upstream's signatures, kept: lint's check that a line's series changes no signature and removes no name of the
upstream modules it touches, unless the patch that does it declares the change (``API-Change: <name>: <why>``).

A +fixed wheel fixes a bug and changes nothing else, and code around a patched function relies on its signature:
callers, wrappers with the release's own signature, overrides and copies of a method, monkeypatches. So, for each
upstream module a series changes or deletes (a module it creates is new: every name in it is), pristine (from the
sha256-pinned wheel) against +fixed (pristine + the series), both read with :mod:`ast` (nothing is imported):

- every name pristine binds at the module's top level (a function, a class, an assignment, an import; in any branch
  of a top-level ``if``/``try``/``with``) and in a class's body (methods, attributes, nested classes) is still
  bound;
- every function and method keeps its signature: its parameters, their kinds (positional-only, positional or
  keyword, ``*args``, keyword-only, ``**kwargs``), their order and their defaults (annotations are not compared),
  ``async``, and its decorators (``staticmethod``, ``classmethod``, ``property``, a wrapper);
- every class keeps its bases, its keywords (``metaclass=``) and decorators, and a dataclass its fields in order
  with their defaults (its ``__init__``).

New names (a private helper, a new class, a new method) are fine. A name pristine binds without a ``def`` or
``class`` (an import, an assignment) only has to stay bound.

Each difference is attributed to the patch (or patches) whose step made it: the series' states one patch at a time,
the +fixed files with the patches undone in memory, last first (:func:`undo.undo_series`; ``git apply`` where that
cannot, :func:`apply.apply_series`). A difference is refused unless each patch that made it declares its name in an
``API-Change`` trailer; a declaration of a name the patch does not change is refused too (it would hide the next
change of that name). Names are dotted as upstream's import path spells them: ``<module>.<qualified name>``
(``transformers.modeling_utils.caching_allocator_warmup``, ``accelerate.accelerator.Accelerator.prepare_model``); a
deleted module by its module name.

What a module's API is (:func:`module_api`) is kept, per module's sha256, in the tool's own cache
(``<cache>/records/api/``): lint reads the same pristine modules on every run.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .atomic import replace_text
from .config import ReleaseLine, cache_dir
from .series import API_TRAILER, Patch, api_changes
from .wheels.apply import apply_series
from .wheels.undo import undo_series

#: One definition of a name: ``{"kind": "def" | "async def" | "class", ...}`` (see :func:`_function`, :func:`_class`).
Definition = dict
#: A module's API: each qualified name pristine binds (``f``, ``C``, ``C.m``, ``C.attr``) -> its definitions in source
#: order; an empty list for a name bound only by an assignment or an import.
Api = dict[str, list[Definition]]

#: The form the fix takes in each message.
ADVICE = (
    "keep upstream's signature (callers, wrappers and overrides written for the release rely on it), or, if the "
    "change is intended, declare it in the patch's trailers: `{trailer}: {name}: <why>` (and list it in "
    "docs/fixes.md)"
)


# --- one module's API, read with ast ------------------------------------------------------------------------------


def _params(args: ast.arguments) -> list[list]:
    """Each parameter as [name, kind, default or None], in order."""
    out: list[list] = []
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        kind = "positional-only" if i < len(args.posonlyargs) else "positional or keyword"
        out.append([arg.arg, kind, None if default is None else ast.unparse(default)])
    if args.vararg:
        out.append([args.vararg.arg, "*args", None])
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        out.append([arg.arg, "keyword-only", None if kw_default is None else ast.unparse(kw_default)])
    if args.kwarg:
        out.append([args.kwarg.arg, "**kwargs", None])
    return out


def _function(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Definition:
    return {
        "kind": "async def" if isinstance(node, ast.AsyncFunctionDef) else "def",
        "name": node.name,
        "decorators": [ast.unparse(d) for d in node.decorator_list],
        "params": _params(node.args),
    }


def _is_dataclass(decorator: str) -> bool:
    return decorator.split("(", 1)[0].rsplit(".", 1)[-1] == "dataclass"


def _class(node: ast.ClassDef) -> Definition:
    decorators = [ast.unparse(d) for d in node.decorator_list]
    fields = None
    if any(_is_dataclass(d) for d in decorators):  # its fields make its __init__
        fields = [
            [stmt.target.id, None if stmt.value is None else ast.unparse(stmt.value)]
            for stmt in node.body
            if isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and not ast.unparse(stmt.annotation).split("[", 1)[0].endswith("ClassVar")
        ]
    return {
        "kind": "class",
        "name": node.name,
        "decorators": decorators,
        "bases": [ast.unparse(b) for b in node.bases],
        "keywords": [ast.unparse(k) for k in node.keywords],
        "fields": fields,
    }


def _targets(node: ast.expr) -> list[str]:
    """The names an assignment target binds (``a``, ``a, (b, *c)``); an attribute or subscript binds none."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Tuple | ast.List):
        return [n for e in node.elts for n in _targets(e)]
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return []


def _walk(body: list[ast.stmt], prefix: str, out: Api) -> None:
    """The names ``body`` binds at its own level (``prefix``: "" for the module, "C." in class C's body), with the
    definitions of its functions and classes, and the members of its classes."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.setdefault(prefix + node.name, []).append(_function(node))
        elif isinstance(node, ast.ClassDef):
            out.setdefault(prefix + node.name, []).append(_class(node))
            _walk(node.body, f"{prefix}{node.name}.", out)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                out.setdefault(prefix + (alias.asname or alias.name.split(".")[0]), [])
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                star = f"* from {'.' * node.level}{node.module or ''}"
                out.setdefault(prefix + (star if alias.name == "*" else alias.asname or alias.name), [])
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for name in (n for t in targets for n in _targets(t)):
                out.setdefault(prefix + name, [])
        elif isinstance(node, ast.For | ast.AsyncFor):
            for name in _targets(node.target):
                out.setdefault(prefix + name, [])
            _walk(node.body + node.orelse, prefix, out)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for name in (n for item in node.items if item.optional_vars for n in _targets(item.optional_vars)):
                out.setdefault(prefix + name, [])
            _walk(node.body, prefix, out)
        elif isinstance(node, ast.If | ast.While):
            _walk(node.body + node.orelse, prefix, out)
        elif isinstance(node, ast.Try | ast.TryStar):
            handlers = [stmt for h in node.handlers for stmt in h.body]
            _walk(node.body + handlers + node.orelse + node.finalbody, prefix, out)
        elif isinstance(node, ast.Match):
            _walk([stmt for case in node.cases for stmt in case.body], prefix, out)


def module_api(source: bytes) -> Api:
    """What code outside a module can rely on (see the module's docstring). Raises SyntaxError."""
    out: Api = {}
    _walk(ast.parse(source).body, "", out)
    return out


# --- the cache: a module's API by its sha256 ----------------------------------------------------------------------

#: The version of what :func:`module_api` records: a record of another is not read.
_SCHEMA = f"patchwheel api 1 {hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}"


def _record(sha256: str) -> Path:
    key = hashlib.sha256(f"{_SCHEMA}\n{sha256}".encode()).hexdigest()
    return cache_dir() / "records" / "api" / key


def _is_api(data: object) -> bool:
    return isinstance(data, dict) and all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(d, dict) and "kind" in d for d in v)
        for k, v in data.items()
    )


class ApiReader:
    """Module APIs by their source's sha256: from this reader's memory, the tool's cache, else :func:`module_api`
    (then recorded). A record that is damaged or of another shape is no match: the module is read again."""

    def __init__(self) -> None:
        self._known: dict[str, Api] = {}

    def api(self, source: bytes) -> Api:
        sha = hashlib.sha256(source).hexdigest()
        if sha in self._known:
            return self._known[sha]
        path = _record(sha)
        try:
            record = json.loads(path.read_bytes())
        except (OSError, ValueError):
            record = None
        if isinstance(record, dict) and record.get("sha256") == sha and _is_api(record.get("api")):
            api: Api = record["api"]
        else:
            api = module_api(source)  # SyntaxError: the caller says which module
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                replace_text(path, json.dumps({"sha256": sha, "api": api}))
            except OSError:
                pass  # a cache that cannot be written costs the next lint time, never this one its verdict
        self._known[sha] = api
        return api


# --- differences ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """A name whose definition differs: ``before`` and ``after`` are its definitions, None where it is not bound
    (for a module: ``[]`` where it is there)."""

    name: str  # <module>.<qualified name>; a module: its name
    before: list[Definition] | None
    after: list[Definition] | None
    member: bool = False  # a name in a class's body (not the module's top level)
    module: bool = False  # the module itself (deleted)


def module_name(wheel_path: str) -> str:
    """``transformers/modeling_utils.py`` -> ``transformers.modeling_utils``; a package's ``__init__.py`` -> the
    package."""
    parts = wheel_path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def differences(module: str, before: Api | None, after: Api | None, *, every: bool = False) -> dict[str, Change]:
    """The names of ``module`` (before: None, no such module: nothing to keep) whose definitions differ in ``after``
    (None: the module is deleted). A name pristine binds without a def or class only has to stay bound. A member of
    a name that is gone is left to that name, unless ``every`` (the differences of one patch's step)."""
    if before is None:
        return {}
    if after is None:
        return {module: Change(module, [], None, module=True)}
    out = {}
    for qual, defs in before.items():
        now = after.get(qual)
        parent = "" if qual.startswith("* from ") else qual.rpartition(".")[0]  # (a star import: a module's name)
        if now is None and not every and parent and parent not in after:
            continue
        if now is None or (defs and now != defs):
            out[f"{module}.{qual}"] = Change(f"{module}.{qual}", defs, now, member=bool(parent))
    return out


def render(defs: list[Definition] | None) -> str:
    """A name's definitions as Python spells them (``def f(a, b=1, *, c)``; two: both, joined by " / ")."""
    if defs is None:
        return "no such name"
    if not defs:
        return "a name bound by an assignment or an import"
    return " / ".join(_render_one(d) for d in defs)


def _render_one(d: Definition) -> str:
    head = "".join(f"@{x} " for x in d.get("decorators", []))
    if d["kind"] == "class":
        inside = ", ".join([*d.get("bases", []), *d.get("keywords", [])])
        fields = d.get("fields")
        shown = "" if fields is None else " with fields (" + ", ".join(_field(f) for f in fields) + ")"
        return f"{head}class {d['name']}" + (f"({inside})" if inside else "") + shown
    return f"{head}{d['kind']} {d['name']}({_signature(d['params'])})"


def _field(field: list) -> str:
    return field[0] if field[1] is None else f"{field[0]}={field[1]}"


def _signature(params: list[list]) -> str:
    out: list[str] = []
    for i, (name, kind, default) in enumerate(params):
        if kind == "keyword-only" and not any(p[1] in ("*args", "keyword-only") for p in params[:i]):
            out.append("*")
        shown = {"*args": f"*{name}", "**kwargs": f"**{name}"}.get(kind, name)
        out.append(shown if default is None else f"{shown}={default}")
        if kind == "positional-only" and (i + 1 == len(params) or params[i + 1][1] != "positional-only"):
            out.append("/")
    return ", ".join(out)


def what_differs(change: Change) -> str:
    """What changed, in a few words: "adds the parameter device_mesh", "the default of x: 1 -> 2", "bases ..."."""
    before, after = change.before, change.after
    if change.module:
        return "deletes the module"
    if after is None:
        return "removes it"
    if not after or before is None:
        return "it is no longer a function or class"
    if len(before) != 1 or len(after) != 1:
        return "its definitions differ"
    (b,), (a,) = before, after
    if b["kind"] != a["kind"]:
        return f"{b['kind']} -> {a['kind']}"
    said = []
    if b.get("decorators") != a.get("decorators"):
        said.append(f"decorators [{', '.join(b.get('decorators', []))}] -> [{', '.join(a.get('decorators', []))}]")
    if b["kind"] == "class":
        if (b.get("bases"), b.get("keywords")) != (a.get("bases"), a.get("keywords")):
            said.append(
                f"bases ({', '.join([*b['bases'], *b['keywords']])}) -> ({', '.join([*a['bases'], *a['keywords']])})"
            )
        if b.get("fields") != a.get("fields"):
            said.append("its dataclass fields (its __init__)")
        return "; ".join(said) or "its definition"
    said += _param_changes(b["params"], a["params"])
    return "; ".join(said) or "its definition"


def _param_changes(before: list[list], after: list[list]) -> list[str]:
    was = {p[0]: p for p in before}
    now = {p[0]: p for p in after}
    said = []
    if added := [n for n in now if n not in was]:
        said.append(f"adds the parameter{'s' if len(added) > 1 else ''} {', '.join(added)}")
    if removed := [n for n in was if n not in now]:
        said.append(f"removes the parameter{'s' if len(removed) > 1 else ''} {', '.join(removed)}")
    for name in (n for n in was if n in now):
        if was[name][1] != now[name][1]:
            said.append(f"{name}: {was[name][1]} -> {now[name][1]}")
        if was[name][2] != now[name][2]:
            said.append(f"the default of {name}: {was[name][2] or 'none'} -> {now[name][2] or 'none'}")
    kept = [n for n in was if n in now]
    if kept != [n for n in now if n in was]:
        said.append("the order of its parameters")
    return said


def _problem(patch: Patch, change: Change, where: str) -> str:
    advice = ADVICE.format(trailer=API_TRAILER, name=change.name)
    if change.module:
        return (
            f"{patch.name}: deletes the module {change.name} of {where}: keep it, or, " + advice.split(", or, ", 1)[1]
        )
    if change.after is None:
        what = "a name in a class's body" if change.member else "a module-level name"
        return (
            f"{patch.name}: removes {change.name}, {what} of {where}: pristine `{render(change.before)}`, +fixed: no "
            f"such name: {advice}"
        )
    return (
        f"{patch.name}: changes the signature of {change.name} ({what_differs(change)}): pristine "
        f"`{render(change.before)}`, +fixed `{render(change.after)}`: {advice}"
    )


# --- a line's series -------------------------------------------------------------------------------------------------


def _states(
    line: ReleaseLine, series: list[Patch], pristine: dict[str, bytes | None], fixed: dict[str, bytes | None]
) -> list[dict[str, bytes | None]]:
    """The touched files (upstream-tree paths) after each patch: [pristine, after the 1st, ..., +fixed]. The fixed
    files with the patches undone in memory, last first; where that cannot be done exactly, by ``git apply``."""
    states = [fixed]
    for patch in reversed(series):
        back = undo_series([patch], states[0])
        if back is None:
            break
        states.insert(0, back)
    if len(states) == len(series) + 1 and states[0] == pristine:
        return states
    where = f"{line.package} {line.version}"
    return [pristine] + [
        {**pristine, **apply_series(series[:k], pristine.get, where=where)} for k in range(1, len(series) + 1)
    ]


def series_problems(
    line: ReleaseLine,
    series: list[Patch],
    pristine: Mapping[str, bytes | None],
    fixed: Mapping[str, bytes | None],
    reader: ApiReader | None = None,
) -> list[str]:
    """Every signature a line's series changes, or name it removes, that the patch making it does not declare, and
    every declaration of a change that its patch does not make. ``pristine`` and ``fixed``: each file the series
    touches by its path in the wheel (None: not there)."""
    reader = reader or ApiReader()
    where = f"pristine {line.package} {line.version}"
    problems: list[str] = []
    wheel = {p: w for p in sorted({p for patch in series for p in patch.touched}) if (w := line.wheel_path(p))}
    modules = {p: w for p, w in wheel.items() if w.endswith(".py")}

    def api(state: Mapping[str, bytes | None], path: str, which: str) -> Api | None:
        data = state.get(path)
        if data is None:
            return None
        try:
            return reader.api(data)
        except SyntaxError as exc:
            problems.append(
                f"{modules[path]} ({which}) is not Python that ast can read ({exc.msg}, line {exc.lineno}): the "
                "signature check cannot compare it"
            )
            return {}

    before = {p: pristine.get(w) for p, w in wheel.items()}
    after = {p: fixed.get(w) for p, w in wheel.items()}
    net: dict[str, Change] = {}
    for p, w in modules.items():
        net.update(differences(module_name(w), api(before, p, "pristine"), api(after, p, "+fixed")))
    declared = {(patch.name, name) for patch in series for name, _ in api_changes(patch)}
    if problems or (not net and not declared):
        return problems
    states = _states(line, series, before, after)
    made: dict[str, list[Patch]] = {}  # each name that differs -> the patches whose step changed it, in order
    for k, patch in enumerate(series, 1):
        for p in sorted({p for p in patch.touched if p in modules}):
            was, now = api(states[k - 1], p, f"before {patch.name}"), api(states[k], p, f"after {patch.name}")
            for name in differences(module_name(modules[p]), was, now, every=True):
                made.setdefault(name, []).append(patch)

    def touching(name: str) -> list[Patch]:  # (every difference has a step that made it: this is a safety net)
        owners = {p for p, w in modules.items() if f"{name}.".startswith(f"{module_name(w)}.")}
        return [q for q in series if owners & set(q.touched)]

    for name, change in sorted(net.items()):
        makers = made.get(name) or touching(name)
        problems += [_problem(q, change, where) for q in makers if (q.name, name) not in declared]
    for patch in series:
        mine = sorted(n for n, ps in made.items() if patch in ps and n in net)
        for name, _ in api_changes(patch):
            if name in net and patch in made.get(name, []):
                continue
            if name in net:
                by = ", ".join(q.name for q in made.get(name, []))
                problems.append(
                    f"{patch.name}: declares `{API_TRAILER}: {name}`, but {by} makes that change, not this patch: "
                    "move the trailer to that patch"
                )
                continue
            problems.append(
                f"{patch.name}: declares `{API_TRAILER}: {name}`, which the series does not change ({where} and "
                "+fixed agree): remove the trailer (a declaration of a change that did not happen would hide the "
                "next one)" + (f"; the names this patch changes: {', '.join(mine)}" if mine else "")
            )
    return problems
