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
"""`from_pretrained` of a model whose `__init__` loads a sub-model with `from_pretrained` (a pretrained text encoder
under a task head of its own). `from_pretrained` builds the outer model under its own meta device context, in which
the inner `from_pretrained` must load as it does outside, while a user's meta device context is still refused."""

import os

from transformers import LlamaConfig, PreTrainedConfig, is_torch_available
from transformers.testing_utils import TestCasePlus, require_torch, torch_device


if is_torch_available():
    import torch
    from torch import nn

    from transformers import AutoModel, LlamaModel, PreTrainedModel

    class EncoderWithHeadConfig(PreTrainedConfig):
        model_type = "encoder-with-head-test"

        def __init__(self, encoder_path="", head_size=3, **kwargs):
            self.encoder_path = encoder_path
            self.head_size = head_size
            super().__init__(**kwargs)

    class EncoderWithHead(PreTrainedModel):
        config_class = EncoderWithHeadConfig
        base_model_prefix = "model"

        def __init__(self, config):
            super().__init__(config)
            self.encoder = AutoModel.from_pretrained(config.encoder_path)
            self.head = nn.Linear(self.encoder.config.hidden_size, config.head_size)
            self.post_init()

        def forward(self, input_ids):
            return self.head(self.encoder(input_ids).last_hidden_state)


@require_torch
class NestedFromPretrainedTest(TestCasePlus):
    def setUp(self):
        super().setUp()
        tmp_dir = self.get_auto_remove_tmp_dir()
        encoder_path = os.path.join(tmp_dir, "encoder")
        self.path = os.path.join(tmp_dir, "model")
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=32,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
        LlamaModel(config).save_pretrained(encoder_path)
        self.reference = EncoderWithHead(EncoderWithHeadConfig(encoder_path=encoder_path))
        # Fine-tuned: the checkpoint's encoder weights are no longer those of the encoder's own checkpoint
        with torch.no_grad():
            self.reference.encoder.embed_tokens.weight.add_(1.0)
        self.reference.save_pretrained(self.path)

    def assert_loaded_like_the_reference(self, model):
        expected = self.reference.state_dict()
        loaded = model.state_dict()
        self.assertEqual(sorted(loaded), sorted(expected))
        for name, tensor in loaded.items():
            torch.testing.assert_close(tensor.cpu(), expected[name], rtol=0, atol=0, msg=name)
        input_ids = torch.tensor([[1, 5, 17, 3, 28]])
        with torch.no_grad():
            torch.testing.assert_close(model(input_ids.to(model.device)).cpu(), self.reference(input_ids))

    def test_model_loading_a_sub_model_in_init(self):
        model = EncoderWithHead.from_pretrained(self.path)
        self.assert_loaded_like_the_reference(model)

    def test_model_loading_a_sub_model_in_init_with_device_map(self):
        model = EncoderWithHead.from_pretrained(self.path, device_map=torch_device)
        self.assertEqual(model.head.weight.device.type, torch.device(torch_device).type)
        self.assert_loaded_like_the_reference(model)

    def test_meta_device_context_is_still_refused(self):
        with torch.device("meta"), self.assertRaisesRegex(RuntimeError, "meta device context manager"):
            EncoderWithHead.from_pretrained(self.path)
