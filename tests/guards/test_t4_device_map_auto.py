"""Guards for T4 (``device_map="auto"`` under torchrun) and its warning: loads next to the bug.

The bug: from transformers 4.50 to 4.53, ``device_map="auto"`` with WORLD_SIZE set became tensor parallelism. The
backport keeps ``device_map="auto"`` a plain load, and the warning tells rank 0 of a run with several processes
that each loads a full copy. Next to them: a load without WORLD_SIZE, a single process under torchrun
(WORLD_SIZE=1: nothing to warn about), torchrun with no ``device_map`` or another one. Recorded: what each process
loaded (parameter types, whether any is a DTensor, the logits of a fixed input) and what it warned or logged.
"""

from __future__ import annotations

import pytest
import torch

import guardkit
from harness import run_ranks
from tiny_llama import INPUT, save_small

pytestmark = pytest.mark.guard(package="transformers")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_small(tmp_path_factory.mktemp("llama"))


def _load(ckpt, device_map):
    """What a process gets from ``from_pretrained(ckpt, device_map=...)``."""
    from transformers import AutoModelForCausalLM

    kwargs = {} if device_map is None else {"device_map": device_map}
    model = AutoModelForCausalLM.from_pretrained(ckpt, **kwargs)
    with torch.no_grad():
        logits = model(INPUT.to(model.device)).logits
    return {
        "type": type(model).__name__,
        "parameter_types": sorted({type(p.data).__name__ for p in model.parameters()}),
        "device_map": {k: str(v) for k, v in getattr(model, "hf_device_map", {}).items()},
        "logits": [float(logits.sum()), float(logits.abs().sum()), logits[0, -1, :4].tolist()],
    }


def _rank_load(rank, world_size, ckpt, device_maps):
    import guardkit

    results = {}
    for device_map in device_maps:
        with guardkit.capture() as seen:
            loaded = _load(ckpt, device_map)
        results[str(device_map)] = {**loaded, "warnings": seen.warnings, "logs": seen.logs}
    return results


def test_world_size_unset(observe, checkpoint, monkeypatch):
    """A plain script, no launcher: ``device_map="auto"``."""
    for name in guardkit.TORCHRUN:
        monkeypatch.delenv(name, raising=False)
    observe("loaded", _load(checkpoint, "auto"))


@pytest.mark.intended(
    "*",
    reason="WORLD_SIZE=1 made device_map='auto' tensor parallelism before 4.54 (the bug itself: 4.50 fails to start "
    "it on CPU, 4.53 shards over one rank)",
    when="transformers<4.54",
)
def test_single_process_under_torchrun(observe, checkpoint):
    """``torchrun --nproc-per-node 1`` (WORLD_SIZE=1), ``device_map="auto"``: one process, the only copy."""
    (rank0,) = run_ranks(_rank_load, 1, checkpoint, ["auto"], init_group=False)
    observe("rank0", rank0)


def test_two_processes_without_device_map_auto(observe, checkpoint):
    """torchrun with 2 processes, no ``device_map``, then ``device_map="cpu"``: a replica each, as before."""
    for rank, result in enumerate(run_ranks(_rank_load, 2, checkpoint, [None, "cpu"], init_group=False)):
        observe(f"rank{rank}", result)
