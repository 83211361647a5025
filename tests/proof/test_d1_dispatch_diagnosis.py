"""Feature test for D1: a diagnosis for `device_map="auto"` generation that stalls (accelerate#3434).

A capability, not a bug fix: upstream has no such diagnosis, so on a release without the patch these tests do not
run (see conftest), and the patch is dropped by release or PR (its Drop-When), never by a proof. The fixed
accelerate carries `accelerate.utils.diagnose`: a pure function over a placement, so every GPU situation is checked
here with synthetic maps, and a real tiny model is dispatched on CPU with a small `max_memory` and an offload
folder: the diagnosis reports the disk offload, greedy output stays identical to the model loaded whole, and
`dispatch_model` warns once per dispatch when asked to (`ACCELERATE_DIAGNOSE_DISPATCH=1` or another true value),
and does no diagnosis at all, silently, when it is not (the default path of every `device_map="auto"` load, and
any value of the switch it does not recognise). What is offloaded is read from the offload hooks, so a model that
`cpu_offload` or `disk_offload` offloaded (no `hf_device_map`) is reported as the same `dispatch_model` map is.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import logging
import types

import pytest
import torch

from tiny_llama import small_config

pytestmark = pytest.mark.feature(package="accelerate")

GiB = 1024**3
INPUT = torch.tensor([[1, 5, 17, 42, 3, 88, 9, 60]])
SWITCH = "ACCELERATE_DIAGNOSE_DISPATCH"


def _diagnose():
    from accelerate.utils import diagnose

    return diagnose


def _llama_stages(devices):
    names = ["model.embed_tokens"] + [f"model.layers.{i}" for i in range(4)] + ["model.norm", "lm_head"]
    return list(zip(names, devices, strict=True))


def test_split_across_gpus_although_it_fits_on_one():
    d = _diagnose()
    stages = _llama_stages(["cuda:0"] * 3 + ["cuda:1"] * 4)
    p = d.Placement(
        stages,
        {n: GiB for n, _ in stages},
        capacity={"cuda:0": 48 * GiB, "cuda:1": 24 * GiB},
        capacity_source="max_memory",
    )
    (f,) = d.diagnose(p)
    assert (f.kind, f.severity) == ("split", "warning")
    assert "fits on cuda:0 (48.0 GiB usable there, from max_memory)" in f.message, f.message
    assert 'device_map={"": "cuda:0"}' in f.message
    assert "cuda:0 [model.embed_tokens … model.layers.1 (3 entries)] -> cuda:1 [model.layers.2" in f.message


def test_split_that_does_not_fit_is_only_a_note():
    d = _diagnose()
    stages = _llama_stages(["cuda:0"] * 3 + ["cuda:1"] * 4)
    p = d.Placement(stages, {n: 10 * GiB for n, _ in stages}, capacity={"cuda:0": 24 * GiB, "cuda:1": 24 * GiB})
    assert [(f.kind, f.severity) for f in d.diagnose(p)] == [("split", "note")]


def test_offload_to_cpu_and_disk_is_streamed_per_token():
    d = _diagnose()
    stages = _llama_stages(["cuda:0"] * 3 + ["cpu"] * 2 + ["disk"] * 2)
    p = d.Placement(stages, {n: 512 * 1024**2 for n, _ in stages}, capacity={"cuda:0": 80 * GiB})
    (f,) = d.diagnose(p)
    assert f.kind == "offload" and "1.0 GiB from cpu" in f.message and "1.0 GiB from disk" in f.message
    assert "about 2.0 GiB per token" in f.message


def test_mps_with_cpu_entries_is_not_streaming():
    """With an mps main device, accelerate moves the cpu-mapped modules to mps once (it offloads only disk)."""
    d = _diagnose()
    assert d.diagnose(d.Placement(_llama_stages(["mps"] * 5 + ["cpu"] * 2), {})) == []
    (f,) = d.diagnose(d.Placement(_llama_stages(["mps"] * 5 + ["cpu", "disk"]), {"lm_head": GiB}))
    assert f.kind == "offload" and "1.0 GiB from disk" in f.message and "from cpu" not in f.message, f.message


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))


MLP_BYTES = (16 * 64 + 64 + 64 * 16 + 16) * 4  # 9.3 KiB of float32 weights, no buffers


def test_cpu_offload_to_an_accelerator_is_streamed_per_token():
    """`cpu_offload` keeps the weights in a CPU state dict and copies them to the execution device on every
    forward, as `dispatch_model` does for a "cpu" entry: the same finding, sizes from the hooks. (On a machine
    without an accelerator only the hooks are built: the MLP has no buffer to move.)"""
    from accelerate import cpu_offload

    d = _diagnose()
    model = cpu_offload(_mlp(), execution_device=torch.device("cuda", 0))
    assert not hasattr(model, "hf_device_map") and {p.device.type for p in model.parameters()} == {"meta"}
    (f,) = d.diagnose_model(model)
    assert f.kind == "offload" and "streamed to cuda:0" in f.message, f.message
    assert f"{MLP_BYTES / 1024:.1f} KiB from cpu (0.weight … 2.bias (4 entries))" in f.message, f.message
    assert "from disk" not in f.message


def test_cpu_offload_onto_the_cpu_moves_nothing():
    """Executed on the CPU, `cpu_offload` streams from the CPU to the CPU: nothing is copied, as `dispatch_model`
    does not offload "cpu" entries when its main device is the CPU."""
    from accelerate import cpu_offload

    d = _diagnose()
    assert d.diagnose_model(cpu_offload(_mlp())) == []


def test_disk_offload_is_streamed_per_token(tmp_path):
    from accelerate import disk_offload

    d = _diagnose()
    x = torch.arange(32.0).reshape(2, 16) / 32
    expected = _mlp()(x)
    model = disk_offload(_mlp(), str(tmp_path), execution_device=torch.device("cpu"))
    (f,) = d.diagnose_model(model)
    assert f.kind == "offload" and "streamed to cpu" in f.message, f.message
    assert f"{MLP_BYTES / 1024:.1f} KiB from disk (0.weight … 2.bias (4 entries))" in f.message, f.message
    assert f"about {MLP_BYTES / 1024:.1f} KiB per token" in f.message, f.message
    assert torch.allclose(model(x), expected)


def test_disk_offload_of_a_llama_reports_what_its_hooks_stream(checkpoint, tmp_path):
    """A real model offloaded whole by `disk_offload`: every parameter is read from disk on each forward (the
    buffers, not offloaded, stay on the execution device), and greedy output is unchanged."""
    from accelerate import disk_offload
    from transformers import AutoModelForCausalLM

    d = _diagnose()
    whole = AutoModelForCausalLM.from_pretrained(checkpoint)
    weights = sum(p.numel() * p.element_size() for p in whole.parameters())
    greedy = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
    expected = whole.generate(INPUT, **greedy)
    model = disk_offload(whole, str(tmp_path), execution_device=torch.device("cpu"))
    (f,) = d.diagnose_model(model)
    assert f.kind == "offload" and f"about {weights / 1024:.1f} KiB per token" in f.message, (weights, f.message)
    assert torch.equal(model.generate(INPUT, **greedy), expected)


def test_offload_helpers_do_not_dispatch_so_they_do_not_warn(tmp_path, caplog, monkeypatch):
    """`cpu_offload` and `disk_offload` do not call `dispatch_model`: the switch, which diagnoses dispatches,
    leaves them alone (they offload by request; `diagnose_model` reports them)."""
    from accelerate import cpu_offload, disk_offload

    monkeypatch.setenv(SWITCH, "1")
    with caplog.at_level(logging.WARNING):
        cpu_offload(_mlp(), execution_device=torch.device("cuda", 0))
        disk_offload(_mlp(), str(tmp_path), execution_device=torch.device("cpu"))
    assert not [r for r in caplog.records if "accelerate dispatch diagnosis" in r.getMessage()]


def _two_gpu_model():
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))  # 257 KiB each
    model.hf_device_map = {"0": 0, "1": 1}
    return model


def test_capacity_is_the_max_memory_the_dispatch_used():
    d = _diagnose()
    found = d.diagnose_model(_two_gpu_model(), max_memory={0: "400KB", 1: "10GB"})
    assert [(f.kind, f.severity) for f in found] == [("split", "warning")], found
    assert "fits on cuda:1" in found[0].message and "from max_memory" in found[0].message, found[0].message
    p = d.placement_of(_two_gpu_model(), max_memory={0: "400KB", 1: "10GB"})
    assert p.capacity == {"cuda:0": 400_000, "cuda:1": 10**10}


def test_capacity_is_free_memory_not_total_memory(monkeypatch):
    """Two 80 GiB GPUs with little free memory: the model does not fit on one, whatever the total says."""
    d = _diagnose()
    total = types.SimpleNamespace(total_memory=80 * GiB, name="fake", major=8, minor=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a, **k: total)
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        d, "get_max_memory", lambda max_memory=None: {0: 100_000, 1: 100_000, "cpu": GiB}, raising=False
    )
    found = d.diagnose_model(_two_gpu_model())
    assert [(f.kind, f.severity) for f in found] == [("split", "note")], found
    monkeypatch.setattr(d, "get_max_memory", lambda max_memory=None: {0: 8 * GiB, 1: 100_000, "cpu": GiB})
    (f,) = d.diagnose_model(_two_gpu_model())
    assert f.severity == "warning" and "fits on cuda:0" in f.message and "free memory" in f.message, f.message


def test_no_peer_access_between_consecutive_stages():
    d = _diagnose()
    stages = _llama_stages(["cuda:0"] * 3 + ["cuda:1"] * 4)
    p = d.Placement(
        stages,
        {n: 30 * GiB for n, _ in stages},
        capacity={"cuda:0": 80 * GiB, "cuda:1": 80 * GiB},
        peer_access={("cuda:0", "cuda:1"): False},
    )
    kinds = [f.kind for f in d.diagnose(p)]
    assert kinds == ["split", "peer-access"]


def test_meta_without_hook():
    d = _diagnose()
    stages = _llama_stages(["cuda:1"] * 7)
    p = d.Placement(stages, {n: GiB for n, _ in stages}, unhooked_meta=["model.rotary_emb.inv_freq"])
    found = {f.kind: f.message for f in d.diagnose(p)}
    assert list(found) == ["meta"] and "model.rotary_emb.inv_freq" in found["meta"]


def test_inputs_are_no_finding_the_dispatch_hooks_move_them():
    """An upstream review found the "inputs" finding a false positive: the hooks `dispatch_model` attaches move
    every input to the execution device of the module they wrap (and a model without hooks, moved whole with
    `.to()`, raises a clear device error at once: no stall). The diagnosis takes no inputs and says nothing of them."""
    d = _diagnose()
    assert "inputs" not in inspect.signature(d.diagnose_model).parameters
    assert "inputs" not in inspect.signature(d.placement_of).parameters
    assert "input_devices" not in {f.name for f in dataclasses.fields(d.Placement)}
    stages = _llama_stages(["cuda:1"] * 7)
    assert d.diagnose(d.Placement(stages, {n: GiB for n, _ in stages})) == []


def test_a_single_device_model_is_fine():
    d = _diagnose()
    stages = [("", "cuda:0")]
    assert d.diagnose(d.Placement(stages, {"": GiB}, capacity={"cuda:0": 80 * GiB})) == []
    assert "nothing found" in d.format_findings([])


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("llama")
    LlamaForCausalLM(small_config()).save_pretrained(path)
    return path


def test_real_disk_offload_is_reported_and_greedy_output_is_unchanged(checkpoint, tmp_path, caplog, monkeypatch):
    from transformers import AutoModelForCausalLM

    d = _diagnose()
    monkeypatch.setenv(SWITCH, "1")
    whole = AutoModelForCausalLM.from_pretrained(checkpoint)
    with caplog.at_level(logging.WARNING):
        model = AutoModelForCausalLM.from_pretrained(
            checkpoint, device_map="auto", max_memory={"cpu": "90KB"}, offload_folder=str(tmp_path)
        )
        greedy = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
        assert torch.equal(model.generate(INPUT, **greedy), whole.generate(INPUT, **greedy))
        model.generate(INPUT, **greedy)
    findings = d.diagnose_model(model)
    assert [f.kind for f in findings] == ["offload"], findings
    assert "from disk (model.layers.1 … lm_head" in findings[0].message, findings[0].message
    warnings = [r for r in caplog.records if "accelerate dispatch diagnosis" in r.getMessage()]
    assert len(warnings) == 1, "the warning appears exactly once, for the one dispatch"
    assert "streamed" in warnings[0].getMessage()


def test_one_warning_per_dispatch_and_nothing_kept_on_the_model(tmp_path, caplog, monkeypatch):
    """Each dispatch is a placement of its own: dispatched again, the model is diagnosed again, and the diagnosis
    records nothing on it (the model pickles as on pristine, and a model that carries an attribute of any name is
    not misread)."""
    from accelerate import dispatch_model

    monkeypatch.setenv(SWITCH, "1")
    offloaded = {"0": "cpu", "1": "cpu", "2": "disk"}
    with caplog.at_level(logging.WARNING):
        model = dispatch_model(_mlp(), offloaded, offload_dir=str(tmp_path))
        model = dispatch_model(model, offloaded, offload_dir=str(tmp_path))  # the weights are there
    warnings = [r for r in caplog.records if "accelerate dispatch diagnosis" in r.getMessage()]
    assert len(warnings) == 2, "one warning per dispatch"
    plain = _mlp()
    plain._accelerate_dispatch_diagnosed = torch.ones(2)  # no truth value
    assert torch.equal(dispatch_model(plain, {"": "cpu"})._accelerate_dispatch_diagnosed, torch.ones(2))
    model = dispatch_model(_mlp(), {"": "cpu"})
    assert not [k for k in vars(model) if "diagnos" in k]
    saved = io.BytesIO()
    torch.save(model, saved)
    assert b"diagnos" not in saved.getvalue(), "the pickle of the whole model names the diagnosis"


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_a_true_value_of_the_switch_asks_for_it(tmp_path, caplog, monkeypatch, value):
    from accelerate import dispatch_model

    monkeypatch.setenv(SWITCH, value)
    with caplog.at_level(logging.WARNING):
        dispatch_model(_mlp(), {"0": "cpu", "1": "cpu", "2": "disk"}, offload_dir=str(tmp_path))
    assert len([r for r in caplog.records if "accelerate dispatch diagnosis" in r.getMessage()]) == 1


@pytest.mark.parametrize("value", [None, "0", "false", "maybe", "", "2"])
def test_no_diagnosis_and_no_warning_unless_asked(checkpoint, tmp_path, caplog, monkeypatch, value):
    """The default path (the switch unset or off): `dispatch_model` neither diagnoses nor warns, even for a model
    the diagnosis would warn about; the explicit `diagnose_model` call still works. A value the switch does not
    recognise ("maybe", empty, "2") leaves it off, silently, as pristine ignores the variable: it raised
    `ValueError: invalid truth value maybe` once."""
    from transformers import AutoModelForCausalLM

    d = _diagnose()
    if value is None:
        monkeypatch.delenv(SWITCH, raising=False)
    else:
        monkeypatch.setenv(SWITCH, value)
    calls = []
    real = d.diagnose_model

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(d, "diagnose_model", spy)
    with caplog.at_level(logging.WARNING):
        model = AutoModelForCausalLM.from_pretrained(
            checkpoint, device_map="auto", max_memory={"cpu": "90KB"}, offload_folder=str(tmp_path)
        )
    warnings = [r.getMessage() for r in caplog.records if "accelerate dispatch diagnosis" in r.getMessage()]
    assert warnings == [] and calls == [], f"dispatch_model diagnosed without being asked: {warnings}"
    assert not hasattr(model, "_accelerate_dispatch_diagnosed")
    assert [f.kind for f in d.diagnose_model(model)] == ["offload"]


def test_a_failing_diagnosis_is_not_hidden(checkpoint, tmp_path, monkeypatch):
    """Asked for (`ACCELERATE_DIAGNOSE_DISPATCH=1`), a diagnosis that fails raises: silence would read as "nothing
    found", and an `except Exception: return` around it hid its bugs (found by an upstream review)."""
    from transformers import AutoModelForCausalLM

    d = _diagnose()
    monkeypatch.setenv(SWITCH, "1")

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug in the diagnosis")

    monkeypatch.setattr(d, "placement_of", broken)
    with pytest.raises(ZeroDivisionError, match="a bug in the diagnosis"):
        AutoModelForCausalLM.from_pretrained(
            checkpoint, device_map="auto", max_memory={"cpu": "90KB"}, offload_folder=str(tmp_path)
        )
