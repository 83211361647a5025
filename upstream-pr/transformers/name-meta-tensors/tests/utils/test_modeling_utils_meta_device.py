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
"""`from_pretrained` with a `device_map` under a meta default device (`with torch.device("meta")` or
`torch.set_default_device("meta")`), issue #38066."""

from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, is_torch_available
from transformers.testing_utils import TestCasePlus, require_accelerate, require_torch


if is_torch_available():
    import torch


def tiny_llama_config():
    return LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )


@require_torch
@require_accelerate
class LoadUnderMetaDefaultDeviceTest(TestCasePlus):
    def setUp(self):
        super().setUp()
        torch.manual_seed(0)
        self.checkpoint = self.get_auto_remove_tmp_dir()
        LlamaForCausalLM(tiny_llama_config()).save_pretrained(self.checkpoint)
        self.reference = AutoModelForCausalLM.from_pretrained(self.checkpoint)

    def assert_loaded_like_the_reference(self, model):
        # The non-persistent buffers (`inv_freq`) are in no checkpoint: they must be computed, not left on meta
        reference_tensors = dict(self.reference.named_parameters()) | dict(self.reference.named_buffers())
        tensors = dict(model.named_parameters()) | dict(model.named_buffers())
        self.assertEqual(sorted(tensors), sorted(reference_tensors))
        for name, tensor in tensors.items():
            self.assertEqual(tensor.device, torch.device("cpu"), name)
            torch.testing.assert_close(tensor, reference_tensors[name], msg=name)
        input_ids = torch.tensor([[1, 5, 17, 42, 3, 88]])
        with torch.no_grad():
            torch.testing.assert_close(model(input_ids).logits, self.reference(input_ids).logits)

    def test_device_map_auto_in_a_meta_device_context(self):
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_pretrained(self.checkpoint, device_map="auto")
        self.assert_loaded_like_the_reference(model)

    def test_explicit_device_map_with_meta_as_default_device(self):
        torch.set_default_device("meta")
        try:
            model = AutoModelForCausalLM.from_pretrained(self.checkpoint, device_map={"": "cpu"})
        finally:
            torch.set_default_device(None)
        self.assert_loaded_like_the_reference(model)

    def test_without_device_map_the_meta_default_device_is_still_refused(self):
        with torch.device("meta"), self.assertRaises(RuntimeError):
            AutoModelForCausalLM.from_pretrained(self.checkpoint)
