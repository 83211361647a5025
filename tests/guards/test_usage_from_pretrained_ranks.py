"""Guards mined from public code, on real gloo ranks: how downstream projects call ``from_pretrained`` under
torchrun, where the transformers patches meet their loads: T1's warm-up and plan gathering (a ``device_map`` load
with ``torch.distributed`` initialised, a tensor-parallel load), T2b's checks of a ``device_map`` load, T4
(``device_map="auto"`` with ``WORLD_SIZE`` set, 4.50.3 and 4.53.3) and the T4 warning (rank 0 of a run with several
processes). The single-process patterns are in test_usage_from_pretrained.py; how they were found, and the rule for
a new fix: docs/proof-contract.md#guards-mined-from-public-code.

Two runs of 2 ranks each, one import of transformers per rank and run: torchrun's environment without a process
group (the code under test may make one), then an initialised gloo group (as Trainer, accelerate and the training
frameworks have it before they load). Each rank loads every scenario of its run in order, each with its own warnings
and log records and a cleared warn-once cache; each test observes its scenario. Recorded per rank: the parameter
types (any DTensor?), every tensor (whole, gathered from its shards), the device map, the logits of a fixed input,
what the load raised, and the warnings and log records.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

import pytest
import torch

from harness import run_ranks
from tiny_llama import INPUT, no_post_init_llama, save_small

pytestmark = pytest.mark.guard(package="transformers")
FLOAT32 = {"torch_dtype": torch.float32}
#: This folder: an exception whose innermost frame is here is the guard's own error.
GUARDS = os.path.dirname(os.path.realpath(__file__)) + os.sep


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_small(tmp_path_factory.mktemp("llama"))


def _observed(model) -> dict:
    """What a process holds after a load: parameter types, every tensor (DTensors gathered), device map, logits."""
    from torch.distributed.tensor import DTensor

    state = model.state_dict()
    sharded = sorted(name for name, t in state.items() if isinstance(t, DTensor))
    whole = {name: (t.full_tensor() if isinstance(t, DTensor) else t) for name, t in state.items()}
    out: dict[str, Any] = {
        "type": type(model).__name__,
        "parameter_types": sorted({type(p.data).__name__ for p in model.parameters()}),
        "sharded": sharded,
        "tensors": {
            name: [t.device.type, str(t.dtype)]
            + (
                []
                if t.device.type == "meta"
                else [float(t.detach().double().sum()), float(t.detach().double().abs().sum())]
            )
            for name, t in sorted(whole.items())
        },
        "device_map": {k: str(v) for k, v in (getattr(model, "hf_device_map", None) or {}).items()},
    }
    if not any(t.device.type == "meta" for t in whole.values()):
        with torch.no_grad():
            logits = model(INPUT).logits
        if isinstance(logits, DTensor):
            logits = logits.full_tensor()
        out["logits"] = [float(logits.sum()), logits[0, -1, :4].tolist()]
    return out


def _library_error(exc: BaseException) -> bool:
    """Whether an exception is the code under test's: raised inside a library, not by this module's own code (an
    error of the guard is re-raised and fails the rank, never recorded as an observation)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and not os.path.realpath(frames[-1].filename).startswith(GUARDS)


def _each(scenarios) -> dict:
    """Each scenario's load, alone: its warnings and log records, a cleared warn-once cache, what it raised."""
    import guardkit

    results = {}
    for name, load in scenarios:
        guardkit.forget_once()
        result: dict[str, Any] = {"raised": None}
        with guardkit.capture() as seen:
            try:
                result["loaded"] = _observed(load())
            except Exception as exc:  # noqa: BLE001 - what the load raised is the observation
                if not _library_error(exc):
                    raise
                result["raised"] = guardkit.raised(exc)
        results[name] = {**result, "warnings": seen.warnings, "logs": seen.logs}
    return results


# ---------------------------------------------------------------------------------------------------------------
# torchrun's environment, no process group yet


def _hidden_world_size():
    """ms-swift's ``patch_tp_plan``: WORLD_SIZE out of the environment for the load, back after."""
    import contextlib

    @contextlib.contextmanager
    def hidden():
        saved = os.environ.pop("WORLD_SIZE")
        os.environ["_PATCH_WORLD_SIZE"] = saved
        try:
            yield
        finally:
            os.environ["WORLD_SIZE"] = saved

    return hidden()


def _per_rank_device_map_patched():
    """ms-swift's ``patch_mp_ddp`` on CPU: ``infer_auto_device_map`` replaced, where ``from_pretrained`` finds it, by
    a function that computes this process's own memory budget and calls the original; on 4.x also
    ``get_balanced_memory`` by one that returns ``{}``."""
    import contextlib
    import importlib

    import psutil

    where = importlib.import_module("transformers.modeling_utils")
    if not hasattr(where, "infer_auto_device_map"):
        where = importlib.import_module("transformers.integrations.accelerate")
    original = where.infer_auto_device_map

    def patched(model, max_memory=None, **kwargs):
        kwargs.pop("verbose", None)
        return original(model, {"cpu": psutil.virtual_memory().available}, **kwargs)

    stack = contextlib.ExitStack()
    names = {"infer_auto_device_map": patched}
    if where.__name__ == "transformers.modeling_utils":
        names["get_balanced_memory"] = lambda *args, **kwargs: {}
    for name, value in names.items():
        saved = getattr(where, name)
        setattr(where, name, value)
        stack.callback(setattr, where, name, saved)
    return stack


def _rank_torchrun(rank, world_size, ckpt):
    import contextlib

    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    def sequential():
        return AutoModelForCausalLM.from_pretrained(ckpt, device_map="sequential", **FLOAT32)

    def world_size_hidden():
        with _hidden_world_size():
            return AutoModelForCausalLM.from_pretrained(ckpt, device_map="auto", **FLOAT32)

    def mp_ddp():
        with contextlib.ExitStack() as stack:
            stack.enter_context(_per_rank_device_map_patched())
            stack.enter_context(_hidden_world_size())
            return AutoModelForCausalLM.from_pretrained(ckpt, device_map="auto", **FLOAT32)

    def architecture_from_config():
        architecture = getattr(transformers, AutoConfig.from_pretrained(ckpt).architectures[0])
        return architecture.from_pretrained(ckpt, device_map="auto", **FLOAT32)

    # the last: on 4.50 and 4.53 it is T4's bug, which makes a process group (4.53) or fails trying (4.50)
    return _each(
        [
            ("sequential", sequential),
            ("world_size_hidden", world_size_hidden),
            ("mp_ddp", mp_ddp),
            ("architecture_from_config", architecture_from_config),
        ]
    )


@pytest.fixture(scope="module")
def torchrun_loads(checkpoint) -> list[dict]:
    return run_ranks(_rank_torchrun, 2, checkpoint, init_group=False)


def test_sequential_device_map_under_torchrun(observe, torchrun_loads):
    """Stands for unsloth's ``FastLanguageModel.from_pretrained`` (unslothai/unsloth unsloth/models/loader.py,
    unsloth/models/llama.py), whose ``device_map`` defaults to ``"sequential"`` and is replaced by a per-rank map
    only for quantized loads (``prepare_device_map``, unsloth/models/loader_utils.py): under torchrun with 2
    processes, each loads with ``device_map="sequential"``."""
    for rank, result in enumerate(torchrun_loads):
        observe(f"rank{rank}", result["sequential"])


def test_world_size_hidden_around_device_map_auto(observe, torchrun_loads):
    """Stands for ms-swift's ``patch_tp_plan`` (modelscope/ms-swift swift/model/patcher.py), which takes
    ``WORLD_SIZE`` out of the environment around a ``device_map`` load under torchrun (keeping it in
    ``_PATCH_WORLD_SIZE``) so that 4.50 - 4.53 do not turn ``device_map="auto"`` into tensor parallelism: each of 2
    processes loads with ``device_map="auto"`` and no ``WORLD_SIZE``."""
    for rank, result in enumerate(torchrun_loads):
        observe(f"rank{rank}", result["world_size_hidden"])


def test_device_map_inference_patched_per_process(observe, torchrun_loads):
    """Stands for ms-swift's ``patch_mp_ddp`` (modelscope/ms-swift swift/model/patcher.py, model parallel under
    DDP): ``infer_auto_device_map`` replaced where ``from_pretrained`` looks it up
    (``transformers.modeling_utils`` on 4.x, ``transformers.integrations.accelerate`` on 5.x) by a function that
    computes this process's own memory budget and calls the original, and on 4.x ``get_balanced_memory`` by one that
    returns ``{}``; with ``patch_tp_plan`` around the ``device_map="auto"`` load, as ms-swift applies both."""
    for rank, result in enumerate(torchrun_loads):
        observe(f"rank{rank}", result["mp_ddp"])


@pytest.mark.intended(
    "*",
    reason="device_map='auto' with WORLD_SIZE set became tensor parallelism before 4.54 (T4, the bug itself: 4.50 "
    "fails to start it on CPU, 4.53 shards each rank's weights)",
    when="transformers<4.54",
)
@pytest.mark.intended(
    "rank0_logs",
    reason="the T4 warning (a feature): rank 0 of a run with several processes is told once that each process "
    "loads a full copy of the model",
    match=r'`device_map="auto"` in a distributed run \(WORLD_SIZE=2\) loads a full copy',
    when="transformers>=4.54",
)
def test_device_map_auto_of_a_trainer_on_a_cpu_cluster(observe, torchrun_loads):
    """Stands for TRL's ``create_model_from_path`` (huggingface/trl trl/trainer/utils.py): the class named by
    ``config.architectures[0]``, ``from_pretrained(model_id, device_map=kwargs.get("device_map", "auto"), ...)``;
    its trainers reset ``device_map`` to None only for ``MULTI_GPU`` and ``DEEPSPEED`` (trl/trainer/dpo_trainer.py,
    grpo_trainer.py: "Distributed training requires device_map=None"), so a CPU job under torchrun with 2 processes
    (``MULTI_CPU``) loads each model with ``device_map="auto"``."""
    for rank, result in enumerate(torchrun_loads):
        load = dict(result["architecture_from_config"])
        observe(f"rank{rank}_logs", load.pop("logs"))  # a list of its own: the declared warning is one entry
        observe(f"rank{rank}", load)


# ---------------------------------------------------------------------------------------------------------------
# An initialised process group (Trainer, accelerate and the frameworks make it before they load)


def _rank_group(rank, world_size, ckpt):
    from accelerate import PartialState
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM, PreTrainedModel

    def per_process_device():
        return AutoModelForCausalLM.from_pretrained(ckpt, device_map={"": PartialState().device}, **FLOAT32)

    def rank0_cpu_others_meta():
        device_map = "cpu" if int(os.environ.get("LOCAL_RANK", "0")) == 0 else "meta"
        return AutoModelForCausalLM.from_pretrained(ckpt, device_map=device_map, **FLOAT32)

    def plan_fixed_by_a_monkeypatch():
        original = PreTrainedModel.from_pretrained.__func__
        cls = no_post_init_llama()

        @classmethod  # type: ignore[misc]
        def _new_from_pretrained(cls, *args, **kwargs):
            if hasattr(cls, "_tp_plan"):
                cls._tp_plan = cls._tp_plan or {}
            return original(cls, *args, **kwargs)

        PreTrainedModel.from_pretrained = _new_from_pretrained
        try:
            return cls.from_pretrained(ckpt, device_map="cpu", **FLOAT32)
        finally:
            PreTrainedModel.from_pretrained = classmethod(original)

    def explicit_tensor_parallel_mesh():
        mesh = init_device_mesh("cpu", (world_size,))
        return AutoModelForCausalLM.from_pretrained(
            ckpt, tp_plan="auto", tp_size=world_size, device_mesh=mesh, **FLOAT32
        )

    return _each(
        [
            ("per_process_device", per_process_device),
            ("rank0_cpu_others_meta", rank0_cpu_others_meta),
            ("plan_fixed_by_a_monkeypatch", plan_fixed_by_a_monkeypatch),
            ("explicit_tensor_parallel_mesh", explicit_tensor_parallel_mesh),
        ]
    )


@pytest.fixture(scope="module")
def group_loads(checkpoint) -> list[dict]:
    return run_ranks(_rank_group, 2, checkpoint)


def test_one_replica_per_process_for_ddp(observe, group_loads):
    """Stands for the per-process ``device_map`` of DDP training: TRL's ``get_kbit_device_map`` (huggingface/trl
    trl/trainer/utils.py, ``{"": PartialState().local_process_index}``) and its examples'
    ``device_map={"": Accelerator().local_process_index}``, LLaMA-Factory's ``{"": get_current_device()}``
    (hiyouga/LLaMA-Factory src/llamafactory/hparams/parser.py), axolotl's ``{"": int(os.environ.get("LOCAL_RANK",
    0))}`` (axolotl-ai-cloud/axolotl src/axolotl/loaders/model.py), unsloth's ``prepare_device_map``
    (unslothai/unsloth unsloth/models/loader_utils.py): on CPU, ``{"": PartialState().device}``, each of 2 ranks of
    an initialised gloo group."""
    for rank, result in enumerate(group_loads):
        observe(f"rank{rank}", result["per_process_device"])


def test_rank0_loads_on_cpu_the_others_on_meta(observe, group_loads):
    """Stands for axolotl's FSDP2 ``cpu_ram_efficient_loading`` (axolotl-ai-cloud/axolotl
    src/axolotl/loaders/model.py, ``_build_model``): with the process group up, rank 0 loads with
    ``device_map="cpu"`` and every other rank with ``device_map="meta"``, for FSDP to broadcast rank 0's weights."""
    for rank, result in enumerate(group_loads):
        observe(f"rank{rank}", result["rank0_cpu_others_meta"])


def test_class_plan_fixed_by_a_monkeypatch_under_a_group(observe, group_loads):
    """Stands for ms-swift's "fix tp_plan" (modelscope/ms-swift swift/llm/model/patcher.py, fc859ae4 of May 2025;
    today swift/model/patcher.py): ``PreTrainedModel.from_pretrained`` replaced by a classmethod that sets
    ``cls._tp_plan = cls._tp_plan or {}`` before calling the original, which kept 4.50 - 4.53 from iterating a
    ``None`` plan; here for a remote-code-style class whose ``__init__`` skips ``post_init()``, loaded with
    ``device_map="cpu"`` on each of 2 ranks of an initialised gloo group."""
    for rank, result in enumerate(group_loads):
        observe(f"rank{rank}", result["plan_fixed_by_a_monkeypatch"])


def test_tensor_parallel_load_on_the_callers_mesh(observe, group_loads):
    """Stands for axolotl's tensor-parallel load (axolotl-ai-cloud/axolotl src/axolotl/loaders/model.py,
    ``_build_model``: ``tp_size``, ``tp_plan="auto"`` and its own ``device_mesh`` passed to ``from_pretrained``, no
    ``device_map``): 2 ranks of an initialised gloo group, a 1-D CPU mesh over both (4.50 has neither keyword and
    cannot shard onto a CPU mesh; what it does is compared too)."""
    for rank, result in enumerate(group_loads):
        observe(f"rank{rank}", result["explicit_tensor_parallel_mesh"])
