"""Guards mined from public code: how code outside ``dispatch_model`` calls it, the function D1 patches (an opt-in
diagnosis at its end, run when ``ACCELERATE_DIAGNOSE_DISPATCH`` holds a true value).

Each pattern runs in a fresh process (the rank harness, one rank, no process group) with the switch unset, and again
with it set to ``1``: unset, nothing may change; set, the diagnosis may import its module and warn about disk
offload (declared where it does), and must raise nothing, change no placement, output or attribute of the model.
The patterns are those of accelerate's own tests of ``dispatch_model`` (``huggingface/accelerate``,
``tests/test_big_modeling.py``), in their CPU form (a "cpu" main device where they use GPU 0), and of its callers:

- a hand-written map of "cpu" and "disk" entries with ``offload_dir`` (``test_dispatch_model``);
- a map of "disk" entries only (``test_dispatch_model_disk_only``);
- ``offload_buffers=True`` for a model with a non-persistent buffer
  (``test_dispatch_model_with_non_persistent_buffers``);
- ``preload_module_classes`` for a module that uses its submodules' weights without calling them
  (``test_dispatch_model_with_unused_submodules``);
- ``force_hooks=True`` on a map of one device (``test_dispatch_model_force_hooks``);
- the keywords transformers' ``from_pretrained`` passes (``huggingface/transformers``,
  ``src/transformers/modeling_utils.py``: ``offload_dir``, ``offload_index``, ``offload_buffers`` and, after
  checking ``inspect.signature(dispatch_model).parameters``, ``skip_keys``), with weights already offloaded to a
  folder (``offload_state_dict``) and an explicit ``main_device``;
- a model dispatched with hooks on one device, its hooks removed with ``remove_hook_from_submodules``, and
  dispatched again with disk offload (``test_dispatch_model_and_remove_hook``).

Recorded: the model's outputs on a fixed input (before the second dispatch too), ``hf_device_map``, where each
parameter is, its attributes, whether ``accelerate.utils.diagnose`` was imported, ``dispatch_model``'s parameters,
errors, warnings and log records.
"""

from __future__ import annotations

import inspect
import os
import sys

import pytest
import torch

import guardkit
from harness import run_ranks

pytestmark = pytest.mark.guard(package="accelerate")

SWITCH = "ACCELERATE_DIAGNOSE_DISPATCH"
IMPORTS = "asked for (the switch set), the diagnosis imports its module"
WARNS = "asked for (the switch set), the diagnosis warns that the disk-offloaded weights are streamed on every forward"


def _models():
    from torch import nn

    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear1 = nn.Linear(3, 4)
            self.batchnorm = nn.BatchNorm1d(4)
            self.linear2 = nn.Linear(4, 5)

        def forward(self, x):
            return self.linear2(self.batchnorm(self.linear1(x)))

    class WithNonPersistentBuffer(Small):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.full((4,), 0.5), persistent=False)

        def forward(self, x):
            return self.linear2(self.batchnorm(self.linear1(x)) * self.scale)

    class UsesWeightsOfItsSubmodules(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(4, 4)

        def forward(self, x):
            return x @ self.inner.weight.t() + self.inner.bias

    class WithUnusedSubmodules(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear1 = nn.Linear(3, 4)
            self.linear2 = UsesWeightsOfItsSubmodules()
            self.batchnorm = nn.BatchNorm1d(4)
            self.linear3 = nn.Linear(4, 5)

        def forward(self, x):
            return self.linear3(self.batchnorm(self.linear2(self.linear1(x))))

    return {"small": Small, "buffer": WithNonPersistentBuffer, "unused": WithUnusedSubmodules}


def _dispatch(folder, pattern):
    from accelerate import dispatch_model
    from accelerate.hooks import remove_hook_from_submodules
    from accelerate.utils import offload_state_dict

    kinds = _models()
    torch.manual_seed(0)
    model = kinds["buffer" if pattern == "offload-buffers" else "unused" if pattern == "preload" else "small"]()
    model.eval()
    x = torch.arange(6.0).reshape(2, 3) / 6
    values = {"expected": model(x).detach()}
    if pattern == "cpu-and-disk":
        dispatch_model(model, {"linear1": "disk", "batchnorm": "cpu", "linear2": "cpu"}, offload_dir=folder)
    elif pattern == "disk-only":
        dispatch_model(model, {"linear1": "disk", "batchnorm": "disk", "linear2": "disk"}, offload_dir=folder)
    elif pattern == "offload-buffers":
        device_map = {"linear1": "cpu", "batchnorm": "cpu", "linear2": "disk"}
        dispatch_model(model, device_map, offload_dir=folder, offload_buffers=True)
    elif pattern == "preload":
        device_map = {"linear1": "cpu", "linear2": "disk", "batchnorm": "cpu", "linear3": "cpu"}
        dispatch_model(model, device_map, offload_dir=folder, preload_module_classes=["UsesWeightsOfItsSubmodules"])
    elif pattern == "force-hooks":
        dispatch_model(model, {"": "cpu"}, force_hooks=True)
    elif pattern == "from-pretrained-keywords":
        offload_state_dict(folder, {k: v for k, v in model.state_dict().items() if k.startswith("linear2.")})
        with open(os.path.join(folder, "index.json")) as index:
            import json

            offload_index = json.load(index)
        values["parameters"] = list(inspect.signature(dispatch_model).parameters)
        kwargs = {"offload_dir": folder, "offload_index": offload_index, "offload_buffers": False}
        if "skip_keys" in values["parameters"]:
            kwargs["skip_keys"] = "past_key_values"
        dispatch_model(model, {"linear1": "cpu", "batchnorm": "cpu", "linear2": "disk"}, main_device="cpu", **kwargs)
    elif pattern == "twice":
        dispatch_model(model, {"": "cpu"}, force_hooks=True)
        values["first"] = model(x).detach()
        remove_hook_from_submodules(model)
        dispatch_model(model, {"linear1": "cpu", "batchnorm": "cpu", "linear2": "disk"}, offload_dir=folder)
    else:
        raise ValueError(pattern)
    values["out"] = model(x).detach()
    values["hf_device_map"] = {k: str(v) for k, v in model.hf_device_map.items()}
    values["devices"] = {name: str(p.device) for name, p in model.named_parameters()}
    return values, model


def _scenario(rank, world_size, folder, pattern, switch):
    for variable in guardkit.TORCHRUN:  # a plain `python script.py`
        os.environ.pop(variable, None)
    os.environ.pop(SWITCH, None)
    if switch is not None:
        os.environ[SWITCH] = switch
    with guardkit.capture() as seen:
        values, model = _dispatch(folder, pattern)
    return {
        **values,
        "diagnose_imported": "accelerate.utils.diagnose" in sys.modules,
        "model_attributes": sorted(k for k in vars(model) if not k.startswith("_") or "diagnos" in k),
        "warnings": seen.warnings,
        "logs": seen.logs,
    }


def _observe(observe, tmp_path, pattern, switch):
    (result,) = run_ranks(_scenario, 1, str(tmp_path), pattern, switch, init_group=False)
    logs = result.pop("logs")
    observe("dispatch", result)
    observe("rank_logs", logs)  # a list of its own, which a declaration can narrow with `match`


UNSET_AND_SET = [
    pytest.param(None, id="unset"),
    pytest.param("1", id="set", marks=pytest.mark.intended("dispatch.diagnose_imported", reason=IMPORTS)),
]
UNSET_AND_SET_WARNS = [
    pytest.param(None, id="unset"),
    pytest.param(
        "1",
        id="set",
        marks=[
            pytest.mark.intended("dispatch.diagnose_imported", reason=IMPORTS),
            pytest.mark.intended("rank_logs", reason=WARNS, match=r"accelerate dispatch diagnosis"),
        ],
    ),
]


@pytest.mark.parametrize("switch", UNSET_AND_SET_WARNS)
def test_hand_written_map_of_cpu_and_disk(observe, tmp_path, switch):
    """Stands for accelerate's ``test_dispatch_model`` (huggingface/accelerate tests/test_big_modeling.py), with
    "cpu" for GPU 0: ``dispatch_model(model, {"linear1": "disk", "batchnorm": "cpu", "linear2": "cpu"},
    offload_dir=...)``."""
    _observe(observe, tmp_path, "cpu-and-disk", switch)


DISK_ONLY = [
    pytest.param(None, id="unset"),
    pytest.param(
        "1",
        id="set",
        marks=[
            pytest.mark.intended("dispatch.diagnose_imported", reason=IMPORTS, when="accelerate>=1.15"),
            pytest.mark.intended(
                "rank_logs", reason=WARNS, match=r"accelerate dispatch diagnosis", when="accelerate>=1.15"
            ),
        ],
    ),
]


@pytest.mark.parametrize("switch", DISK_ONLY)
def test_map_of_disk_only(observe, tmp_path, switch):
    """Stands for accelerate's ``test_dispatch_model_disk_only`` (huggingface/accelerate
    tests/test_big_modeling.py): every entry on "disk"; releases before 1.15.0 refuse it (``ValueError: You are
    trying to offload the whole model to the disk``) before anything is dispatched, 1.15.0 offloads it."""
    _observe(observe, tmp_path, "disk-only", switch)


@pytest.mark.parametrize("switch", UNSET_AND_SET_WARNS)
def test_offload_buffers_with_a_non_persistent_buffer(observe, tmp_path, switch):
    """Stands for accelerate's ``test_dispatch_model_with_non_persistent_buffers`` (huggingface/accelerate
    tests/test_big_modeling.py), with "cpu" for GPU 0: ``offload_buffers=True`` for a model with a non-persistent
    buffer."""
    _observe(observe, tmp_path, "offload-buffers", switch)


@pytest.mark.parametrize("switch", UNSET_AND_SET_WARNS)
def test_preload_module_classes(observe, tmp_path, switch):
    """Stands for accelerate's ``test_dispatch_model_with_unused_submodules`` (huggingface/accelerate
    tests/test_big_modeling.py), with "cpu" for GPU 0: ``preload_module_classes`` for a module that uses its
    submodule's weights without calling it."""
    _observe(observe, tmp_path, "preload", switch)


@pytest.mark.parametrize("switch", UNSET_AND_SET)
def test_force_hooks_on_one_device(observe, tmp_path, switch):
    """Stands for accelerate's ``test_dispatch_model_force_hooks`` (huggingface/accelerate
    tests/test_big_modeling.py), with "cpu" for GPU 0: ``dispatch_model(model, {"": "cpu"}, force_hooks=True)``,
    hooks on one device, nothing offloaded."""
    _observe(observe, tmp_path, "force-hooks", switch)


@pytest.mark.parametrize("switch", UNSET_AND_SET_WARNS)
def test_keywords_from_pretrained_passes(observe, tmp_path, switch):
    """Stands for what transformers' ``from_pretrained`` passes (huggingface/transformers
    src/transformers/modeling_utils.py): ``offload_dir``, an ``offload_index`` of weights already offloaded with
    ``offload_state_dict``, ``offload_buffers=False`` and, once ``inspect.signature(dispatch_model)`` shows it,
    ``skip_keys``; here with ``main_device="cpu"`` too."""
    _observe(observe, tmp_path, "from-pretrained-keywords", switch)


@pytest.mark.parametrize("switch", UNSET_AND_SET_WARNS)
def test_dispatched_again_after_its_hooks_are_removed(observe, tmp_path, switch):
    """Stands for accelerate's ``test_dispatch_model_and_remove_hook`` (huggingface/accelerate
    tests/test_big_modeling.py): dispatched, hooks removed with ``remove_hook_from_submodules``, dispatched again on
    another map; each dispatch is its own."""
    _observe(observe, tmp_path, "twice", switch)
