"""setruns.prove_set (follow's and derive's proving step) without real environments: which pytest runs it starts,
with which options, and what the judge's proof cases become (a replay for the proofs on the pristine pins only)."""

from __future__ import annotations

import json
from pathlib import Path

from patchwheel.maint.proving import proofenv, setruns


def _runs(demo_project, monkeypatch, tmp_path, seen):
    """prove_set on the demo's line: each pytest it starts (arguments, PYTHONHASHSEED, the replay it was given)."""
    project = demo_project.load()
    line = project.line("demo")
    envs = {"pristine": tmp_path / "envs" / "demo-1.0.0", "fixed": tmp_path / "envs" / "follow-demo-1.0.0+fixed"}
    monkeypatch.setattr(proofenv, "release_env", lambda cache, wheels: envs["pristine"])
    monkeypatch.setattr(proofenv, "fixed_env", lambda cache, wheels, purpose, at: envs["fixed"])
    monkeypatch.setattr(setruns, "current_wheel", lambda line, dist, hint: dist / "demo-1.0.0+fixed-py3-none-any.whl")
    started = []

    def run_in_group(cmd, cwd, env, log, timeout):
        if cmd[1:3] == ["-m", "patchwheel"]:  # the status check before each chain's proofs: a bug on pristine only
            python = Path(cmd[cmd.index("--python") + 1])
            started.append((python.parents[1].name, ["status"], None, None, None))
            log.write_text("")
            return 1 if python.parents[1] == envs["pristine"] else 0
        args = cmd[3:]
        replay = args[args.index("--proof-replay") + 1] if "--proof-replay" in args else None
        started.append(
            (
                Path(cmd[0]).parents[1].name,
                [a for a in args if a.startswith(("tests/", "--guard-", "--proof-"))],
                env.get("PYTHONHASHSEED"),
                json.loads(Path(replay).read_text()) if replay else None,
                args[args.index("--guard-exchange") + 1] if "--guard-exchange" in args else None,
            )
        )
        log.write_text("=== 1 passed in 0.1s ===\n")
        return 0

    monkeypatch.setattr(proofenv, "run_in_group", run_in_group)
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    runs = setruns.prove_set(project, {"demo": line}, tmp_path, log=lambda m: None, seen=seen(envs))
    assert all(r.ok for r in runs)
    guards = [s for s in started if s[1][0].startswith("tests/guards")]  # one chain: in its order
    proofs = [s for s in started if s not in guards]
    # each proof chain in its order: the status check, then the proofs
    by_env = {env: [s for s in proofs if s[0] == env] for env in sorted({s[0] for s in proofs})}
    assert all([s[1] for s in chain][:1] == [["status"]] for chain in by_env.values()), by_env
    return guards + [s for chain in by_env.values() for s in chain[1:]]


def test_the_judge_s_cases_are_replayed_on_the_pristine_pins_only(demo_project, monkeypatch, tmp_path):
    case = {"nodeid": "tests/proof/test_demo.py::test_greet", "seen": False, "inputs": "x"}
    other = {"nodeid": "tests/proof/test_demo.py::test_greet", "seen": False, "inputs": "y"}
    started = _runs(
        demo_project, monkeypatch, tmp_path, lambda envs: {str(envs["pristine"]): [case], "/elsewhere": [other]}
    )
    assert [(env, args[:2], seed, replay) for env, args, seed, replay, _ in started] == [
        ("demo-1.0.0", ["tests/guards/test_demo.py", "--guard-record"], "0", None),
        ("follow-demo-1.0.0+fixed", ["tests/guards/test_demo.py", "--guard-against"], "0", None),
        ("demo-1.0.0", ["tests/guards/test_demo.py", "--guard-readback"], "0", None),
        ("demo-1.0.0", ["tests/proof", "--proof-replay"], None, [case]),  # the proofs keep the judge's hash seed
        ("follow-demo-1.0.0+fixed", ["tests/proof"], None, None),
    ]
    exchange = [folder for *_, folder in started if folder is not None]
    assert len(exchange) == 3 and len(set(exchange)) == 1, "the three guard runs exchange artifacts through one folder"


def test_nothing_judged_there_runs_every_proof(demo_project, monkeypatch, tmp_path):
    started = _runs(demo_project, monkeypatch, tmp_path, lambda envs: {})
    assert [replay for _, args, _, replay, _ in started if args[0] == "tests/proof"] == [None, None]


def test_run_proofs_keeps_every_case_and_judges_as_first_bug_would(tmp_path, monkeypatch):
    """With a sink, the run goes past a module's first bug (the cases are for the pristine pins' replay), and the
    verdicts are those --proof-first-bug gives: each module's cases up to its first bug."""
    root = tmp_path
    a, b = str(root / "tests/proof/a.py"), str(root / "tests/proof/b.py")
    cases = [
        {"file": a, "test": "t1", "outcome": "passed", "bug": False, "error": ""},
        {"file": a, "test": "t2", "outcome": "failed", "bug": True, "error": "E: bug"},
        {"file": a, "test": "t3", "outcome": "failed", "bug": False, "error": "KeyError: later"},
        {"file": b, "test": "u", "outcome": "passed", "bug": False, "error": ""},
    ]
    asked = []

    def run_report(python, root, files, *, timeout, first_bug=False, guards=False):
        asked.append(first_bug)
        return proofenv.ProofRun(cases, "", 1.0)

    monkeypatch.setattr(proofenv, "run_report", run_report)
    files = ["tests/proof/a.py", "tests/proof/b.py"]
    sink: list[dict] = []
    kept = proofenv.run_proofs(root, root, files, first_bug=True, sink=sink)
    early = proofenv.run_proofs(root, root, files, first_bug=True)
    assert asked == [False, True]
    assert sink == cases
    assert kept == early
    assert kept["tests/proof/a.py"] == proofenv.ProofOutcome("fails", "t2: E: bug")  # not "(+1 more)", not t3
    assert kept["tests/proof/b.py"].verdict == "passes"


def test_a_proof_a_companion_s_bug_masked_is_judged_again_with_that_companion_fixed_and_its_own_package_pristine(
    demo_project, monkeypatch, tmp_path
):
    """The proofs on the pristine pins list the tests another package's known bug masked (--proof-masked); those
    are run again on the set's pristine pins with that package +fixed and their own package pristine, one run for
    each package whose proofs were masked, where each must fail (--proof-expect=fail). Two packages whose bugs masked
    each other's proofs were re-run together with both +fixed: each proof then ran on its own fix, and passed."""
    from dataclasses import replace

    project = demo_project.load()
    line = project.line("demo")
    members = {"demo": line, "other": replace(line, package="other")}
    envs = {"pristine": tmp_path / "pristine", "fixed": tmp_path / "fixed"}
    monkeypatch.setattr(proofenv, "release_env", lambda cache, wheels: envs["pristine"])
    monkeypatch.setattr(proofenv, "fixed_env", lambda cache, wheels, purpose, at: envs["fixed"])
    made = []

    def mixed_env(cache, pristine, fixed, at):
        made.append(([pkg for pkg, _ in pristine], [w.name for w in fixed]))
        envs[f"unmasked-{len(made)}"] = env = tmp_path / f"unmasked-{len(made)}"
        return env

    monkeypatch.setattr(proofenv, "mixed_env", mixed_env)
    monkeypatch.setattr(setruns, "current_wheel", lambda line, dist, hint: dist / f"{line.package}+fixed.whl")
    started: list[tuple[str, str]] = []
    verdict: dict[str, int] = {}
    cases = [
        {"nodeid": "tests/proof/test_a.py::test_a", "of": "demo", "package": "other", "patch": "0001-o.patch"},
        {"nodeid": "tests/proof/test_b.py::test_b", "of": "other", "package": "demo", "patch": "0001-d.patch"},
    ]

    def run_in_group(cmd, cwd, env, log, timeout):
        python = Path(cmd[0] if cmd[1:3] != ["-m", "patchwheel"] else cmd[cmd.index("--python") + 1])
        where = next(name for name, path in envs.items() if python.parents[1] == path)
        args = cmd[3:]
        started.append((where, "status" if cmd[1:3] == ["-m", "patchwheel"] else " ".join(args[: args.index("-p")])))
        if "--proof-masked" in args:
            Path(args[args.index("--proof-masked") + 1]).write_text(json.dumps(cases))
        log.write_text("=== 1 passed in 0.1s ===\n")
        return 1 if started[-1] == ("pristine", "status") else verdict.get(where, 0)

    monkeypatch.setattr(proofenv, "run_in_group", run_in_group)
    runs = setruns.prove(project, members, tmp_path, ("pristine",), log=lambda m: None)
    assert [r.ok for r in runs] == [True, True, True, True]
    assert started[2:] == [
        ("unmasked-1", "--proof-expect=fail tests/proof/test_a.py::test_a"),
        ("unmasked-2", "--proof-expect=fail tests/proof/test_b.py::test_b"),
    ]
    assert made == [(["demo"], ["other+fixed.whl"]), (["other"], ["demo+fixed.whl"])]
    assert runs[2].name == "proofs of demo masked by other's 0001-o.patch, on the pristine pins with other +fixed"
    verdict["unmasked-1"] = 1  # the first re-run fails: the chain fails there, and no second is made
    made.clear()
    runs = setruns.prove(project, members, tmp_path, ("pristine",), log=lambda m: None)
    assert [r.ok for r in runs] == [True, True, False] and len(made) == 1
