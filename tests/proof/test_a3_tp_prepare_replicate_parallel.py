"""Proof for A3: a tensor-parallel ``prepare`` imports what transformers 5.1 removed.

Bug (accelerate 1.11.0, fixed upstream in 1.13.0 by huggingface/accelerate#3908, "fix tp only bug"): with a
``ParallelismConfig(tp_size=N)``, ``Accelerator.prepare`` runs ``_prepare_tp``, which for every module it is given
imports ``ReplicateParallel`` from ``transformers.integrations.tensor_parallel`` to replicate the module's plain
parameters on the "tp" mesh. transformers removed ``ReplicateParallel`` in 5.1.0 (5.8.0, the release LLaMA-Factory's
``transformers<=5.8.0`` caps at, has none), so every tensor-parallel ``prepare`` of a model fails, on every backend:

    ImportError: cannot import name 'ReplicateParallel' from 'transformers.integrations.tensor_parallel'

Only FSDP2 combined with tensor parallelism needs that replication (upstream's fix keeps it there). A correct
``prepare`` returns the model sharded by ``from_pretrained(..., tp_plan="auto")`` (its ``tp_size`` recorded) as it
is, its plain parameters plain. Run here on the GPU-like branch (the state says MULTI_GPU on a gloo group: the only
branch pristine 1.11.0 accepts a tensor-parallel configuration on), with a module that records its ``tp_size`` as
transformers models do. Real runs: 2 spawned ranks, gloo on 127.0.0.1, CPU device mesh.

The proof contract takes no ImportError as a bug's signature (an import that fails usually means the test could not
look). So the rank judges where the error came from: an ImportError of ``ReplicateParallel`` whose traceback passes
through accelerate's ``_prepare_tp`` is the bug, raised as BugSymptom with the original message; any other ImportError
propagates (could not observe). accelerate before 1.10 has no ``ParallelismConfig`` (its tensor-parallel ``prepare``
is the plugin's, which never imports ``ReplicateParallel``): there the test does not run.
"""

from __future__ import annotations

import importlib.util
import traceback

import pytest
import torch

from a1_models import CPU_JOB
from a1_models import model as _model
from a1_models import shard as _shard
from harness import run_ranks
from proofkit import BugSymptom

pytestmark = pytest.mark.proof(
    package="accelerate",
    signatures=[("BugSymptom", r"tensor-parallel prepare imported transformers' ReplicateParallel")],
)


def _prepare_tp_model(rank, world_size):
    from accelerate import Accelerator
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType
    from torch.distributed.tensor import DTensor

    PartialState(cpu=True).distributed_type = DistributedType.MULTI_GPU  # the GPU-like branch, on gloo
    accelerator = Accelerator(parallelism_config=ParallelismConfig(tp_size=world_size))
    model = _shard(_model(), accelerator.torch_device_mesh["tp"], "parameters")
    model.tp_size = world_size  # what `from_pretrained(..., tp_plan="auto")` records
    try:
        prepared = accelerator.prepare(model)
    except ImportError as exc:
        frames = [(frame.filename, frame.name) for frame in traceback.extract_tb(exc.__traceback__)]
        in_prepare_tp = any(name == "_prepare_tp" and "accelerate" in path for path, name in frames)
        if "ReplicateParallel" not in str(exc) or not in_prepare_tp:
            raise
        raise BugSymptom(f"tensor-parallel prepare imported transformers' ReplicateParallel: {exc}") from exc
    x = torch.arange(24.0).reshape(3, 8) / 24
    return {
        "same": prepared is model,
        "norm_plain": not isinstance(prepared.norm.weight, DTensor),
        "out": prepared(x).detach().clone(),
    }


@pytest.mark.may_skip(reason="accelerate < 1.10 has no ParallelismConfig: its TP prepare is the plugin's")
def test_tensor_parallel_prepare_keeps_the_sharded_model():
    if importlib.util.find_spec("accelerate.parallelism_config") is None:
        pytest.skip("accelerate < 1.10 has no ParallelismConfig")
    reference = _model()(torch.arange(24.0).reshape(3, 8) / 24).detach()
    for rank, r in enumerate(run_ranks(_prepare_tp_model, 2, env=CPU_JOB)):
        assert r["same"] and r["norm_plain"], f"rank {rank}: prepare changed the tensor-parallel model: {r}"
        torch.testing.assert_close(r["out"], reference)
