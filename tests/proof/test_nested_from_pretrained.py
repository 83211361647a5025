"""Proof for T6: a model whose ``__init__`` loads a sub-model with ``from_pretrained`` cannot itself be loaded.

Bug (transformers 5): ``Outer.from_pretrained(path)`` builds ``Outer`` under the loader's own meta device context;
its ``__init__`` calls ``AutoModel.from_pretrained(encoder)``, and that load's check for a user's meta context
(``check_and_set_device_map``, huggingface/transformers#40942) sees the outer loader's and raises
``RuntimeError: You are using `from_pretrained` with a meta device context manager or
`torch.set_default_device('meta')```. Such models (a text encoder inside a tabular model, an inverted embedder)
loaded on transformers 4; downstream projects pinned ``transformers<5`` over it (TabSTAR, vec2text).

The fix lets the check ignore the loader's own context: the inner model loads its weights, and the outer load then
replaces them with the outer checkpoint's, as for any other module. The load must give the saved model's weights and
outputs, with the outer checkpoint's encoder weights where they differ from the encoder's own checkpoint.
"""

from __future__ import annotations

import pytest
import torch

import nested_models
import tiny_llama

pytestmark = pytest.mark.proof(
    package="transformers",
    signatures=[
        ("RuntimeError", r"^You are using `from_pretrained` with a meta device context manager"),
    ],
)


def _classes():
    return nested_models.classes("proof-t6-nested")


def _saved(tmp_path):
    """The outer model, saved after training moved its encoder away from the encoder's own checkpoint. Built in the
    test itself (not a fixture): what goes wrong in the build is then the test's failure."""
    config_class, model_class = _classes()
    encoder = tiny_llama.save_small(tmp_path / "encoder")
    model = model_class(config_class(encoder_path=encoder))
    with torch.no_grad():
        model.encoder.embed_tokens.weight.add_(1.0)
    model.save_pretrained(tmp_path / "outer")
    return model_class, model, tmp_path / "outer"


@pytest.mark.parametrize("device_map", [None, "cpu"], ids=["plain", "device-map-cpu"])
def test_a_model_that_loads_a_sub_model_in_init_loads(tmp_path, device_map):
    model_class, reference, path = _saved(tmp_path)
    kwargs = {} if device_map is None else {"device_map": device_map}
    loaded = model_class.from_pretrained(path, **kwargs)
    expected = reference.state_dict()
    got = loaded.state_dict()
    assert sorted(got) == sorted(expected)
    differ = [name for name in expected if not torch.equal(got[name], expected[name])]
    assert differ == [], f"weights that are not the outer checkpoint's: {differ}"
    with torch.no_grad():
        assert torch.equal(loaded(tiny_llama.INPUT), reference(tiny_llama.INPUT))
