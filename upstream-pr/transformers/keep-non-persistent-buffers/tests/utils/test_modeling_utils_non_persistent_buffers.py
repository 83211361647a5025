# Copyright 2026 The HuggingFace Team. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Non-persistent buffers that a model computes in `__init__` (a RoPE table, a scale) after `from_pretrained`, issue
#48892. No checkpoint holds them, and `from_pretrained` builds the model on the meta device: a model of the library
sets them again in `_init_weights`, a custom or remote code model usually does not. A model that does set them there
(every model of the library) keeps the values `_init_weights` gives and is built once, as before.

The tests run with `torch.use_deterministic_algorithms(True)`, under which torch fills the memory it allocates with
NaN (`torch.utils.deterministic.fill_uninitialized_memory`): a buffer left uninitialized shows as NaN every time,
instead of whatever the allocator held."""

import tempfile
from unittest import mock

from transformers import LlamaConfig, PreTrainedConfig, is_torch_available
from transformers.testing_utils import TestCasePlus, require_torch, torch_device


if is_torch_available():
    import torch
    from torch import nn

    from transformers import LlamaModel, PreTrainedModel
    from transformers import initialization as init

    def inverse_frequencies(dim):
        return 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))

    class BufferConfig(PreTrainedConfig):
        model_type = "non-persistent-buffers-test"

        def __init__(self, hidden_size=8, **kwargs):
            self.hidden_size = hidden_size
            super().__init__(**kwargs)

    class FrequencyTable(nn.Module):
        # Not named like the library's `...RotaryEmbedding` modules, which the generic `_init_weights` knows
        def __init__(self, dim):
            super().__init__()
            self.register_buffer("inv_freq", inverse_frequencies(dim), persistent=False)

    class ModelWithBuffersComputedInInit(PreTrainedModel):
        """A custom model: its non-persistent buffers are computed in `__init__` only."""

        config_class = BufferConfig
        base_model_prefix = "model"

        def __init__(self, config):
            super().__init__(config)
            self.proj = nn.Linear(config.hidden_size, config.hidden_size)
            self.table = FrequencyTable(config.hidden_size)
            scale = torch.arange(1, config.hidden_size + 1, dtype=torch.float32) / 4
            self.register_buffer("scale", scale, persistent=False)
            self.post_init()

        def forward(self, x):
            return self.proj(x) * self.scale + self.table.inv_freq.repeat(2)

    class ModelWithABufferMadeOnCpuInInit(PreTrainedModel):
        """A buffer made on a real device, which holds its value even while the model is built on meta."""

        config_class = BufferConfig
        base_model_prefix = "model"

        def __init__(self, config):
            super().__init__(config)
            self.proj = nn.Linear(config.hidden_size, config.hidden_size)
            self.register_buffer("bias", torch.full((config.hidden_size,), 0.5, device="cpu"), persistent=False)
            self.post_init()

        def forward(self, x):
            return self.proj(x) + self.bias

    class ModelSettingItsBuffersInInitWeights(ModelWithBuffersComputedInInit):
        """As the library's models do: `_init_weights` sets the buffers (here to other values than `__init__`, so that
        the test sees which one the model gets). Counts how many times it is built."""

        builds = 0

        def __init__(self, config):
            type(self).builds += 1
            super().__init__(config)

        def _init_weights(self, module):
            super()._init_weights(module)
            if isinstance(module, FrequencyTable):
                init.copy_(module.inv_freq, 2 * inverse_frequencies(2 * module.inv_freq.numel()))
            elif isinstance(module, ModelSettingItsBuffersInInitWeights):
                init.copy_(module.scale, torch.full_like(module.scale, 0.5))


@require_torch
class NonPersistentBuffersFromPretrainedTest(TestCasePlus):
    def setUp(self):
        super().setUp()
        deterministic = torch.are_deterministic_algorithms_enabled()
        warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
        fill = torch.utils.deterministic.fill_uninitialized_memory
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = True
        self.addCleanup(torch.use_deterministic_algorithms, deterministic, warn_only=warn_only)
        self.addCleanup(setattr, torch.utils.deterministic, "fill_uninitialized_memory", fill)

    def assert_loaded_like(self, model, reference):
        self.assertEqual(
            sorted(name for name, _ in model.named_buffers()), sorted(name for name, _ in reference.named_buffers())
        )
        for name, expected in reference.named_buffers():
            torch.testing.assert_close(
                model.get_buffer(name).cpu(), expected, rtol=0, atol=0, msg=lambda msg, name=name: f"{name}: {msg}"
            )
        x = torch.linspace(-1, 1, 2 * reference.config.hidden_size).reshape(2, -1)
        with torch.no_grad():
            torch.testing.assert_close(model(x.to(model.device)).cpu(), reference(x))

    def save_and_load(self, model_class, **kwargs):
        torch.manual_seed(0)
        reference = model_class(BufferConfig())
        with tempfile.TemporaryDirectory() as tmp_dir:
            reference.save_pretrained(tmp_dir)
            model = model_class.from_pretrained(tmp_dir, **kwargs)
        return model, reference

    def test_buffers_computed_in_init(self):
        model, reference = self.save_and_load(ModelWithBuffersComputedInInit)
        self.assert_loaded_like(model, reference)

    def test_buffers_computed_in_init_with_device_map(self):
        model, reference = self.save_and_load(ModelWithBuffersComputedInInit, device_map=torch_device)
        self.assertEqual(model.scale.device.type, torch.device(torch_device).type)
        self.assert_loaded_like(model, reference)

    def test_buffer_made_on_a_device_in_init(self):
        model, reference = self.save_and_load(ModelWithABufferMadeOnCpuInInit, device_map=torch_device)
        self.assertEqual(model.bias.device.type, torch.device(torch_device).type)
        self.assert_loaded_like(model, reference)

    def test_buffers_set_by_init_weights_are_kept_and_the_model_is_built_once(self):
        ModelSettingItsBuffersInInitWeights.builds = 0
        model, reference = self.save_and_load(ModelSettingItsBuffersInInitWeights)
        self.assertEqual(ModelSettingItsBuffersInInitWeights.builds, 2)  # the reference, then `from_pretrained`
        self.assert_loaded_like(model, reference)
        torch.testing.assert_close(model.scale, torch.full((8,), 0.5))

    def test_rotary_embedding_of_a_library_model_is_set_by_init_weights(self):
        config = LlamaConfig(
            vocab_size=32,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
        torch.manual_seed(0)
        reference = LlamaModel(config)
        with tempfile.TemporaryDirectory() as tmp_dir:
            reference.save_pretrained(tmp_dir)
            with mock.patch.object(LlamaModel, "__init__", autospec=True, side_effect=LlamaModel.__init__) as build:
                model = LlamaModel.from_pretrained(tmp_dir)
        # `_init_weights` sets `inv_freq`: the model is not built a second time to compute it
        self.assertEqual(build.call_count, 1)
        for name, expected in reference.named_buffers():
            torch.testing.assert_close(model.get_buffer(name), expected, rtol=0, atol=0, msg=name)
