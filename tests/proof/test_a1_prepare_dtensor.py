"""Proof for A1: ``Accelerator.prepare`` wraps a DTensor model in DDP.

Bug (accelerate 1.6.0, accelerate#3565): a model whose parameters or buffers are partly or wholly DTensors meets
``DistributedDataParallel``, whose constructor broadcasts every parameter and buffer from rank 0:

- a tensor-parallel model (``parallelize_module``, ``from_pretrained(..., tp_plan="auto")``), DTensors mixed with
  plain tensors: ``RuntimeError: aten.cat.default got mixed torch.Tensor and DTensor``;
- a model sharded with FSDP2's ``fully_shard`` (every parameter a DTensor) prepared under plain DDP:
  ``NotImplementedError: Operator c10d.broadcast_.default does not have a sharding strategy registered``.

Upstream's 1.9 check covers only the GPU-like branch and only parameters; the MULTI_CPU branch wraps unguarded up to
1.15.0. A correct prepare checks what DDP synchronizes (parameters, and buffers unless ``broadcast_buffers=False``,
less the model's ``_ddp_params_and_buffers_to_ignore``) right before DDP would wrap the model, and raises a short
ValueError that names the DTensors, one's placements and device mesh, and says to pass DDP a model that is not
sharded (when only buffers are DTensors: ``broadcast_buffers=False``). The models next to the bug that DDP does
train, or never wraps (frozen ones), are guards (tests/guards/test_a1_prepare.py). It never wraps a sharded model
(DDP's start-up broadcast would overwrite rank 1's shards with rank 0's: a silent wrap is the bug's symptom), and
its error path reads no environment: odd ``PARALLELISM_CONFIG_*`` values (an unknown word, an empty value, a
number that is none) change nothing. Tensor parallelism configured explicitly on a CPU job is a capability of its
own patch, tested in test_a1_cpu_tensor_parallel.py.

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

VERSION_STORY = re.compile(r"transformers\s*(?:[<>=]=?\s*)?\d+\.\d+")
# Only buffers are DTensors: DDP leaves buffers alone when it does not broadcast them.
BUFFER_ADVICE = "DistributedDataParallelKwargs(broadcast_buffers=False)"
# What a configuration would offer: the refusal names none (it builds none and asks none).
CONFIG_ADVICE = re.compile(r"ParallelismConfig|TorchTensorParallelPlugin|FullyShardedDataParallelPlugin|device_map=")
# Variables a ParallelismConfig reads when built without sizes or backends: one per class of odd value.
ODD_ENVIRONMENTS = {
    "unknown-word": {"PARALLELISM_CONFIG_SP_BACKEND": "bogus"},
    "empty": {"PARALLELISM_CONFIG_CP_BACKEND": ""},
    "not-a-number": {"PARALLELISM_CONFIG_TP_SIZE": "two", "PARALLELISM_CONFIG_DP_SHARD_SIZE": "1.5"},
}


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
    except AssertionError as exc:  # torch 2.6's DTensor dispatch refuses DDP's start-up broadcast with an assert
        if "found no DeviceMesh from dtensor args for c10d.broadcast_.default" not in str(exc):
            raise
        raise BugSymptom(
            f"prepare wrapped a DTensor model in DistributedDataParallel, whose start-up broadcast failed ({exc})"
        ) from exc
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
    assert "not sharded" in message, f"no way back to DDP: {message}"
    assert not CONFIG_ADVICE.search(message), f"advises a configuration it did not ask about: {message}"
    assert "patchwheel" not in message and "+fixed" not in message, message


def _check(where, rank, message):
    _common(message)
    sharded = {"parameters": "up.weight", "buffer": "table"}[where]
    assert sharded in message, f"rank {rank}: does not name {sharded}: {message}"
    placement = {"parameters": "Shard(dim=0)", "buffer": "Shard(dim=0)"}[where]  # ColwiseParallel: dim 0
    assert placement in message, f"rank {rank}: no {placement}: {message}"
    if where == "buffer":  # its parameters are plain: DDP trains it once it leaves the DTensor buffer alone
        assert BUFFER_ADVICE in message, f"rank {rank}: no way to keep DDP off the buffer: {message}"
    else:
        assert BUFFER_ADVICE not in message, f"rank {rank}: buffer advice for sharded parameters: {message}"


@pytest.mark.parametrize("where", ["parameters", "buffer"])
def test_prepare_refuses_a_tp_sharded_model_with_a_clear_error(where):
    for rank, message in enumerate(run_ranks(_prepare_without_tp_config, 2, where, env=CPU_JOB)):
        _check(where, rank, message)


@pytest.mark.parametrize("odd", list(ODD_ENVIRONMENTS))
def test_odd_parallelism_config_variables_change_nothing(odd):
    """The refusal reads no ``PARALLELISM_CONFIG_*`` variable: an odd value there must neither replace it with a
    configuration's error nor make it raise anything else."""
    env = {**CPU_JOB, **ODD_ENVIRONMENTS[odd]}
    for rank, message in enumerate(run_ranks(_prepare_without_tp_config, 2, "parameters", env=env)):
        _check("parameters", rank, message)


@pytest.mark.proof(
    package="accelerate",
    signatures=[
        ("NotImplementedError", r"c10d\.broadcast_\.default does not have a sharding strategy"),
        ("BugSymptom", r"wrapped a DTensor model in DistributedDataParallel"),
    ],
)
def test_prepare_refuses_an_fsdp2_model_and_says_fsdp2():
    """A model sharded with ``fully_shard``: the message names its DTensors and says that DDP needs a model not
    sharded with FSDP2; it points to no configuration (the Accelerator configures FSDP on GPU-like backends only)."""
    for rank, message in enumerate(run_ranks(_prepare_without_tp_config, 2, "fsdp2", env=CPU_JOB)):
        _common(message)
        assert "FSDP2" in message, f"rank {rank}: does not say FSDP2: {message}"
        assert BUFFER_ADVICE not in message, f"rank {rank}: buffer advice for sharded parameters: {message}"
        assert "up.weight" in message and "Shard(dim=0)" in message, f"rank {rank}: {message}"
