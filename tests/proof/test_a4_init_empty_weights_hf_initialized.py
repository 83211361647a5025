"""Proof for A4: ``init_empty_weights`` cannot take a parameter that transformers 5 flagged as loaded.

Bug (accelerate 1.11.0, fixed upstream in 1.13.0 by huggingface/accelerate#3955): inside ``init_empty_weights()``
(``init_on_device``), every parameter assigned to a module is made again on the target device as
``type(param)(param.to(device), **param.__dict__)``, so that a parameter subclass gets back the attributes its
constructor takes. transformers 5 records on each parameter it loads that it was loaded (``param._is_hf_initialized
= True``, so that its weight initialisation leaves it alone) before it assigns it to its module; that attribute is
no argument of ``torch.nn.Parameter``, so every ``from_pretrained`` inside the context fails, whatever its
``device_map``:

    TypeError: Parameter.__new__() got an unexpected keyword argument '_is_hf_initialized'

The pattern is common in public code: ``with init_empty_weights(): model = AutoModelForCausalLM.from_pretrained(
path)`` for a skeleton to compute a device map on (accelerate's own ``test_accelerator_bnb_multi_device_no_distributed``
in ``tests/test_accelerator.py``), or before ``load_checkpoint_and_dispatch``. A correct context gives what it gives
outside transformers: the model's skeleton on meta, every parameter with the attributes transformers recorded on it.
A tiny random Llama from a config, saved to a temporary folder (untied embeddings: the context makes each
assigned parameter anew, so tying inside it is a matter of its own, which ``tie_weights()`` after it handles).

On accelerate 1.6.0 and 1.15.0 (before the bug was reachable with transformers 5, and after upstream's fix), and on
transformers 4, which flags no parameter, the test is a regression guard: it must pass there.
"""

from __future__ import annotations

import pytest

import tiny_llama

pytestmark = pytest.mark.proof(
    package="accelerate",
    signatures=[("TypeError", r"unexpected keyword argument '_is_hf_initialized'")],
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_llama.save_small(tmp_path_factory.mktemp("llama"))


def _parameters(model):
    """Each parameter: its shape, dtype and the flag transformers records on loaded ones."""
    return {
        name: (tuple(p.shape), str(p.dtype), getattr(p, "_is_hf_initialized", None))
        for name, p in model.named_parameters()
    }


def test_from_pretrained_inside_init_empty_weights_gives_the_skeleton(checkpoint):
    from accelerate import infer_auto_device_map, init_empty_weights
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(checkpoint)
    with init_empty_weights():
        skeleton = AutoModelForCausalLM.from_pretrained(checkpoint)

    off_meta = [name for name, p in skeleton.named_parameters() if p.device.type != "meta"]
    assert not off_meta, f"parameters made inside init_empty_weights() are not on meta: {off_meta}"
    assert _parameters(skeleton) == _parameters(reference)
    assert infer_auto_device_map(skeleton) == infer_auto_device_map(reference)
