"""The small module the A1 tests shard: two Linears and a LayerNorm, and how to shard it on a CPU mesh."""

from __future__ import annotations

import torch

# From accelerate 1.13 a CPU job under torchrun is MULTI_CPU only when it says so.
CPU_JOB = {"ACCELERATE_USE_CPU": "1"}


def model():
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


def shard(model, mesh, where):
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    if where == "parameters":
        parallelize_module(model, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    else:  # only a buffer is sharded: upstream's later guard looks at parameters only
        model.register_buffer("table", distribute_tensor(torch.arange(8.0), mesh, [Shard(0)]))
    return model
