"""A CPU stand-in for ``nn.DataParallel`` over N CUDA devices, for the T3 proof.

Real DataParallel needs several CUDA devices: on a CPU build its constructor finds no device and its forward just
calls the module (nothing is scattered), and the CUDA parts (``torch._C._scatter``, ``Broadcast``, CUDA streams in
``parallel_apply``, ``Gather``) are absent or refuse CPU tensors. This subclass keeps torch's own code where the
bug lives and replaces only what needs CUDA:

- torch's own ``DataParallel.forward``, ``scatter`` and ``scatter_kwargs``, and torch's ``Scatter`` autograd
  function (``scatter_gather.scatter`` walks the inputs and kwargs, zips per-replica kwargs, pads);
- ``comm.scatter``, the C++ ``torch._C._scatter``, becomes ``tensor.chunk(n, dim)``: the first ATen call of the
  C++ scatter, the one that raises ``chunk expects at least a 1-dimensional tensor`` for a 0-d tensor. Like the
  C++ code it may return fewer chunks than devices;
- ``replicate`` returns the same module for every replica (gradients then add up in the shared parameters, as
  ``Broadcast``'s backward ``ReduceAddCoalesced`` does), ``parallel_apply`` runs replicas one after another;
- ``gather`` is torch's ``scatter_gather.gather`` with ``Gather`` done by ``torch.cat`` (autograd splits the
  gradient back, like ``Gather.backward``), including torch's unsqueeze of 0-d outputs.

Each call records what every replica received, so a test can assert that all replicas ran.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
from torch import nn
from torch.nn.parallel import _functions, comm


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


@contextlib.contextmanager
def _patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


class SimulatedDataParallel(nn.DataParallel):
    replicas = 2
    log: list[list[dict]] = []  # per forward: what each replica got

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        nn.Module.__init__(self)
        self.module = module
        self.device_ids = list(range(self.replicas))
        self.output_device = 0
        self.dim = dim
        self.src_device_obj = next(module.parameters()).device

    def scatter(self, inputs, kwargs, device_ids):
        with _patched(comm, "scatter", _chunk_scatter):
            return super().scatter(inputs, kwargs, device_ids)

    def replicate(self, module, device_ids):
        return [module for _ in device_ids]

    def parallel_apply(self, replicas, inputs, kwargs):
        seen = []
        outputs = []
        # as torch's parallel_apply: as many replicas run as there are inputs
        for module, args, kw in zip(replicas, inputs, kwargs, strict=False):
            seen.append({k: (v.clone() if torch.is_tensor(v) else v) for k, v in kw.items()})
            outputs.append(module(*args, **kw))
        type(self).log.append(seen)
        return outputs

    def gather(self, outputs, output_device):
        with _patched(_functions.Gather, "apply", _cat_gather):
            return super().gather(outputs, output_device)
