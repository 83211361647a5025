"""Guards mined from public code: how code outside accelerate calls, replaces and wraps ``model_has_dtensor``.

accelerate 1.15.0's ``prepare_model`` asks ``accelerate.utils.other.model_has_dtensor`` (imported by name into
``accelerate.accelerator`` and ``accelerate.utils``) whether to place a model; A2 makes it answer False on a torch
without distributed support, and A1 checks DTensors again right before DDP would wrap a model. Public code meets the
function in three ways, each a guard here (pristine and +fixed must agree):

- it calls it, with the model as its one argument, and checks that the three names are one function
  (``unslothai/unsloth``'s tests of ``unsloth/import_fixes.py``);
- it replaces it, in ``accelerate.utils.other`` and ``accelerate.accelerator``, by a function of its own with the
  release's one parameter: Windows ROCm training scripts assign a one-argument function that answers False, and
  ``zombiehausAI/LoRAMancer``'s ``Utilities/Setup-AmdAiToolkit.ps1`` (its "Patch H") rewrites it in
  site-packages as ``model_has_dtensor(model)``; such a script runs unchanged when the same job is started with
  several processes;
- it wraps it, keeping ``__wrapped__`` (``functools.wraps``), in all three namespaces and delegates with the model
  alone (``unslothai/unsloth``, ``unsloth/import_fixes.py``:
  ``fix_accelerate_dtensor_check_without_torch_distributed``).

Each scenario runs on real gloo ranks of a CPU job (tests/proof/harness.py), or as one plain process, and records
the answers, what ``prepare`` returned, each step's loss, the weights' norms, errors, warnings and log records.
"""

from __future__ import annotations

import functools
import inspect
import os

import pytest

import guardkit
from a1_models import CPU_JOB
from a1_models import model as _model
from a1_models import shard as _shard
from harness import run_ranks

pytestmark = pytest.mark.guard(package="accelerate")

STEPS = 2


def _kinds(world_size):
    """A model of each kind public code asks about: plain, tensor-parallel (``parallelize_module``), one whose only
    DTensor is a buffer, and one sharded with FSDP2's ``fully_shard``."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world_size,))
    return {
        "plain": _model(),
        "tensor-parallel": _shard(_model(), mesh, "parameters"),
        "buffer": _shard(_model(), mesh, "buffer"),
        "fsdp2": _shard(_model(), mesh, "fsdp2"),
    }


def _train(accelerator, model):
    """``prepare`` the model with an SGD optimizer and train it for STEPS steps on this rank's batches."""
    prepared, losses = guardkit.sgd_steps(accelerator, model, STEPS)
    norms = {k: float(v.norm()) for k, v in accelerator.unwrap_model(prepared).state_dict().items()}
    return {"wrapper": type(prepared).__name__, "losses": losses, "norms": norms}


def _direct_calls(rank, world_size):
    with guardkit.capture() as seen:
        import accelerate.accelerator
        import accelerate.utils
        import accelerate.utils.other as other

        function = other.model_has_dtensor
        values = {
            "one_function": [
                accelerate.utils.model_has_dtensor is function,
                accelerate.accelerator.model_has_dtensor is function,
            ],
            "parameters": list(inspect.signature(function).parameters),
            "answers": {name: function(model) for name, model in _kinds(world_size).items()},
            "keyword": function(model=_model()),
        }
    return {**values, "warnings": seen.warnings, "logs": seen.logs}


def _one_argument(model):
    """What the public replacements answer: no DTensor, whatever the model (the release's one parameter)."""
    return False


def _install(how):
    """Replace or wrap ``model_has_dtensor`` where ``prepare_model`` finds it, as the public code does."""
    import accelerate.accelerator
    import accelerate.utils
    import accelerate.utils.other as other

    targets: tuple = (other, accelerate.accelerator)
    if how == "replaced":  # the function of a script or a rewritten site-packages module: one parameter
        replacement = _one_argument
    else:  # a wrapper that keeps `__wrapped__` and delegates with the model alone
        original = other.model_has_dtensor

        @functools.wraps(original)
        def replacement(model):
            return original(model)

        targets += (accelerate.utils,)
    for module in targets:
        module.model_has_dtensor = replacement


def _prepare_with(rank, world_size, how, plain_process):
    with guardkit.capture() as seen:
        if plain_process:  # `python train.py`: no torchrun, no process group
            for variable in guardkit.TORCHRUN:
                os.environ.pop(variable, None)
        _install(how)
        from accelerate import Accelerator

        accelerator = Accelerator()
        values = {"distributed_type": accelerator.distributed_type.value}
        try:
            values.update(_train(accelerator, _model()))
        except Exception as exc:  # noqa: BLE001 - what prepare raised is the observation; the rank goes on
            values["raised"] = guardkit.raised(exc)
    return {**values, "warnings": seen.warnings, "logs": seen.logs}


def _observe_ranks(observe, fn, *args, world_size=2, init_group=True):
    for rank, result in enumerate(run_ranks(fn, world_size, *args, env=CPU_JOB, init_group=init_group)):
        observe(f"rank{rank}", result)


def test_called_on_each_kind_of_model(observe):
    """Stands for what unsloth's tests of its fix rely on before they wrap the function (unslothai/unsloth
    unsloth/import_fixes.py): ``model_has_dtensor(model)`` on a plain, a tensor-parallel, a buffer-only and an
    FSDP2 model (and by keyword), its parameters, and that ``accelerate.utils``, ``accelerate.accelerator`` and
    ``accelerate.utils.other`` name one function. 2 gloo ranks (the sharded models need a mesh)."""
    _observe_ranks(observe, _direct_calls)


def test_replaced_by_a_one_argument_function_under_ddp(observe):
    """Stands for the replacements of Windows ROCm training scripts, such as "Patch H" of LoRAMancer's setup
    script (zombiehausAI/LoRAMancer Utilities/Setup-AmdAiToolkit.ps1): replaced in ``accelerate.utils.other`` and
    ``accelerate.accelerator`` by a function of the release's one parameter, then ``prepare(model, optimizer)`` and
    two steps on 2 gloo ranks of a CPU job, where DDP wraps a plain model."""
    _observe_ranks(observe, _prepare_with, "replaced", False)


def test_wrapped_with_functools_wraps_under_ddp(observe):
    """Stands for unsloth's ``fix_accelerate_dtensor_check_without_torch_distributed`` (unslothai/unsloth
    unsloth/import_fixes.py): wrapped in ``accelerate.utils.other``, ``accelerate.utils`` and
    ``accelerate.accelerator`` by a ``functools.wraps`` wrapper that calls the original with the model alone, then
    ``prepare(model, optimizer)`` and two steps on 2 gloo ranks of a CPU job."""
    _observe_ranks(observe, _prepare_with, "wrapped", False)


def test_replaced_in_a_single_process(observe):
    """Stands for the same replacement ("Patch H" of zombiehausAI/LoRAMancer Utilities/Setup-AmdAiToolkit.ps1,
    and the Windows ROCm training scripts like it) in the process it was written for: a plain ``python train.py``
    (no process group, no DDP), ``prepare(model, optimizer)`` and two steps."""
    _observe_ranks(observe, _prepare_with, "replaced", True, world_size=1, init_group=False)
