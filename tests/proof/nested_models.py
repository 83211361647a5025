"""T6's model: a ``PreTrainedModel`` whose ``__init__`` loads its encoder with ``AutoModel.from_pretrained`` (the path
in its config) and adds a head, as text-encoder-with-a-head models do; it records the default device its
``__init__`` ran under. Shared by T6's proof and its guards."""

from __future__ import annotations

import torch


def classes(model_type: str):
    """The config and model classes (defined on call: transformers is imported then)."""
    from transformers import AutoModel, PretrainedConfig, PreTrainedModel

    class NestedConfig(PretrainedConfig):
        def __init__(self, encoder_path="", labels=3, **kwargs):
            self.encoder_path = encoder_path
            self.labels = labels
            super().__init__(**kwargs)

    NestedConfig.model_type = model_type

    class NestedModel(PreTrainedModel):
        config_class = NestedConfig
        base_model_prefix = "nested"

        def __init__(self, config):
            super().__init__(config)
            self.init_device = str(torch.empty(0).device)
            self.encoder = AutoModel.from_pretrained(config.encoder_path)
            self.head = torch.nn.Linear(self.encoder.config.hidden_size, config.labels)
            self.post_init()

        def forward(self, input_ids):
            return self.head(self.encoder(input_ids).last_hidden_state)

    return NestedConfig, NestedModel
