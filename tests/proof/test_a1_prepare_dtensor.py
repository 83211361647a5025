"""Proof for A1: ``Accelerator.prepare`` wraps a DTensor model in DDP.

Bug (accelerate 1.6.0, accelerate#3565): a model whose parameters or buffers are partly or wholly DTensors meets
``DistributedDataParallel``, whose constructor broadcasts every parameter and buffer from rank 0:

- a tensor-parallel model (``parallelize_module``, ``from_pretrained(..., tp_plan="auto")``), DTensors mixed with
  plain tensors: ``RuntimeError: aten.cat.default got mixed torch.Tensor and DTensor``;
- a model sharded with FSDP2's ``fully_shard`` (every parameter a DTensor) prepared under plain DDP:
  ``NotImplementedError: Operator c10d.broadcast_.default does not have a sharding strategy registered``.

Upstream's 1.9 guard covers only the GPU-like branch and only parameters; the MULTI_CPU branch wraps unguarded up to
1.15.0. A correct prepare checks what DDP broadcasts (parameters, and buffers unless ``broadcast_buffers=False``,
less the model's ``_ddp_params_and_buffers_to_ignore``; the models next to the bug that DDP does train are guards,
tests/guards/test_a1_prepare.py) before every DDP wrap and raises a ValueError that says what the DTensors are
(names, mesh, placements) and the way out for the case at hand, one that works on the job's backend: an explicit
tensor-parallel configuration where the configuration accepts the backend, never where it refuses it; the FSDP
plugin (``fsdp_version=2``) for an FSDP2 model where the Accelerator configures FSDP (not on a CPU job);
``broadcast_buffers=False`` when only buffers are DTensors; or the model loaded unsharded for DDP without a device
map (one naming ``local_process_index`` or ``accelerator.device`` fails on a CPU job). It never wraps a sharded
model (DDP's start-up broadcast would overwrite rank 1's shards with rank 0's: a silent wrap is the bug's symptom)
and never skips DDP silently. Tensor parallelism configured explicitly on a CPU job is a capability of its own
patch, tested in test_a1_cpu_tensor_parallel.py.

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
# The unsharded load for DDP, which works on any backend: no device map at all (`prepare` places the model).
DDP_ADVICE = 'without `tp_plan` or `device_map="auto"`'
# Only buffers are DTensors: DDP leaves buffers alone when it does not broadcast them.
BUFFER_ADVICE = "DistributedDataParallelKwargs(broadcast_buffers=False)"


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
        assert "fully_shard" not in message and not FSDP2_ADVICE.search(message), message
        if where == "parameters":
            assert TP_ADVICE.search(message), f"rank {rank}: no explicit tensor-parallel configuration: {message}"
            _way_back_to_ddp(rank, message)
        else:  # its parameters are plain: DDP trains it once it leaves the DTensor buffer alone
            assert BUFFER_ADVICE in message, f"rank {rank}: no way to keep DDP off the buffer: {message}"
            assert not TP_ADVICE.search(message), f"rank {rank}: TP advice for unsharded parameters: {message}"


def _way_back_to_ddp(rank, message):
    """The unsharded load the message advises must work on a CPU job. A device map fails there:
    ``device_map={"": accelerator.local_process_index}`` with ``Cannot access accelerator device when none is
    available``, and so does ``{"": accelerator.device}`` with transformers 4.50 to 4.53, which pass the index of
    that ``torch.device`` (``cpu:0``) on as an accelerator ordinal. Without a device map the model loads on the CPU
    and ``prepare`` places it, on any backend."""
    assert DDP_ADVICE in message, f"rank {rank}: no way back to DDP that works on this backend: {message}"
    assert "device_map={" not in message, f"rank {rank}: advises a device map a CPU job cannot load: {message}"


def _prepare_where_tp_cannot_be_configured(rank, world_size):
    """The job as a release without CPU tensor parallelism sees it: 1.10+ ``ParallelismConfig`` refuses MULTI_CPU
    (upstream's own check and message), 1.6's ``TorchTensorParallelPlugin`` builds its mesh on CUDA. The refusal must
    ask the configuration, and offer tensor parallelism only where it is accepted."""
    from accelerate.utils import TorchTensorParallelPlugin

    try:
        from accelerate.parallelism_config import ParallelismConfig
    except ImportError:  # accelerate < 1.10: the plugin says where it builds its device mesh
        TorchTensorParallelPlugin._mesh_device_type = staticmethod(lambda: "cuda")
    else:

        def refuse(self, accelerator):
            raise ValueError(
                "ParallelismConfig is only compatible DistributedType.FSDP (version 2) or "
                "DistributedType.Multi{Device} or DistributedType.DEEPSPEED, but got "
                f"{accelerator.distributed_type}."
            )

        ParallelismConfig._validate_accelerator = refuse
    return _prepare_without_tp_config(rank, world_size, "parameters")


def test_no_tensor_parallel_advice_where_the_configuration_refuses_the_backend():
    for rank, message in enumerate(run_ranks(_prepare_where_tp_cannot_be_configured, 2, env=CPU_JOB)):
        _common(message)
        assert "up.weight" in message and "Shard(dim=1)" in message, f"rank {rank}: {message}"
        assert not TP_ADVICE.search(message), f"rank {rank}: advises a configuration this job refuses: {message}"
        assert re.search(r"tensor parallel", message, re.I), f"rank {rank}: does not say why no TP: {message}"
        _way_back_to_ddp(rank, message)


@pytest.mark.proof(
    package="accelerate",
    signatures=[
        ("NotImplementedError", r"c10d\.broadcast_\.default does not have a sharding strategy"),
        ("BugSymptom", r"wrapped a DTensor model in DistributedDataParallel"),
    ],
)
def test_prepare_refuses_an_fsdp2_model_and_says_fsdp2():
    """A model sharded with ``fully_shard`` is no tensor-parallel model: the message must say FSDP2, never point to
    a tensor-parallel configuration, and give advice that works on a CPU job: the Accelerator configures FSDP on
    GPU-like backends only, so the FSDP plugin is no way out here, passing the model without ``fully_shard`` is."""
    for rank, message in enumerate(run_ranks(_prepare_without_tp_config, 2, "fsdp2", env=CPU_JOB)):
        assert not re.search(r"tensor[- ]parallel", message, re.I), f"rank {rank}: says tensor parallel: {message}"
        assert not TP_ADVICE.search(message) and "tp_size" not in message, f"rank {rank}: TP advice: {message}"
        assert "without `fully_shard`" in message, f"rank {rank}: no way back to DDP: {message}"
        assert not FSDP2_ADVICE.search(message), f"rank {rank}: FSDP is no CPU option: {message}"
        _common(message)
        assert "up.weight" in message and "Shard(dim=0)" in message, f"rank {rank}: {message}"
