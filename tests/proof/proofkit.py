"""The two exception types a proof test raises itself (standard library only, so ranks and reproducers can use it).

A proof's verdict rests on what the code under test raised: the bug's exception type and message (see conftest).
Some bugs raise nothing and are seen only in their effect (one replica ran, a halved warm-up, a loss off by the
number of replicas). A test that sees such an effect raises :class:`BugSymptom`, the one type that means "the
bug's symptom was observed", with a message saying which. A test that could not look at all (a spy that recorded
nothing, a function upstream renamed, a rank that died without a word) raises :class:`CouldNotObserve`: that is
an error of the test, never the bug, and never a pass.
"""

from __future__ import annotations


class BugSymptom(AssertionError):
    """The bug's effect was observed (wrong result, dropped work); the message names the symptom."""


class CouldNotObserve(Exception):
    """The test could not reach the behaviour it judges; neither the bug nor its absence was seen."""


#: What torch raises where code asks for an accelerator on a machine without one (transformers 4.50's tensor-parallel
#: start-up does): a CPU build of torch says the first, a CUDA build on a machine with no GPU driver the second.
NO_ACCELERATOR = (
    "Cannot access accelerator device when none is available.",
    "Found no NVIDIA driver on your system.",
)


def no_accelerator(message: str) -> bool:
    """Whether ``message`` is torch's refusal for want of an accelerator (either build of torch)."""
    return message.startswith(NO_ACCELERATOR)


def reset_default_device() -> None:
    """``torch.set_default_device(None)``, undone as it is meant to be. torch 2.6 leaves a None context behind, after
    which ``torch.get_default_device()`` raises AttributeError (fixed in torch 2.7), and so does every model
    transformers 5 builds in that process later: the tests after this one must not inherit it."""
    import torch

    torch.set_default_device(None)
    state = getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None)
    if state is not None and getattr(state, "device_context", False) is None:
        del state.device_context


def tp_needs_newer_torch(message: str) -> bool:
    """Whether ``message`` is transformers 5's tensor-parallel sharding failing on a torch older than it calls for:
    it passes ``distribute_tensor()`` ``src_data_rank``, which torch 2.7 added (torch 2.6 raises TypeError). Raised
    from inside the sharding, it shows the tensor-parallel path was taken."""
    return "unexpected keyword argument 'src_data_rank'" in message
