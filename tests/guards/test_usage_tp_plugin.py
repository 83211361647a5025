"""Guards mined from public code: how code outside accelerate 1.6.0 builds an ``Accelerator`` around
``TorchTensorParallelPlugin``, whose ``__post_init__``, ``Accelerator.__init__`` and ``AcceleratorState.__init__``
the A1 feature patches (a plugin passed to a CPU job builds its mesh on the CPU; ``ACCELERATE_USE_TP`` alone leaves a
CPU job on DDP).

The public ways in, each a guard here, on 2 real gloo ranks of a CPU job (tests/proof/harness.py) unless said:

- ``accelerate launch --use_tp`` writes ``ACCELERATE_USE_TP=true`` and ``TP_SIZE`` (its ``--tp_size`` defaults to
  1) into each process's environment (``huggingface/accelerate``, ``src/accelerate/utils/launch.py``,
  ``prepare_multi_gpu_env``), and ``Accelerator()`` builds the plugin from them;
- a plugin the script builds itself, ``TorchTensorParallelPlugin(tp_size=...)``, as transformers 4.50's Trainer does
  for ``TrainingArguments(tp_size=...)`` (``huggingface/transformers``, ``src/transformers/trainer.py``,
  ``create_accelerator_and_postprocess``), with a degree of 1, which the plugin refuses;
- ``PartialState()`` made before the ``Accelerator`` (``huggingface/trl``, ``examples/scripts/ppo/ppo.py``:
  ``with PartialState().local_main_process_first():``), which the patched plugin reads;
- transformers 4.50's Trainer on a CPU job without tensor parallelism (``TrainingArguments(use_cpu=True)``): the
  ``Accelerator`` it builds, and one training step;
- ``TrainingArguments(tp_size=2)`` leaves ``ACCELERATE_USE_TP=true`` and ``TP_SIZE=2`` in the environment of the whole
  process (``huggingface/transformers``, ``src/transformers/training_args.py``); a CPU job that then builds an
  ``Accelerator()`` of its own is in the feature's reach (pristine fails there) and declares so.

Recorded per rank: the state the ``Accelerator`` reports (distributed type, processes, device, whether it holds a
plugin and its mesh), what ``prepare`` returned and the losses of two steps, errors, warnings and log records.
"""

from __future__ import annotations

import os

import pytest
import torch

import guardkit
from a1_models import CPU_JOB
from a1_models import model as _model
from harness import run_ranks

pytestmark = pytest.mark.guard(package="accelerate")


def _state(accelerator):
    plugin = accelerator.state.torch_tp_plugin
    mesh = getattr(plugin, "torch_device_mesh", None)
    return {
        "distributed_type": accelerator.distributed_type.value,
        "num_processes": accelerator.num_processes,
        "device": str(accelerator.device),
        "plugin": None if plugin is None else type(plugin).__name__,
        "mesh": None if mesh is None else [mesh.device_type, list(mesh.mesh.shape)],
    }


def _train(accelerator):
    model = _model()
    prepared, losses = guardkit.sgd_steps(accelerator, model, 2)
    return {"wrapper": type(prepared).__name__, "losses": losses}


def _accelerator(rank, world_size, how, variables, plain_process=False):
    if plain_process:  # `python train.py` or a notebook: no torchrun, no process group
        for variable in guardkit.TORCHRUN:
            os.environ.pop(variable, None)
    os.environ.update(variables)
    with guardkit.capture() as seen:
        from accelerate import Accelerator, PartialState
        from accelerate.utils import TorchTensorParallelPlugin

        values = {}
        try:
            if how == "partial-state-first":
                with PartialState().local_main_process_first():
                    values["partial_state"] = PartialState().distributed_type.value
                accelerator = Accelerator()
            elif how.startswith("own-plugin-"):
                size = int(how.rsplit("-", 1)[1])
                accelerator = Accelerator(torch_tp_plugin=TorchTensorParallelPlugin(tp_size=size))
            else:
                accelerator = Accelerator()
            values.update(_state(accelerator))
            values.update(_train(accelerator))
        except Exception as exc:  # noqa: BLE001 - what accelerate raised is the observation; the rank goes on
            values["raised"] = guardkit.raised(exc)
    return {**values, "warnings": seen.warnings, "logs": seen.logs}


def _trainer(rank, world_size, folder):
    with guardkit.capture() as seen:
        from transformers import LlamaForCausalLM, Trainer, TrainingArguments

        from tiny_llama import small_config

        torch.manual_seed(0)
        model = LlamaForCausalLM(small_config())
        rows = [dict.fromkeys(("input_ids", "labels"), torch.tensor([1 + i, 5, 17, 42, 3, 88])) for i in range(4)]
        args = TrainingArguments(
            output_dir=os.path.join(folder, str(rank)),
            per_device_train_batch_size=2,
            max_steps=1,
            learning_rate=0.5,
            optim="sgd",
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
            seed=0,
        )
        trainer = Trainer(model=model, args=args, train_dataset=rows)
        trainer.train()
        values = {
            **_state(trainer.accelerator),
            "wrapper": type(trainer.model_wrapped).__name__,
            "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
        }
    return {**values, "warnings": seen.warnings, "logs": seen.logs}


def _observe_ranks(observe, fn, *args, world_size=2, init_group=True):
    for rank, result in enumerate(run_ranks(fn, world_size, *args, env=CPU_JOB, init_group=init_group)):
        observe(f"rank{rank}", result)


def test_launch_use_tp_with_its_default_size(observe):
    """Stands for what ``accelerate launch --use_tp`` writes into each process's environment
    (huggingface/accelerate src/accelerate/utils/launch.py, ``prepare_multi_gpu_env``), here without ``--tp_size``:
    ``ACCELERATE_USE_TP=true``, ``TP_SIZE=1``; the plugin ``Accelerator()`` builds from them refuses the degree, on
    a CPU job as on any."""
    _observe_ranks(observe, _accelerator, "env", {"ACCELERATE_USE_TP": "true", "TP_SIZE": "1"})


def test_own_plugin_of_degree_one(observe):
    """Stands for a plugin the script builds itself, as transformers 4.50's Trainer does for
    ``TrainingArguments(tp_size=...)`` (huggingface/transformers src/transformers/trainer.py,
    ``create_accelerator_and_postprocess``): ``Accelerator(torch_tp_plugin=TorchTensorParallelPlugin(tp_size=1))``,
    whose plugin refuses the degree before it builds a mesh (transformers' Trainer builds it only for
    ``tp_size > 1``)."""
    _observe_ranks(observe, _accelerator, "own-plugin-1", {})


@pytest.mark.parametrize("how", ["own-plugin-2", "env"])
def test_single_process_asking_for_tensor_parallelism(observe, how):
    """Stands for a plugin built as transformers 4.50's Trainer builds it (huggingface/transformers
    src/transformers/trainer.py) and for the environment ``TrainingArguments(tp_size=2)`` leaves in a notebook's
    process (huggingface/transformers src/transformers/training_args.py): a plain ``python train.py`` (no torchrun)
    that asks for a degree of 2, with a plugin of its own, or with ``ACCELERATE_USE_TP=true`` and ``TP_SIZE=2``:
    the mesh cannot be built without a process group, on either build."""
    variables = {"ACCELERATE_USE_TP": "true", "TP_SIZE": "2"} if how == "env" else {}
    _observe_ranks(observe, _accelerator, how, variables, True, world_size=1, init_group=False)


def test_partial_state_made_first(observe):
    """Stands for TRL's PPO example (huggingface/trl examples/scripts/ppo/ppo.py), which makes ``PartialState()``
    first (``with PartialState().local_main_process_first():``): then ``Accelerator()`` with no tensor parallelism,
    the state, the DDP wrapper and two steps."""
    _observe_ranks(observe, _accelerator, "partial-state-first", {})


def test_trainer_on_a_cpu_job(observe, tmp_path):
    """transformers' Trainer with ``TrainingArguments(use_cpu=True)`` (no ``tp_size``) on 2 ranks: the Accelerator it
    builds, the wrapper and the loss of one step."""
    _observe_ranks(observe, _trainer, str(tmp_path))


@pytest.mark.intended(
    "*",
    reason="the feature's reach: a CPU job with ACCELERATE_USE_TP=true and TP_SIZE=2 (what "
    "TrainingArguments(tp_size=2) leaves in the process) failed on pristine building a CUDA mesh; the patch leaves "
    "such a job on DDP",
)
def test_environment_left_by_training_arguments_tp_size(observe):
    """Stands for the environment ``TrainingArguments(tp_size=2)`` leaves in the whole process
    (huggingface/transformers src/transformers/training_args.py): ``ACCELERATE_USE_TP=true`` and ``TP_SIZE=2``,
    then ``Accelerator()`` of the script's own on a CPU job."""
    _observe_ranks(observe, _accelerator, "env", {"ACCELERATE_USE_TP": "true", "TP_SIZE": "2"})
