"""Proof for T2: meta tensors reach ``.to()`` when loading with ``device_map="auto"``.

Bug (transformers <= 4.51.0 for the environment trigger; the meta-device trigger is still open upstream):
``AutoModel.from_pretrained(ckpt, device_map="auto")`` raises ``NotImplementedError: Cannot copy out of meta tensor;
no data! Please use torch.nn.Module.to_empty() instead of torch.nn.Module.to() ...``. The non-persistent buffer
``rotary_emb.inv_freq`` (computed in ``__init__``, never in a checkpoint) is left on the meta device, then
``device_map="auto"`` resolves to one device and accelerate's ``dispatch_model`` calls ``model.to(device)``.

Trigger 1: ``ACCELERATE_INIT_INCLUDE_BUFFERS=1`` in the environment. transformers 4.50 builds the empty model with
accelerate's ``init_empty_weights()``, whose ``include_buffers`` defaults to that variable. The fix builds it with
``include_buffers=False``: the load must then give the same ``inv_freq`` and the same outputs as a load without
the variable. Trigger 2: a meta default device around the call (``with torch.device("meta")`` or
``torch.set_default_device("meta")``). Nothing can be loaded there; the fix raises a clear error that names the
tensors and the cause instead of the misleading ``to_empty()`` advice, which would throw loaded weights away.

The checkpoint is a tiny random Llama-3.1-style model saved here: base-model prefix ``model.``, untied
``lm_head``, llama3 rope scaling; once as one file and once sharded.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.proof(package="transformers",
                               pristine_error=r"NotImplementedError: Cannot copy out of meta tensor; no data!")


def _env_trigger_fixed_upstream() -> bool:
    """Upstream fixed the environment trigger in 4.51.1 (its own init_empty_weights, include_buffers=False):
    from there on, the environment-variable test guards against regressions instead of proving the bug."""
    from importlib.metadata import version

    from packaging.version import Version

    return Version(Version(version("transformers")).base_version) >= Version("4.51.1")


env_trigger_role = pytest.mark.regression if _env_trigger_fixed_upstream() else pytest.mark.proof(
    package="transformers", pristine_error=r"NotImplementedError: Cannot copy out of meta tensor; no data!")

INPUT = torch.tensor([[1, 5, 17, 42, 3, 88, 9, 60]])


def _config():
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                       tie_word_embeddings=False, rope_theta=500000.0,
                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64})


@pytest.fixture(scope="module", params=["single-file", "sharded"])
def checkpoint(request, tmp_path_factory):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(_config())
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path, max_shard_size="40KB" if request.param == "sharded" else "1GB")
    shards = list(path.glob("*.safetensors"))
    assert (len(shards) > 1) == (request.param == "sharded"), shards
    return path


def _auto(kind):
    from transformers import AutoModel, AutoModelForCausalLM

    return {"base": AutoModel, "causal-lm": AutoModelForCausalLM}[kind]


def _outputs(model, kind):
    with torch.no_grad():
        out = model(INPUT)
    return out.logits if kind == "causal-lm" else out.last_hidden_state


def _meta_tensors(model):
    return [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]


@env_trigger_role
@pytest.mark.parametrize("kind", ["base", "causal-lm"])
def test_env_include_buffers_load_equals_plain_load(checkpoint, kind, monkeypatch):
    monkeypatch.delenv("ACCELERATE_INIT_INCLUDE_BUFFERS", raising=False)
    reference = _auto(kind).from_pretrained(checkpoint, device_map="auto")
    monkeypatch.setenv("ACCELERATE_INIT_INCLUDE_BUFFERS", "1")
    model = _auto(kind).from_pretrained(checkpoint, device_map="auto")
    assert _meta_tensors(model) == []
    rotary = model.model.rotary_emb if kind == "causal-lm" else model.rotary_emb
    ref_rotary = reference.model.rotary_emb if kind == "causal-lm" else reference.rotary_emb
    assert torch.equal(rotary.inv_freq, ref_rotary.inv_freq)
    fresh = _auto(kind).from_config(_config()).rotary_emb if kind == "base" else \
        _auto(kind).from_config(_config()).model.rotary_emb
    assert torch.equal(rotary.inv_freq, fresh.inv_freq), "inv_freq must hold the llama3-scaled values"
    assert torch.equal(_outputs(model, kind), _outputs(reference, kind))
    if kind == "causal-lm":  # the untied head is the checkpoint's, not the embeddings
        assert not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)


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
    model = AutoModelForCausalLM.from_pretrained(checkpoint, device_map="auto", max_memory={"cpu": "90KB"},
                                                 offload_folder=str(tmp_path))
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
    assert "do not follow it" in msg, msg
