"""The noxfile: thin (loading it does nothing), and which sessions may run beside which."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def noxfile():
    saved = dict(os.environ)
    spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    os.environ.clear()
    os.environ.update(saved)


def test_loading_the_noxfile_runs_nothing_and_imports_nothing_of_the_tool(tmp_path):
    """The noxfile once put src/ on sys.path, imported the tool, ran `pip config list` and read nox's own command
    line when it was loaded: loaded in a fresh interpreter where starting a process fails, it now does none of
    that, and the suite's parallelism is the command line's (`nox -j 4`)."""
    code = (
        "import subprocess, sys, importlib.util\n"
        "def refuse(*a, **k): raise AssertionError(f'the noxfile ran {a}')\n"
        "subprocess.run = subprocess.Popen = refuse\n"
        "path = list(sys.path)\n"
        f"spec = importlib.util.spec_from_file_location('nf', {str(ROOT / 'noxfile.py')!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "import nox\n"
        "assert sys.path == path, 'sys.path changed'\n"
        "assert not [m for m in sys.modules if m.startswith('patchwheel')], 'the tool was imported'\n"
        "assert not nox.options.parallel, 'parallelism set by the noxfile'\n"
    )
    import subprocess
    import sys

    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr


def test_the_readme_runs_the_suite_four_sessions_at_a_time():
    commands = (ROOT / "README.md").read_text().split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert commands[1].split("#")[0].split() == [".venv/bin/nox", "-j", "4"]


def test_sessions_that_read_dist_require_the_build_and_do_not_build_themselves(noxfile):
    """Two sessions building dist/ at once would each rewrite it while the other reads it."""
    import nox.registry

    sessions = nox.registry.get()
    for name in ("tests", "prove", "suite_prove", "e2e", "mutants", "upstream_suite"):
        assert sessions[name].requires == ["build_dist"], name
    assert not sessions["build_dist"].allow_parallel  # runs alone
    suite = list(nox.options.sessions or [])
    assert suite, "the noxfile names the default sessions"
    for name in suite:
        assert sessions[name.split("(")[0]].allow_parallel, name
    text = (ROOT / "noxfile.py").read_text()
    assert text.count('tool(session, "build")') == 1  # build_dist's (the build session passes its args)


@pytest.mark.parametrize(
    "suite,proven,guarded",
    [
        ("", ["a", "b", "latest"], {"a": "demo,other", "b": "demo", "latest": "demo"}),  # no [suite]: every set
        ('\n[suite]\nsets = ["latest", "b"]\n', ["b", "latest"], {"latest": "demo,other", "b": "demo"}),
    ],
)
def test_the_default_suite_proves_the_sets_of_suite(tmp_path, suite, proven, guarded):
    """`nox` (the README's test command) proves the sets [suite] names, both ways with their guards, each line once
    (`other` 2.0 is in every set); `nox -s prove` proves every set whole (the sets workflow). Asked of nox
    itself: the sessions it selects by default."""
    import json
    import subprocess
    import sys

    (tmp_path / "overlay").mkdir()
    sets = "".join(f'[set.{name}]\ndemo = "1.{i}"\nother = "2.0"\n' for i, name in enumerate(("a", "b", "latest")))
    (tmp_path / "overlay" / "sets.toml").write_text(sets + suite)
    (tmp_path / "noxfile.py").write_bytes((ROOT / "noxfile.py").read_bytes())
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "-l", "--json", "-f", str(tmp_path / "noxfile.py")],
        capture_output=True,
        text=True,
        check=True,
    )
    selected = json.loads(listed.stdout)
    by_kind: dict[str, dict[str, str]] = {}
    for s in selected:
        if s["name"] == "suite_prove":
            kind = s["call_spec"]["chain"]
            by_kind.setdefault(kind, {})[s["call_spec"]["pins"]] = s["call_spec"]["packages"]
    assert by_kind == {kind: guarded for kind in ("fixed", "pristine", "guards")}
    assert set(guarded) == set(proven)
    everything = subprocess.run(
        [sys.executable, "-m", "nox", "-l", "--json", "-f", str(tmp_path / "noxfile.py"), "-s", "prove"],
        capture_output=True,
        text=True,
        check=True,
    )
    proving = [s for s in json.loads(everything.stdout) if s["name"] == "prove"]
    assert len(proving) == 3 * 3, "proof both ways and guards, for every set"


def test_each_set_s_sessions_carry_its_tag_for_the_sets_workflow(noxfile):
    """The sets workflow runs `nox -t set-<name>` per (set, torch) cell: the tag selects exactly that set's proofs,
    both ways, and its guards."""
    import subprocess
    import sys

    import yaml

    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "sets.yml").read_text())
    job = doc["jobs"]["sets"]
    assert job["strategy"]["matrix"]["include"] == "${{ fromJSON(needs.plan.outputs.cells) }}"
    assert job["env"]["TORCH_VERSION"] == "${{ matrix.torch }}"
    assert any('nox -j 4 -t "set-${{ matrix.set }}"' in step.get("run", "") for step in job["steps"])
    script = ROOT / ".github" / "scripts" / "torch_cells.py"
    ran = subprocess.run(
        [sys.executable, str(script), str(ROOT)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        check=True,
    )
    cells = json.loads(ran.stdout.removeprefix("cells="))
    assert {c["set"] for c in cells} == set(noxfile.SETS) and all(c["torch"].count(".") == 2 for c in cells)
    for name in noxfile.SETS:
        listed = subprocess.run(
            [sys.executable, "-m", "nox", "-l", "--json", "-f", str(ROOT / "noxfile.py"), "-t", f"set-{name}"],
            capture_output=True,
            text=True,
            check=True,
        )
        chosen = sorted(s["session"] for s in json.loads(listed.stdout) if s["session"] != "build_dist")
        assert chosen == sorted(f"prove(pins='{name}', chain='{c}')" for c in ("pristine", "fixed", "guards")), chosen


def test_the_proving_sessions_run_one_chain_of_the_prove_verb_each(noxfile, tmp_path):
    """prove and suite_prove are `patchwheel prove`, one chain each (a session's own core under
    `nox -j 4`), the +fixed environment the set's sessions share in
    this checkout's .nox/, the session's arguments (`-- -k t3`) to
    pytest; the old helper verbs are gone."""
    import nox.registry

    class Session:
        posargs = ["-k", "t3"]

        def __init__(self) -> None:
            self.ran: list[tuple[str, ...]] = []

        cache_dir = tmp_path

        def run(self, *args: str, **kw) -> None:
            self.ran.append(args)

    sessions = nox.registry.get()
    fixed = ["--fixed-env", "", "--", "-k", "t3"]
    for name, kwargs, chain in [
        ("prove", {"pins": "latest", "chain": "pristine"}, ["--pristine"]),
        ("prove", {"pins": "latest", "chain": "guards"}, ["--guards"]),
        ("suite_prove", {"pins": "v4", "packages": "transformers", "chain": "fixed"}, ["--fixed", "--package"]),
        ("suite_prove", {"pins": "v4", "packages": "a,b", "chain": "guards"}, ["--guards", "--package", "a"]),
    ]:
        session = Session()
        sessions[name].func(session, **kwargs)
        (command,) = session.ran
        tool = list(command[command.index("patchwheel") + 1 :])
        assert tool[:3] == ["prove", "--set", kwargs["pins"]] and tool[3 : 3 + len(chain)] == chain, tool
        fixed[1] = str(tmp_path / f"fixed-{kwargs['pins']}")  # the set's, shared by its sessions
        assert tool[-len(fixed) :] == fixed
        assert sessions[name].venv_backend == "none", "the verb makes its environments"
    text = (ROOT / "noxfile.py").read_text()
    assert '"requirements"' not in text and 'tool(session, "guards"' not in text


def test_each_session_is_named_for_the_verb_it_runs(noxfile, tmp_path):
    """A session that runs the tool carries its verb's name (`suite_prove` and `build_dist` add what they run it
    on): the command line said `prove` where nox said `proof(pins=..., flavor=...)` and `guards(...)`, and `dist`
    ran `build`. Sessions that run pytest or the benchmarks (tests, e2e, bench) are named for what they test."""
    import nox.registry

    class Session:
        posargs: list[str] = []
        cache_dir = tmp_path
        venv_backend = "uv"

        def __init__(self) -> None:
            self.ran: list[list[str]] = []

        def run(self, *args, **kw):
            self.ran.append([str(a) for a in args])
            return f"{tmp_path}\n"

        def install(self, *args, **kw) -> None:
            pass

        def create_tmp(self) -> str:
            return str(tmp_path)

    named = {}
    for name, session in nox.registry.get().items():
        fake = Session()
        kwargs = {"pins": "latest", "packages": "demo", "chain": "fixed", "flavor": "fixed"}
        session.func(fake, **{k: v for k, v in kwargs.items() if k in session.func.__code__.co_varnames})
        if any("pytest" in run or "bench/bench.py" in run for run in fake.ran):
            continue
        verbs = [run[run.index("patchwheel") + 1] for run in fake.ran if "patchwheel" in run]
        if verbs:
            named[name] = verbs[0]
    wrong = {
        name: verb
        for name, verb in named.items()
        if not any(name.split("_")[i : i + len(v)] == v for v in [verb.replace("-", "_").split("_")] for i in range(3))
    }
    assert wrong == {}, "sessions not named for their verb"
    assert {"prove", "suite_prove", "build_dist", "matrix_check"} <= set(named), sorted(named)
