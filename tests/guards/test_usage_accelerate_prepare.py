"""Guards mined from public code: how code outside accelerate calls, subclasses and replaces ``Accelerator.prepare``
and ``Accelerator.prepare_model``, whose DDP branches A1 patches (on 1.6.0 and 1.15.0: a DTensor check right before
DDP; the feature: a tensor-parallel job leaves a sharded model as it is).

Each pattern below is one guard, on 2 real gloo ranks of a CPU job (tests/proof/harness.py), where ``prepare``
wraps a trainable model in DDP: the very branch the patches touch. Recorded per rank: what ``prepare`` returned,
each step's loss, the weights' norms afterwards, outputs, errors, warnings and log records. Pristine and +fixed must
agree; none of these models holds a DTensor.

- ``prepare`` of a model, an optimizer, two dataloaders and a scheduler in one call, then training and a gathered
  evaluation (``huggingface/accelerate``, ``examples/nlp_example.py``), with ``None`` and a plain list among the
  objects (``tests/test_accelerator.py``: ``test_accelerator_none``, ``test_is_accelerator_prepared``);
- a policy prepared with its optimizer, then a reference model and a reward model, both trainable, prepared for
  evaluation (``prepare_model(ref, evaluation_mode=True)``; ``evaluation_mode=True, device_placement=True``)
  (``huggingface/trl``, ``trl/trainer/grpo_trainer.py``, also ``dpo_trainer.py`` and ``rloo_trainer.py``);
- a trainable model prepared alone with ``prepare_model(model)`` and used for inference (``huggingface/trl``,
  ``examples/scripts/bco.py``, the embedding model of BCO), and prepared twice (``huggingface/accelerate``,
  ``tests/test_accelerator.py``, ``test_prepare_model_twice_does_not_double_wrap``);
- a subclass of ``Accelerator`` with ``device_placement=False`` by default that keeps its modules out of
  ``prepare_model`` and hands everything else to ``super().prepare`` (``kvcache-ai/ktransformers``,
  ``kt-sft/ktransformers/util/trainer_utils.py``, ``KAccelerator``);
- a subclass that overrides ``prepare_model`` with upstream's signature and calls ``super().prepare_model`` with
  the same arguments, an instance whose ``prepare_model`` is replaced by a wrapper that calls the original, and the
  class's ``prepare_model`` replaced by such a function: the ways public training scripts put code around it
  (found by exact-string search of public code, in scripts whose repository the index does not name: Trainer
  subclasses that assign ``self.accelerator.prepare_model`` in ``create_accelerator_and_postprocess``, a DPO script
  that wraps ``Accelerator.prepare_model`` to clear ``hf_device_map`` around the original call, an ``Accelerator``
  subclass ``RepreparableAccelerator``);
- a tensor-parallel model kept out of DDP by a script that makes accelerate's shared state say one process (a TP+SP
  trainer on sd-scripts' ``prepare_accelerator``; repository not named by the index);
- a model compiled with ``torch.compile`` before ``prepare`` (``huggingface/accelerate``,
  ``tests/test_accelerator.py``, ``test_can_unwrap_distributed_compiled_model_*``).
"""

from __future__ import annotations

import pytest
import torch

import guardkit
from a1_models import CPU_JOB
from a1_models import model as _model
from harness import run_ranks

pytestmark = pytest.mark.guard(package="accelerate")

STEPS = 2


def _norms(module):
    return {k: float(v.norm()) for k, v in module.state_dict().items()}


def _steps(accelerator, prepared, optimizer, scheduler=None, batches=None):
    """STEPS steps of SGD on this rank's own batches (or on ``batches``, a prepared dataloader); the losses."""
    g = torch.Generator().manual_seed(accelerator.process_index)
    losses = []
    source = iter(batches) if batches is not None else None
    for _ in range(STEPS):
        x = next(source)[0] if source is not None else torch.randn(4, 8, generator=g)
        loss = prepared(x).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def _x():
    return torch.arange(32.0).reshape(4, 8) / 32


def _all_in_one(accelerator):
    from torch.utils.data import DataLoader, TensorDataset

    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    rows = torch.arange(16 * 8, dtype=torch.float32).reshape(16, 8) / 128
    train_dl = DataLoader(TensorDataset(rows), batch_size=2, shuffle=False)
    eval_dl = DataLoader(TensorDataset(rows[:6]), batch_size=2)
    listed = [1, 2, 3]
    model, optimizer, train_dl, eval_dl, scheduler, none, listed = accelerator.prepare(
        model, optimizer, train_dl, eval_dl, scheduler, None, listed
    )
    losses = _steps(accelerator, model, optimizer, scheduler, train_dl)
    model.eval()
    with torch.no_grad():
        outs = [accelerator.gather_for_metrics(model(batch[0])) for batch in eval_dl]
    return {
        "types": [type(o).__name__ for o in (model, optimizer, train_dl, eval_dl, scheduler, none, listed)],
        "lengths": [len(train_dl), len(eval_dl)],
        "losses": losses,
        "lr": scheduler.get_last_lr(),
        "gathered": torch.cat(outs),
        "norms": _norms(accelerator.unwrap_model(model)),
    }


def _for_evaluation(accelerator):
    policy, ref, reward = _model(), _model(), _model()
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
    policy, optimizer = accelerator.prepare(policy, optimizer)
    ref = accelerator.prepare_model(ref, evaluation_mode=True)
    reward = accelerator.prepare_model(reward, evaluation_mode=True, device_placement=True)
    losses = _steps(accelerator, policy, optimizer)
    with torch.no_grad():
        outs = {"ref": ref(_x()), "reward": reward(_x())}
    return {
        "types": [type(m).__name__ for m in (policy, ref, reward)],
        "requires_grad": [all(p.requires_grad for p in m.parameters()) for m in (ref, reward)],
        "models": len(accelerator._models),
        "losses": losses,
        "outs": outs,
    }


def _alone(accelerator):
    embedder = accelerator.prepare_model(_model())
    again = accelerator.prepare_model(embedder)
    with torch.no_grad():
        out = embedder(_x())
    return {
        "types": [type(embedder).__name__, type(again).__name__],
        "same": again is embedder,
        "models": len(accelerator._models),
        "out": out,
    }


def _compiled(accelerator):
    model = torch.compile(_model(), backend="eager")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    losses = _steps(accelerator, prepared, optimizer)
    unwrapped = accelerator.unwrap_model(prepared, keep_torch_compile=False)
    return {
        "types": [type(prepared).__name__, type(unwrapped).__name__],
        "losses": losses,
        "norms": _norms(unwrapped),
    }


def _spoofed_single_process():
    """A tensor-parallel model kept out of DDP by making the shared state say one process of no distributed type,
    then prepared with its optimizer and trained on the same batch on every rank (what tensor parallelism needs)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType
    from torch.distributed.device_mesh import init_device_mesh

    from a1_models import shard

    accelerator = Accelerator()
    spoof = {"distributed_type": DistributedType.NO, "process_index": 0, "local_process_index": 0, "num_processes": 1}
    PartialState._shared_state.update(spoof)
    AcceleratorState._shared_state.update(spoof)
    model = shard(_model(), init_device_mesh("cpu", (2,)), "parameters")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    losses = []
    for step in range(STEPS):
        loss = prepared(_x() + step).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return {
        "distributed_type": accelerator.distributed_type.value,
        "types": [type(prepared).__name__, type(prepared.up.weight).__name__],
        "losses": losses,
        "norms": {
            k: float(v.full_tensor().norm()) for k, v in prepared.state_dict().items() if hasattr(v, "full_tensor")
        },
    }


def _subclass_keeps_modules():
    """A subclass whose prepare keeps modules as they are and hands the rest to ``Accelerator.prepare``."""
    from accelerate import Accelerator

    class KeepsModules(Accelerator):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("device_placement", False)
            super().__init__(*args, **kwargs)

        def prepare_model(self, model, *args, **kwargs):
            return model

        def prepare(self, *args, **kwargs):
            out = []
            for o in args:
                out.append(
                    self.prepare_model(o, **kwargs) if isinstance(o, torch.nn.Module) else super().prepare(o, **kwargs)
                )
            return tuple(out) if len(out) > 1 else out[0]

    accelerator = KeepsModules()
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    losses = _steps(accelerator, prepared, optimizer)
    return {
        "device_placement": accelerator.device_placement,
        "types": [type(prepared).__name__, type(optimizer).__name__],
        "losses": losses,
        "norms": _norms(prepared),
    }


def _around(how):
    """Code around ``prepare_model``: a subclass overriding it and calling super, or an instance attribute that
    wraps the original; both record what they were given, as public wrappers inspect it."""
    from accelerate import Accelerator

    calls = []
    if how == "subclass":

        class Around(Accelerator):
            def prepare_model(self, model, device_placement=None, evaluation_mode=False):
                calls.append([type(model).__name__, device_placement, evaluation_mode])
                return super().prepare_model(model, device_placement=device_placement, evaluation_mode=evaluation_mode)

        accelerator = Around()
    elif how == "class":  # assigned on the class (this rank's process only), taking `self` as the method did
        original_method = Accelerator.prepare_model

        def method(self, model, device_placement=None, evaluation_mode=False):
            calls.append([type(model).__name__, device_placement, evaluation_mode])
            return original_method(self, model, device_placement=device_placement, evaluation_mode=evaluation_mode)

        Accelerator.prepare_model = method
        accelerator = Accelerator()
    else:
        accelerator = Accelerator()
        original = accelerator.prepare_model

        def wrapper(model, device_placement=None, evaluation_mode=False):
            calls.append([type(model).__name__, device_placement, evaluation_mode])
            return original(model, device_placement=device_placement, evaluation_mode=evaluation_mode)

        accelerator.prepare_model = wrapper
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    prepared, optimizer = accelerator.prepare(model, optimizer)
    ref = accelerator.prepare_model(_model(), evaluation_mode=True)
    losses = _steps(accelerator, prepared, optimizer)
    return {
        "calls": calls,
        "types": [type(prepared).__name__, type(ref).__name__],
        "losses": losses,
        "norms": _norms(accelerator.unwrap_model(prepared)),
    }


def _scenario(rank, world_size, name):
    with guardkit.capture() as seen:
        from accelerate import Accelerator

        if name.startswith("around-"):
            values = _around(name.split("-", 1)[1])
        elif name == "subclass-keeps-modules":
            values = _subclass_keeps_modules()
        elif name == "spoofed":
            values = _spoofed_single_process()
        else:
            accelerator = Accelerator()
            values = {"all-in-one": _all_in_one, "evaluation": _for_evaluation, "alone": _alone, "compiled": _compiled}[
                name
            ](accelerator)
            values["distributed_type"] = accelerator.distributed_type.value
    return {**values, "warnings": seen.warnings, "logs": seen.logs}


def _observe_ranks(observe, name):
    for rank, result in enumerate(run_ranks(_scenario, 2, name, env=CPU_JOB)):
        observe(f"rank{rank}", result)


def test_everything_prepared_in_one_call(observe):
    """Stands for accelerate's NLP example (huggingface/accelerate examples/nlp_example.py) and its tests
    ``test_accelerator_none`` and ``test_is_accelerator_prepared`` (huggingface/accelerate
    tests/test_accelerator.py): ``accelerator.prepare(model, optimizer, train_dl, eval_dl, scheduler, None, [1, 2,
    3])``, two steps and a gathered evaluation."""
    _observe_ranks(observe, "all-in-one")


def test_reference_and_reward_models_prepared_for_evaluation(observe):
    """Stands for TRL's trainers (huggingface/trl trl/trainer/grpo_trainer.py; also huggingface/trl
    trl/trainer/dpo_trainer.py and huggingface/trl trl/trainer/rloo_trainer.py): the policy with its optimizer,
    then a trainable reference model with ``prepare_model(ref, evaluation_mode=True)`` and a reward model with
    ``evaluation_mode=True, device_placement=True``: not wrapped, not frozen."""
    _observe_ranks(observe, "evaluation")


def test_model_prepared_alone_and_twice(observe):
    """Stands for the embedding model of TRL's BCO example (huggingface/trl examples/scripts/bco.py) and for
    accelerate's ``test_prepare_model_twice_does_not_double_wrap`` (huggingface/accelerate
    tests/test_accelerator.py): a trainable model prepared alone with ``prepare_model(model)`` (DDP wraps it) and
    used for inference, then prepared again, which returns it as it is."""
    _observe_ranks(observe, "alone")


def test_subclass_that_keeps_modules_out_of_prepare(observe):
    """Stands for ktransformers' ``KAccelerator`` (kvcache-ai/ktransformers
    kt-sft/ktransformers/util/trainer_utils.py): a subclass with ``device_placement=False`` by default whose
    ``prepare_model`` returns the model and whose ``prepare`` hands optimizers to ``super().prepare``."""
    _observe_ranks(observe, "subclass-keeps-modules")


@pytest.mark.parametrize("how", ["subclass", "instance", "class"])
def test_code_around_prepare_model(observe, how):
    """``prepare_model`` overridden in a subclass that calls ``super().prepare_model(model, device_placement=...,
    evaluation_mode=...)``, replaced on the instance by a wrapper that calls the original the same way (Trainer
    subclasses that assign ``self.accelerator.prepare_model``), or replaced on the class by a function of the
    method's signature that calls the original (training scripts that assign ``Accelerator.prepare_model``): what
    it is called with, and what it returns, for a model prepared with its optimizer and one prepared for
    evaluation."""
    _observe_ranks(observe, f"around-{how}")


def test_tensor_parallel_model_kept_out_of_ddp_by_a_spoofed_state(observe):
    """Tensor parallelism around accelerate rather than through it: after ``Accelerator()``, the script sets
    ``distributed_type=NO``, ``num_processes=1`` and the process indices in both ``PartialState._shared_state`` and
    ``AcceleratorState._shared_state``, so that ``prepare`` wraps nothing in DDP, then prepares a
    ``parallelize_module`` model and trains it on the same batch on every rank (a TP+SP DiT LoRA trainer built on
    sd-scripts' ``train_util.prepare_accelerator``, found by exact-string search; the index does not name its
    repository)."""
    _observe_ranks(observe, "spoofed")


def test_compiled_model(observe):
    """Stands for accelerate's ``test_can_unwrap_distributed_compiled_model_remove_torch_compile``
    (huggingface/accelerate tests/test_accelerator.py): a model compiled with ``torch.compile`` (the eager backend:
    no compiler needed) before ``prepare``, trained and unwrapped without its compile wrapper."""
    _observe_ranks(observe, "compiled")
