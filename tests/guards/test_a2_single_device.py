"""Guards for A2 (``model_has_dtensor`` on a torch without distributed support): the same calls on a normal torch.

On a torch with distributed support ``torch.distributed.is_available()`` is True and the fix changes nothing:
``prepare_model`` still asks ``model_has_dtensor`` whether to place the model, and the answer must be the same.
Each scenario runs in a fresh process (tests/proof/harness.py), which imports accelerate itself:

- a plain `python train.py` (no torchrun, no process group): a small model prepared with an SGD optimizer and
  trained for a few steps; recorded: the wrapper, the device, the losses, the weights' norms;
- one process under torchrun (a process group of one): a model whose ``up`` layer is sharded into DTensors on a
  one-process mesh, prepared; recorded: the wrapper, whether ``up.weight`` is still a DTensor and where, the
  output, and what ``model_has_dtensor`` answers for it and for a plain model.
"""

from __future__ import annotations

import os

import pytest
import torch

import guardkit
from a1_models import CPU_JOB
from a1_models import model as _model
from harness import run_ranks

pytestmark = pytest.mark.guard(package="accelerate")


def _plain(rank, world_size):
    from accelerate import Accelerator

    with guardkit.capture() as seen:
        for variable in guardkit.TORCHRUN:  # a plain `python train.py`: no process group
            os.environ.pop(variable, None)
        accelerator = Accelerator()
        model = _model()
        prepared, losses = guardkit.sgd_steps(accelerator, model, 3, seed=0)
        values = {
            "distributed_type": accelerator.distributed_type.value,
            "wrapper": type(prepared).__name__,
            "device": str(next(prepared.parameters()).device),
            "losses": losses,
            "norms": {name: float(value.norm()) for name, value in prepared.state_dict().items()},
        }
    return {**values, "warnings": seen.warnings, "logs": seen.logs}


def _sharded_on_one_process(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    with guardkit.capture() as seen:
        from accelerate import Accelerator
        from accelerate.utils.other import model_has_dtensor

        model = parallelize_module(_model(), init_device_mesh("cpu", (world_size,)), {"up": ColwiseParallel()})
        accelerator = Accelerator()
        answers = {"sharded": model_has_dtensor(model), "plain": model_has_dtensor(_model())}
        prepared = accelerator.prepare_model(model, evaluation_mode=True)
        out = prepared(torch.arange(16.0).reshape(2, 8) / 16)
        values = {
            "distributed_type": accelerator.distributed_type.value,
            "model_has_dtensor": answers,
            "wrapper": type(prepared).__name__,
            "up_weight": type(prepared.up.weight).__name__,
            "dtensor": isinstance(prepared.up.weight, DTensor),
            "device": str(prepared.up.weight.device),
            "out": out.detach(),
        }
    return {**values, "warnings": seen.warnings, "logs": seen.logs}


def test_single_process_prepare_and_train(observe):
    """A plain `python train.py` on one device: placed, not wrapped, trained as before."""
    (result,) = run_ranks(_plain, 1, env=CPU_JOB, init_group=False)
    observe("process", result)


def test_dtensor_model_on_a_one_process_group(observe):
    """A model with DTensor parameters in a process group of one: ``model_has_dtensor`` answers as before, and
    ``prepare`` leaves the model where it is."""
    (result,) = run_ranks(_sharded_on_one_process, 1, env=CPU_JOB)
    observe("process", result)
