"""Proof for T2's other half: tensors left on the meta device fail in ``.to()`` with advice that loses weights.

Bug (open upstream through 5.x, huggingface/transformers#38066): under a meta default device
(``with torch.device("meta")`` or ``torch.set_default_device("meta")``) ``from_pretrained(ckpt, device_map="auto")``
fails with ``NotImplementedError: Cannot copy out of meta tensor; no data!``, and whatever else leaves a parameter
or buffer on meta (here: a model whose own code registers a buffer there) reaches accelerate's
``dispatch_model``, whose ``model.to(device)`` fails with the same message plus the advice to use ``to_empty()``,
which would throw the loaded weights away.

The fix: under a meta default device, where nothing can be loaded, a ValueError that says so and names the tensors
no checkpoint can fill; before dispatch, a ValueError naming any tensor still on meta and the likely cause. Weights
offloaded to disk stay on meta on purpose (their hooks load them): a regression guard checks that partial disk
offload still loads and generates the same tokens.
"""

from __future__ import annotations

import pytest
import torch

import tiny_llama

pytestmark = pytest.mark.proof(
    package="transformers",
    signatures=[
        ("NotImplementedError", r"^Cannot copy out of meta tensor; no data!"),
    ],
)
INPUT = tiny_llama.INPUT


@pytest.fixture(scope="module", params=["single-file", "sharded"])
def checkpoint(request, tmp_path_factory):
    return tiny_llama.save(tmp_path_factory.mktemp(request.param), request.param)


@pytest.mark.parametrize("style", ["with-torch.device", "set_default_device"])
def test_meta_default_device_gives_a_clear_error(checkpoint, style):
    from transformers import AutoModelForCausalLM

    if style == "with-torch.device":
        with torch.device("meta"), pytest.raises(ValueError) as err:
            AutoModelForCausalLM.from_pretrained(checkpoint, device_map="auto")
    else:
        torch.set_default_device("meta")
        try:
            with pytest.raises(ValueError) as err:
                AutoModelForCausalLM.from_pretrained(checkpoint, device_map="auto")
        finally:
            torch.set_default_device(None)
    msg = str(err.value)
    assert "meta default device" in msg and "model.rotary_emb.inv_freq" in msg, msg
    assert 'torch.device("meta")' in msg and "set_default_device" in msg, msg
    assert "Please use torch.nn.Module.to_empty()" not in msg


@pytest.mark.regression
def test_partial_disk_offload_still_loads_and_generates_the_same(checkpoint, tmp_path):
    """Offloaded weights stay on meta on purpose (hooks load them): the fix must not call that a bug."""
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(
        checkpoint, device_map="auto", max_memory={"cpu": "90KB"}, offload_folder=str(tmp_path)
    )
    assert "disk" in set(model.hf_device_map.values()), model.hf_device_map
    greedy = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(INPUT, **greedy), reference.generate(INPUT, **greedy))


def test_tensor_left_on_meta_by_model_code_is_named_before_dispatch(checkpoint):
    """Whatever leaves a tensor on meta, the load stops with an error naming it, before `.to()` would fail."""
    from transformers import LlamaForCausalLM

    class MetaScaleLlama(LlamaForCausalLM):
        def __init__(self, config):
            super().__init__(config)
            self.register_buffer("scale", torch.empty(3, device="meta"), persistent=False)

    with pytest.raises(ValueError) as err:
        MetaScaleLlama.from_pretrained(checkpoint, device_map="auto")
    msg = str(err.value)
    assert "still on the meta device after loading" in msg and "scale" in msg, msg
    assert "non-persistent buffers, which no checkpoint holds" in msg, msg
    assert "`to_empty()` would discard the loaded weights" in msg, msg


def test_meta_error_does_not_blame_accelerate_include_buffers(checkpoint, monkeypatch):
    """The empty model is built with ``include_buffers=False`` (the fix upstream shipped in 4.51.1), so
    ``ACCELERATE_INIT_INCLUDE_BUFFERS`` puts nothing on meta: the error must not advise unsetting it."""
    from transformers import LlamaForCausalLM

    class MetaScaleLlama(LlamaForCausalLM):
        def __init__(self, config):
            super().__init__(config)
            self.register_buffer("scale", torch.empty(3, device="meta"), persistent=False)

    monkeypatch.setenv("ACCELERATE_INIT_INCLUDE_BUFFERS", "1")
    with pytest.raises(ValueError) as err:
        MetaScaleLlama.from_pretrained(checkpoint, device_map="auto")
    msg = str(err.value)
    assert "still on the meta device after loading" in msg and "scale" in msg, msg
    assert "ACCELERATE_INIT_INCLUDE_BUFFERS" not in msg, msg
