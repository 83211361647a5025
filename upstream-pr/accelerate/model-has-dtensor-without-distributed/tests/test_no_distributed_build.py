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
"""`Accelerator.prepare` on a torch built without distributed support (#4249).

Such a build (USE_DISTRIBUTED=0, AMD's Windows ROCm wheels) imports `torch.distributed`, but
`torch.distributed.is_available()` is False and `torch.distributed.tensor` cannot be imported. The test simulates it
in a fresh interpreter, before accelerate is imported, and prepares a model on one device there."""

import os
import sys
import textwrap
import unittest

from accelerate.test_utils import execute_subprocess_async
from accelerate.test_utils.testing import TempDirTestCase
from accelerate.utils import patch_environment


SCRIPT = textwrap.dedent(
    """
    import importlib.abc
    import sys

    import torch
    import torch.distributed

    UNIMPORTABLE = ("torch.distributed.tensor", "torch.distributed._tensor", "torch.distributed.device_mesh")


    class NoDistributedBuild(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname in UNIMPORTABLE or fullname.startswith(tuple(name + "." for name in UNIMPORTABLE)):
                raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
            return None


    torch.distributed.is_available = lambda: False
    for name in [name for name in sys.modules if name.startswith(UNIMPORTABLE)]:
        del sys.modules[name]
    sys.meta_path.insert(0, NoDistributedBuild())

    from accelerate import Accelerator
    from accelerate.utils.other import model_has_dtensor

    model = torch.nn.Linear(4, 2)
    assert not model_has_dtensor(model)
    prepared = Accelerator(cpu=True).prepare(model)
    assert prepared is model, type(prepared)
    assert prepared(torch.ones(1, 4)).shape == (1, 2)
    """
)


class NoDistributedBuildTest(TempDirTestCase):
    def test_prepare_without_distributed_support(self):
        script = os.path.join(self.tmpdir, "no_distributed_build.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        with patch_environment(omp_num_threads=1, accelerate_use_cpu="1"):
            execute_subprocess_async([sys.executable, script], env=os.environ.copy())


if __name__ == "__main__":
    unittest.main()
