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
"""Why is `generate()` on a dispatched model slow or stalled? A diagnosis to run before a long generation.

The core, `diagnose(placement)`, is a pure function over plain data (the device map in execution order, bytes per
entry, the memory accelerate may use per device, peer access, tensors left on meta), so every GPU situation can be
checked without a GPU. `placement_of(model)` reads that data from a real dispatched model, and
`diagnose_model(model)` does both and returns the findings; `print(format_findings(...))` shows them. What is
offloaded is read from the offload hooks themselves, so a model offloaded by `cpu_offload` or `disk_offload` (no
`hf_device_map`) is judged as one dispatched by `dispatch_model`.

`dispatch_model` runs it only when asked to, with `ACCELERATE_DIAGNOSE_DISPATCH=1` (or another true value): then it
warns, on each dispatch, about the two likely causes of a stalled generation. Otherwise it does nothing of the kind.

It looks for the likely causes of accelerate#3434 (a `device_map="auto"` model whose `generate()` produces
nothing):

- the model is split across several accelerators although it would fit on one: every token crosses devices,
  and peer-to-peer copies between GPUs are known to stall or corrupt on some machines (IOMMU/ACS);
- modules are offloaded to CPU or disk: their weights are streamed to the execution device on every forward,
  that is for every generated token;
- no peer access between consecutive stages (every crossing goes through host memory);
- tensors on the meta device that no offload hook will fill.

Where the inputs are is not judged: the hooks `dispatch_model` attaches move them to each module's execution device.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise

from .modeling import get_max_memory, named_module_tensors
from .offload import OffloadedWeightsLoader, PrefixedDataset


MiB = 1024 * 1024


@dataclass(frozen=True)
class Finding:
    kind: str  # "split" | "offload" | "peer-access" | "meta"
    severity: str  # "warning" | "note"
    message: str


@dataclass
class Placement:
    """What the diagnosis needs to know about a dispatched model, as plain data."""

    stages: list[tuple[str, str]]  # (device-map entry, device) in execution order; devices as "cuda:0", "cpu", "disk"
    entry_bytes: dict[str, int]  # bytes of parameters and buffers per device-map entry
    # memory accelerate may use per accelerator, as it judged when placing the model: the `max_memory` of the
    # dispatch when known, else the free memory `get_max_memory()` reports (plus what the model already takes there)
    capacity: dict[str, int] = field(default_factory=dict)
    capacity_source: str = ""  # where `capacity` comes from, for the message ("max_memory", "free memory ...")
    peer_access: dict[tuple[str, str], bool] = field(default_factory=dict)  # (from, to) for consecutive stages
    unhooked_meta: list[str] = field(default_factory=list)  # tensors on meta with no offload hook to fill them
    # where offload hooks stream weights to on every forward; if empty, the first accelerator (else "cpu")
    execution_device: str = ""


def _is_accelerator(device: str) -> bool:
    return device not in ("cpu", "disk", "meta")


def _size(n: int) -> str:
    if n >= 1024 * MiB:
        return f"{n / MiB / 1024:.1f} GiB"
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n / 1024:.1f} KiB"


def _span(entries: list[str]) -> str:
    return entries[0] if len(entries) == 1 else f"{entries[0]} … {entries[-1]} ({len(entries)} entries)"


def diagnose(p: Placement, headroom: float = 0.85) -> list[Finding]:
    """Findings for one placement, most likely cause of a stall first. `headroom`: the share of the memory
    accelerate may use on a device that the weights may take and still "fit" (the rest is left for activations and
    the KV cache)."""
    findings: list[Finding] = []
    total = sum(p.entry_bytes.get(name, 0) for name, _ in p.stages)
    groups: list[tuple[str, list[str]]] = []  # consecutive stages on one device
    for name, device in p.stages:
        if groups and groups[-1][0] == device:
            groups[-1][1].append(name)
        else:
            groups.append((device, [name]))
    accelerators = list(dict.fromkeys(d for d, _ in groups if _is_accelerator(d)))
    if len(accelerators) > 1:
        order = " -> ".join(f"{d} [{_span(names)}]" for d, names in groups)
        fits = [d for d in accelerators if p.capacity.get(d) and total <= headroom * p.capacity[d]]
        source = f", from {p.capacity_source}" if p.capacity_source else ""
        if fits:
            best = max(fits, key=lambda d: p.capacity[d])
            findings.append(
                Finding(
                    "split",
                    "warning",
                    f"the model ({_size(total)}) is split across {len(accelerators)} accelerators although it fits on "
                    f"{best} ({_size(p.capacity[best])} usable there{source}): stage order {order}. Every generated "
                    f"token crosses devices {len(groups) - 1} time(s), and peer-to-peer copies between GPUs are known "
                    f'to stall on some machines. Load it on one device: device_map={{"": "{best}"}}.',
                )
            )
        else:
            unknown = " (device memory unknown: cannot tell whether it fits on one)" if not p.capacity else ""
            findings.append(
                Finding(
                    "split",
                    "note",
                    f"the model ({_size(total)}) is split across {len(accelerators)} accelerators: stage order "
                    f"{order}{unknown}.",
                )
            )
    main = p.execution_device or (accelerators[0] if accelerators else "cpu")
    # As in `dispatch_model`: with a cpu or mps main device only disk is offloaded (cpu entries are moved once).
    offloaded = ("disk",) if main.split(":")[0] in ("cpu", "mps") else ("cpu", "disk")
    streamed = {d: [n for n, dev in p.stages if dev == d] for d in offloaded}
    moved = {d: sum(p.entry_bytes.get(n, 0) for n in names) for d, names in streamed.items() if names}
    if moved:
        parts = [f"{_size(b)} from {d} ({_span(streamed[d])})" for d, b in moved.items()]
        findings.append(
            Finding(
                "offload",
                "warning",
                f"offloaded weights are streamed to {main} on every forward, that is for every generated token: "
                f"{', '.join(parts)}, about {_size(sum(moved.values()))} per token. Give the model more device memory "
                f"(max_memory), a smaller dtype, or a quantized checkpoint; disk offload is the slowest.",
            )
        )
    for (a, b), ok in p.peer_access.items():
        if not ok:
            findings.append(
                Finding(
                    "peer-access",
                    "warning",
                    f"no peer access from {a} to {b}: every activation crossing between these stages is copied "
                    f"through host memory. Keep the model on one device, or check the driver / IOMMU (ACS) settings.",
                )
            )
    if p.unhooked_meta:
        more = " …" if len(p.unhooked_meta) > 5 else ""
        findings.append(
            Finding(
                "meta",
                "warning",
                f"{len(p.unhooked_meta)} tensor(s) are on the meta device with no offload hook to fill them: "
                f"{', '.join(p.unhooked_meta[:5])}{more}. The forward will fail or compute on nothing: reload the "
                f"model.",
            )
        )
    return findings


def format_findings(findings: list[Finding]) -> str:
    if not findings:
        return "accelerate dispatch diagnosis: nothing found that would slow generation down."
    return "accelerate dispatch diagnosis:\n" + "\n".join(f"  [{f.severity}] {f.kind}: {f.message}" for f in findings)


def _device_str(device, accelerator: str) -> str:
    if isinstance(device, int):
        return f"{accelerator}:{device}"
    device = str(device)
    return f"{device}:0" if device in ("cuda", "xpu", "npu", "mlu", "musa", "sdaa", "hpu") else device


def _capacity(devices: list[str], on_device: dict[str, int], max_memory=None) -> tuple[dict[str, int], str]:
    """The memory accelerate may use on each accelerator in `devices`, as `infer_auto_device_map` judges it."""
    if max_memory is not None:
        budget, source, already = get_max_memory(dict(max_memory)), "max_memory", {}
    else:
        # Free memory now, after the dispatch: what the model already takes on a device was free before it.
        budget, source, already = get_max_memory(), "free memory as get_max_memory() reports it", on_device
    capacity = {}
    for d in devices:
        index = d.split(":", 1)[1] if ":" in d else None
        for key in (int(index) if index is not None and index.isdigit() else None, d, d.split(":")[0]):
            if key is not None and key in budget:
                capacity[d] = int(budget[key]) + already.get(d, 0)
                break
    return capacity, source


def _owner(tensor_name: str, entries) -> str | None:
    """The most specific device-map entry owning `tensor_name` (walks up its dotted prefixes: linear in depth)."""
    name = tensor_name
    while True:
        if name in entries:
            return name
        if not name:
            return None
        name = name.rsplit(".", 1)[0] if "." in name else ""


def _source(weights, key: str, accelerator: str) -> str:
    """Where an offload hook's weights map holds `key`: "disk" for what an `OffloadedWeightsLoader` reads from its
    folder, else the device of the tensor it holds (the CPU for the state dict of `cpu_offload`)."""
    while isinstance(weights, PrefixedDataset):
        key, weights = weights.prefix + key, weights.dataset
    if isinstance(weights, OffloadedWeightsLoader) and key not in weights.state_dict:
        return "disk"
    value = weights.get(key) if isinstance(weights, Mapping) else None
    return _device_str(getattr(value, "device", "cpu"), accelerator)


def _offloaded(model, accelerator: str) -> tuple[dict[str, str], str]:
    """What the offload hooks (of `dispatch_model`, `cpu_offload`, `disk_offload`) stream to their execution device
    on every forward: tensor name -> where it is read from ("cpu", "disk"), and that execution device."""
    streamed, execution = {}, ""
    for module_name, module in model.named_modules():
        hook = getattr(module, "_hf_hook", None)
        for h in getattr(hook, "hooks", [hook]) if hook is not None else []:
            if not getattr(h, "offload", False) or getattr(h, "weights_map", None) is None:
                continue
            if not execution and getattr(h, "execution_device", None) is not None:
                execution = _device_str(h.execution_device, accelerator)
            prefix = f"{module_name}." if module_name else ""
            tensors = named_module_tensors(
                module,
                include_buffers=getattr(h, "offload_buffers", False),
                recurse=getattr(h, "place_submodules", False),
                remove_non_persistent=True,
            )
            for name, _ in tensors:
                streamed[prefix + name] = _source(h.weights_map, name, accelerator)
    return streamed, execution


def placement_of(model, max_memory=None) -> Placement:
    """Read a placement from a model dispatched by accelerate (`hf_device_map` and the offload hooks), from the
    offload hooks alone (`cpu_offload`, `disk_offload`), or from where its weights are. `max_memory`: the one the
    model was dispatched with, if any; else free memory (`get_max_memory()`) is used."""
    import torch

    accelerator = "cuda"
    if hasattr(torch, "accelerator") and torch.accelerator.is_available():
        accelerator = torch.accelerator.current_accelerator().type
    params = list(model.named_parameters()) + list(model.named_buffers())
    streamed, execution = _offloaded(model, accelerator)
    device_map = getattr(model, "hf_device_map", None)
    if not device_map and streamed:  # offloaded by hooks alone: one entry per tensor, where it is read from
        device_map = {name: streamed.get(name, tensor.device) for name, tensor in params}
    device_map = device_map or {"": params[0][1].device if params else "cpu"}
    stages = [(name, _device_str(device, accelerator)) for name, device in device_map.items()]
    entry_bytes = dict.fromkeys(device_map, 0)
    for tensor_name, tensor in params:
        owner = _owner(tensor_name, entry_bytes)
        if owner is not None:
            entry_bytes[owner] += tensor.numel() * tensor.element_size()
    devices = list(dict.fromkeys(d for _, d in stages if _is_accelerator(d)))
    capacity, source = {}, ""
    if len(devices) > 1:  # only a split is judged against device memory
        on_device: dict[str, int] = {}
        for name, d in stages:
            on_device[d] = on_device.get(d, 0) + entry_bytes[name]
        capacity, source = _capacity(devices, on_device, max_memory)
    peer_access = {}
    if torch.cuda.is_available():
        for (_, a), (_, b) in pairwise(stages):
            if a != b and a.startswith("cuda:") and b.startswith("cuda:"):
                peer_access[(a, b)] = bool(
                    torch.cuda.can_device_access_peer(torch.device(a).index, torch.device(b).index)
                )
    unhooked = [name for name, tensor in params if tensor.device.type == "meta" and name not in streamed]
    return Placement(stages, entry_bytes, capacity, source, peer_access, unhooked, execution)


def diagnose_model(model, max_memory=None) -> list[Finding]:
    """Run before a long `generate()`: `print(format_findings(diagnose_model(model)))`. Pass the
    `max_memory` the model was loaded with, if any, so that "fits on one device" is judged as accelerate placed it."""
    return diagnose(placement_of(model, max_memory))


def warn_after_dispatch(model, logger) -> None:
    """Called by `dispatch_model` when `ACCELERATE_DIAGNOSE_DISPATCH` is set: warn about the two likely causes of a
    stalled generation (streamed offloaded weights; a split across accelerators although the model fits on one).
    Each dispatch is a placement of its own and is diagnosed as such; nothing is recorded on the model."""
    # No `except`: the diagnosis was asked for, and a failure kept silent would read as "nothing found".
    findings = [f for f in diagnose_model(model) if f.severity == "warning" and f.kind in ("offload", "split")]
    if findings:
        logger.warning(
            format_findings(findings)
            + "\n  (run accelerate.utils.diagnose.diagnose_model(model) for the full diagnosis)"
        )
