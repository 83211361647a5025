"""Proof for A1: ``Accelerator.prepare`` wraps a tensor-parallel (DTensor) model in DDP.

Bug (accelerate 1.6.0, accelerate#3565): a model whose parameters or buffers are partly or wholly DTensors
(``parallelize_module``, ``from_pretrained(..., tp_plan="auto")``, or transformers 4.50-4.53 turning
``device_map="auto"`` into tensor parallelism under torchrun) meets ``DistributedDataParallel``, whose constructor
broadcasts all parameters and buffers together: ``RuntimeError: aten.cat.default got mixed torch.Tensor and
DTensor``. Upstream's 1.9 guard covers only the GPU-like branch and only parameters; the MULTI_CPU branch wraps
unguarded up to 1.15.0.

A correct prepare checks parameters *and* buffers before every DDP wrap. Without an explicit tensor-parallel
configuration it raises a ValueError naming sharded and plain tensors, the mesh, the likely cause and the fixes:
it never wraps a sharded model (DDP's start-up broadcast would overwrite rank 1's shards with rank 0's: a silent
wrap is the bug's symptom) and never skips DDP silently (TP needs the same batch on every rank of its group, DDP's
dataloader gives each rank another). Tensor parallelism configured explicitly on a CPU job is a capability of its
own patch, tested in test_a1_cpu_tensor_parallel.py.

Real runs: 2 spawned ranks, gloo on 127.0.0.1, CPU device mesh, no transformers involved.
"""

from __future__ import annotations

import pytest

from a1_models import CPU_JOB
from a1_models import model as _model
from a1_models import shard as _shard
from harness import run_ranks
from proofkit import BugSymptom

pytestmark = pytest.mark.proof(
    package="accelerate",
    signatures=[
        ("RuntimeError", r"got mixed torch\.Tensor and DTensor"),
        ("BugSymptom", r"wrapped a tensor-parallel sharded model in DistributedDataParallel"),
    ],
)


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
    if type(prepared).__name__ == "DistributedDataParallel":
        raise BugSymptom(
            "prepare wrapped a tensor-parallel sharded model in DistributedDataParallel, whose start-up "
            "broadcast overwrites the other ranks' shards with rank 0's"
        )
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
