"""Proof for T2's other half: tensors left on the meta device fail in ``.to()`` with advice that loses weights.

Bug (huggingface/transformers#38066): under a meta default device (``with torch.device("meta")`` or
``torch.set_default_device("meta")``) ``from_pretrained(ckpt, device_map="auto")`` fails with
``NotImplementedError: Cannot copy out of meta tensor; no data!``, and whatever else leaves a parameter or buffer on
meta (here: a model whose own code registers a buffer there) reaches accelerate's ``dispatch_model``, whose
``model.to(device)`` fails with the same message plus the advice to use ``to_empty()``, which would throw the
loaded weights away.

What a fixed build may do, and what is checked for each (never the raw ``NotImplementedError``):

- under a meta default device, with a ``device_map``: either stop with a ValueError that names the context, the
  tensors no checkpoint can fill and the remedy (the first 4.x fixes), or load as the device map says, the same
  model as a normal load (the 5.23.0 fix, and the 4.x fixes since issue 44); a load that keeps weights on meta
  without a word (the yanked 4.52.0) is the bug's symptom;
- a tensor left on meta by the model's own code: either a ValueError naming it before dispatch (the 4.x fixes), or
  a load that leaves nothing on meta (5.x materializes missing tensors and non-persistent buffers itself).

Weights offloaded to disk stay on meta on purpose (their hooks load them): a regression guard checks that partial
disk offload still loads and generates the same tokens.

Which loads fail on the pristine releases (``tiny_models``: each checkpoint form x meta context x ``device_map`` of
"cpu" and "auto"; the same on 4.50.3, 4.53.3 and 4.57.6): under a meta default device, every load of a model whose
``__init__`` computes a non-persistent buffer (a Llama's ``inv_freq`` lands on meta), and every load of a safetensors
checkpoint (4.x reads its tensors onto the default device); inside ``init_empty_weights()`` every load (4.x: "Cannot
copy out of meta tensor"; 5.x: a model on meta, without an error; on 5.8.0, a load of OPT or T5, whose output
embeddings are tied to the input ones, from a ``pytorch_model.bin`` or ``state_dict=``, which hold both, stops in
``tie_weights`` comparing the two loaded weights on meta: "aten::equal: attempted to run this operator with Meta
tensors"). Each is a proof here. The other loads, of a ``pytorch_model.bin``, ``use_safetensors=False`` or
``state_dict=`` into a model without such buffers (OPT, T5), work on every pristine release with the same weights
and logits as outside the context: they are guards (tests/guards/test_t2_loading.py), which a fix must leave as they
are.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import tiny_llama
import tiny_models
from proofkit import BugSymptom, reset_default_device

pytestmark = pytest.mark.proof(
    package="transformers",
    signatures=[
        ("NotImplementedError", r"^Cannot copy out of meta tensor; no data!"),
        # the loaded weights left on meta, compared by `tie_weights` (5.8's init_empty_weights() loads of tied models)
        ("NotImplementedError", r"^aten::equal: attempted to run this operator with Meta tensors"),
        ("BugSymptom", r"^loaded without an error, with \d+ tensor\(s\) left on the meta device"),
    ],
)
INPUT = tiny_llama.INPUT
# What torch raises on a tensor left on meta that the load reads: never an error a fix may give
RAW_META_ERRORS = ("Cannot copy out of meta tensor", "aten::equal: attempted to run this operator with Meta tensors")
GREEDY = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)


@pytest.fixture(scope="module", params=["single-file", "sharded"])
def checkpoint(request, tmp_path_factory):
    return tiny_llama.save(tmp_path_factory.mktemp(request.param), request.param)


def _load_or_value_error(load: Callable[[], torch.nn.Module]) -> tuple[torch.nn.Module | None, str | None]:
    """``(model, None)`` when ``load()`` loads, ``(None, message)`` when it stops with a ValueError. Any other
    exception (the bug's ``NotImplementedError``) propagates to the verdict."""
    try:
        return load(), None
    except ValueError as err:
        return None, str(err)


def _assert_same_as_a_normal_load(model: torch.nn.Module, checkpoint, skip: tuple[str, ...] = ()) -> None:
    """Nothing left on meta, every parameter and buffer (but ``skip``) equal to a plain CPU load's, same tokens."""
    from transformers import LlamaForCausalLM

    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    on_meta = [name for name, tensor in tensors.items() if tensor.device.type == "meta"]
    if on_meta:  # a load that silently keeps weights on meta (the yanked 4.52.0): the bug, without even an error
        raise BugSymptom(f"loaded without an error, with {len(on_meta)} tensor(s) left on the meta device: {on_meta}")
    reference = LlamaForCausalLM.from_pretrained(checkpoint)
    expected = dict(reference.named_parameters()) | dict(reference.named_buffers())
    assert set(expected) - set(tensors) == set(), set(expected) - set(tensors)
    differ = [n for n, tensor in expected.items() if n not in skip and not torch.equal(tensors[n].cpu(), tensor)]
    assert not differ, f"differ from a normal load: {differ}"
    assert "model.rotary_emb.inv_freq" in expected  # the non-persistent buffer no checkpoint holds was compared
    tokens = model.generate(INPUT.to(model.device), **GREEDY).cpu()
    assert torch.equal(tokens, reference.generate(INPUT, **GREEDY))


@pytest.mark.parametrize("style", ["with-torch.device", "set_default_device"])
def test_meta_default_device_loads_or_gives_a_clear_error(checkpoint, style):
    """With a device map, a meta default device either gives way to it (the same model as a normal load) or stops
    the load with an error naming the context and the remedy; never "Cannot copy out of meta tensor"."""
    from transformers import AutoModelForCausalLM

    def load():
        return AutoModelForCausalLM.from_pretrained(checkpoint, device_map="auto")

    if style == "with-torch.device":
        with torch.device("meta"):
            model, error = _load_or_value_error(load)
    else:
        torch.set_default_device("meta")
        try:
            model, error = _load_or_value_error(load)
        finally:
            reset_default_device()
    if error is not None:
        assert "meta default device" in error and "model.rotary_emb.inv_freq" in error, error
        assert 'torch.device("meta")' in error and "set_default_device" in error, error
        assert "Please use torch.nn.Module.to_empty()" not in error
    else:
        assert model is not None
        _assert_same_as_a_normal_load(model, checkpoint)


@pytest.mark.regression
def test_partial_disk_offload_still_loads_and_generates_the_same(checkpoint, tmp_path):
    """Offloaded weights stay on meta on purpose (hooks load them): the fix must not call that a bug."""
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(
        checkpoint, device_map="auto", max_memory={"cpu": "90KB"}, offload_folder=str(tmp_path)
    )
    assert "disk" in set(model.hf_device_map.values()), model.hf_device_map
    assert torch.equal(model.generate(INPUT, **GREEDY), reference.generate(INPUT, **GREEDY))


def _meta_scale_llama():
    from transformers import LlamaForCausalLM

    class MetaScaleLlama(LlamaForCausalLM):
        def __init__(self, config):
            super().__init__(config)
            self.register_buffer("scale", torch.empty(3, device="meta"), persistent=False)

    return MetaScaleLlama


def test_tensor_left_on_meta_by_model_code_is_named_before_dispatch(checkpoint):
    """Whatever leaves a tensor on meta, the load either stops with an error naming it, before `.to()` would fail,
    or leaves nothing on meta."""
    model, error = _load_or_value_error(lambda: _meta_scale_llama().from_pretrained(checkpoint, device_map="auto"))
    if error is not None:
        assert "still on the meta device after loading" in error and "scale" in error, error
        assert "non-persistent buffers, which no checkpoint holds" in error, error
        assert "`to_empty()` would discard the loaded weights" in error, error
    else:
        assert model is not None and model.scale.shape == (3,)
        # `scale` holds whatever `torch.empty` gave it; everything else must be the checkpoint's
        _assert_same_as_a_normal_load(model, checkpoint, skip=("scale",))


def test_meta_error_does_not_blame_accelerate_include_buffers(checkpoint, monkeypatch):
    """The empty model is built with ``include_buffers=False`` (the fix upstream shipped in 4.51.1), so
    ``ACCELERATE_INIT_INCLUDE_BUFFERS`` puts nothing on meta: an error must not advise unsetting it, and a load
    must leave nothing on meta."""
    monkeypatch.setenv("ACCELERATE_INIT_INCLUDE_BUFFERS", "1")
    model, error = _load_or_value_error(lambda: _meta_scale_llama().from_pretrained(checkpoint, device_map="auto"))
    if error is not None:
        assert "still on the meta device after loading" in error and "scale" in error, error
        assert "ACCELERATE_INIT_INCLUDE_BUFFERS" not in error, error
    else:
        assert model is not None
        _assert_same_as_a_normal_load(model, checkpoint, skip=("scale",))


@pytest.mark.parametrize("device_map", ["cpu", "auto"])
def test_init_empty_weights_default_form_loads_or_gives_a_clear_error(checkpoint, device_map):
    """The other meta context: accelerate's ``init_empty_weights()`` in its default form (``include_buffers=False``)
    puts no default device in place but moves every parameter assigned to a module to meta, the loaded weights
    among them. With a device map, the load either gives the same model as a normal load or stops with an error
    that names the context and the remedy (``from_config``); never a model whose weights are on meta, without a
    word (the bug's symptom), nor "Cannot copy out of meta tensor"."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    try:
        with init_empty_weights():
            model = AutoModelForCausalLM.from_pretrained(checkpoint, device_map=device_map)
    except (ValueError, RuntimeError) as err:
        message = str(err)
        if message.startswith(RAW_META_ERRORS):
            raise
        assert "init_empty_weights()" in message and "from_config" in message, message
        assert "still on the meta device after loading" not in message, f"not the cause: {message}"
        return
    _assert_same_as_a_normal_load(model, checkpoint)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, tiny_models.Saved]:
    return {family: tiny_models.Saved(family, tmp_path_factory.mktemp(family)) for family in tiny_models.FAMILIES}


def _loads_as_outside_the_context_or_refuses(
    saved: tiny_models.Saved, form: str, context: str, device_map: str
) -> None:
    """The load inside ``context`` either equals the same load outside it (every parameter and buffer, the logits),
    or stops with an error that names the context and the remedy. The raw "Cannot copy out of meta tensor"
    propagates (the bug); a load that leaves tensors on meta without a word is the bug's symptom."""
    reference = saved.load(form, device_map=device_map)
    try:
        with tiny_models.meta_context(context):
            model = saved.load(form, device_map=device_map)
    except (ValueError, RuntimeError) as err:
        message = str(err)
        if message.startswith(RAW_META_ERRORS):
            raise
        assert "Please use torch.nn.Module.to_empty()" not in message, message
        if context == "init_empty_weights":
            assert "init_empty_weights()" in message and "from_config" in message, message
        else:
            assert "meta default device" in message and 'torch.device("meta")' in message, message
        return
    tensors = tiny_models.tensors(model)
    on_meta = [name for name, tensor in tensors.items() if tensor.device.type == "meta"]
    if on_meta:
        raise BugSymptom(f"loaded without an error, with {len(on_meta)} tensor(s) left on the meta device: {on_meta}")
    expected = tiny_models.tensors(reference)
    assert set(tensors) == set(expected), set(tensors) ^ set(expected)
    differ = [name for name, tensor in expected.items() if not torch.equal(tensors[name].cpu(), tensor.cpu())]
    assert not differ, f"differ from the same load outside the context: {differ}"
    assert torch.equal(tiny_models.logits(model), tiny_models.logits(reference))


@pytest.mark.parametrize("device_map", ["cpu", "auto"])
@pytest.mark.parametrize("context", tiny_models.META_DEFAULT_DEVICES)
@pytest.mark.parametrize("form", tiny_models.FORMS)
def test_a_model_that_computes_buffers_in_init_loads_under_a_meta_default_device(saved, form, context, device_map):
    """A Llama computes its rotary ``inv_freq`` (a non-persistent buffer, in no checkpoint) in ``__init__``: under a
    meta default device it is built on meta, whatever the checkpoint's form, and every pristine release fails (4.x in
    ``.to()``, advising ``to_empty()``; 5.x in weight initialization). A fixed load gives the model a load outside the
    context gives, or says why it cannot."""
    _loads_as_outside_the_context_or_refuses(saved["llama"], form, context, device_map)


@pytest.mark.parametrize("device_map", ["cpu", "auto"])
@pytest.mark.parametrize("context", tiny_models.META_DEFAULT_DEVICES)
@pytest.mark.parametrize("family", ["opt", "t5"])
def test_a_safetensors_checkpoint_loads_under_a_meta_default_device(saved, family, context, device_map):
    """A model without buffers (OPT, T5) from a safetensors checkpoint: 4.x reads each tensor onto the default device,
    meta, and fails copying it to the map's device; the same load of a ``pytorch_model.bin`` works (a guard). On 5.x
    it works (a regression guard there)."""
    _loads_as_outside_the_context_or_refuses(saved[family], "safetensors", context, device_map)


@pytest.mark.parametrize("device_map", ["cpu", "auto"])
@pytest.mark.parametrize("form", tiny_models.FORMS)
@pytest.mark.parametrize("family", tiny_models.FAMILIES)
def test_init_empty_weights_default_form_with_every_checkpoint_form(saved, family, form, device_map):
    """accelerate's ``init_empty_weights()`` moves every parameter assigned to a module to meta, the loaded weights
    among them, whatever the checkpoint's form: no pristine release loads there (4.x fails in ``.to()``; 5.x returns
    a model on meta). A fixed load says so before reading any weight."""
    _loads_as_outside_the_context_or_refuses(saved[family], form, "init_empty_weights", device_map)
