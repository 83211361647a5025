"""Run inside one environment: a model with many non-persistent buffers, loaded with `from_pretrained`.

python bench/buffers_load_time.py save DIR          -> saves the model (seeded) to DIR
python bench/buffers_load_time.py time DIR REPEAT   -> prints one float: the median CPU seconds of a load (this
                                                       process's, steadier than wall time on a busy machine)

The model stands for the ordinary case of transformers 5 loading: every one of its BLOCKS blocks has a non-persistent
buffer computed in `__init__` (a RoPE-like table) that its `_init_weights` sets again, as the library's own models
do theirs, next to a Linear and a persistent buffer. A load writes each table from `_init_weights`; what the fix for
huggingface/transformers#48892 adds on this path is a copy of each table and a comparison, never a second build.
"""

import statistics
import sys
import time

import torch
from transformers import PretrainedConfig, PreTrainedModel

BLOCKS = 256


class TablesConfig(PretrainedConfig):
    model_type = "bench-tables"

    def __init__(self, hidden=64, blocks=BLOCKS, **kwargs):
        self.hidden = hidden
        self.blocks = blocks
        super().__init__(**kwargs)


def table(dim: int) -> torch.Tensor:
    return 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))


class Block(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)
        self.register_buffer("freq", table(dim), persistent=False)
        self.register_buffer("count", torch.zeros(()), persistent=True)


class TablesModel(PreTrainedModel):
    config_class = TablesConfig
    base_model_prefix = "tables"

    def __init__(self, config):
        super().__init__(config)
        self.blocks = torch.nn.ModuleList(Block(config.hidden) for _ in range(config.blocks))
        self.post_init()

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, Block):
            with torch.no_grad():
                module.freq.copy_(table(self.config.hidden))


def main() -> None:
    mode, folder = sys.argv[1], sys.argv[2]
    if mode == "save":
        torch.manual_seed(0)
        TablesModel(TablesConfig()).save_pretrained(folder)
        return
    repeat = int(sys.argv[3])
    TablesModel.from_pretrained(folder)  # warm imports and the page cache
    times = []
    for _ in range(repeat):
        start = time.process_time()
        model = TablesModel.from_pretrained(folder)
        times.append(time.process_time() - start)
    assert torch.equal(model.blocks[0].freq, table(model.config.hidden)), "the tables hold their values"
    print(statistics.median(times))


if __name__ == "__main__":
    main()
