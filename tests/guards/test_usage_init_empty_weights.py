"""Guards mined from public code: how code outside accelerate uses ``init_empty_weights`` and ``init_on_device``,
whose parameter hook A4 patches (it keeps transformers' ``_is_hf_initialized`` out of the parameter's constructor
and sets it on the new parameter after).

The hook makes every parameter assigned to a module again on the context's device, as
``type(param)(param.to(device), **param.__dict__)``. Public code meets it in these ways, each a guard here (one
process; pristine and +fixed must agree):

- a module built inside the context, as accelerate's own docstring of ``init_empty_weights`` shows
  (``huggingface/accelerate``, ``src/accelerate/big_modeling.py``: an ``nn.Sequential`` of ``nn.Linear``);
- ``AutoModelForCausalLM.from_config(config)`` inside it for a skeleton, then ``tie_weights()`` and
  ``infer_auto_device_map`` on it (``Mon-ius/XTPU``, ``xla_demo/tie.py``), or ``load_checkpoint_and_dispatch`` of a
  checkpoint into it (``microsoft/DeepSpeedExamples``,
  ``inference/huggingface/text-generation/test-accelerate.py``);
- a model class constructed inside it, then ``load_state_dict(state_dict, assign=True)`` after it (the conversion
  scripts of ``huggingface/transformers``, e.g.
  ``src/transformers/models/llava_onevision/convert_llava_onevision_weights_to_hf.py``);
- ``init_empty_weights(include_buffers=True)`` with ``from_config`` (buffers on meta too);
- ``init_on_device(torch.device(...))`` with a module (the docstring of ``init_on_device``, on "cpu" here);
- a parameter subclass whose constructor takes its own attributes as keywords, as bitsandbytes' ``Int8Params``
  does (``bitsandbytes-foundation/bitsandbytes``, ``bitsandbytes/nn/modules.py``): the hook's reason to pass
  ``__dict__`` on; and a plain parameter that carries an attribute of the user's, which its constructor does not
  take (the hook refuses it on either build, in the same words).

Recorded: each parameter's and buffer's class, device, dtype, shape and, where it has data, its sums; the
attributes a subclass keeps; device maps, logits, errors, warnings and log records.
"""

from __future__ import annotations

import pytest
import torch

import tiny_llama

pytestmark = pytest.mark.guard(package="accelerate")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_llama.save_small(tmp_path_factory.mktemp("llama"))


def _tensors(module):
    tensors = dict(module.named_parameters()) | dict(module.named_buffers())
    return {
        name: [type(t).__name__, t.device.type, str(t.dtype), list(t.shape)]
        + ([] if t.device.type == "meta" else [float(t.double().sum()), float(t.double().abs().sum())])
        for name, t in sorted(tensors.items())
    }


def test_module_built_inside_the_context(observe):
    """Stands for the example of ``init_empty_weights``'s docstring (huggingface/accelerate
    src/accelerate/big_modeling.py): an ``nn.Sequential`` of ``nn.Linear`` built inside the context."""
    from accelerate import init_empty_weights
    from torch import nn

    with init_empty_weights():
        model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(4)])
    observe("tensors", _tensors(model))


def test_from_config_skeleton_tied_and_mapped(observe, checkpoint):
    """Stands for a skeleton made to plan a device map (Mon-ius/XTPU xla_demo/tie.py): ``from_config`` inside the
    context, then ``tie_weights()`` and ``infer_auto_device_map`` (here with a CPU budget that splits the model)."""
    from accelerate import infer_auto_device_map, init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(checkpoint))
    model.tie_weights()
    observe("tensors", _tensors(model))
    observe("device_map", infer_auto_device_map(model, max_memory={"cpu": "10MB"}))


def test_from_config_skeleton_then_load_checkpoint_and_dispatch(observe, checkpoint):
    """Stands for the skeleton filled from a checkpoint (microsoft/DeepSpeedExamples
    inference/huggingface/text-generation/test-accelerate.py): ``from_config`` inside the context, then
    ``load_checkpoint_and_dispatch(model, path, device_map="auto", no_split_module_classes=[...])``."""
    from accelerate import init_empty_weights, load_checkpoint_and_dispatch
    from transformers import AutoConfig, AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(checkpoint))
    model = load_checkpoint_and_dispatch(
        model, checkpoint, device_map="auto", no_split_module_classes=["LlamaDecoderLayer"]
    )
    observe("tensors", _tensors(model))
    observe("device_map", {k: str(v) for k, v in model.hf_device_map.items()})
    with torch.no_grad():
        observe("logits", model(tiny_llama.INPUT).logits[0, -1, :8])


def test_class_built_inside_then_state_dict_assigned(observe, checkpoint):
    """Stands for transformers' conversion scripts (huggingface/transformers
    src/transformers/models/llava_onevision/convert_llava_onevision_weights_to_hf.py): the model class constructed
    inside the context, then ``load_state_dict(state_dict, assign=True)`` after it."""
    from accelerate import init_empty_weights
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    with init_empty_weights():
        model = LlamaForCausalLM(tiny_llama.small_config())
    missing, unexpected = model.load_state_dict(load_file(f"{checkpoint}/model.safetensors"), assign=True)
    observe("load", {"missing": sorted(missing), "unexpected": sorted(unexpected)})
    observe("tensors", _tensors(model))


def test_include_buffers(observe, checkpoint):
    """``init_empty_weights(include_buffers=True)`` around ``from_config``: parameters and buffers on meta."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    with init_empty_weights(include_buffers=True):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(checkpoint))
    observe("tensors", _tensors(model))


def test_init_on_device(observe):
    """Stands for the example of ``init_on_device``'s docstring (huggingface/accelerate
    src/accelerate/big_modeling.py), on "cpu" where it names "cuda": every parameter made again on that device."""
    from accelerate import init_on_device
    from torch import nn

    torch.manual_seed(0)
    with init_on_device(torch.device("cpu")):
        model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))
    observe("tensors", _tensors(model))


class TaggedParams(torch.nn.Parameter):
    """A parameter that takes its own attributes in its constructor, as bitsandbytes' ``Int8Params`` does."""

    def __new__(cls, data=None, requires_grad=True, has_fp16_weights=False, scheme=None):
        param = torch.Tensor._make_subclass(cls, torch.empty(0) if data is None else data, requires_grad)
        param.has_fp16_weights = has_fp16_weights
        param.scheme = scheme
        return param


def test_parameter_subclass_with_constructor_attributes(observe):
    """Stands for bitsandbytes' ``Int8Params`` (bitsandbytes-foundation/bitsandbytes bitsandbytes/nn/modules.py), a
    parameter whose constructor takes its own attributes as keywords: the hook hands them back to it."""
    from accelerate import init_empty_weights
    from torch import nn

    with init_empty_weights():
        layer = nn.Linear(4, 4)
        layer.weight = TaggedParams(torch.ones(4, 4), requires_grad=False, has_fp16_weights=True, scheme="int8")
    observe("tensors", _tensors(layer))
    observe("attributes", [layer.weight.has_fp16_weights, layer.weight.scheme, layer.weight.requires_grad])


def test_parameter_with_an_attribute_of_the_user(observe):
    """A plain parameter that carries an attribute of the user's, assigned inside the context: its constructor does
    not take it, and the hook refuses it on either build, in the same words."""
    from accelerate import init_empty_weights
    from torch import nn

    param = nn.Parameter(torch.ones(4))
    param.tag = "frozen-by-user"
    with init_empty_weights():
        layer = nn.LayerNorm(4)
        layer.weight = param  # refused on either build: `tag` is no argument of Parameter's constructor
    observe("tensors", _tensors(layer))
