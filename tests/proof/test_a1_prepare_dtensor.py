"""Proof for A1: ``Accelerator.prepare`` wraps a DTensor model in DDP.

Bug (accelerate 1.6.0, accelerate#3565): a model whose parameters or buffers are partly or wholly DTensors meets
``DistributedDataParallel``, whose constructor broadcasts every parameter and buffer from rank 0:

- a tensor-parallel model (``parallelize_module``, ``from_pretrained(..., tp_plan="auto")``), DTensors mixed with
  plain tensors: ``RuntimeError: aten.cat.default got mixed torch.Tensor and DTensor``;
- a model sharded with FSDP2's ``fully_shard`` (every parameter a DTensor) prepared under plain DDP:
  ``NotImplementedError: Operator c10d.broadcast_.default does not have a sharding strategy registered``.

Upstream's 1.9 guard covers only the GPU-like branch and only parameters; the MULTI_CPU branch wraps unguarded up to
1.15.0. A correct prepare checks parameters *and* buffers before every DDP wrap and raises a ValueError that says
what the DTensors are (names, mesh, placements) and the way out for the case at hand: the FSDP plugin
(``fsdp_version=2``) for an FSDP2 model, an explicit tensor-parallel configuration otherwise, or the model unsharded
for DDP. It never wraps a sharded model (DDP's start-up broadcast would overwrite rank 1's shards with rank 0's: a
silent wrap is the bug's symptom) and never skips DDP silently. Tensor parallelism configured explicitly on a CPU
job is a capability of its own patch, tested in test_a1_cpu_tensor_parallel.py.

Real runs: 2 spawned ranks, gloo on 127.0.0.1, CPU device mesh (``fully_shard`` runs on it with gloo in torch 2.13),
no transformers involved.
"""

from __future__ import annotations

import re

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
        ("BugSymptom", r"wrapped a DTensor model in DistributedDataParallel"),
    ],
)

# The way out the message must give, by how the model was sharded (accelerate 1.6: the plugin; from 1.10:
# ParallelismConfig), and what it must not say for the other case.
TP_ADVICE = re.compile(r"TorchTensorParallelPlugin\(tp_size=|ParallelismConfig\(tp_size=")
FSDP2_ADVICE = re.compile(r"FullyShardedDataParallelPlugin\(fsdp_version=2\)")
VERSION_STORY = re.compile(r"transformers\s*(?:[<>=]=?\s*)?\d+\.\d+")


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
            "prepare wrapped a DTensor model in DistributedDataParallel, whose start-up broadcast overwrites the "
            "other ranks' shards with rank 0's"
        )
    return f"prepare returned a {type(prepared).__name__} without complaint"


def _common(message):
    assert not VERSION_STORY.search(message), f"tells a transformers version story: {message}"
    assert "DistributedDataParallel" in message, message
    assert "DeviceMesh" in message and "placements" in message, f"names no mesh or placements: {message}"
    assert "patchwheel" not in message and "+fixed" not in message, message


@pytest.mark.parametrize("where", ["parameters", "buffer"])
def test_prepare_refuses_a_tp_sharded_model_with_a_clear_error(where):
    for rank, message in enumerate(run_ranks(_prepare_without_tp_config, 2, where, env=CPU_JOB)):
        _common(message)
        sharded, plain = {"parameters": ("up.weight", "norm.weight"), "buffer": ("table", "up.weight")}[where]
        assert sharded in message and plain in message, message
        placement = {"parameters": "Shard(dim=1)", "buffer": "Shard(dim=0)"}[where]  # RowwiseParallel: dim 1
        assert placement in message, f"rank {rank}: no {placement}: {message}"
        assert TP_ADVICE.search(message), f"rank {rank}: no explicit tensor-parallel configuration: {message}"
        assert "local_process_index" in message, f"rank {rank}: no way back to DDP: {message}"
        assert "fully_shard" not in message and not FSDP2_ADVICE.search(message), message


@pytest.mark.proof(
    package="accelerate",
    signatures=[
        ("NotImplementedError", r"c10d\.broadcast_\.default does not have a sharding strategy"),
        ("BugSymptom", r"wrapped a DTensor model in DistributedDataParallel"),
    ],
)
def test_prepare_refuses_an_fsdp2_model_and_says_fsdp2():
    """A model sharded with ``fully_shard`` is no tensor-parallel model: the message must say FSDP2 and point to the
    FSDP plugin, never to a tensor-parallel configuration."""
    for rank, message in enumerate(run_ranks(_prepare_without_tp_config, 2, "fsdp2", env=CPU_JOB)):
        assert not re.search(r"tensor[- ]parallel", message, re.I), f"rank {rank}: says tensor parallel: {message}"
        assert not TP_ADVICE.search(message) and "tp_size" not in message, f"rank {rank}: TP advice: {message}"
        assert "fully_shard" in message and FSDP2_ADVICE.search(message), f"rank {rank}: no FSDP2 advice: {message}"
        _common(message)
        assert "up.weight" in message and "Shard(dim=0)" in message, f"rank {rank}: {message}"
