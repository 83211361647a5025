"""Proof for A1: ``Accelerator.prepare`` wraps a tensor-parallel (DTensor) model in DDP.

Bug (accelerate 1.6.0, accelerate#3565): a model whose parameters or buffers are partly or wholly DTensors
(``parallelize_module``, ``from_pretrained(..., tp_plan="auto")``, or transformers 4.50-4.53 turning
``device_map="auto"`` into tensor parallelism under torchrun) meets ``DistributedDataParallel``, whose constructor
broadcasts all parameters and buffers together: ``RuntimeError: aten.cat.default got mixed torch.Tensor and
DTensor``. Upstream's 1.9 guard covers only the GPU-like branch and only parameters; the MULTI_CPU branch wraps
unguarded up to 1.15.0.

A correct prepare checks parameters *and* buffers before every DDP wrap. Without an explicit tensor-parallel
configuration it raises a ValueError naming sharded and plain tensors, the mesh, the likely cause and the fixes:
it never wraps a sharded model (DDP's start-up broadcast would overwrite rank 1's shards with rank 0's) and never
skips DDP silently (TP needs the same batch on every rank of its group, DDP's dataloader gives each rank another).
With an explicit configuration (``TorchTensorParallelPlugin``) prepare succeeds without DDP.

Real runs: 2 spawned ranks, gloo on 127.0.0.1, CPU device mesh, no transformers involved.
"""

from __future__ import annotations

import pytest
import torch

from harness import run_ranks

pytestmark = pytest.mark.proof(package="accelerate",
                               pristine_error=r"got mixed torch\.Tensor and DTensor")


# From accelerate 1.13 a CPU job under torchrun is MULTI_CPU only when it says so.
CPU_JOB = {"ACCELERATE_USE_CPU": "1"}


def _model():
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(8, 16)
            self.down = nn.Linear(16, 8)
            self.norm = nn.LayerNorm(8)

        def forward(self, x):
            return self.norm(self.down(torch.relu(self.up(x))))

    torch.manual_seed(0)
    return Block()


def _shard(model, mesh, where):
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    if where == "parameters":
        parallelize_module(model, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    else:  # only a buffer is sharded: upstream's later guard looks at parameters only
        model.register_buffer("table", distribute_tensor(torch.arange(8.0), mesh, [Shard(0)]))
    return model


def _prepare_without_tp_config(rank, world_size, where):
    from torch.distributed.device_mesh import init_device_mesh

    model = _shard(_model(), init_device_mesh("cpu", (world_size,)), where)
    from accelerate import Accelerator

    accelerator = Accelerator()
    assert accelerator.distributed_type.value == "MULTI_CPU", f"not a CPU job: {accelerator.distributed_type}"
    try:
        prepared = accelerator.prepare(model)
    except ValueError as exc:
        return str(exc)
    return f"prepare returned a {type(prepared).__name__} without complaint"


@pytest.mark.parametrize("where", ["parameters", "buffer"])
def test_prepare_refuses_a_tp_sharded_model_with_a_clear_error(where):
    for rank, message in enumerate(run_ranks(_prepare_without_tp_config, 2, where, env=CPU_JOB)):
        assert "tensor-parallel sharded" in message, f"rank {rank}: {message}"
        sharded, plain = {"parameters": ("up.weight", "norm.weight"), "buffer": ("table", "up.weight")}[where]
        assert sharded in message and plain in message, message
        assert "DeviceMesh" in message, message
        assert 'device_map="auto"' in message and "torchrun" in message, message
        assert "local_process_index" in message and "TorchTensorParallelPlugin" in message, message


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
    return {"type": type(prepared).__name__, "distributed_type": accelerator.distributed_type.value,
            "sharded": isinstance(prepared.up.weight, DTensor), "out": out.detach().clone(),
            "up_grad": prepared.up.weight.grad.full_tensor().clone()}


# Upstream has no explicit tensor-parallel path for CPU jobs: 1.6.0's plugin is hard-wired to CUDA, and from 1.10
# ParallelismConfig refuses MULTI_CPU. The patch opens it, so prepare can succeed without DDP there too.
@pytest.mark.proof(package="accelerate",
                   pristine_error=r"_cuda_setDevice|Torch not compiled with CUDA|only compatible DistributedType")
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
