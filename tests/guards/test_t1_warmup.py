"""Guards for T1 (the allocator warm-up's tensor-parallel plan): ordinary loads under a process group, and the code
users write around ``caching_allocator_warmup``.

The bug needs a model whose ``_tp_plan`` is ``None`` (it skipped ``post_init()``). Next to it: a normal Llama,
whose plan is a dict, loaded one replica per rank under an initialised 2-rank gloo group (``device_map="cpu"``, as
for DDP), and loaded with ``tp_plan="auto"`` (tensor parallelism). Recorded per rank: the weights (whole, gathered
from their shards), which were sharded, the logits of a fixed input, and the warnings and log records.

The patch touches ``transformers.modeling_utils.caching_allocator_warmup``, a module-level function that public code
replaces, wraps and calls (mined with ``find_string``/``search`` over public repositories; each guard's docstring
names the code it stands for). Every such replacement is installed where users install it, on the module, and
called by ``from_pretrained`` itself: in a plain load (one process, ``device_map="cpu"``) and on the 2 ranks of a
gloo group (``device_map="cpu"``, then ``tp_plan="auto"``). Recorded, besides the load's outcome: how the
replacement was called (its positional arguments and keywords), which is the release's contract with it.

On transformers 5 the warm-up's sizes come from ``get_total_byte_count``, which the 5.8.0 patch touches and public
code wraps (to give a model that skips ``post_init()`` what loading reads): the same loads with such a wrapper,
where the release has the function.
"""

from __future__ import annotations

import re

import pytest
import torch

from harness import run_ranks
from tiny_llama import INPUT, no_post_init_llama, save_small, small_config

pytestmark = pytest.mark.guard(package="transformers")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_small(tmp_path_factory.mktemp("llama"))


def _load(ckpt, kwargs, model_class=None):
    from torch.distributed.tensor import DTensor
    from transformers import LlamaForCausalLM

    import guardkit

    with guardkit.capture() as seen:
        try:
            model = (model_class or LlamaForCausalLM).from_pretrained(ckpt, **kwargs)
        # 4.50 cannot shard onto a CPU mesh; transformers 5 cannot load a model that skips post_init()
        # (AttributeError: no `all_tied_weights_keys`): alike on both builds
        except (RuntimeError, TypeError, AttributeError) as exc:
            return {"raised": guardkit.raised(exc), "warnings": seen.warnings, "logs": seen.logs}
        state = model.state_dict()
        sharded = sorted(name for name, t in state.items() if isinstance(t, DTensor))
        whole = {name: (t.full_tensor() if isinstance(t, DTensor) else t) for name, t in state.items()}
        with torch.no_grad():
            logits = model(INPUT)
            logits = getattr(logits, "logits", logits)
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


def test_loads_under_a_process_group(observe, distributed):
    """On each of 2 ranks of an initialised gloo group: ``device_map="cpu"`` (the warm-up runs with the group up),
    then ``tp_plan="auto"`` (the model's own plan shards it; 4.50 cannot shard onto a CPU mesh and raises, alike on
    both builds)."""
    for rank, result in enumerate(distributed):
        observe(f"rank{rank}", result["loads"])


# ---------------------------------------------------------------------------------------------------------------
# What users write around caching_allocator_warmup


def _release(version: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


def _with_the_release_signature(body):
    """``body`` behind a function with the parameters of this release's own ``caching_allocator_warmup``, as a user
    who wraps it writes them, copied from the release they run: ``(model, expanded_device_map)`` on 4.50,
    ``(model, expanded_device_map, factor=2)`` on 4.51, ``(model, expanded_device_map, hf_quantizer)`` from 4.52.
    (Read from the release, not from the installed function: a +fixed build must keep its release's signature.)"""
    import transformers

    release = _release(transformers.__version__)
    if release < (4, 51):
        return _as_4_50(body)
    if release < (4, 52):
        return _as_4_51(body)
    return _as_4_52(body)


def _as_4_50(body):
    def warmup(model, expanded_device_map):
        return body(model, expanded_device_map)

    return warmup


def _as_4_51(body):
    def warmup(model, expanded_device_map, factor=2):
        return body(model, expanded_device_map, factor)

    return warmup


def _as_4_52(body):
    def warmup(model, expanded_device_map, hf_quantizer):
        return body(model, expanded_device_map, hf_quantizer)

    return warmup


def _skip_on_mps(original, calls):
    """A wrapper with the release's signature that skips the warm-up when the map targets MPS, else calls the
    original with the same arguments."""

    def body(*args):
        calls.append({"args": len(args)})
        if any(str(device).startswith("mps") for device in args[1].values()):
            return None
        return original(*args)

    return _with_the_release_signature(body)


def _skip_on_runtime_error(original, calls):
    """A wrapper with the release's signature that calls the original and skips the warm-up if it raises
    RuntimeError (an NVML or a device-memory query that fails)."""

    def body(*args):
        calls.append({"args": len(args)})
        try:
            return original(*args)
        except RuntimeError:
            return None

    return _with_the_release_signature(body)


def _no_op(original, calls):
    """A replacement that accepts anything and does nothing: ``lambda *args, **kwargs: None``."""
    return lambda *args, **kwargs: calls.append({"args": len(args), "kwargs": sorted(kwargs)})


def _pass_through(original, calls):
    """A wrapper that takes ``*args, **kwargs``, decides whether to skip, and otherwise forwards them unchanged."""

    def warmup(*args, **kwargs):
        calls.append({"args": len(args), "kwargs": sorted(kwargs)})
        return original(*args, **kwargs)

    return warmup


def _swallow_type_error(original, calls):
    """A wrapper, ``(model, device_map, hf_quantizer=None)``, that calls the original and skips the warm-up on the
    ``TypeError`` of a model whose ``_tp_plan`` is None (T1 itself, before 4.54)."""

    def warmup(model, device_map, hf_quantizer=None):
        calls.append({"args": 3})
        try:
            return original(model, device_map, hf_quantizer)
        except TypeError:
            return None

    return warmup


REPLACEMENTS = {
    "skip_on_mps": _skip_on_mps,
    "skip_on_runtime_error": _skip_on_runtime_error,
    "no_op": _no_op,
    "pass_through": _pass_through,
    "swallow_type_error": _swallow_type_error,
}


def _loads_with(replacement, ckpt, loads, no_post_init=False):
    """``loads`` (name -> from_pretrained kwargs) with ``caching_allocator_warmup`` replaced on the module, as users
    do; the original is put back afterwards. Returns each load's outcome and how the replacement was called."""
    import transformers.modeling_utils as modeling_utils

    original = modeling_utils.caching_allocator_warmup
    model_class = no_post_init_llama() if no_post_init else None
    outcomes = {}
    try:
        for name, kwargs in loads.items():
            calls: list = []
            modeling_utils.caching_allocator_warmup = REPLACEMENTS[replacement](original, calls)
            outcomes[name] = {**_load(ckpt, kwargs, model_class), "calls": calls}
    finally:
        modeling_utils.caching_allocator_warmup = original
    return outcomes


#: The replacements whose model skips ``post_init()`` (the others load a normal Llama).
NO_POST_INIT = {"swallow_type_error"}


def _rank_loads_with(rank, world_size, replacement, ckpt, no_post_init):
    loads = {"replica": {"device_map": "cpu"}}
    if not no_post_init:
        loads["tensor_parallel"] = {"tp_plan": "auto"}
    return _loads_with(replacement, ckpt, loads, no_post_init)


def _rank_scenarios(rank, world_size, ckpt):
    """Every guard's loads on one rank, one scenario after the other (each load clears the libraries' "once"
    caches, and each replacement is put back after its loads)."""
    out = {"loads": _rank_loads(rank, world_size, ckpt)}
    for replacement in REPLACEMENTS:
        out[replacement] = _rank_loads_with(rank, world_size, replacement, ckpt, replacement in NO_POST_INIT)
    out["byte_count_wrapper"] = _loads_with_byte_count_wrapper(
        ckpt, {"replica": {"device_map": "cpu"}, "tensor_parallel": {"tp_plan": "auto"}}
    )
    return out


@pytest.fixture(scope="module")
def distributed(checkpoint):
    """The distributed part of every guard of this module, on 2 ranks of an initialised gloo group started once:
    starting ranks (each imports transformers) costs more than their loads. Each guard observes its own part."""
    return run_ranks(_rank_scenarios, 2, checkpoint)


def _plain_and_distributed(observe, replacement, ckpt, distributed):
    """One process without torch.distributed, then what the replacement gave on the 2 gloo ranks."""
    observe("plain", _loads_with(replacement, ckpt, {"replica": {"device_map": "cpu"}}, replacement in NO_POST_INIT))
    for rank, result in enumerate(distributed):
        observe(f"rank{rank}", result[replacement])


def test_a_wrapper_with_the_release_signature_that_skips_mps(observe, checkpoint, distributed):
    """Stands for the wrappers with the release's own parameters that skip the warm-up on a condition and call the
    saved original otherwise: unsloth-zoo's ``guarded_caching_allocator_warmup(model, expanded_device_map,
    hf_quantizer)``, which skips it for GPT-OSS 4-bit loads on small accelerators (unslothai/unsloth-zoo
    unsloth_zoo/temporary_patches/gpt_oss.py, d66df48d, February 2026; later made ``*args, **kwargs``), and the
    application code that skips it on Apple's MPS, which refuses a buffer that large (``RuntimeError: Invalid buffer
    size``, huggingface/transformers#46239, QwenLM/Qwen3-VL#1508; found by ``find_string`` on
    ``_warmup(model, expanded_device_map, hf_quantizer)`` in several scripts, whose repositories the index does not
    name). The condition here is MPS; each load must call the wrapper as the release does."""
    _plain_and_distributed(observe, "skip_on_mps", checkpoint, distributed)


def test_a_wrapper_with_the_release_signature_that_skips_on_an_error(observe, checkpoint, distributed):
    """Stands for the wrappers that call the original in ``try`` and skip the warm-up on ``RuntimeError`` (PyTorch
    unable to initialise NVML, Jetson's ``NVML_SUCCESS == r INTERNAL ASSERT FAILED``, a device that cannot report
    its free memory: huggingface/transformers#48130) or on ``torch.OutOfMemoryError``, each with the release's own
    parameters ``(model, expanded_device_map, hf_quantizer)``. Found by ``find_string`` on
    ``_warmup(model, expanded_device_map, hf_quantizer)`` (an NVML guard in a training launcher, an allocator
    compatibility shim of an RL project); the index does not name their repositories."""
    _plain_and_distributed(observe, "skip_on_runtime_error", checkpoint, distributed)


def test_a_replacement_that_accepts_anything_and_does_nothing(observe, checkpoint, distributed):
    """Stands for ``caching_allocator_warmup = lambda *args, **kwargs: None`` and its named forms: axolotl's no-op
    ``(*args, **kwargs)``, so that quantizing on load is not defeated by a bf16-sized reservation
    (axolotl-ai-cloud/axolotl src/axolotl/monkeypatch/moe_quant.py), mindnlp's ``empty_fn``
    (mindspore-lab/mindnlp src/mindnlp/patch/transformers/common.py), and many scripts found by ``find_string`` on
    ``modeling_utils.caching_allocator_warmup``. It sees whatever the release passes."""
    _plain_and_distributed(observe, "no_op", checkpoint, distributed)


def test_a_pass_through_wrapper(observe, checkpoint, distributed):
    """Stands for unsloth-zoo's ``guarded_caching_allocator_warmup(*args, **kwargs)``, "Guard transformers
    caching_allocator_warmup on low-memory GPUs" (unslothai/unsloth-zoo unsloth_zoo/temporary_patches/gpt_oss.py,
    e69de6af, March 2026): it skips the warm-up on small accelerators and otherwise forwards the arguments
    unchanged. The original must accept what the release passes it, through the wrapper."""
    _plain_and_distributed(observe, "pass_through", checkpoint, distributed)


def test_a_wrapper_that_works_around_the_none_plan(observe, checkpoint, distributed):
    """Stands for the wrappers that work around T1 itself: ``def _safe_warmup(model, device_map,
    hf_quantizer=None)`` calling the original in ``try`` and skipping the warm-up on its ``TypeError`` (found by
    ``find_string`` on ``caching_allocator_warmup``, in a GRPO training script for LLaDA/SDAR, models without a
    tensor-parallel plan; the index does not name its repository). With such a model, which skips ``post_init()``,
    the pristine 4.50 and 4.53 load works because the wrapper swallows the bug; a +fixed load must work too, and
    call the wrapper as the release does."""
    _plain_and_distributed(observe, "swallow_type_error", checkpoint, distributed)


def test_a_direct_call_with_the_release_arguments(observe, checkpoint):
    """Stands for code that calls the warm-up itself on a model it dispatches by hand (a loading benchmark that
    replicates it: ``init_empty_weights()``, ``infer_auto_device_map``, then ``caching_allocator_warmup(model,
    expand_device_map(device_map, keys), None)``; found by ``find_string`` on ``import caching_allocator_warmup``,
    the index does not name its repository). The call passes what the release's signature asks for."""
    import transformers
    from accelerate import init_empty_weights
    from transformers import LlamaForCausalLM
    from transformers.modeling_utils import caching_allocator_warmup, expand_device_map

    with init_empty_weights():
        model = LlamaForCausalLM(small_config())
    expanded = expand_device_map({"": "cpu"}, list(model.state_dict()))
    arguments = (model, expanded) if _release(transformers.__version__) < (4, 52) else (model, expanded, None)
    try:
        observe("returned", caching_allocator_warmup(*arguments))
    except TypeError as exc:  # a +fixed build that no longer takes the release's arguments
        observe("returned", {"type": type(exc).__name__, "message": str(exc)})


# ---------------------------------------------------------------------------------------------------------------
# What users write around get_total_byte_count (transformers 5: the sizes the warm-up reserves)


def _giving_what_post_init_sets(original, calls):
    """A wrapper of ``get_total_byte_count`` that gives a model without ``all_tied_weights_keys`` (its ``__init__``
    skipped ``post_init()``) an empty one, then calls the original with the same arguments."""

    def get_total_byte_count(model, *args, **kwargs):
        calls.append({"args": len(args), "kwargs": sorted(kwargs)})
        if not hasattr(model, "all_tied_weights_keys"):
            model.all_tied_weights_keys = {}
        return original(model, *args, **kwargs)

    return get_total_byte_count


def _loads_with_byte_count_wrapper(ckpt, loads):
    """``loads`` with ``get_total_byte_count`` wrapped on the module, as users do on transformers 5, and the CPU
    counted as an accelerator by the warm-up (as a GPU is; else the warm-up returns before it sizes anything on this
    CPU-only machine). None on a release without the function (4.x sizes the warm-up inside
    ``caching_allocator_warmup``). Each load's outcome and how the wrapper was called."""
    import transformers.modeling_utils as modeling_utils

    if not hasattr(modeling_utils, "get_total_byte_count"):
        return None
    original, is_accelerator = modeling_utils.get_total_byte_count, modeling_utils.is_accelerator_device
    outcomes = {}
    try:
        for name, kwargs in loads.items():
            calls: list = []
            modeling_utils.get_total_byte_count = _giving_what_post_init_sets(original, calls)
            modeling_utils.is_accelerator_device = lambda device: str(device) not in ("disk", "meta")
            outcomes[name] = {**_load(ckpt, kwargs), "calls": calls}
    finally:
        modeling_utils.get_total_byte_count, modeling_utils.is_accelerator_device = original, is_accelerator
    return outcomes


@pytest.mark.may_skip(reason="transformers 4.x has no get_total_byte_count (its warm-up sizes the model itself)")
def test_get_total_byte_count_wrapped_to_give_what_post_init_sets(observe, checkpoint, distributed):
    """Stands for the wrappers of ``transformers.modeling_utils.get_total_byte_count`` that give a remote-code model
    which skips ``post_init()`` the ``all_tied_weights_keys`` that transformers 5's loading reads, then call the
    original with the same arguments: ``patched_get_total_byte_count(model, accelerator_device_map, hf_quantizer)``
    in a LLaDA probing script and ``patched_get_total_byte_count(model, *args, **kwargs)`` in an InternVL3 inference
    script (found by ``find_string`` on ``get_total_byte_count(``; the index does not name their repositories).
    Here around a normal Llama, in one process and on the 2 ranks of a gloo group (one replica per rank, then
    ``tp_plan="auto"``): each load must load what pristine loads and call the wrapper as the release does."""
    plain = _loads_with_byte_count_wrapper(checkpoint, {"replica": {"device_map": "cpu"}})
    if plain is None:
        pytest.skip("no transformers.modeling_utils.get_total_byte_count on this release")
    observe("plain", plain)
    for rank, result in enumerate(distributed):
        observe(f"rank{rank}", result["byte_count_wrapper"])
