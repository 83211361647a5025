"""Feature test for A1's companion: tensor parallelism configured explicitly on a CPU job.

Upstream has no explicit tensor-parallel path for CPU jobs: 1.6.0's ``TorchTensorParallelPlugin`` is hard-wired to
CUDA, and from 1.10 ``ParallelismConfig`` refuses MULTI_CPU. Once ``prepare`` refuses to wrap a sharded model in
DDP (test_a1_prepare_dtensor.py), CPU jobs need the explicit configuration to train a sharded model at all. The
patch opens it: the plugin (1.6.0) or ``ParallelismConfig(tp_size=N)`` (1.15.0) builds a "cpu" device mesh over
gloo, and ``prepare`` leaves the already sharded model as it is, with no DDP. Output and gradients equal the
unsharded model's.

A capability, not a bug: on a release without the patch this test does not run (see conftest).
Real runs: 2 spawned ranks, gloo on 127.0.0.1, CPU device mesh.
"""

from __future__ import annotations

import pytest
import torch

from a1_models import CPU_JOB
from a1_models import model as _model
from a1_models import shard as _shard
from harness import run_ranks

pytestmark = pytest.mark.feature(package="accelerate")


def _explicit_tp_accelerator(world_size):
    """accelerate >= 1.10: ParallelismConfig(tp_size=...); before: TorchTensorParallelPlugin(tp_size=...)."""
    from accelerate import Accelerator

    try:
        from accelerate.parallelism_config import ParallelismConfig
    except ImportError:
        from accelerate.utils import TorchTensorParallelPlugin

        accelerator = Accelerator(torch_tp_plugin=TorchTensorParallelPlugin(tp_size=world_size))
        return accelerator, accelerator.state.torch_tp_plugin.torch_device_mesh["tp"]
    accelerator = Accelerator(parallelism_config=ParallelismConfig(tp_size=world_size))
    return accelerator, accelerator.torch_device_mesh["tp"]


def _prepare_with_tp_plugin(rank, world_size):
    from torch.distributed.tensor import DTensor

    accelerator, mesh = _explicit_tp_accelerator(world_size)
    model = _shard(_model(), mesh, "parameters")
    prepared = accelerator.prepare(model)
    x = torch.arange(24.0).reshape(3, 8) / 24  # the same batch on every rank of the TP group
    out = prepared(x)
    accelerator.backward(out.sum())
    return {
        "type": type(prepared).__name__,
        "distributed_type": accelerator.distributed_type.value,
        "sharded": isinstance(prepared.up.weight, DTensor),
        "out": out.detach().clone(),
        "up_grad": prepared.up.weight.grad.full_tensor().clone(),
    }


def test_explicit_tp_config_prepares_without_ddp():
    """An explicitly configured tensor-parallel job: prepare leaves the sharded model as it is (no DDP)."""
    reference = _model()
    x = torch.arange(24.0).reshape(3, 8) / 24
    out = reference(x)
    out.sum().backward()
    for rank, r in enumerate(run_ranks(_prepare_with_tp_plugin, 2, env=CPU_JOB)):
        assert r["type"] == "Block" and r["sharded"], f"rank {rank}: prepare must not wrap or gather: {r['type']}"
        torch.testing.assert_close(r["out"], out.detach())
        torch.testing.assert_close(r["up_grad"], reference.up.weight.grad)
