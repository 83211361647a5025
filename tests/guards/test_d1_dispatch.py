"""Guards for D1 (the opt-in diagnosis of dispatched models): ``dispatch_model`` with the switch unset, off, set to
a value it does not recognise, and set, next to the values the diagnosis reads.

The diagnosis runs only when ``ACCELERATE_DIAGNOSE_DISPATCH`` holds a true value (``1``, ``true``, ...). Every
other ``device_map`` load must not notice it: nothing imported (``accelerate.utils.diagnose`` stays out of
``sys.modules``), nothing recorded on the model, no warning or log record, and the same outputs; a value it does
not recognise (``maybe``, empty) is no reason to raise where pristine ignores the variable. Asked for, the
diagnosis may warn, and must still raise nothing pristine did not, whatever the model carries (an attribute of its
own name, a device map of ``torch.device`` values and ``"disk"``, a ``max_memory`` of strings), and must record
nothing on the model: a model saved whole with ``torch.save`` after a diagnosed dispatch pickles as on pristine.
Each scenario runs in a fresh process (the rank harness, one rank, no process group), so that no earlier import
hides one, and dispatches a small MLP with accelerate alone.
"""

from __future__ import annotations

import io
import os
import pickletools
import sys
import zipfile

import pytest
import torch

import guardkit
from harness import run_ranks

pytestmark = pytest.mark.guard(package="accelerate")

SWITCH = "ACCELERATE_DIAGNOSE_DISPATCH"
ASKED = "asked for (the switch set), the diagnosis warns about the disk offload and imports its module"
IMPORTS = "asked for (the switch set), the diagnosis imports its module"


def _mlp():
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16))


def _pickled(model) -> dict:
    """What ``torch.save(model)`` writes that another environment must resolve: the globals its pickle names and
    the attribute names it stores, and whether it loads back here."""
    buffer = io.BytesIO()
    torch.save(model, buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith("data.pkl")]
        data = archive.read(name)
    strings = sorted({str(arg) for op, arg, _ in pickletools.genops(data) if isinstance(arg, str)})
    loaded = torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)
    return {"strings": strings, "loads": type(loaded).__name__}


def _dispatch(rank, world_size, folder, placement, switch, attribute):
    """Save the MLP, load it back with ``load_checkpoint_and_dispatch`` (or ``dispatch_model`` with a device map)
    and run it; what a user can see."""
    for variable in guardkit.TORCHRUN:  # a plain `python script.py`
        os.environ.pop(variable, None)
    os.environ.pop(SWITCH, None)
    if switch is not None:
        os.environ[SWITCH] = switch
    with guardkit.capture() as seen:
        from accelerate import dispatch_model, init_empty_weights, load_checkpoint_and_dispatch

        torch.save(_mlp().state_dict(), os.path.join(folder, "mlp.bin"))
        if placement == "device-map-values":  # a map as a user writes it: torch.device values, "cpu" and "disk"
            device_map = {"0": torch.device("cpu"), "1": "cpu", "2": "disk", "3": "cpu", "4": "disk"}
            model = dispatch_model(_mlp(), device_map, offload_dir=folder)
        else:
            with init_empty_weights():
                empty = _mlp()
            if attribute == "tensor":  # a value of the name the diagnosis once kept on the model: no truth value
                empty._accelerate_dispatch_diagnosed = torch.ones(2)
            if placement == "disk-offload":
                kwargs = {"device_map": "auto", "max_memory": {"cpu": 24 * 1024}, "offload_folder": folder}
            elif placement == "max-memory-strings":
                kwargs = {"device_map": "auto", "max_memory": {"cpu": "24KiB"}, "offload_folder": folder}
            else:
                kwargs = {"device_map": {"": "cpu"}}
            model = load_checkpoint_and_dispatch(empty, os.path.join(folder, "mlp.bin"), **kwargs)
        out = model(torch.arange(32.0).reshape(2, 16) / 32).detach()
        pickled = _pickled(model) if placement == "one-device" else None
    return {
        "device_map": {k: str(v) for k, v in getattr(model, "hf_device_map", {}).items()},
        "out": out,
        "diagnose_imported": "accelerate.utils.diagnose" in sys.modules,
        "model_attributes": sorted(k for k in vars(model) if not k.startswith("_") or "diagnos" in k),
        "pickled": pickled,
        "warnings": seen.warnings,
        "logs": seen.logs,
    }


def _observe(observe, tmp_path, placement, switch=None, attribute=None):
    (result,) = run_ranks(_dispatch, 1, str(tmp_path), placement, switch, attribute, init_group=False)
    logs = result.pop("logs")
    observe("dispatch", result)
    observe("rank_logs", logs)  # a list of its own, which a declaration can narrow with `match`


@pytest.mark.parametrize("switch", [None, "0", "maybe", ""], ids=["unset", "off", "unknown-word", "empty"])
def test_disk_offload(observe, tmp_path, switch):
    """``device_map="auto"`` with a ``max_memory`` that sends most of the model to disk: the placement the
    diagnosis would warn about, were it asked to. A value the switch does not recognise leaves it off, silently, as
    pristine ignores the variable (it raised ``ValueError: invalid truth value maybe`` once)."""
    _observe(observe, tmp_path, "disk-offload", switch)


def test_one_device(observe, tmp_path):
    """The whole model on one device, as ``device_map={"": device}`` places it."""
    _observe(observe, tmp_path, "one-device")


@pytest.mark.intended("dispatch.diagnose_imported", reason=IMPORTS)
def test_one_device_diagnosed(observe, tmp_path):
    """Asked for, on a placement with nothing to report: no warning, nothing recorded on the model (its attributes,
    and what ``torch.save`` of the whole model pickles, are pristine's), so the saved model loads wherever pristine
    accelerate is installed."""
    _observe(observe, tmp_path, "one-device", "1")


@pytest.mark.intended("dispatch.diagnose_imported", reason=IMPORTS)
def test_model_with_an_attribute_of_the_diagnosis_name(observe, tmp_path):
    """A model that carries ``_accelerate_dispatch_diagnosed`` with no truth value (a tensor of two elements): the
    diagnosis reads no attribute of the model (it raised ``RuntimeError: Boolean value of Tensor with more than one
    value is ambiguous`` once)."""
    _observe(observe, tmp_path, "one-device", "1", attribute="tensor")


@pytest.mark.intended("dispatch.diagnose_imported", reason=ASKED)
@pytest.mark.intended("rank_logs", reason=ASKED, match=r"accelerate dispatch diagnosis")
@pytest.mark.parametrize("placement", ["device-map-values", "max-memory-strings"])
def test_diagnosed_dispatch_of_odd_values(observe, tmp_path, placement):
    """Asked for (``true``, a true value other than ``1``), on a device map of ``torch.device`` values, ``"cpu"``
    and ``"disk"`` given to ``dispatch_model``, and on a ``max_memory`` given as strings: the same placement,
    outputs and errors as pristine, and one warning about the disk offload."""
    _observe(observe, tmp_path, placement, "true")
