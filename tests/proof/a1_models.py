"""The small module the A1 tests shard: two Linears and a LayerNorm, and how to shard it on a CPU mesh."""

from __future__ import annotations

import torch

# From accelerate 1.13 a CPU job under torchrun is MULTI_CPU only when it says so.
CPU_JOB = {"ACCELERATE_USE_CPU": "1"}


def model(with_tensor_parallel: bool = False):
    """The block; ``with_tensor_parallel`` gives it transformers' ``tensor_parallel(mesh)`` hook (recording calls),
    which accelerate 1.6's tensor-parallel ``prepare`` calls to shard a model."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(8, 16)
            self.down = nn.Linear(16, 8)
            self.norm = nn.LayerNorm(8)
            self.tensor_parallel_calls: list[str] = []

        def forward(self, x):
            return self.norm(self.down(torch.relu(self.up(x))))

    class ShardableBlock(Block):
        supports_tp_plan = True

        def tensor_parallel(self, mesh):
            self.tensor_parallel_calls.append(str(mesh))
            shard(self, mesh, "parameters")

    torch.manual_seed(0)
    return ShardableBlock() if with_tensor_parallel else Block()


def shard(model, mesh, where):
    """``parameters``: tensor parallelism (``parallelize_module``, Colwise ``up``, Rowwise ``down``, ``norm`` plain);
    ``buffer``: only a new buffer ``table`` is a DTensor, the parameters stay plain; ``fsdp2``: FSDP2's
    ``fully_shard`` (every parameter a DTensor sharded on dim 0, the module an ``FSDPModule``)."""
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    if where == "parameters":
        parallelize_module(model, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    elif where == "buffer":  # only a buffer is sharded: upstream's later guard looks at parameters only
        model.register_buffer("table", distribute_tensor(torch.arange(8.0), mesh, [Shard(0)]))
    elif where == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        fully_shard(model, mesh=mesh)
    else:
        raise ValueError(where)
    return model
