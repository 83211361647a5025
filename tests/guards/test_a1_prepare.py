"""Guards for A1 (``Accelerator.prepare`` and DTensor models under DDP): the jobs next to the bug.

Each scenario runs 2 real gloo ranks on a MULTI_CPU job (tests/proof/harness.py) or one process, prepares the
small block of the A1 proofs (two Linears and a LayerNorm) with an SGD optimizer and trains it for a few steps,
each rank on its own batches. Recorded per rank: the wrapper ``prepare`` returned, each step's loss, the norm of
every entry of the state dict afterwards, and the warnings and log records of the rank.

A DTensor that DDP does not broadcast is no bug: a buffer with ``broadcast_buffers=False``, or one the model names
in ``_ddp_params_and_buffers_to_ignore``. Such a model trains on pristine, and must train the same way on the
+fixed build. A model with no DTensor at all, and a single process (no DDP), must not notice the fix either. A
DTensor buffer that DDP does broadcast is the bug itself (pristine fails inside DDP's broadcast): that scenario
declares the difference.
"""

from __future__ import annotations

import os

import pytest
import torch

import guardkit
from a1_models import CPU_JOB
from a1_models import model as _model
from a1_models import shard as _shard
from harness import run_ranks

pytestmark = pytest.mark.guard(package="accelerate")

STEPS = 3
#: What torchrun (and the rank harness) sets for a rank.


def _with_buffer(mesh):
    """The plain block with one DTensor buffer, replicated on every rank (parameters stay plain tensors)."""
    from torch.distributed.tensor import Replicate, distribute_tensor

    block = _model()
    block.register_buffer("table", distribute_tensor(torch.arange(8.0) / 8, mesh, [Replicate()]))
    return block


def _norms(state_dict):
    from torch.distributed.tensor import DTensor

    return {
        name: float((value.to_local() if isinstance(value, DTensor) else value).double().norm())
        for name, value in state_dict.items()
    }


def _train(model, ddp_kwargs=None, evaluation_mode=False):
    """Prepare ``model`` (and an SGD optimizer) and train it for STEPS steps on this rank's own batches."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    handlers = [DistributedDataParallelKwargs(**ddp_kwargs)] if ddp_kwargs is not None else []
    accelerator = Accelerator(kwargs_handlers=handlers)
    if evaluation_mode:
        prepared = accelerator.prepare_model(model, evaluation_mode=True)
        x = torch.arange(32.0).reshape(4, 8) / 32
        return {"wrapper": type(prepared).__name__, "out": prepared(x).detach()}
    prepared, losses = guardkit.sgd_steps(accelerator, model, STEPS)
    return {
        "distributed_type": accelerator.distributed_type.value,
        "wrapper": type(prepared).__name__,
        "losses": losses,
        "norms": _norms(accelerator.unwrap_model(prepared).state_dict()),
    }


def _frozen(world_size, where, branch):
    """A model without trainable parameters (a teacher or reference model) whose DTensors are a buffer or its
    sharded parameters, prepared alone: DDP never wraps it. ``branch`` "gpu" takes prepare's GPU-like branch: the
    state says MULTI_GPU on this gloo group; no DDP is built there for a frozen model, so no GPU is needed."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedType
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world_size,))
    model = _with_buffer(mesh) if where == "buffer" else _shard(_model(), mesh, "parameters")
    model.requires_grad_(False)
    accelerator = Accelerator()
    if branch == "gpu":
        accelerator.state.distributed_type = DistributedType.MULTI_GPU
    prepared = accelerator.prepare(model)
    out = prepared(torch.arange(32.0).reshape(4, 8) / 32)
    return {"distributed_type": accelerator.distributed_type.value, "wrapper": type(prepared).__name__, "out": out}


def _scenario(rank, world_size, name):
    """One rank of a scenario, with what the rank warned and logged."""
    from torch.distributed.device_mesh import init_device_mesh

    with guardkit.capture() as seen:
        if name == "plain":
            values = _train(_model())
        elif name in ("buffer-not-broadcast", "buffer-broadcast", "buffer-ignored"):
            model = _with_buffer(init_device_mesh("cpu", (world_size,)))
            if name == "buffer-ignored":
                torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ["table"])
            values = _train(model, {"broadcast_buffers": False} if name == "buffer-not-broadcast" else None)
        elif name in ("buffer-ignore-none", "buffer-ignore-iterator", "buffer-ignore-tuple", "buffer-broadcast-none"):
            model = _with_buffer(init_device_mesh("cpu", (world_size,)))
            odd = {
                "buffer-ignore-none": None,
                "buffer-ignore-iterator": iter(["table"]),
                "buffer-ignore-tuple": ("table",),
            }
            if name in odd:  # set by hand, as DDP's own helper would not
                model._ddp_params_and_buffers_to_ignore = odd[name]
            values = _train(model, {"broadcast_buffers": None} if name == "buffer-broadcast-none" else None)
        elif name.startswith("frozen-"):
            values = _frozen(world_size, *name.split("-")[1:])
        elif name == "fsdp2":
            values = _train(_shard(_model(), init_device_mesh("cpu", (world_size,)), "fsdp2"), evaluation_mode=True)
        elif name == "single-process":
            for variable in guardkit.TORCHRUN:  # a plain `python train.py`: no process group, no DDP
                os.environ.pop(variable, None)
            values = _train(_model())
        else:
            raise ValueError(name)
    return {**values, "warnings": seen.warnings, "logs": seen.logs}


def _observe_ranks(observe, name, world_size=2, **kwargs):
    for rank, result in enumerate(run_ranks(_scenario, world_size, name, env=CPU_JOB, **kwargs)):
        observe(f"rank{rank}", result)


def test_plain_model_under_ddp(observe):
    """No DTensor at all: DDP wraps and trains it as before."""
    _observe_ranks(observe, "plain")


def test_dtensor_buffer_not_broadcast(observe):
    """A replicated DTensor buffer with ``DistributedDataParallelKwargs(broadcast_buffers=False)``: DDP never
    broadcasts it, so it wraps and trains the model (pristine does)."""
    _observe_ranks(observe, "buffer-not-broadcast")


def test_dtensor_buffer_ignored_by_ddp(observe):
    """The same buffer named in the model's ``_ddp_params_and_buffers_to_ignore``: DDP leaves it alone."""
    _observe_ranks(observe, "buffer-ignored")


@pytest.mark.intended(
    "raised",
    reason="in the bug: DDP broadcasts the DTensor buffer, and pristine fails inside its broadcast with the mixed "
    "Tensor/DTensor RuntimeError; the fix refuses the model first, with a ValueError that says why and what to do",
)
def test_dtensor_buffer_broadcast(observe):
    """The same buffer with DDP's default ``broadcast_buffers=True``: the bug's neighbourhood ends here."""
    _observe_ranks(observe, "buffer-broadcast")


@pytest.mark.parametrize("odd", ["none", "iterator", "tuple"])
def test_dtensor_buffer_with_odd_params_to_ignore(observe, odd):
    """``_ddp_params_and_buffers_to_ignore`` set by hand to what DDP reads its own way: None (DDP raises a
    TypeError), an iterator naming the buffer (DDP reads it once, and leaves the buffer alone), a tuple."""
    _observe_ranks(observe, f"buffer-ignore-{odd}")


def test_dtensor_buffer_with_broadcast_buffers_none(observe):
    """``DistributedDataParallelKwargs(broadcast_buffers=None)``: DDP takes it as false and leaves the buffer."""
    _observe_ranks(observe, "buffer-broadcast-none")


@pytest.mark.parametrize("branch", ["cpu", "gpu"])
@pytest.mark.parametrize("where", ["buffer", "parameters"])
def test_frozen_dtensor_model(observe, where, branch):
    """A frozen model with a DTensor buffer or sharded parameters: on the GPU-like branch pristine returns it
    unwrapped (buffer) or refuses it with #3629's ValueError (parameters, from 1.9); on MULTI_CPU DDP itself refuses a
    model without trainable parameters. Whatever pristine does, the fix must do too: it refuses only what DDP would
    wrap."""
    _observe_ranks(observe, f"frozen-{where}-{branch}")


def test_fsdp2_model_prepared_for_evaluation(observe):
    """A model sharded with FSDP2's ``fully_shard``, prepared for evaluation (no DDP): its forward as before."""
    _observe_ranks(observe, "fsdp2")


def test_single_process(observe):
    """One process started without torchrun: no process group and no DDP; the model is prepared (placed on the
    Accelerator's device, which 1.10+ decides with ``model_has_dtensor``) and trained as before."""
    _observe_ranks(observe, "single-process", world_size=1, init_group=False)
