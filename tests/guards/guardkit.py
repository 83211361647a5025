"""What a user could observe, recorded so that a pristine and a +fixed run can be compared. Standard library only:
ranks (harness.run_ranks) capture and return records too.

A guard is a scenario from a fix's neighbourhood that never hits the bug. It runs on the pristine release and on
the +fixed build; what it observed (:func:`plain` values), what it raised, and the warnings and log records a user
would see are compared by :func:`differences`. Pristine is the reference: a guard needs no knowledge of the right
answer.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: Losses, gradient norms and every other float agree to this (absolute and relative).
TOLERANCE = 1e-6
#: The loggers a record can end at: the root, and the library roots that do not propagate to it.
LOGGERS = ("", "transformers", "torch")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
#: The variables torchrun sets for each process: without them, a process is a plain `python script.py`.
TORCHRUN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass
class Captured:
    """Warnings (``Category: message``) and log records (``LEVEL logger: message``) a user would see."""

    warnings: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)


class _Handler(logging.Handler):
    """Collects each record once, at whatever logger it was attached to; the logger's level already decided that
    the record is emitted, which at the default verbosity is what a user sees."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not any(r is record for r in self.records):
            self.records.append(record)


def trainer_args(output_dir: str, n_gpu: int, batch: int, steps: int, **overrides: Any):
    """TrainingArguments of the DataParallel guards: plain SGD at a constant rate, no clipping (the updated weights
    show a change of the gradients' scale), nothing saved or reported; ``_n_gpu`` as ``n_gpu`` visible GPUs give it,
    so that the Trainer wraps the model in DataParallel and scales the batch."""
    from transformers import TrainingArguments

    fields = {
        "output_dir": output_dir,
        "per_device_train_batch_size": batch // n_gpu,
        "max_steps": steps,
        "learning_rate": 0.5,
        "optim": "sgd",
        "lr_scheduler_type": "constant",
        "report_to": [],
        "use_cpu": True,
        "save_strategy": "no",
        "logging_steps": 1,
        "seed": 0,
        "disable_tqdm": True,
        "max_grad_norm": 0.0,
        **overrides,
    }
    args = TrainingArguments(**fields)
    args._n_gpu = n_gpu
    return args


def forget_once() -> None:
    """Clear the libraries' "once" caches (transformers' ``logger.warning_once``/``info_once``, accelerate's
    ``warning_once``), so that each scenario shows what it would show alone, whatever the scenarios before it did:
    a scenario that failed on one build before it reached a warning would otherwise move that warning to a later
    scenario on that build only."""
    owners: list[type] = [logging.Logger]
    adapter = getattr(sys.modules.get("accelerate.logging"), "MultiProcessAdapter", None)
    if adapter is not None:
        owners.append(adapter)
    for owner in owners:
        for name in ("warning_once", "info_once"):
            clear = getattr(getattr(owner, name, None), "cache_clear", None)
            if clear is not None:
                clear()


@contextlib.contextmanager
def capture() -> Iterator[Captured]:
    """Every warning raised inside (the filter is "always": a warning that Python's default filter shows once per
    place is counted each time, alike in both runs) and every log record emitted at the loggers' levels."""
    forget_once()
    torch = sys.modules.get("torch")
    if torch is not None:  # torch's own warn-once warnings, shown once per process, would move between scenarios
        torch.set_warn_always(True)
    got = Captured()
    handler = _Handler()
    loggers = [logging.getLogger(name) for name in LOGGERS]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield got
            finally:
                got.warnings.extend(f"{w.category.__name__}: {w.message}" for w in caught)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        got.logs.extend(f"{r.levelname} {r.name}: {r.getMessage()}" for r in handler.records)


@contextlib.contextmanager
def deterministic() -> Iterator[None]:
    """torch fills the memory it allocates with NaN (``torch.utils.deterministic.fill_uninitialized_memory``): an
    uninitialised buffer then reads alike on every run and on both builds."""
    import torch

    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def raised(exc: BaseException) -> dict:
    """An exception of the code under test as an observed value (a scenario that goes on after it, in a rank)."""
    return {"type": type(exc).__name__, "message": str(exc)}


def plain(value: Any) -> Any:
    """``value`` as JSON: numbers, strings, lists and string-keyed dicts; tensors as nested lists, torch sizes and
    tuples as lists, types and dtypes by name. Anything else is refused, so no record holds a ``repr`` with an
    address or a path that would differ between two runs of the same code."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    kind = type(value).__module__ + "." + type(value).__qualname__
    if kind == "torch.Tensor" or kind.startswith("torch.nn.parameter."):
        return plain(value.detach().cpu().tolist())
    if kind == "torch.Size":
        return list(value)
    if kind in ("torch.dtype", "torch.device"):
        return str(value)
    raise TypeError(f"cannot record a {kind}: observe numbers, strings, tensors, or lists and dicts of them")


def normalize(value: Any, paths: dict[str, str]) -> Any:
    """Strings with each of ``paths`` (a run's temporary folders) replaced by its placeholder, and memory
    addresses by ``0x?``: the same code gives the same record in two runs."""
    if isinstance(value, str):
        for path, placeholder in sorted(paths.items(), key=lambda p: -len(p[0])):
            value = value.replace(path, placeholder)
        return _ADDRESS.sub("0x?", value)
    if isinstance(value, list):
        return [normalize(v, paths) for v in value]
    if isinstance(value, dict):
        return {k: normalize(v, paths) for k, v in value.items()}
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)
    return type(a) is type(b) and a == b


def differences(reference: Any, got: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Where ``got`` differs from ``reference``: (path, reference's value, got's value), paths as ``losses[1]``,
    ``wrapper.type``; floats agree to :data:`TOLERANCE`. A key one side lacks is a difference at that key."""
    if isinstance(reference, dict) and isinstance(got, dict):
        out = []
        for key in list(reference) + [k for k in got if k not in reference]:
            sub = f"{path}.{key}" if path else key
            if key not in got or key not in reference:
                out.append((sub, reference.get(key, "<absent>"), got.get(key, "<absent>")))
            else:
                out += differences(reference[key], got[key], sub)
        return out
    if isinstance(reference, list) and isinstance(got, list) and len(reference) == len(got):
        return [
            d for i, (a, b) in enumerate(zip(reference, got, strict=True)) for d in differences(a, b, f"{path}[{i}]")
        ]
    return [] if _same(reference, got) else [(path, reference, got)]


def covers(key: str, difference: tuple[str, Any, Any]) -> bool:
    """Whether a declared key covers a difference (path, pristine's value, +fixed's value): the key itself, anything
    under it, or, for ``*``, the whole record (a scenario that is in the bug on some releases, not next to it), but
    never an exception that the +fixed build raised where pristine raised none."""
    path, reference, _ = difference
    if key == "*":
        return not (path == "raised" and reference is None)
    return path == key or path.startswith((key + ".", key + "["))


def sgd_steps(accelerator, model, steps: int, seed: int | None = None) -> tuple[Any, list[float]]:
    """``accelerator.prepare`` ``model`` with an SGD optimizer (lr 0.1) and train it ``steps`` steps on random
    [4, 8] batches from a generator seeded with ``seed`` (default: this rank's process index), as a training script
    does: the prepared model and the losses."""
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    g = torch.Generator().manual_seed(accelerator.process_index if seed is None else seed)
    losses = []
    for _ in range(steps):
        loss = prepared(torch.randn(4, 8, generator=g)).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return prepared, losses
