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
"""`Accelerator.prepare` and a model sharded into DTensors, which `DistributedDataParallel` cannot wrap (#3565).

Each test starts the script at the end of this file under `torchrun` with two processes: on CPU processes (gloo,
`ACCELERATE_USE_CPU=1`) and on accelerators."""

import os
import unittest

import torch
from torch import nn

from accelerate import Accelerator
from accelerate.test_utils import execute_subprocess_async, get_torch_dist_unique_port, require_multi_device
from accelerate.test_utils.testing import require_torch_min_version
from accelerate.utils import patch_environment


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.down(torch.relu(self.up(x))))


def check_prepare_refuses_dtensor_models():
    """Run under torchrun: tensor parallel parameters, then a DTensor buffer, must be refused with a ValueError."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    accelerator = Accelerator()
    mesh = init_device_mesh(accelerator.device.type, (accelerator.num_processes,))
    tensor_parallel = Block().to(accelerator.device)
    parallelize_module(tensor_parallel, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    sharded_buffer = Block().to(accelerator.device)
    sharded_buffer.register_buffer("table", distribute_tensor(torch.arange(8.0), mesh, [Shard(0)]))
    for model, sharded in ((tensor_parallel, "up.weight"), (sharded_buffer, "table")):
        try:
            accelerator.prepare(model)
        except ValueError as error:
            assert "DTensor" in str(error) and sharded in str(error), error
        else:
            raise AssertionError(f"prepare wrapped a model whose {sharded} is a DTensor in DDP")


@require_torch_min_version(version="2.5.0")
class PrepareDTensorModelTest(unittest.TestCase):
    def launch(self, **environment):
        cmd = ["torchrun", "--nproc_per_node=2", f"--master_port={get_torch_dist_unique_port()}", __file__]
        with patch_environment(omp_num_threads=1, **environment):
            execute_subprocess_async(cmd, env=os.environ.copy())

    def test_prepare_refuses_dtensor_models_on_cpu(self):
        self.launch(accelerate_use_cpu="1")

    @require_multi_device
    def test_prepare_refuses_dtensor_models_on_accelerators(self):
        self.launch()


if __name__ == "__main__":
    check_prepare_refuses_dtensor_models()
