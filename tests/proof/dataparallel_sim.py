"""A CPU stand-in for ``nn.DataParallel`` over N CUDA devices, for the T3 proof.

Real DataParallel needs several CUDA devices: on a CPU build its constructor finds no device and its forward just
calls the module (nothing is scattered), and the CUDA parts (``torch._C._scatter``, ``Broadcast``, CUDA streams in
``parallel_apply``, ``Gather``) are absent or refuse CPU tensors. ``simulate`` keeps torch's own code where the bug
lives and replaces only what needs CUDA:

- torch's own ``DataParallel.forward``, ``scatter`` and ``scatter_kwargs``, and torch's ``Scatter`` autograd
  function (``scatter_gather.scatter`` walks the inputs and kwargs, zips per-replica kwargs, pads);
- ``comm.scatter``, the C++ ``torch._C._scatter``, becomes ``tensor.chunk(n, dim)``: the first ATen call of the
  C++ scatter, the one that raises ``chunk expects at least a 1-dimensional tensor`` for a 0-d tensor. Like the
  C++ code it may return fewer chunks than devices;
- ``__init__`` takes devices ``0 .. N-1`` with the module's own (CPU) device as the source device;
- ``replicate`` returns the same module for every replica (gradients then add up in the shared parameters, as
  ``Broadcast``'s backward ``ReduceAddCoalesced`` does), ``parallel_apply`` runs replicas one after another;
- ``gather`` is torch's ``scatter_gather.gather`` with ``Gather`` done by ``torch.cat`` (autograd splits the
  gradient back, like ``Gather.backward``), including torch's unsqueeze of 0-d outputs.

These are set on ``nn.DataParallel`` itself (for the test's duration, through ``monkeypatch``), not on a subclass,
so whatever the code under test builds, ``nn.DataParallel`` or a subclass of it that overrides ``scatter``, runs
simulated. Every forward appends to the returned log what each replica received, so a test can assert that all
replicas ran and what they were given.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.nn.parallel import _functions, comm

REPLICAS = 2


def _chunk_scatter(tensor, devices, chunk_sizes=None, dim=0, streams=None, *, out=None):
    assert chunk_sizes is None, "DataParallel passes no chunk sizes"
    return tuple(c.contiguous() for c in tensor.chunk(len(devices), dim))


def _cat_gather(target_device, dim, *inputs):
    if all(t.dim() == 0 for t in inputs) and dim == 0:
        warnings.warn(
            "Was asked to gather along dimension 0, but all input tensors were scalars; will instead "
            "unsqueeze and return a vector.",
            stacklevel=2,
        )  # torch's Gather does the same
        inputs = tuple(t.view(1) for t in inputs)
    return torch.cat(inputs, dim)


def simulate(monkeypatch: pytest.MonkeyPatch, replicas: int = REPLICAS) -> list[list[dict]]:
    """Make every ``nn.DataParallel`` built during the test run ``replicas`` replicas on CPU; returns the log."""
    log: list[list[dict]] = []

    def init(self, module, device_ids=None, output_device=None, dim=0):
        nn.Module.__init__(self)
        self.module = module
        self.device_ids = list(range(replicas))
        self.output_device = 0
        self.dim = dim
        self.src_device_obj = next(module.parameters()).device

    def replicate(self, module, device_ids):
        return [module for _ in device_ids]

    def parallel_apply(self, modules, inputs, kwargs):
        seen = []
        outputs = []
        # as torch's parallel_apply: as many replicas run as there are inputs
        for module, args, kw in zip(modules, inputs, kwargs, strict=False):
            seen.append({k: (v.clone() if torch.is_tensor(v) else v) for k, v in kw.items()})
            outputs.append(module(*args, **kw))
        log.append(seen)
        return outputs

    monkeypatch.setattr(nn.DataParallel, "__init__", init)
    monkeypatch.setattr(nn.DataParallel, "replicate", replicate)
    monkeypatch.setattr(nn.DataParallel, "parallel_apply", parallel_apply)
    monkeypatch.setattr(comm, "scatter", _chunk_scatter)
    monkeypatch.setattr(_functions.Gather, "apply", _cat_gather)
    return log
