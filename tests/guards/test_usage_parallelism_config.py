"""Guards mined from public code: how code outside accelerate 1.15.0 builds an ``Accelerator`` with a
``ParallelismConfig``, whose ``_validate_accelerator`` the A1 feature patches (a CPU job accepts a configuration of
tensor parallelism alone; the refusal of every other configuration on MULTI_CPU is reworded to say so).

The public ways in, each a guard here, on 2 real gloo ranks of a CPU job (tests/proof/harness.py) unless said:

- ``ParallelismConfig()`` built from the environment and passed on (``huggingface/accelerate``,
  ``examples/torch_native_parallelism/nd_parallel_trainer.py``), with no variable set: a default configuration;
- ``ParallelismConfig(dp_replicate_size=..., dp_shard_size=..., tp_size=...)`` from a script's arguments, then
  ``Accelerator(parallelism_config=...)`` (``huggingface/accelerate``,
  ``examples/torch_native_parallelism/nd_parallel.py``), with data parallelism only, which a CPU job refuses on
  either build; and the same configuration written by ``accelerate launch --parallelism_config_dp_replicate_size``
  into ``ACCELERATE_USE_PARALLELISM_CONFIG`` and ``PARALLELISM_CONFIG_DP_REPLICATE_SIZE``
  (``src/accelerate/utils/launch.py``), which ``Accelerator()`` reads;
- a plain ``python train.py`` (one process) with a default configuration, and with ``tp_size=2``, which does not
  match the number of processes;
- the deprecated ``Accelerator(torch_tp_plugin=TorchTensorParallelPlugin(tp_size=2))``, which 1.15.0 turns into
  ``ParallelismConfig(tp_size=2)``, on a CPU job: the feature's reach (pristine refuses it), declared.

Recorded per rank: the distributed type, the configuration's sizes, the device mesh (type and dimensions), what
``prepare`` returned and two steps' losses, the refusal's type, warnings and log records; the refusal's wording is
recorded apart (the patch rewords it, and declares so).
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

REWORDED = (
    "the patch rewords the refusal of a ParallelismConfig on MULTI_CPU to name what a CPU job accepts (tensor "
    "parallelism alone); the refusal itself, its type and where it happens are pristine's"
)


def _accelerator(rank, world_size, how, sizes, variables, plain_process):
    if plain_process:  # `python train.py`: no torchrun, no process group
        for variable in guardkit.TORCHRUN:
            os.environ.pop(variable, None)
    os.environ.update(variables)
    values, refusal = {}, None
    with guardkit.capture() as seen:
        from accelerate import Accelerator
        from accelerate.parallelism_config import ParallelismConfig

        try:
            if how == "environment":
                accelerator = Accelerator()
            elif how == "tp-plugin":
                from accelerate.utils import TorchTensorParallelPlugin

                accelerator = Accelerator(torch_tp_plugin=TorchTensorParallelPlugin(tp_size=2))
            else:
                accelerator = Accelerator(parallelism_config=ParallelismConfig(**sizes))
            config, mesh = accelerator.parallelism_config, accelerator.torch_device_mesh
            values["distributed_type"] = accelerator.distributed_type.value
            values["sizes"] = None if config is None else [config.total_size, config.dp_replicate_size, config.tp_size]
            values["mesh"] = None if mesh is None else [mesh.device_type, list(mesh.mesh_dim_names or ())]
            model = _model()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            prepared, optimizer = accelerator.prepare(model, optimizer)
            g = torch.Generator().manual_seed(accelerator.process_index)
            values["wrapper"], values["losses"] = type(prepared).__name__, []
            for _ in range(2):
                loss = prepared(torch.randn(4, 8, generator=g)).pow(2).mean()
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                values["losses"].append(loss.item())
        except Exception as exc:  # noqa: BLE001 - what accelerate raised is the observation; the rank goes on
            values["raised"], refusal = type(exc).__name__, str(exc)
    return {**values, "warnings": seen.warnings, "logs": seen.logs}, refusal


def _observe_ranks(observe, how, sizes=None, variables=None, world_size=2, plain_process=False):
    results = run_ranks(
        _accelerator,
        world_size,
        how,
        sizes or {},
        variables or {},
        plain_process,
        env=CPU_JOB,
        init_group=not plain_process,
    )
    for rank, (values, _) in enumerate(results):
        observe(f"rank{rank}", values)
    observe("refusals", [refusal for _, refusal in results])


def test_default_configuration_on_a_cpu_job(observe):
    """Stands for accelerate's ND-parallel Trainer example (huggingface/accelerate
    examples/torch_native_parallelism/nd_parallel_trainer.py), which builds ``ParallelismConfig()`` from the
    environment and passes it to ``TrainingArguments``: here with no ``PARALLELISM_CONFIG_*`` variable set, passed
    to the Accelerator: accepted, DDP, two steps."""
    _observe_ranks(observe, "config", {})


@pytest.mark.intended("refusals", reason=REWORDED)
@pytest.mark.parametrize("sizes", [{"dp_replicate_size": 2}, {"dp_shard_size": 2}], ids=["dp-replicate", "dp-shard"])
def test_data_parallel_configuration_on_a_cpu_job(observe, sizes):
    """Stands for accelerate's ND-parallel example (huggingface/accelerate
    examples/torch_native_parallelism/nd_parallel.py), which builds ``ParallelismConfig(dp_replicate_size=...,
    dp_shard_size=..., tp_size=...)`` from its arguments and passes it to ``Accelerator(parallelism_config=...)``:
    ``nd_parallel.py --dp-replicate-size 2`` or ``--dp-shard-size 2`` on a CPU job, refused on either build (a CPU
    job accepts tensor parallelism alone)."""
    _observe_ranks(observe, "config", sizes)


@pytest.mark.intended("refusals", reason=REWORDED)
def test_configuration_from_accelerate_launch(observe):
    """Stands for ``accelerate launch --parallelism_config_dp_replicate_size 2`` (huggingface/accelerate
    src/accelerate/utils/launch.py): the variables it writes, ``ACCELERATE_USE_PARALLELISM_CONFIG`` and
    ``PARALLELISM_CONFIG_DP_REPLICATE_SIZE``, read by ``Accelerator()``; refused on a CPU job on either build."""
    variables = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true", "PARALLELISM_CONFIG_DP_REPLICATE_SIZE": "2"}
    _observe_ranks(observe, "environment", variables=variables)


@pytest.mark.parametrize("sizes", [{}, {"tp_size": 2}], ids=["default", "tp-2"])
def test_single_process(observe, sizes):
    """A plain ``python train.py`` with a default configuration (accepted, nothing distributed), and with
    ``tp_size=2``, which does not match its one process (refused on either build, in the same words)."""
    _observe_ranks(observe, "config", sizes, world_size=1, plain_process=True)


@pytest.mark.intended(
    "*",
    reason="the feature's reach: tensor parallelism alone on a CPU job, here through the deprecated "
    "TorchTensorParallelPlugin(tp_size=2) that 1.15.0 turns into ParallelismConfig(tp_size=2); pristine refuses it",
)
def test_deprecated_tp_plugin_on_a_cpu_job(observe):
    """``Accelerator(torch_tp_plugin=TorchTensorParallelPlugin(tp_size=2))`` on a CPU job of 2 processes."""
    _observe_ranks(observe, "tp-plugin")
