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
    assert accelerator.distributed_type.value == "MULTI_CPU"
    try:
        prepared = accelerator.prepare(model)
    except ValueError as exc:
        return str(exc)
    return f"prepare returned a {type(prepared).__name__} without complaint"


@pytest.mark.parametrize("where", ["parameters", "buffer"])
def test_prepare_refuses_a_tp_sharded_model_with_a_clear_error(where):
    for rank, message in enumerate(run_ranks(_prepare_without_tp_config, 2, where)):
        assert "tensor-parallel sharded" in message, f"rank {rank}: {message}"
        sharded, plain = {"parameters": ("up.weight", "norm.weight"), "buffer": ("table", "up.weight")}[where]
        assert sharded in message and plain in message, message
        assert "DeviceMesh" in message, message
        assert 'device_map="auto"' in message and "torchrun" in message, message
        assert "local_process_index" in message and "TorchTensorParallelPlugin" in message, message


def _prepare_with_tp_plugin(rank, world_size):
    from accelerate import Accelerator
    from accelerate.utils import TorchTensorParallelPlugin
    from torch.distributed.tensor import DTensor

    accelerator = Accelerator(torch_tp_plugin=TorchTensorParallelPlugin(tp_size=world_size))
    model = _shard(_model(), accelerator.state.torch_tp_plugin.torch_device_mesh["tp"], "parameters")
    prepared = accelerator.prepare(model)
    x = torch.arange(24.0).reshape(3, 8) / 24  # the same batch on every rank of the TP group
    out = prepared(x)
    accelerator.backward(out.sum())
    return {"type": type(prepared).__name__, "distributed_type": accelerator.distributed_type.value,
            "sharded": isinstance(prepared.up.weight, DTensor), "out": out.detach().clone(),
            "up_grad": prepared.up.weight.grad.full_tensor().clone()}


@pytest.mark.proof(package="accelerate", pristine_error=r"_cuda_setDevice|Torch not compiled with CUDA")
def test_explicit_tp_plugin_prepares_without_ddp():
    """Pristine 1.6.0 cannot even build the plugin on CPU (its mesh is hard-wired to CUDA)."""
    reference = _model()
    x = torch.arange(24.0).reshape(3, 8) / 24
    out = reference(x)
    out.sum().backward()
    for rank, r in enumerate(run_ranks(_prepare_with_tp_plugin, 2)):
        assert r["type"] == "Block" and r["sharded"], f"rank {rank}: prepare must not wrap or gather: {r['type']}"
        assert r["distributed_type"] == "TP"
        torch.testing.assert_close(r["out"], out.detach())
        torch.testing.assert_close(r["up_grad"], reference.up.weight.grad)
