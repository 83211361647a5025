"""Run inside one environment: median wall time of `dispatch_model` of a synthetic module with a large device map.

python bench/dispatch_time.py ENTRIES REPEAT    -> prints one float (seconds): the fastest of REPEAT calls

The module has ENTRIES blocks, each a device-map entry holding three small linear layers and a buffer (7 tensors),
all mapped to cpu. A fresh module is built before each timed call (the build is not timed). The fastest call is
the one least disturbed by other work on the machine, which is what a comparison of two builds needs. Whether
accelerate's opt-in dispatch diagnosis runs is left to the caller's environment (`ACCELERATE_DIAGNOSE_DISPATCH`).
"""

import sys
import time

import torch
from accelerate import dispatch_model


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4))


def build(entries: int) -> torch.nn.Module:
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList(Block() for _ in range(entries))
    return model


entries, repeat = int(sys.argv[1]), int(sys.argv[2])
device_map = {f"blocks.{i}": "cpu" for i in range(entries)}
dispatch_model(build(2), device_map={"blocks.0": "cpu", "blocks.1": "cpu"})  # warm imports
times = []
for _ in range(repeat):
    model = build(entries)
    t = time.perf_counter()
    dispatch_model(model, device_map=dict(device_map))
    times.append(time.perf_counter() - t)
print(min(times))
