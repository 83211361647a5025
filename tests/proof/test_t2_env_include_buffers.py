"""Proof for T2's environment trigger: ``ACCELERATE_INIT_INCLUDE_BUFFERS=1`` leaves buffers on the meta device.

Bug (transformers <= 4.51.0, huggingface/transformers#38066): ``AutoModel.from_pretrained(ckpt, device_map="auto")``
raises ``NotImplementedError: Cannot copy out of meta tensor; no data! Please use torch.nn.Module.to_empty() ...``
when ``ACCELERATE_INIT_INCLUDE_BUFFERS=1`` is set. transformers 4.50 builds the empty model with accelerate's
``init_empty_weights()``, whose ``include_buffers`` defaults to that variable, so the non-persistent buffer
``rotary_emb.inv_freq`` (computed in ``__init__``, never in a checkpoint) stays on meta; ``device_map="auto"``
resolves to one device and accelerate's ``dispatch_model`` calls ``model.to(device)``.

The fix builds the empty model with ``include_buffers=False`` (upstream did the same in 4.51.1): the load must
give the same ``inv_freq`` (llama3-scaled) and the same outputs as a load without the variable, through
``AutoModel`` and ``AutoModelForCausalLM``, from one file and from shards.
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


@pytest.fixture(scope="module", params=["single-file", "sharded"])
def checkpoint(request, tmp_path_factory):
    return tiny_llama.save(tmp_path_factory.mktemp(request.param), request.param)


def _auto(kind):
    from transformers import AutoModel, AutoModelForCausalLM

    return {"base": AutoModel, "causal-lm": AutoModelForCausalLM}[kind]


def _outputs(model, kind):
    with torch.no_grad():
        out = model(tiny_llama.INPUT)
    return out.logits if kind == "causal-lm" else out.last_hidden_state


def _rotary(model, kind):
    return model.model.rotary_emb if kind == "causal-lm" else model.rotary_emb


@pytest.mark.parametrize("kind", ["base", "causal-lm"])
def test_env_include_buffers_load_equals_plain_load(checkpoint, kind, monkeypatch):
    monkeypatch.delenv("ACCELERATE_INIT_INCLUDE_BUFFERS", raising=False)
    reference = _auto(kind).from_pretrained(checkpoint, device_map="auto")
    monkeypatch.setenv("ACCELERATE_INIT_INCLUDE_BUFFERS", "1")
    model = _auto(kind).from_pretrained(checkpoint, device_map="auto")
    meta = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
    assert meta == []
    assert torch.equal(_rotary(model, kind).inv_freq, _rotary(reference, kind).inv_freq)
    fresh = _rotary(_auto(kind).from_config(tiny_llama.config()), kind)
    assert torch.equal(_rotary(model, kind).inv_freq, fresh.inv_freq), "inv_freq must hold the llama3-scaled values"
    assert torch.equal(_outputs(model, kind), _outputs(reference, kind))
    if kind == "causal-lm":  # the untied head is the checkpoint's, not the embeddings
        assert not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
