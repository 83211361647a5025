"""Feature test for A1's companion: tensor parallelism configured explicitly on a CPU job.

Upstream has no explicit tensor-parallel path for CPU jobs: 1.6.0's ``TorchTensorParallelPlugin`` is hard-wired to
CUDA, and from 1.10 ``ParallelismConfig`` refuses MULTI_CPU. Once ``prepare`` refuses to wrap a sharded model in
DDP (test_a1_prepare_dtensor.py), CPU jobs need the explicit configuration to train a sharded model at all. The
patch opens it: the plugin (1.6.0) or ``ParallelismConfig(tp_size=N)`` (1.15.0) builds the device mesh on the
state's device (a CPU job: "cpu", over gloo), and ``prepare`` leaves the already sharded model as it is, with no
DDP. Output and gradients equal the unsharded model's. What the patch must not do:

- take a model whose only DTensors are buffers for a sharded one (1.6.0 would then skip sharding its parameters);
- hard-code the mesh's device (an XPU or NPU host's state says otherwise; checked by making the state report
  "xpu" and spying on the mesh requested);
- switch a CPU job to tensor parallelism on ``ACCELERATE_USE_TP=true`` alone (``TrainingArguments(tp_size=N)`` of
  transformers 4.50 sets it, with ``TP_SIZE``, for the whole process): only a configuration passed to the
  Accelerator does;
- (1.10+) read an FSDP2 model's 1-D mesh as a tensor-parallel degree;
- (1.10+) leave a CPU job's user guessing: a model sharded on a mesh of its own is told to use the Accelerator's
  "tp" mesh, and a refused ParallelismConfig says that tensor parallelism alone is what a CPU job accepts.

A capability, not a bug: on a release without the patch this test does not run (see conftest).
Real runs: 2 spawned ranks, gloo on 127.0.0.1, CPU device mesh.
"""

from __future__ import annotations

import importlib.util
import re

import pytest
import torch

from a1_models import CPU_JOB
from a1_models import model as _model
from a1_models import shard as _shard
from harness import run_ranks
from proofkit import CouldNotObserve

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


def _prepare_buffer_only_dtensor_model(rank, world_size):
    from torch.distributed.tensor import DTensor

    accelerator, mesh = _explicit_tp_accelerator(world_size)
    model = _shard(_model(with_tensor_parallel=True), mesh, "buffer")
    assert isinstance(model.table, DTensor) and not isinstance(model.up.weight, DTensor)
    # Before 1.10 (no ParallelismConfig) prepare shards the model itself, with ``model.tensor_parallel(mesh)``.
    result = {"shards_itself": importlib.util.find_spec("accelerate.parallelism_config") is None}
    try:
        prepared = accelerator.prepare(model)
    except NotImplementedError as exc:  # accelerate >= 1.10 shards no model itself: it must be sharded already
        return {**result, "refused": str(exc)}
    return {
        **result,
        "tensor_parallel_calls": len(model.tensor_parallel_calls),
        "sharded": isinstance(prepared.up.weight, DTensor) and isinstance(prepared.down.weight, DTensor),
    }


def test_dtensor_buffer_alone_does_not_count_as_sharded():
    """DTensor buffers alone do not make a model tensor-parallel: its parameters still get sharded (1.6: prepare
    calls ``model.tensor_parallel(mesh)``), or (1.10+, which shards nothing itself) it is refused as unsharded."""
    for rank, r in enumerate(run_ranks(_prepare_buffer_only_dtensor_model, 2, env=CPU_JOB)):
        if r["shards_itself"]:
            assert r.get("tensor_parallel_calls") == 1 and r["sharded"], f"rank {rank}: parameters left plain: {r}"
        else:
            assert "should undergo tensor parallel" in r.get("refused", ""), f"rank {rank}: taken as sharded: {r}"


def _mesh_device_requested(rank, world_size):
    """Build the explicit TP configuration while the state reports an "xpu" device; spy on the mesh requested."""
    import torch.distributed.device_mesh as device_mesh
    from accelerate.state import PartialState

    state = PartialState(cpu=True)
    real, saved, requested = device_mesh.init_device_mesh, state.device, []

    def spy(device_type, *args, **kwargs):
        requested.append(device_type)
        return real("cpu", *args, **kwargs)  # no XPU here: build the mesh the job can use

    device_mesh.init_device_mesh, state.device = spy, torch.device("xpu")
    try:
        _explicit_tp_accelerator(world_size)
    finally:
        device_mesh.init_device_mesh, state.device = real, saved
    if not requested:
        raise CouldNotObserve("no device mesh was requested while building the tensor-parallel configuration")
    return requested


def test_tp_mesh_is_built_on_the_state_device():
    for rank, requested in enumerate(run_ranks(_mesh_device_requested, 2, env=CPU_JOB)):
        assert set(requested) == {"xpu"}, f"rank {rank}: mesh requested on {requested}, the state says xpu"


def _env_only(rank, world_size):
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    accelerator = Accelerator()
    try:
        prepared = type(accelerator.prepare(_model())).__name__
    except Exception as exc:  # noqa: BLE001 - reported with the distributed type it came from
        prepared = f"{type(exc).__name__}: {exc}"
    loader = accelerator.prepare(DataLoader(torch.arange(8.0), batch_size=2))
    return {
        "distributed_type": accelerator.distributed_type.value,
        "type": prepared,
        "batches": [batch.tolist() for batch in loader],
    }


def test_accelerate_use_tp_alone_keeps_a_cpu_job_on_ddp():
    """What ``TrainingArguments(tp_size=2)`` leaves in the environment, with no plugin passed to the Accelerator:
    the CPU job stays MULTI_CPU, prepare wraps the (unsharded) model in DDP and each rank gets its own batches, as
    in any DDP job (a tensor-parallel dataloader would give both ranks the same ones)."""
    env = {**CPU_JOB, "ACCELERATE_USE_TP": "true", "TP_SIZE": "2"}
    results = run_ranks(_env_only, 2, env=env)
    for rank, r in enumerate(results):
        assert (r["distributed_type"], r["type"]) == ("MULTI_CPU", "DistributedDataParallel"), f"rank {rank}: {r}"
    batches = [r["batches"] for r in results]
    assert batches == [[[0.0, 1.0], [4.0, 5.0]], [[2.0, 3.0], [6.0, 7.0]]], f"not DDP's sharding: {batches}"


def _fsdp2_model_tp_size(rank, world_size):
    from accelerate.utils.other import get_model_tp_size
    from torch.distributed.device_mesh import init_device_mesh

    accelerator, mesh = _explicit_tp_accelerator(world_size)
    tp_model = _shard(_model(), mesh, "parameters")
    fsdp2_model = _shard(_model(), init_device_mesh("cpu", (world_size,)), "fsdp2")
    result = {"tp": get_model_tp_size(tp_model), "fsdp2": get_model_tp_size(fsdp2_model)}
    try:
        accelerator.prepare(fsdp2_model)
    except NotImplementedError as exc:
        return {**result, "prepare": str(exc)}
    return {**result, "prepare": "accepted as tensor-parallel"}


@pytest.mark.may_skip(reason="accelerate < 1.10 has no get_model_tp_size: its TP prepare shards the model itself")
def test_fsdp2_mesh_is_not_a_tensor_parallel_degree():
    if importlib.util.find_spec("accelerate.parallelism_config") is None:
        pytest.skip("accelerate < 1.10 has no get_model_tp_size")
    for rank, r in enumerate(run_ranks(_fsdp2_model_tp_size, 2, env=CPU_JOB)):
        assert r["tp"] == 2, f"rank {rank}: the tensor-parallel model's degree: {r}"
        assert r["fsdp2"] is None, f"rank {rank}: an FSDP2 model read as tensor-parallel: {r}"
        assert "should undergo tensor parallel" in r["prepare"], f"rank {rank}: {r}"


def _refusals(rank, world_size):
    """What a CPU job is told (accelerate >= 1.10): a tensor-parallel model sharded on a mesh of its own, without a
    "tp" dimension; and a ParallelismConfig whose parallelism is not tensor parallelism alone."""
    from accelerate import Accelerator
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.state import AcceleratorState
    from torch.distributed.device_mesh import init_device_mesh

    accelerator, _ = _explicit_tp_accelerator(world_size)
    model = _shard(_model(), init_device_mesh("cpu", (world_size,)), "parameters")
    try:
        accelerator.prepare(model)
    except NotImplementedError as exc:
        result = {"own_mesh": str(exc)}
    else:
        result = {"own_mesh": "accepted as tensor-parallel"}
    AcceleratorState._reset_state(True)
    try:
        Accelerator(parallelism_config=ParallelismConfig(dp_replicate_size=world_size))
    except ValueError as exc:
        return {**result, "data_parallel": str(exc)}
    return {**result, "data_parallel": "accepted"}


@pytest.fixture(scope="module")
def refusals():
    if importlib.util.find_spec("accelerate.parallelism_config") is None:
        pytest.skip("accelerate < 1.10 has no ParallelismConfig: its TP prepare shards the model itself")
    return run_ranks(_refusals, 2, env=CPU_JOB)


@pytest.mark.may_skip(reason="accelerate < 1.10 has no ParallelismConfig: its TP prepare shards the model itself")
def test_a_model_sharded_on_another_mesh_is_told_to_use_the_tp_mesh(refusals):
    """The tensor-parallel degree is read from the "tp" dimension of the model's mesh: a model sharded on a mesh
    without one is refused, and the message must say which mesh to shard it on (and read as sentences)."""
    for rank, r in enumerate(refusals):
        message = r["own_mesh"]
        assert "should undergo tensor parallel" in message, f"rank {rank}: taken as sharded: {r}"
        assert "torch_device_mesh['tp']" in message, f"rank {rank}: does not name the Accelerator's tp mesh: {message}"
        assert not re.search(r"\.[A-Z]", message), f"rank {rank}: sentences run together: {message}"


@pytest.mark.may_skip(reason="accelerate < 1.10 has no ParallelismConfig: its TP prepare shards the model itself")
def test_a_refused_cpu_configuration_is_told_what_a_cpu_job_accepts(refusals):
    """Data parallelism in a ParallelismConfig stays refused on MULTI_CPU; the refusal must say that tensor
    parallelism alone is accepted there."""
    for rank, r in enumerate(refusals):
        message = r["data_parallel"]
        assert "MULTI_CPU" in message and "tensor parallelism alone" in message, f"rank {rank}: {message}"
