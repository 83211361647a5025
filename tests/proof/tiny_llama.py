"""Tiny random Llama models for the proofs. ``small_config``: the smallest Llama they need (two layers,
grouped-query attention, untied ``lm_head``). ``config``/``save``: a Llama-3.1-style checkpoint for the T2 proofs,
with llama3 rope scaling (so the non-persistent ``rotary_emb.inv_freq`` holds scaled values no checkpoint
stores)."""

from __future__ import annotations

import torch

INPUT = torch.tensor([[1, 5, 17, 42, 3, 88, 9, 60]])


def small_config(**overrides):
    """A two-layer Llama with grouped-query attention and an untied ``lm_head``; ``overrides`` change any field."""
    from transformers import LlamaConfig

    fields = {
        "vocab_size": 96,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
        "tie_word_embeddings": False,
    }
    return LlamaConfig(**{**fields, **overrides})


def config():
    return small_config(
        max_position_embeddings=128,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    )


def save(path, layout: str):
    """Save a seeded random model to ``path`` as one file (``single-file``) or several (``sharded``)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(config()).save_pretrained(path, max_shard_size="40KB" if layout == "sharded" else "1GB")
    shards = list(path.glob("*.safetensors"))
    assert (len(shards) > 1) == (layout == "sharded"), shards
    return path


def save_small(path) -> str:
    """Save a seeded random ``small_config`` Llama to ``path`` (one file); returns the path as a string."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(small_config()).save_pretrained(path)
    return str(path)


def no_post_init_llama():
    """A causal LM class whose ``__init__`` skips ``post_init()``, as many remote-code models do: its own
    ``_tp_plan`` stays the class default (its ``LlamaModel`` submodule calls ``post_init()`` and has a plan). Its
    ``forward`` returns an object with ``logits``, as a model output has."""
    from types import SimpleNamespace

    from transformers import LlamaModel, LlamaPreTrainedModel

    class NoPostInitLlama(LlamaPreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            self.model = LlamaModel(config)
            self.lm_head = torch.nn.Linear(config.hidden_size, config.vocab_size, bias=False)
            # deliberately no self.post_init()

        def forward(self, input_ids, **kwargs):
            return SimpleNamespace(logits=self.lm_head(self.model(input_ids).last_hidden_state))

    return NoPostInitLlama
