"""Proof for T5 (huggingface/transformers#48892): a non-persistent buffer that ``__init__`` computes comes back from
``from_pretrained`` as uninitialised memory.

Bug (transformers 5): ``from_pretrained`` builds the model under a meta device, so a buffer registered with
``persistent=False`` (a custom model's RoPE ``inv_freq``, a scale, a mask) holds no value; no checkpoint stores it.
``_move_missing_keys_from_meta_to_device`` then gives every non-persistent buffer ``torch.empty_like``, and only
``_init_weights`` may write it again: transformers' own models do (their rotary modules), a custom or remote-code
model does not, and keeps whatever the memory held (values like ``-3.7e19``). The forward output is silently wrong.
A buffer that ``__init__`` makes on a real device (``device="cpu"``), which holds its value, is replaced so too.
Under ``torch.use_deterministic_algorithms(True)`` torch fills new memory with NaN, which makes the symptom certain
here: every test runs so.

The fix gives such a buffer the value its module's ``__init__`` computes, wherever ``_init_weights`` leaves it
unwritten. The load must give the buffer and the outputs of the model it saved, plain and with a ``device_map``.
"""

from __future__ import annotations

import pytest
import torch

from proofkit import BugSymptom

pytestmark = pytest.mark.proof(
    package="transformers",
    signatures=[
        ("BugSymptom", r"^non-persistent buffer \S+ came back from from_pretrained as \["),
    ],
)

HIDDEN = 8


def _classes():
    """A custom model (not one of transformers' own) with non-persistent buffers on the model and one on a submodule
    (a RoPE-like table, named so that transformers' generic rotary init does not know it); one of them is made on the
    CPU explicitly, so it holds a value even while `from_pretrained` builds the model on meta."""
    from transformers import PretrainedConfig, PreTrainedModel

    class ScaledConfig(PretrainedConfig):
        model_type = "proof-t5-scaled"

        def __init__(self, hidden=HIDDEN, **kwargs):
            self.hidden = hidden
            super().__init__(**kwargs)

    class Table(torch.nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)

    class ScaledModel(PreTrainedModel):
        config_class = ScaledConfig
        base_model_prefix = "scaled"

        def __init__(self, config):
            super().__init__(config)
            self.proj = torch.nn.Linear(config.hidden, config.hidden)
            self.table = Table(config.hidden)
            self.register_buffer("scale", torch.arange(1, config.hidden + 1, dtype=torch.float32) / 4, persistent=False)
            # made on a real device even while the model is built on meta: it holds its value from the start
            self.register_buffer("bias", torch.full((config.hidden,), 0.5, device="cpu"), persistent=False)
            self.register_buffer("gain", torch.tensor(1.5), persistent=False)  # a scalar (0-d) one too
            self.post_init()

        def forward(self, x):
            return (self.proj(x) * self.scale + self.table.inv_freq.repeat(2) + self.bias) * self.gain

    return ScaledConfig, ScaledModel


@pytest.fixture(autouse=True)
def deterministic():
    """torch fills memory it allocates with NaN (torch.utils.deterministic.fill_uninitialized_memory)."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    config_class, model_class = _classes()
    torch.manual_seed(0)
    model = model_class(config_class())
    path = tmp_path_factory.mktemp("t5")
    model.save_pretrained(path)
    return model_class, model, path


def _check(loaded, reference):
    for name, expected in reference.named_buffers():
        got = loaded.get_buffer(name)
        if not torch.equal(got, expected):
            raise BugSymptom(
                f"non-persistent buffer {name} came back from from_pretrained as {got.tolist()}, not the value "
                f"__init__ computed, {expected.tolist()}"
            )
    x = torch.linspace(-1, 1, 2 * HIDDEN).reshape(2, HIDDEN)
    with torch.no_grad():
        assert torch.equal(loaded(x), reference(x)), "the loaded model computes what the saved one did"


@pytest.mark.parametrize("device_map", [None, "cpu", {"": "cpu"}], ids=["plain", "device-map-cpu", "device-map-dict"])
def test_buffers_computed_in_init_come_back(saved, device_map):
    model_class, reference, path = saved
    kwargs = {} if device_map is None else {"device_map": device_map}
    _check(model_class.from_pretrained(path, **kwargs), reference)


# The GPU form: the same load onto the first CUDA device, where `empty_like` takes memory from CUDA's allocator as it
# does for users (NaN too under deterministic algorithms, which fill new CUDA memory alike).
@pytest.mark.may_skip(reason="the GPU form loads onto a CUDA device and needs one")
@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU form: needs a CUDA device")
def test_gpu_buffers_computed_in_init_come_back(saved):
    model_class, reference, path = saved
    loaded = model_class.from_pretrained(path, device_map={"": 0})
    assert all(buffer.is_cuda for buffer in loaded.buffers()), "the load put the model on the GPU"
    _check(loaded.cpu(), reference)
