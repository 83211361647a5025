"""Guards for D1 (the opt-in diagnosis of dispatched models): ``dispatch_model`` with the switch unset.

The diagnosis runs only when ``ACCELERATE_DIAGNOSE_DISPATCH=1``. Every other ``device_map`` load must not notice
it: nothing imported (``accelerate.utils.diagnose`` stays out of ``sys.modules``), nothing recorded on the model,
no warning or log record, and the same outputs. Each scenario runs in a fresh process (the rank harness, one rank,
no process group), so that no earlier import hides one, and dispatches a small MLP with accelerate alone: offloaded
to disk by ``device_map="auto"`` under a small ``max_memory`` (the placement the diagnosis warns about when asked),
or placed whole on one device.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

import guardkit
from harness import run_ranks

pytestmark = pytest.mark.guard(package="accelerate")

SWITCH = "ACCELERATE_DIAGNOSE_DISPATCH"


def _mlp():
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16))


def _dispatch(rank, world_size, folder, placement, switch):
    """Save the MLP, load it back with ``load_checkpoint_and_dispatch`` and run it; what a user can see."""
    for variable in guardkit.TORCHRUN:  # a plain `python script.py`
        os.environ.pop(variable, None)
    os.environ.pop(SWITCH, None)
    if switch is not None:
        os.environ[SWITCH] = switch
    with guardkit.capture() as seen:
        from accelerate import init_empty_weights, load_checkpoint_and_dispatch

        torch.save(_mlp().state_dict(), os.path.join(folder, "mlp.bin"))
        with init_empty_weights():
            empty = _mlp()
        if placement == "disk-offload":
            kwargs = {"device_map": "auto", "max_memory": {"cpu": 24 * 1024}, "offload_folder": folder}
        else:
            kwargs = {"device_map": {"": "cpu"}}
        model = load_checkpoint_and_dispatch(empty, os.path.join(folder, "mlp.bin"), **kwargs)
        out = model(torch.arange(32.0).reshape(2, 16) / 32).detach()
    return {
        "device_map": dict(getattr(model, "hf_device_map", {})),
        "out": out,
        "diagnose_imported": "accelerate.utils.diagnose" in sys.modules,
        "model_attributes": sorted(k for k in vars(model) if not k.startswith("_") or "diagnos" in k),
        "warnings": seen.warnings,
        "logs": seen.logs,
    }


def _observe(observe, tmp_path, placement, switch=None):
    (result,) = run_ranks(_dispatch, 1, str(tmp_path), placement, switch, init_group=False)
    observe("dispatch", result)


@pytest.mark.parametrize("switch", [None, "0"], ids=["unset", "off"])
def test_disk_offload(observe, tmp_path, switch):
    """``device_map="auto"`` with a ``max_memory`` that sends most of the model to disk: the placement the
    diagnosis would warn about, were it asked to."""
    _observe(observe, tmp_path, "disk-offload", switch)


def test_one_device(observe, tmp_path):
    """The whole model on one device, as ``device_map={"": device}`` places it."""
    _observe(observe, tmp_path, "one-device")
