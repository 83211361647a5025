"""Tiny random models of three families, saved in every checkpoint form ``from_pretrained`` reads, for the loads of
T2 (a meta default device): a Llama (its rotary ``inv_freq`` is a non-persistent buffer computed in ``__init__``;
``tiny_llama.config``, with llama3 rope scaling), an OPT and a T5 (no buffers at all).

Forms: ``safetensors`` (``save_pretrained``), ``bin`` (a folder with only ``pytorch_model.bin``, as older checkpoints
are), ``use_safetensors=False`` (a folder with both, read with that argument) and ``state_dict``
(``from_pretrained(None, config=..., state_dict=...)``). The meta contexts: ``with torch.device("meta")``,
``torch.set_default_device("meta")``, accelerate's ``init_empty_weights(include_buffers=True)`` (a meta default device
too) and its default form ``init_empty_weights()`` (no default device; it moves every parameter assigned to a module
to meta)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch

import tiny_llama
from proofkit import reset_default_device

INPUT = tiny_llama.INPUT
FAMILIES = ("llama", "opt", "t5")
FORMS = ("safetensors", "bin", "use_safetensors=False", "state_dict")
#: The meta default devices (``get_torch_context_manager_or_global_device()`` is meta in each).
META_DEFAULT_DEVICES = ("with-torch.device", "set_default_device", "init_empty_weights-include_buffers")


def model_class_and_config(family: str):
    from transformers import LlamaForCausalLM, OPTConfig, OPTForCausalLM, T5Config, T5ForConditionalGeneration

    if family == "llama":
        return LlamaForCausalLM, tiny_llama.config()
    if family == "opt":
        config = OPTConfig(
            vocab_size=96,
            hidden_size=32,
            word_embed_proj_dim=32,
            ffn_dim=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=64,
        )
        return OPTForCausalLM, config
    if family == "t5":
        config = T5Config(
            vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0
        )
        return T5ForConditionalGeneration, config
    raise ValueError(family)


class Saved:
    """A seeded random model of ``family``, saved under ``root`` in each of ``FORMS``; ``load(form, **kwargs)``."""

    def __init__(self, family: str, root: Path) -> None:
        self.model_class, self.config = model_class_and_config(family)
        torch.manual_seed(0)
        model = self.model_class(self.config)
        self.state_dict = {name: tensor.clone() for name, tensor in model.state_dict().items()}
        self.safetensors, self.bin, self.both = root / "safetensors", root / "bin", root / "both"
        model.save_pretrained(self.safetensors)
        model.config.save_pretrained(self.bin)
        torch.save(self.state_dict, self.bin / "pytorch_model.bin")
        model.save_pretrained(self.both)
        torch.save(self.state_dict, self.both / "pytorch_model.bin")

    def load(self, form: str, **kwargs):
        if form == "safetensors":
            return self.model_class.from_pretrained(self.safetensors, **kwargs)
        if form == "bin":
            return self.model_class.from_pretrained(self.bin, **kwargs)
        if form == "use_safetensors=False":
            return self.model_class.from_pretrained(self.both, use_safetensors=False, **kwargs)
        if form == "state_dict":
            state_dict = dict(self.state_dict)
            return self.model_class.from_pretrained(None, config=self.config, state_dict=state_dict, **kwargs)
        raise ValueError(form)


@contextlib.contextmanager
def meta_context(kind: str) -> Iterator[None]:
    """One of ``META_DEFAULT_DEVICES``, or ``init_empty_weights`` (accelerate's default form)."""
    if kind == "with-torch.device":
        with torch.device("meta"):
            yield
    elif kind == "set_default_device":
        torch.set_default_device("meta")
        try:
            yield
        finally:
            reset_default_device()
    else:
        from accelerate import init_empty_weights

        if kind not in ("init_empty_weights-include_buffers", "init_empty_weights"):
            raise ValueError(kind)
        with init_empty_weights(include_buffers=kind == "init_empty_weights-include_buffers"):
            yield


def logits(model) -> torch.Tensor:
    """The logits of a fixed input (T5: with the first half as the decoder's input); call it outside a meta context."""
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            return model(input_ids=INPUT.to(model.device), decoder_input_ids=INPUT[:, :4].to(model.device)).logits
        return model(INPUT.to(model.device)).logits


def tensors(model) -> dict[str, torch.Tensor]:
    """Every parameter and buffer, by name."""
    return dict(model.named_parameters()) | dict(model.named_buffers())


def numpy_count_classes(kind: str):
    """A Llama that reads ``num_items_in_batch`` with ``float()`` (which a 0-d array needs: torch cannot divide by
    one), and a ``Trainer`` whose ``get_batch_samples`` counts the batch's tokens with NumPy (``np.sum``): a
    ``numpy.int64`` for ``kind`` "numpy-int64", a 0-d array for "numpy-0-d-array". Returns (model class, trainer
    class)."""
    import numpy as np
    from transformers import LlamaForCausalLM, Trainer

    class FloatCountLlama(LlamaForCausalLM):
        def forward(self, input_ids=None, labels=None, num_items_in_batch=None, **kwargs):
            count = None if num_items_in_batch is None else float(num_items_in_batch)
            return super().forward(input_ids=input_ids, labels=labels, num_items_in_batch=count, **kwargs)

    class NumpyCountTrainer(Trainer):
        def get_batch_samples(self, epoch_iterator, num_batches, *args, **kwargs):
            batches, count = super().get_batch_samples(epoch_iterator, num_batches, *args, **kwargs)
            if count is None:
                return batches, None
            tokens = np.sum([int((b["labels"] != -100).sum()) for b in batches])
            return batches, tokens if kind == "numpy-int64" else np.asarray(tokens)

    return FloatCountLlama, NumpyCountTrainer
