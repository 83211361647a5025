"""Guards for T4 (``device_map="auto"`` under torchrun) and its warning: loads next to the bug.

The bug: from transformers 4.50 to 4.53, ``device_map="auto"`` with WORLD_SIZE set became tensor parallelism. The
backport keeps ``device_map="auto"`` a plain load, and the warning tells rank 0 of a run with several processes
that each loads a full copy. Next to them: a load without WORLD_SIZE, a single process under torchrun
(WORLD_SIZE=1: nothing to warn about), torchrun with no ``device_map`` or another one. Recorded: what each process
loaded (parameter types, whether any is a DTensor, the logits of a fixed input) and what it warned or logged.
"""

from __future__ import annotations

from typing import Any

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
    """A plain script, no launcher: ``device_map="auto"``. Stands for LLaMA-Factory's inference load
    (hiyouga/LLaMA-Factory src/llamafactory/hparams/parser.py sets ``device_map="auto"``) and TRL's
    ``create_model_from_path`` in a single process (huggingface/trl trl/trainer/utils.py: ``device_map`` defaults to
    ``"auto"``)."""
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
    """``torchrun --nproc-per-node 1`` (WORLD_SIZE=1), ``device_map="auto"``: one process, the only copy. Stands for
    TRL's ``create_model_from_path`` (huggingface/trl trl/trainer/utils.py), whose ``device_map`` defaults to
    ``"auto"``, run by ``accelerate launch`` or torchrun with one process."""
    (rank0,) = run_ranks(_rank_load, 1, checkpoint, ["auto"], init_group=False)
    observe("rank0", rank0)


def test_two_processes_without_device_map_auto(observe, checkpoint):
    """torchrun with 2 processes, no ``device_map``, then ``device_map="cpu"``: a replica each, as before. Stands for
    TRL's trainers, which set ``device_map=None`` for distributed training (huggingface/trl
    trl/trainer/dpo_trainer.py, grpo_trainer.py: "Distributed training requires device_map=None"), and for NeMo's
    ``HFAutoModelForCausalLM``, whose ``device_map`` defaults to ``"cpu"`` (NVIDIA/NeMo
    nemo/collections/llm/gpt/model/hf_auto_model_for_causal_lm.py)."""
    for rank, result in enumerate(run_ranks(_rank_load, 2, checkpoint, [None, "cpu"], init_group=False)):
        observe(f"rank{rank}", result)


# ---------------------------------------------------------------------------------------------------------------
# The warning's neighbourhood: loads that do not each hold a full copy, and odd launcher variables


def _rank_parallel_load(rank, world_size, ckpt, parallel):
    """``device_map="auto"`` next to a tensor-parallel or FSDP configuration, in the form the release takes (5.x:
    ``distributed_config=DistributedConfig(...)``; 4.x: ``tp_plan="auto"``, 4.x has no FSDP option)."""
    import transformers
    from transformers import AutoModelForCausalLM

    import guardkit

    config_class: Any = getattr(transformers, "DistributedConfig", None)
    fields = getattr(config_class, "__dataclass_fields__", {})
    if parallel == "fsdp":
        kwargs = {"distributed_config": config_class(fsdp_size=world_size)}
    elif "tp_plan" in fields:
        kwargs = {"distributed_config": config_class(tp_plan="auto")}
    else:
        kwargs = {"tp_plan": "auto"}
    result: dict = {"raised": None}
    with guardkit.capture() as seen:
        try:
            model = AutoModelForCausalLM.from_pretrained(ckpt, device_map="auto", **kwargs)
            result["parameter_types"] = sorted({type(p).__name__ for p in model.parameters()})
        except Exception as exc:  # noqa: BLE001 - what the load raised is the observation
            result["raised"] = guardkit.raised(exc)
    return {**result, "warnings": seen.warnings, "logs": seen.logs}


def _has_fsdp_option() -> bool:
    import transformers

    return "fsdp_size" in getattr(getattr(transformers, "DistributedConfig", None), "__dataclass_fields__", {})


@pytest.mark.may_skip(reason="transformers 4.x has no FSDP option in from_pretrained (no DistributedConfig.fsdp_size)")
def test_fsdp_load_with_device_map_auto(observe, checkpoint):
    """torchrun with 2 processes, ``distributed_config=DistributedConfig(fsdp_size=2)`` and ``device_map="auto"``:
    the model is sharded (DTensors), so no process holds a full copy."""
    if not _has_fsdp_option():
        pytest.skip("no DistributedConfig.fsdp_size on this release")
    for rank, result in enumerate(run_ranks(_rank_parallel_load, 2, checkpoint, "fsdp", init_group=False)):
        observe(f"rank{rank}", result)


def test_tensor_parallel_config_with_device_map_auto(observe, checkpoint):
    """torchrun with 2 processes, tensor parallelism asked for next to ``device_map="auto"``: upstream refuses the
    pair ("mutually exclusive") before loading anything. Stands for configurations that set both, which axolotl
    guards against by deleting ``device_map`` when it sets ``tp_plan="auto"`` (axolotl-ai-cloud/axolotl
    src/axolotl/loaders/model.py, ``_build_model``: "not compatible with `tp_plan`")."""
    for rank, result in enumerate(run_ranks(_rank_parallel_load, 2, checkpoint, "tp", init_group=False)):
        observe(f"rank{rank}", result)


#: Odd launcher variables, one class each, with ``device_map="auto"`` (the only load that reads them): what a
#: launcher other than torchrun, or a hand-written environment, may give. Unset names are absent.
ODD_ENVIRONMENTS = {
    "rank_empty": {"WORLD_SIZE": "2", "RANK": ""},
    "rank_not_a_number": {"WORLD_SIZE": "2", "RANK": "zero"},
    "rank_only_as_local_rank": {"WORLD_SIZE": "2", "LOCAL_RANK": "1"},
    "world_size_empty": {"WORLD_SIZE": "", "RANK": "0"},
    "world_size_not_a_number": {"WORLD_SIZE": "two", "RANK": "0"},
    "world_size_negative": {"WORLD_SIZE": "-1", "RANK": "0"},
}


def _rank_load_in(rank, world_size, ckpt, env):
    """One process: torchrun's variables replaced by ``env``, then ``device_map="auto"``. No rendezvous address is
    left, so a release that would start a process group from them (4.50 to 4.53) fails at once instead of waiting."""
    import os

    import guardkit

    for name in guardkit.TORCHRUN:
        os.environ.pop(name, None)
    os.environ.update(env)
    result: dict = {"raised": None}
    with guardkit.capture() as seen:
        try:
            result["loaded"] = _load(ckpt, "auto")
        except Exception as exc:  # noqa: BLE001 - what the load raised is the observation
            result["raised"] = guardkit.raised(exc)
    return {**result, "warnings": seen.warnings, "logs": seen.logs}


#: Before 4.54, a WORLD_SIZE that int() reads as non-zero made ``device_map="auto"`` tensor parallelism (the bug);
#: an empty or non-numeric one raises the same ValueError on every build.
_IN_THE_BUG = pytest.mark.intended(
    "*", reason="WORLD_SIZE made device_map='auto' tensor parallelism before 4.54 (the bug)", when="transformers<4.54"
)
_STARTS_TENSOR_PARALLELISM = {"rank_empty", "rank_not_a_number", "rank_only_as_local_rank", "world_size_negative"}


@pytest.mark.parametrize(
    "odd",
    [pytest.param(name, marks=_IN_THE_BUG if name in _STARTS_TENSOR_PARALLELISM else []) for name in ODD_ENVIRONMENTS],
)
def test_odd_launcher_variables(observe, odd_loads, odd):
    """Each value behaves as on pristine: nothing raised that pristine does not raise, nothing new said. Stands for
    launchers other than torchrun: SLURM sets ``LOCAL_RANK`` without torchrun's other variables (NVIDIA-NeMo/Automodel
    nemo_automodel/components/launcher/interactive.py says so), and unsloth reads ``LOCAL_RANK``/``RANK`` and
    ``WORLD_SIZE`` skipping values that are not numbers (unslothai/unsloth unsloth/models/loader_utils.py,
    ``_get_env_int``)."""
    observe("process", odd_loads[odd])


@pytest.fixture(scope="module")
def odd_loads(checkpoint) -> dict:
    """Every value class's load, one after the other in one process (each with its own environment and a cleared
    warn-once cache): one import of transformers instead of one per class."""
    (results,) = run_ranks(_rank_load_each, 1, checkpoint, ODD_ENVIRONMENTS, init_group=False)
    return results


def _rank_load_each(rank, world_size, ckpt, environments):
    import os

    import guardkit

    before = dict(os.environ)
    results = {}
    for name, env in environments.items():
        os.environ.clear()
        os.environ.update(before)
        guardkit.forget_once()  # each class is told what a fresh process would be told
        results[name] = _rank_load_in(rank, world_size, ckpt, env)
    return results
