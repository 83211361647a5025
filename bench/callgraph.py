"""Which of the tool's modules a run passes through, and how often it comes back to one (issue 46).

    PYTHONPATH=src python bench/callgraph.py build [ROOT]        # `patchwheel build` of every line, into a temp dist/
    PYTHONPATH=src python bench/callgraph.py follow              # tests/tool/test_follow.py's carried release (pytest)

Counted over function calls (a module's body run at import is not a call: the command line imports lazily, and
would otherwise count modules it merely imports): the patchwheel modules entered, the distinct calls from one module
into another, and the distinct such calls into a module that is still on the call stack below (A -> B -> A: a
callback, or a layer asked back). Deterministic: run it on two trees to compare them.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

FOLLOW = "tests/tool/test_follow.py::test_a_release_the_series_carries_onto_becomes_the_latest_line"


class CallGraph:
    def __init__(self) -> None:
        self.modules: set[str] = set()
        self.edges: set[tuple[str, str]] = set()
        self.back: set[tuple[str, str]] = set()

    def __call__(self, frame, event, arg) -> None:
        if event != "call" or not _ours(frame):
            return
        name = frame.f_globals["__name__"]
        self.modules.add(name)
        stack = []
        caller = frame.f_back
        while caller is not None:
            if _ours(caller):
                stack.append(caller.f_globals["__name__"])
            caller = caller.f_back
        if stack and stack[0] != name:
            self.edges.add((stack[0], name))
            if name in stack[1:]:
                self.back.add((stack[0], name))

    def summary(self, what: str) -> dict:
        return {
            "run": what,
            "modules": len(self.modules),
            "module_to_module_calls": len(self.edges),
            "back_into_a_module_on_the_stack": len(self.back),
            "back": sorted(f"{a} -> {b}" for a, b in self.back),
        }


def _ours(frame) -> bool:
    return frame.f_globals.get("__name__", "").startswith("patchwheel") and frame.f_code.co_name != "<module>"


def _build(graph: CallGraph, root: str) -> None:
    from patchwheel import cli

    with tempfile.TemporaryDirectory() as dist:
        sys.setprofile(graph)
        try:
            cli.main(["--root", root, "build", "--dist", str(Path(dist) / "dist")])
        except SystemExit:
            pass
        finally:
            sys.setprofile(None)


def _follow(graph: CallGraph) -> None:
    import pytest

    class Profiled:
        def pytest_runtest_call(self, item):
            sys.setprofile(graph)

        def pytest_runtest_teardown(self, item):
            sys.setprofile(None)

    pytest.main(["-q", "-p", "no:cacheprovider", FOLLOW], plugins=[Profiled()])


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "build"
    graph = CallGraph()
    if what == "build":
        _build(graph, argv[1] if len(argv) > 1 else ".")
    elif what == "follow":
        _follow(graph)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(graph.summary(what), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
