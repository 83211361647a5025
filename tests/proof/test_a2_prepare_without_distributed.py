"""Proof for A2: ``Accelerator.prepare`` fails on a torch built without distributed support (accelerate#4249).

Bug (accelerate 1.15.0): ``prepare_model`` calls ``model_has_dtensor(model)`` while it computes
``device_placement`` (#4181; 1.14.0 called it only behind ``multi_device``), and ``model_has_dtensor`` imports
``torch.distributed.tensor``. On a torch whose ``torch.distributed.is_available()`` is False that import fails, so
every ``prepare`` of a model fails, on one device too: ``ModuleNotFoundError: No module named
'torch.distributed.tensor'`` (or ``'torch._C._distributed_c10d'``, as the real builds say).

The build is simulated in a fresh interpreter, before accelerate is imported: ``torch.distributed.is_available``
returns False, and ``torch.distributed.tensor``, ``torch.distributed._tensor`` and ``torch.distributed.device_mesh``
cannot be imported (a meta path finder raises ModuleNotFoundError for them, as the real build's imports fail). What
that stands for, and what it does not, is in docs/fixes.md.

The proof contract takes no ImportError as a bug's signature (an import that fails usually means the test could
not look). So the test judges where the error came from: a ModuleNotFoundError whose traceback passes through
accelerate's ``model_has_dtensor`` is the bug, raised as BugSymptom with the original type and message; any
other failure (accelerate itself not importable under the simulation, another module missing) is CouldNotObserve.

accelerate 1.6.0 has no ``model_has_dtensor`` and its ``prepare`` never reaches ``torch.distributed`` on one device:
there the test is a regression guard (the patch is carried only by the 1.15.0 line; see conftest).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from proofkit import BugSymptom, CouldNotObserve

pytestmark = pytest.mark.proof(
    package="accelerate",
    signatures=[
        ("BugSymptom", r"ModuleNotFoundError: No module named 'torch\.(distributed\.|_C\._distributed)"),
    ],
)

#: Installed before accelerate is imported: the torch a USE_DISTRIBUTED=0 build gives, as far as accelerate sees it.
SIMULATION = textwrap.dedent(
    """
    import importlib.abc
    import sys

    import torch
    import torch.distributed

    UNIMPORTABLE = ("torch.distributed.tensor", "torch.distributed._tensor", "torch.distributed.device_mesh")


    class NoDistributedBuild(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname in UNIMPORTABLE or fullname.startswith(tuple(name + "." for name in UNIMPORTABLE)):
                raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
            return None


    torch.distributed.is_available = lambda: False
    for name in [name for name in sys.modules if name.startswith(UNIMPORTABLE)]:
        del sys.modules[name]
    sys.meta_path.insert(0, NoDistributedBuild())
    """
)

SCENARIO = textwrap.dedent(
    """
    import json
    import sys
    import traceback

    result = {"is_available": torch.distributed.is_available()}
    try:
        import torch.distributed.tensor  # noqa: F401
    except ModuleNotFoundError as exc:
        result["tensor"] = str(exc)
    try:
        import accelerate
        from accelerate import Accelerator
    except Exception as exc:
        result["import"] = f"{type(exc).__name__}: {exc}"
    else:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        try:
            accelerator = Accelerator(cpu=True)
            prepared = accelerator.prepare(model)
            out = prepared(torch.ones(1, 4))
        except Exception as exc:
            frames = traceback.extract_tb(exc.__traceback__)
            result["raised"] = {
                "type": type(exc).__name__,
                "message": str(exc),
                "frames": [[frame.filename, frame.name] for frame in frames],
                "accelerate": accelerate.__path__[0],
                "traceback": "".join(traceback.format_exception(exc)),
            }
        else:
            result["prepared"] = {
                "type": type(prepared).__name__,
                "distributed_type": str(accelerator.distributed_type),
                "out": out.tolist(),
                "expected": model(torch.ones(1, 4)).tolist(),
            }
    print("RESULT " + json.dumps(result))
    """
)


def _run(code: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_"))}
    env["ACCELERATE_USE_CPU"] = "1"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise CouldNotObserve(f"the interpreter reported nothing (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def _judge(result: dict) -> dict:
    if result.get("is_available") is not False or "tensor" not in result:
        raise CouldNotObserve(
            f"the simulation does not hold (is_available() False, no torch.distributed.tensor): {result}"
        )
    if "import" in result:
        raise CouldNotObserve(f"accelerate could not be imported under the simulation: {result['import']}")
    if "raised" in result:
        raised = result["raised"]
        through = [name for file, name in raised["frames"] if file.startswith(raised["accelerate"])]
        if raised["type"] == "ModuleNotFoundError" and "model_has_dtensor" in through:
            raise BugSymptom(
                f"prepare on a torch without distributed support raised {raised['type']}: {raised['message']} "
                f"(from accelerate's {' -> '.join(through)})"
            )
        raise CouldNotObserve(f"prepare raised something else:\n{raised['traceback']}")
    return result["prepared"]


def test_prepare_on_a_torch_without_distributed_support():
    """One process, one device: ``prepare`` places and returns the model, whose forward is the model's own. The
    simulated build is checked first, as accelerate sees it: ``is_available()`` False, ``torch.distributed.tensor``
    unimportable, ``import accelerate`` working (as on the real builds, since #1108)."""
    prepared = _judge(_run(SIMULATION + SCENARIO))
    assert prepared["type"] == "Linear", prepared
    assert prepared["distributed_type"] == "DistributedType.NO", prepared
    assert prepared["out"][0] == pytest.approx(prepared["expected"][0]), prepared
