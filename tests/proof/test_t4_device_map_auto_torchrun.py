"""Proof for T4: ``device_map="auto"`` silently becomes tensor parallelism under torchrun.

Bug (transformers 4.50.0 - 4.53.3, huggingface/transformers#38771): in ``from_pretrained``, ``device_map="auto"``
with no ``tp_plan`` and ``WORLD_SIZE`` set (torchrun, ``accelerate launch``; ``WORLD_SIZE=1`` counts) turns into
``tp_plan="auto"``: on GPUs every rank gets DTensor shards and ``Accelerator.prepare`` then dies in DDP ("got mixed
torch.Tensor and DTensor", see A1); on CPU 4.50.x fails earlier, because its TP start-up hard-codes ``nccl``:
``OSError: We tried to initialize torch.distributed for you, but it failed``. Upstream decoupled them in 4.54.0.

The user story, run for real: 2 spawned ranks with torchrun's environment and no process group yet, each loads a
tiny random Llama checkpoint with ``device_map="auto"``, then ``Accelerator().prepare(model, optimizer)`` (gloo,
127.0.0.1), one training step on different data per rank. Fixed: every rank holds a plain replica, prepare wraps
it in DDP, and after the step both ranks hold identical weights (DDP averaged the gradients).
"""

from __future__ import annotations

import pytest
import torch

from harness import run_ranks
from proofkit import BugSymptom, no_accelerator, tp_needs_newer_torch
from tiny_llama import small_config

# 4.50.x fails in its nccl-only TP start-up on CPU; from 4.52 the TP start-up works on CPU and shards for real
# (the symptom: DTensor weights after a plain device_map="auto" load).
pytestmark = pytest.mark.proof(
    package="transformers",
    signatures=[
        ("OSError", r"^We tried to initialize torch\.distributed for you"),
        ("BugSymptom", r"device_map='auto' sharded the model across ranks"),
    ],
)


def _check_not_sharded(model):
    from torch.distributed.tensor import DTensor

    sharded = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if isinstance(t, DTensor)]
    if sharded:
        raise BugSymptom(
            f"device_map='auto' sharded the model across ranks: {len(sharded)} DTensors ({', '.join(sharded[:3])}, ...)"
        )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("llama")
    LlamaForCausalLM(small_config(use_cache=False)).save_pretrained(path)
    return str(path)


def _load_prepare_train(rank, world_size, ckpt):
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    assert not dist.is_initialized(), "like a torchrun script: no process group before from_pretrained"
    model = AutoModelForCausalLM.from_pretrained(ckpt, device_map="auto")
    _check_not_sharded(model)
    from accelerate import Accelerator

    accelerator = Accelerator()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, optimizer = accelerator.prepare(model, optimizer)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data, as a DDP dataloader gives
    ids = torch.randint(1, 96, (2, 8), generator=g)
    loss = model(input_ids=ids, labels=ids).loss
    accelerator.backward(loss)
    optimizer.step()
    return {
        "wrapper": type(model).__name__,
        "state": {k: v.detach().clone() for k, v in accelerator.unwrap_model(model).state_dict().items()},
    }


def test_device_map_auto_under_torchrun_gives_replicas_that_ddp_trains(checkpoint):
    from safetensors.torch import load_file

    # accelerate >= 1.13 treats a CPU torchrun job as MULTI_CPU (DDP over gloo) only when told so.
    results = run_ranks(_load_prepare_train, 2, checkpoint, init_group=False, env={"ACCELERATE_USE_CPU": "1"})
    assert [r["wrapper"] for r in results] == ["DistributedDataParallel"] * 2
    initial = load_file(f"{checkpoint}/model.safetensors")
    a, b = results[0]["state"], results[1]["state"]
    for name, tensor in a.items():
        assert torch.equal(tensor, b[name]), f"{name} differs between ranks after one DDP step"
    assert not torch.equal(a["lm_head.weight"], initial["lm_head.weight"]), "the step must change the weights"


def _load_only(rank, world_size, ckpt):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(ckpt, device_map="auto")
    _check_not_sharded(model)
    return type(model).__name__


def test_world_size_one_counts_too(checkpoint):
    """`torchrun --nproc-per-node 1` sets WORLD_SIZE=1, which also triggered the coupling."""
    assert run_ranks(_load_only, 1, checkpoint, init_group=False) == ["LlamaForCausalLM"]


def _explicit_tp(rank, world_size, ckpt):
    from transformers import AutoModelForCausalLM

    try:
        AutoModelForCausalLM.from_pretrained(ckpt, tp_plan="auto")
    except RuntimeError as exc:
        return str(exc)
    except TypeError as exc:  # raised inside the tensor-parallel sharding (transformers 5 on torch 2.6)
        if not tp_needs_newer_torch(str(exc)):
            raise
        return str(exc)
    return "loaded"


@pytest.mark.regression
def test_explicit_tp_plan_still_takes_the_tensor_parallel_path(checkpoint):
    """Tensor parallelism stays available on request. On CPU, 4.50's TP start-up asks torch for an accelerator,
    and on torch 2.6 transformers 5's sharding calls torch 2.7's ``distribute_tensor``: each fails the same way on the
    pristine and the fixed build, and shows the TP path was taken."""
    for msg in run_ranks(_explicit_tp, 2, checkpoint):
        assert no_accelerator(msg) or tp_needs_newer_torch(msg) or msg == "loaded", msg
