"""Guards for T1 (the allocator warm-up's tensor-parallel plan): ordinary loads under a process group.

The bug needs a model whose ``_tp_plan`` is ``None`` (it skipped ``post_init()``). Next to it: a normal Llama,
whose plan is a dict, loaded one replica per rank under an initialised 2-rank gloo group (``device_map="cpu"``, as
for DDP), and loaded with ``tp_plan="auto"`` (tensor parallelism). Recorded per rank: the weights (whole, gathered
from their shards), which were sharded, the logits of a fixed input, and the warnings and log records.
"""

from __future__ import annotations

import pytest
import torch

from harness import run_ranks
from tiny_llama import INPUT, save_small

pytestmark = pytest.mark.guard(package="transformers")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_small(tmp_path_factory.mktemp("llama"))


def _load(ckpt, kwargs):
    from torch.distributed.tensor import DTensor
    from transformers import LlamaForCausalLM

    import guardkit

    with guardkit.capture() as seen:
        try:
            model = LlamaForCausalLM.from_pretrained(ckpt, **kwargs)
        except RuntimeError as exc:  # 4.50 cannot shard onto a CPU mesh, alike on both builds
            return {"raised": guardkit.raised(exc), "warnings": seen.warnings, "logs": seen.logs}
        state = model.state_dict()
        sharded = sorted(name for name, t in state.items() if isinstance(t, DTensor))
        whole = {name: (t.full_tensor() if isinstance(t, DTensor) else t) for name, t in state.items()}
        with torch.no_grad():
            logits = model(INPUT).logits
        if isinstance(logits, DTensor):
            logits = logits.full_tensor()
    return {
        "sharded": sharded,
        "weights": {name: [float(t.double().sum()), float(t.double().norm())] for name, t in sorted(whole.items())},
        "logits": [float(logits.sum()), logits[0, -1, :4].tolist()],
        "warnings": seen.warnings,
        "logs": seen.logs,
    }


def _rank_loads(rank, world_size, ckpt):
    """Both loads on each rank of one group: a replica per rank, then tensor parallelism."""
    return {"replica": _load(ckpt, {"device_map": "cpu"}), "tensor_parallel": _load(ckpt, {"tp_plan": "auto"})}


def test_loads_under_a_process_group(observe, checkpoint):
    """On each of 2 ranks of an initialised gloo group: ``device_map="cpu"`` (the warm-up runs with the group up),
    then ``tp_plan="auto"`` (the model's own plan shards it; 4.50 cannot shard onto a CPU mesh and raises, alike on
    both builds)."""
    for rank, result in enumerate(run_ranks(_rank_loads, 2, checkpoint)):
        observe(f"rank{rank}", result)
