"""Guards for T2 (tensors left on the meta device at load): the loads next to the bug.

The bug needs a tensor on meta when the model is dispatched (``ACCELERATE_INIT_INCLUDE_BUFFERS=1`` on 4.50, a meta
default device, or a model that registers a buffer on meta). Next to it: an ordinary load, with and without
``device_map="auto"``; partial disk offload, whose weights stay on meta on purpose; and a meta default device
without a ``device_map`` or with one onto meta (a meta model on purpose, which upstream handles itself), and
accelerate's ``init_empty_weights()`` with no device to load onto, or before an ordinary load. Recorded:
every parameter and buffer (device, dtype, sums), the device map, greedy tokens, and the warnings and log records.

And every load under a meta default device that works on the pristine releases (tests/proof/test_t2_meta_errors.py
has the table): a ``pytorch_model.bin``, ``use_safetensors=False`` or ``state_dict=`` load, with
``device_map="cpu"`` or ``"auto"``, of a model without buffers that its ``__init__`` computes (OPT, T5), inside
``with torch.device("meta")``, after ``torch.set_default_device("meta")`` or inside
``init_empty_weights(include_buffers=True)``: torch.load reads onto the CPU, and the load gives the same model as
outside the context. Recorded as well: the logits of a fixed input.
"""

from __future__ import annotations

import pytest
import torch

import tiny_llama
import tiny_models
from proofkit import reset_default_device

pytestmark = pytest.mark.guard(package="transformers")
GREEDY = {"max_new_tokens": 4, "do_sample": False, "pad_token_id": 0}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_llama.save(tmp_path_factory.mktemp("llama31"), "sharded")


def _tensors(model):
    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    return {
        name: [str(t.device.type), str(t.dtype)]
        + ([] if t.device.type == "meta" else [float(t.double().sum()), float(t.double().abs().sum())])
        for name, t in sorted(tensors.items())
    }


def _record(observe, model, generate=True):
    observe("tensors", _tensors(model))
    observe("device_map", {k: str(v) for k, v in getattr(model, "hf_device_map", {}).items()})
    if generate:
        observe("tokens", model.generate(tiny_llama.INPUT, **GREEDY))


@pytest.mark.parametrize("device_map", [None, "auto"], ids=["no-device_map", "device_map-auto"])
def test_ordinary_load(observe, checkpoint, device_map):
    from transformers import AutoModelForCausalLM

    kwargs = {} if device_map is None else {"device_map": device_map}
    _record(observe, AutoModelForCausalLM.from_pretrained(checkpoint, **kwargs))


def test_partial_disk_offload(observe, checkpoint, tmp_path):
    """``device_map="auto"`` with a small ``max_memory``: some weights offloaded to disk stay on meta, on purpose."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        checkpoint, device_map="auto", max_memory={"cpu": "90KB"}, offload_folder=str(tmp_path / "offload")
    )
    _record(observe, model)


@pytest.mark.parametrize("style", ["with-torch.device", "set_default_device"])
def test_meta_default_device_without_device_map(observe, checkpoint, style):
    """A meta default device and no ``device_map``: what upstream does there (an empty model, or its own error)."""
    from transformers import AutoModelForCausalLM

    if style == "with-torch.device":
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_pretrained(checkpoint)
    else:
        torch.set_default_device("meta")
        try:
            model = AutoModelForCausalLM.from_pretrained(checkpoint)
        finally:
            reset_default_device()
    _record(observe, model, generate=False)


@pytest.mark.parametrize("device_map", ["meta", {"": "meta"}], ids=["str", "dict"])
def test_meta_default_device_with_a_meta_device_map(observe, checkpoint, device_map):
    """A meta default device and a ``device_map`` that places the whole model on meta: a model on meta, on purpose."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_pretrained(checkpoint, device_map=device_map)
    _record(observe, model, generate=False)


@pytest.mark.intended(
    "*",
    when="accelerate>=1.11,<1.13",
    reason="in accelerate's own bug here (A4): with transformers 5, pristine accelerate 1.11.0's init_empty_weights() "
    "refuses every parameter transformers loads (TypeError: Parameter.__new__() got an unexpected keyword argument "
    "'_is_hf_initialized'), which the set's accelerate +fixed fixes; the other sets pair accelerate 1.6.0 with "
    "transformers 4 only, which flags no parameter, and 1.13 fixed it upstream",
)
@pytest.mark.parametrize("device_map", [None, "meta"], ids=["no-device_map", "device_map-meta"])
def test_init_empty_weights_without_a_device_to_load_onto(observe, checkpoint, device_map):
    """accelerate's ``init_empty_weights()`` in its default form, and no ``device_map`` or one onto meta: every
    parameter stays on meta, a skeleton on purpose (the fix stops only loads whose map places weights on a device)."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    kwargs = {} if device_map is None else {"device_map": device_map}
    with init_empty_weights():
        model = AutoModelForCausalLM.from_pretrained(checkpoint, **kwargs)
    _record(observe, model, generate=False)


def test_init_empty_weights_then_a_load_outside(observe, checkpoint):
    """A model built inside ``init_empty_weights()`` with ``from_config``, then a ``device_map`` load after the
    context: the probe sees ``register_parameter`` restored and the load is an ordinary one."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    with init_empty_weights():
        skeleton = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(checkpoint))
    observe("skeleton_devices", sorted({p.device.type for p in skeleton.parameters()}))
    _record(observe, AutoModelForCausalLM.from_pretrained(checkpoint, device_map="auto"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, tiny_models.Saved]:
    return {family: tiny_models.Saved(family, tmp_path_factory.mktemp(family)) for family in ("opt", "t5")}


@pytest.mark.parametrize("device_map", ["cpu", "auto"])
@pytest.mark.parametrize("context", tiny_models.META_DEFAULT_DEVICES)
@pytest.mark.parametrize("form", ["bin", "use_safetensors=False", "state_dict"])
@pytest.mark.parametrize("family", ["opt", "t5"])
def test_a_meta_default_device_load_that_works(observe, saved, family, form, context, device_map):
    """A load that every pristine release completes under a meta default device, with the weights and logits of the
    same load outside it: a fix for the loads that fail there must not refuse it, nor change what it gives."""
    with tiny_models.meta_context(context):
        model = saved[family].load(form, device_map=device_map)
    observe("tensors", _tensors(model))
    observe("device_map", {k: str(v) for k, v in getattr(model, "hf_device_map", {}).items()})
    logits = tiny_models.logits(model)
    observe("logits", [float(logits.double().sum()), logits[0, -1, :4].tolist()])
