"""Proof for T1: ``caching_allocator_warmup`` iterates a ``None`` tensor-parallel plan.

Bug (transformers 4.50.0 - 4.53.3, huggingface/transformers#37663): ``PreTrainedModel._tp_plan`` is ``None`` until
``post_init()`` replaces it. A model class whose ``__init__`` skips ``post_init()`` (the Qwen2.5-Omni preview, many
``trust_remote_code`` models) keeps ``None``, and when ``torch.distributed`` is initialised,
``from_pretrained(..., device_map=...)`` dies in the warm-up with ``TypeError: 'NoneType' object is not iterable``.

Reproduction on CPU, no mocks: real gloo process groups on 127.0.0.1 (spawned ranks), a tiny random Llama
checkpoint saved here, a ``LlamaPreTrainedModel`` subclass that skips ``post_init()``, ``device_map="cpu"``. On
4.50.x ``"cpu"`` becomes ``torch.device("cpu")``, which the warm-up's ``in ["cpu", "disk"]`` filter misses, so the
warm-up runs natively on CPU. From 4.52 the warm-up filters the CPU out first (``is_accelerator_device``); there
the test lets the CPU count as an accelerator, so the same code path runs (only needed for the matrix check).

A correct fix treats ``None`` as an empty plan *and* skips the plan regex when the plan is empty. Upstream's 4.54
fix (``or []``) compiles the empty regex, which matches every name, so on 2 ranks every tensor's warm-up size is
halved. ``test_warmup_reserves_whole_model_on_two_ranks`` catches that by recording the warm-up's one allocation:
exactly half the model is the bug's symptom (``BugSymptom``); no allocation recorded means the test could not see
the warm-up at all (``CouldNotObserve``: upstream renamed or removed it), which is never read as the bug.

The plan shards weights only under tensor parallelism, yet the warm-up applies it whenever ``torch.distributed`` is
initialised. ``test_warmup_reserves_whole_model_without_tensor_parallelism`` loads a normal Llama (``post_init()``
gives it a non-empty plan) one replica per rank, as DDP does: a warm-up with the plan's tensors at 1/2 is the same
symptom (``BugSymptom``), on pristine builds and on a fix that only handled the empty plan. Its class declares no
tied weights, as its config ties none: 4.57's warm-up skips every weight a class declares tied (``lm_head``), whatever
the config, which would make "the whole model" depend on the release.

On 4.57 the sharding code reads a ``None`` plan as empty, so ``tp_plan="auto"`` of a model that skips
``post_init()`` no longer fails: it shards nothing and every rank holds the whole model, which
``test_tensor_parallel_load_of_a_model_that_skips_post_init`` reports as the bug's symptom (``BugSymptom``).

A model's plan is set by ``post_init()`` (the config's ``base_model_tp_plan``, then its submodules' plans), not by
its class: ``LlamaForCausalLM`` declares ``_tp_plan = {"lm_head": "colwise_rep"}`` at class level. A subclass whose
``__init__`` skips ``post_init()`` therefore keeps that class plan, which is not None, and ``tp_plan="auto"``
shards ``lm_head`` alone (1 of the 14 weights the normal model shards on 4.53 and 4.57); a ``LlamaModel`` subclass
that skips it keeps ``None``. ``test_tensor_parallel_load_of_a_subclass_that_skips_post_init`` compares the weights
such subclasses shard with those the classes themselves shard, on 2 gloo ranks (``BugSymptom`` when they differ).

transformers 5 requires ``post_init()`` of every model: it sets up what loading reads (``all_tied_weights_keys``),
so a class that skips it cannot load at all, even on one process and without tensor parallelism
(``AttributeError: ... has no attribute 'all_tied_weights_keys'``), and every model that can load has a plan
(``post_init()`` calls ``init_parallel_plans()``). The tests that need a model without ``post_init()`` skip there,
naming that error (``may_skip``); the warm-up test of a normal model judges those releases.

Public code loads such models on transformers 5 all the same: it wraps ``get_total_byte_count`` (the warm-up's
sizes) to give the model an empty ``all_tied_weights_keys`` first (a LLaDA probing script, an InternVL3 inference
script: ``find_string`` on ``get_total_byte_count(``; the index does not name their repositories). Under an
initialised process group that function then takes ``len()`` of the model's None plan: ``TypeError: object of type
'NoneType' has no len()``, T1's crash in its transformers 5 form (5.8.0; 5.20 stopped reading the plan there).
``test_warmup_of_a_model_that_skips_post_init_with_the_public_workaround`` loads the class that skips ``post_init()``
so, on two ranks, and skips where the release has no ``get_total_byte_count`` (4.x, judged by the tests above).
"""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest
import torch

from harness import RankFailed, run_ranks
from proofkit import BugSymptom, CouldNotObserve, no_accelerator, tp_needs_newer_torch
from tiny_llama import no_post_init_llama, small_config

# 4.50 - 4.53 crash; from 4.54 upstream's `or []` compiles the empty regex and halves the warm-up.
pytestmark = pytest.mark.proof(
    package="transformers",
    signatures=[
        ("TypeError", r"^'NoneType' object is not iterable$"),
        # transformers 5's get_total_byte_count takes len() of the plan when torch.distributed is initialised
        ("TypeError", r"^object of type 'NoneType' has no len\(\)$"),
        ("BugSymptom", r"warm-up reserved \d+ bytes, 1/2 of the \d+-byte model"),
        # the sharding code, reached with an explicit tp_plan="auto" once the warm-up no longer crashes
        ("TypeError", r"^argument of type 'NoneType' is not iterable$"),
        # 4.57's sharding code reads a None plan as empty: tp_plan="auto" then shards nothing, silently
        ("BugSymptom", r"tp_plan=\"auto\" sharded none of the weights"),
        # a class that skips post_init() is sharded by its class-level plan (lm_head alone) or by none
        ("BugSymptom", r"tp_plan=\"auto\" sharded \d+ of the \d+ weights"),
    ],
)
POST_INIT_REQUIRED = "a release that requires post_init() of every model it loads (transformers 5)"


def _tiny_checkpoint(path):
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(small_config())
    model.save_pretrained(path)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _load_watching_warmup(model_class, ckpt, device_map="cpu", **load):
    """``model_class.from_pretrained(ckpt, device_map=device_map)`` (or with ``load`` instead) on this rank; returns
    the model and the byte sizes of the allocations ``caching_allocator_warmup`` made."""
    import torch

    assert torch.distributed.is_initialized()
    import transformers.modeling_utils as modeling_utils

    if not hasattr(modeling_utils, "caching_allocator_warmup"):
        raise CouldNotObserve("transformers.modeling_utils has no caching_allocator_warmup to watch")
    if device_map == "cpu" and hasattr(modeling_utils, "is_accelerator_device"):
        # transformers >= 4.52 drops the CPU from the warm-up before the plan is read. On this CPU-only machine,
        # let the warm-up count the CPU as the accelerator it stands in for, so it runs as it does on GPUs.
        modeling_utils.is_accelerator_device = lambda device: str(device) not in ("disk", "meta")
    warmup_bytes = []
    real_empty = torch.empty

    def spy_empty(*args, **kwargs):  # records the warm-up's one big allocation; allocates for real
        if sys._getframe(1).f_code.co_name == "caching_allocator_warmup":
            numel = args[0] if args else kwargs["size"]
            warmup_bytes.append(int(numel) * 2)  # the warm-up allocates float16
        return real_empty(*args, **kwargs)

    torch.empty = spy_empty
    try:
        model = model_class.from_pretrained(ckpt, **(load or {"device_map": device_map}))
    finally:
        torch.empty = real_empty
    return model, warmup_bytes


def _skip_where_post_init_is_required(ckpt):
    """Skip where the release cannot load a model that skips ``post_init()`` at all: one process, no tensor
    parallelism. The bug's None plan then cannot reach any load."""
    try:
        no_post_init_llama().from_pretrained(ckpt)
    except AttributeError as exc:
        if "all_tied_weights_keys" not in str(exc):
            raise
        pytest.skip(f"this release requires post_init() of every model it loads: {exc}")


def _load_without_post_init(rank, world_size, ckpt, device_map="cpu"):
    """On each rank: load with a class that skips post_init(); return the warm-up's bytes and the weights."""
    model, warmup_bytes = _load_watching_warmup(no_post_init_llama(), ckpt, device_map)
    assert getattr(type(model), "_tp_plan", None) is None, "the test class must keep the None plan"
    return {"warmup_bytes": warmup_bytes, "state": _on_cpu(model)}


def _on_cpu(model) -> dict:
    """The model's tensors, copied to the CPU (from the GPU form's device too) to go back to the test process."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def _untied_llama():
    from transformers import LlamaForCausalLM

    class UntiedLlama(LlamaForCausalLM):
        # The config unties lm_head from the embeddings; say so in the class too: the warm-up of 4.57 skips every
        # weight a class declares tied, whatever the config (lm_head here), which is not this bug.
        _tied_weights_keys = None

    return UntiedLlama


def _load_llama_without_tensor_parallelism(rank, world_size, ckpt, device_map="cpu"):
    """On each rank: load a normal Llama (post_init() gives it a non-empty tensor-parallel plan) one replica per
    process, as DDP does; return the warm-up's bytes, the plan and the weights."""
    model, warmup_bytes = _load_watching_warmup(_untied_llama(), ckpt, device_map)
    assert not getattr(model, "_tp_size", None), "the test must load without tensor parallelism"
    return {"warmup_bytes": warmup_bytes, "tp_plan": dict(model._tp_plan or {}), "state": _on_cpu(model)}


def _load_llama_tensor_parallel(rank, world_size, ckpt):
    """On each rank: ``from_pretrained(ckpt, tp_plan="auto")`` of a normal Llama; return the warm-up's bytes and the
    plan."""
    model, warmup_bytes = _load_watching_warmup(_untied_llama(), ckpt, tp_plan="auto")
    return {"warmup_bytes": warmup_bytes, "tp_plan": dict(model._tp_plan or {})}


def _planned_and_reserved(rank, result, reference) -> tuple[int, list[int]]:
    """One rank's planned weights (bytes) and the warm-up's allocations (bytes: it allocates float16 elements, so
    rounded down to even); ``CouldNotObserve`` where the plan names nothing or the spy saw no warm-up."""
    planned = _planned_bytes(reference, result["tp_plan"])
    if not planned:
        raise CouldNotObserve(f"rank {rank}: the tensor-parallel plan names none of the model's tensors")
    if not result["warmup_bytes"]:
        raise CouldNotObserve(f"rank {rank}: the spy saw no warm-up allocation (was the warm-up renamed?)")
    return planned, result["warmup_bytes"]


def _planned_bytes(reference, plan) -> int:
    """The bytes of the weights a tensor-parallel plan names (its keys, with ``*`` for a layer's number)."""
    names = re.compile("|".join(re.escape(name) for name in plan))
    return sum(t.numel() * t.element_size() for n, t in reference.items() if names.search(re.sub(r"\.\d+\.", ".*.", n)))


def _check_loaded(result, reference):
    assert set(result["state"]) == set(reference)
    for name, tensor in reference.items():
        assert result["state"][name].equal(tensor), f"{name} was not loaded from the checkpoint"


@pytest.mark.may_skip(reason=POST_INIT_REQUIRED)
def test_load_with_none_tp_plan_under_initialised_process_group(tmp_path):
    _load_with_none_tp_plan(tmp_path, "cpu")


def _load_with_none_tp_plan(tmp_path, device_map):
    reference = _tiny_checkpoint(tmp_path)
    _skip_where_post_init_is_required(tmp_path)
    (result,) = run_ranks(_load_without_post_init, 1, str(tmp_path), device_map)
    _check_loaded(result, reference)


@pytest.mark.may_skip(reason=POST_INIT_REQUIRED)
def test_warmup_reserves_whole_model_on_two_ranks(tmp_path):
    """An empty plan means no tensor is sharded: each rank reserves the whole model, not 1/world_size of it."""
    _whole_model_on_two_ranks(tmp_path, "cpu")


def _whole_model_on_two_ranks(tmp_path, device_map):
    reference = _tiny_checkpoint(tmp_path)
    _skip_where_post_init_is_required(tmp_path)
    whole = sum(t.numel() * t.element_size() for t in reference.values())
    for rank, result in enumerate(run_ranks(_load_without_post_init, 2, str(tmp_path), device_map)):
        _check_loaded(result, reference)
        reserved = result["warmup_bytes"]  # the warm-up allocates float16 elements: bytes rounded down to even
        if not reserved:
            raise CouldNotObserve(f"rank {rank}: the spy saw no warm-up allocation (was the warm-up renamed?)")
        if reserved == [whole // 4 * 2]:
            raise BugSymptom(
                f"rank {rank}: warm-up reserved {reserved[0]} bytes, 1/2 of the {whole}-byte model: "
                "an empty tensor-parallel plan divided every size by the world size"
            )
        assert reserved == [whole // 2 * 2], f"rank {rank}: warm-up reserved {reserved} bytes for a {whole}-byte model"


def test_warmup_reserves_whole_model_without_tensor_parallelism(tmp_path):
    """A plan only shards when tensor parallelism is on: a plain two-rank load reserves the whole model per rank."""
    _whole_model_without_tensor_parallelism(tmp_path, "cpu")


def _whole_model_without_tensor_parallelism(tmp_path, device_map):
    reference = _tiny_checkpoint(tmp_path)
    whole = sum(t.numel() * t.element_size() for t in reference.values())
    for rank, result in enumerate(run_ranks(_load_llama_without_tensor_parallelism, 2, str(tmp_path), device_map)):
        _check_loaded(result, reference)
        if not result["tp_plan"]:
            raise CouldNotObserve(f"rank {rank}: the loaded Llama has no tensor-parallel plan to misapply")
        planned, reserved = _planned_and_reserved(rank, result, reference)
        if reserved == [(whole - planned + planned // 2) // 2 * 2]:
            raise BugSymptom(
                f"rank {rank}: warm-up reserved {reserved[0]} bytes, 1/2 of the {whole}-byte model's {planned} "
                f"bytes of tensor-parallel weights plus the other {whole - planned}: the plan divided sizes by the "
                "world size although this load is not tensor-parallel"
            )
        assert reserved == [whole // 2 * 2], f"rank {rank}: warm-up reserved {reserved} bytes for a {whole}-byte model"


def _giving_what_post_init_sets(original):
    """The public workaround for a model that skips ``post_init()`` on transformers 5: ``get_total_byte_count``
    wrapped to give the model the ``all_tied_weights_keys`` that loading reads, then called as the release calls it."""

    def get_total_byte_count(model, *args, **kwargs):
        if not hasattr(model, "all_tied_weights_keys"):
            model.all_tied_weights_keys = {}
        return original(model, *args, **kwargs)

    return get_total_byte_count


def _load_without_post_init_with_the_public_workaround(rank, world_size, ckpt, device_map="cpu"):
    """On each rank: the class that skips post_init(), loaded with the public workaround installed; the warm-up's
    bytes and the weights."""
    import transformers.modeling_utils as modeling_utils

    modeling_utils.get_total_byte_count = _giving_what_post_init_sets(modeling_utils.get_total_byte_count)
    return _load_without_post_init(rank, world_size, ckpt, device_map)


@pytest.mark.may_skip(reason="a release without get_total_byte_count (4.x: the tests above judge its warm-up)")
def test_warmup_of_a_model_that_skips_post_init_with_the_public_workaround(tmp_path):
    """A model that skips ``post_init()``, loadable on transformers 5 with the public workaround, loads on two ranks
    and each reserves the whole model: its None plan shards nothing."""
    import transformers.modeling_utils as modeling_utils

    if not hasattr(modeling_utils, "get_total_byte_count"):
        pytest.skip("no transformers.modeling_utils.get_total_byte_count on this release")
    reference = _tiny_checkpoint(tmp_path)
    whole = sum(t.numel() * t.element_size() for t in reference.values())
    results = run_ranks(_load_without_post_init_with_the_public_workaround, 2, str(tmp_path), "cpu")
    for rank, result in enumerate(results):
        _check_loaded(result, reference)
        reserved = result["warmup_bytes"]
        if not reserved:
            raise CouldNotObserve(f"rank {rank}: the spy saw no warm-up allocation (was the warm-up renamed?)")
        assert reserved == [whole // 2 * 2], f"rank {rank}: warm-up reserved {reserved} bytes for a {whole}-byte model"


# The GPU forms: the same loads onto the first CUDA device, every rank on it (one gloo group), where the warm-up runs
# as it does on users' GPUs, with nothing standing in for the accelerator.
GPU_FORM = "the GPU form loads onto a CUDA device and needs one"
ON_THE_GPU = {"": 0}


@pytest.mark.may_skip(reason=f"{GPU_FORM}, or {POST_INIT_REQUIRED}")
@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU form: needs a CUDA device")
def test_gpu_load_with_none_tp_plan_under_initialised_process_group(tmp_path):
    _load_with_none_tp_plan(tmp_path, ON_THE_GPU)


@pytest.mark.may_skip(reason=f"{GPU_FORM}, or {POST_INIT_REQUIRED}")
@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU form: needs a CUDA device")
def test_gpu_warmup_reserves_whole_model_on_two_ranks(tmp_path):
    _whole_model_on_two_ranks(tmp_path, ON_THE_GPU)


@pytest.mark.may_skip(reason=GPU_FORM)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU form: needs a CUDA device")
def test_gpu_warmup_reserves_whole_model_without_tensor_parallelism(tmp_path):
    _whole_model_without_tensor_parallelism(tmp_path, ON_THE_GPU)


def _load_tensor_parallel_without_post_init(rank, world_size, ckpt):
    """On each rank: ``from_pretrained(ckpt, tp_plan="auto")`` with the class that skips post_init(); return which
    weights were sharded and each weight gathered back whole."""
    from torch.distributed.tensor import DTensor

    model = no_post_init_llama().from_pretrained(ckpt, tp_plan="auto")
    sharded = sorted(name for name, tensor in model.state_dict().items() if isinstance(tensor, DTensor))
    whole = {
        name: (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).clone()
        for name, tensor in model.state_dict().items()
    }
    return {"sharded": sharded, "state": whole}


def _tensor_parallel_ranks(load, ckpt):
    """``load`` on two ranks; a skip where the release cannot shard onto a CPU mesh at all (4.50)."""
    try:
        return run_ranks(load, 2, str(ckpt))
    except RankFailed as exc:
        # transformers 4.50's tensor-parallel loading asks torch for an accelerator once the plan is read
        if exc.exc_type == "RuntimeError" and no_accelerator(exc.exc_message):
            pytest.skip(f"this release cannot shard onto a CPU mesh ({exc.exc_message})")
        # transformers 5's tensor-parallel load passes distribute_tensor() an argument torch 2.7 added
        if exc.exc_type == "TypeError" and tp_needs_newer_torch(exc.exc_message):
            pytest.skip(f"this release's tensor-parallel load needs a newer torch than this one ({exc.exc_message})")
        raise


@pytest.mark.may_skip(
    reason="a release that cannot shard onto a CPU mesh (4.50 needs an accelerator), whose tensor-parallel load needs "
    "a newer torch (5.x on torch 2.6), or " + POST_INIT_REQUIRED
)
def test_tensor_parallel_load_of_a_model_that_skips_post_init(tmp_path):
    """With an explicit ``tp_plan="auto"`` the submodules' plans shard the model, as they do after post_init()."""
    reference = _tiny_checkpoint(tmp_path)
    _skip_where_post_init_is_required(tmp_path)
    results = _tensor_parallel_ranks(_load_tensor_parallel_without_post_init, tmp_path)
    for rank, result in enumerate(results):
        _check_loaded(result, reference)
        if not result["sharded"]:
            raise BugSymptom(
                f'rank {rank}: tp_plan="auto" sharded none of the weights: every rank holds the whole model '
                "(the model's tensor-parallel plan was None, read as empty)"
            )
        assert "model.layers.0.self_attn.q_proj.weight" in result["sharded"], f"rank {rank}: {result['sharded']}"


@pytest.mark.regression
@pytest.mark.may_skip(
    reason="a release that cannot shard onto a CPU mesh (4.50 needs an accelerator), or whose tensor-parallel load "
    "needs a newer torch (5.x on torch 2.6)"
)
def test_tensor_parallel_warmup_reserves_each_rank_s_shards(tmp_path):
    """Where the load is tensor-parallel the plan does shard the weights, and the warm-up reserves each rank's part
    of them: the planned weights at 1/world_size, the others whole, on pristine releases and with the fix alike."""
    reference = _tiny_checkpoint(tmp_path)
    whole = sum(t.numel() * t.element_size() for t in reference.values())
    results = _tensor_parallel_ranks(_load_llama_tensor_parallel, tmp_path)
    for rank, result in enumerate(results):
        planned, reserved = _planned_and_reserved(rank, result, reference)
        shards = (whole - planned + planned // 2) // 2 * 2
        assert reserved == [shards], (
            f"rank {rank}: a tensor-parallel warm-up reserved {reserved} bytes, not the {shards} bytes of this rank's "
            f"shards ({planned} of the {whole}-byte model's bytes are planned)"
        )


def _skipping_post_init(base: Any) -> Any:
    """A subclass of ``base`` whose instances never run ``post_init()``, as a model whose ``__init__`` does not call
    it: its ``_tp_plan`` is whatever its class declares (``LlamaForCausalLM``: ``{"lm_head": ...}``; ``LlamaModel``:
    None). Its submodules run their own ``post_init()`` as usual."""

    def post_init(self):
        pass

    return type(f"SkipsPostInit{base.__name__}", (base,), {"post_init": post_init})


def _load_subclasses_tensor_parallel(rank, world_size, ckpt):
    """On each rank: ``from_pretrained(ckpt, tp_plan="auto")`` of ``LlamaForCausalLM`` and ``LlamaModel`` and of their
    subclasses that skip post_init(); return which weights each sharded (a DTensor with a ``Shard`` placement: 4.53
    makes the weights it replicates DTensors too), and the subclasses' weights gathered whole."""
    from torch.distributed.tensor import DTensor, Shard
    from transformers import LlamaForCausalLM, LlamaModel

    def sharded(tensor):
        return isinstance(tensor, DTensor) and any(isinstance(p, Shard) for p in tensor.placements)

    results = {}
    for base in (LlamaForCausalLM, LlamaModel):
        loaded = {}
        for cls in (base, _skipping_post_init(base)):
            state = cls.from_pretrained(ckpt, tp_plan="auto").state_dict()
            loaded[cls is base] = (
                sorted(name for name, tensor in state.items() if sharded(tensor)),
                {n: (t.full_tensor() if isinstance(t, DTensor) else t).clone() for n, t in state.items()},
            )
        results[base.__name__] = {"class": loaded[True][0], "subclass": loaded[False][0], "state": loaded[False][1]}
    return results


@pytest.mark.may_skip(
    reason="a release that cannot shard onto a CPU mesh (4.50 needs an accelerator), whose tensor-parallel load needs "
    "a newer torch (5.x on torch 2.6), or " + POST_INIT_REQUIRED
)
def test_tensor_parallel_load_of_a_subclass_that_skips_post_init(tmp_path):
    """A subclass of a model class that skips ``post_init()`` is sharded as the class itself is: the plan is gathered
    as ``post_init()`` gathers it, not taken from the class attribute."""
    reference = _tiny_checkpoint(tmp_path)
    _skip_where_post_init_is_required(tmp_path)
    results = _tensor_parallel_ranks(_load_subclasses_tensor_parallel, tmp_path)
    for rank, result in enumerate(results):
        for name, loaded in result.items():
            expected = reference if name == "LlamaForCausalLM" else _without_prefix(reference, "model.")
            _check_loaded(loaded, expected)
            if not loaded["class"]:
                raise CouldNotObserve(f'rank {rank}: tp_plan="auto" sharded no weight of {name} itself')
            if loaded["subclass"] != loaded["class"]:
                raise BugSymptom(
                    f'rank {rank}: tp_plan="auto" sharded {len(loaded["subclass"])} of the {len(loaded["class"])} '
                    f"weights that {name} itself shards, in a subclass that skips post_init() "
                    f"({loaded['subclass'][:3]} instead of {loaded['class'][:3]}...): its plan was its class's, not "
                    "the one post_init() gathers"
                )


def _without_prefix(state, prefix):
    """The checkpoint's tensors as a base model loads them (its head's prefix stripped, the head left out)."""
    return {name[len(prefix) :]: tensor for name, tensor in state.items() if name.startswith(prefix)}
