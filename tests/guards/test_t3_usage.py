"""Guards for T3 mined from public code: how downstream projects call, wrap, override, copy or monkeypatch the
functions T3 patches: ``Trainer.compute_loss``, ``Trainer._wrap_model``, and the count (``Trainer.get_batch_samples``,
which counts on 4.50.3 and 4.53.3, and ``Trainer._get_num_items_in_batch``, which it calls from 4.57 on).

Each guard stands for the public code its docstring names (repository and path, as found in the public index;
it never copies that code): the same kind of override or patch, on the real Trainer and a tiny Llama, under the
simulated DataParallel of the T3 guards (dataparallel_sim.py, ``n_gpu`` 2, full batches of 4 rows) unless it says
otherwise. Pristine is the reference, as for every guard. On transformers before 4.57, pristine Trainer cannot
pass the count through DataParallel (the bug): the scenarios in which it does declare so (``IN_THE_BUG``).
"""

from __future__ import annotations

import functools
import inspect
import re
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
import torch

from test_t3_dataparallel import IN_THE_BUG, SCALAR_LOSSES, _declared_scale, _model, _observe, _train

pytestmark = pytest.mark.guard(package="transformers")


# --- Trainer.compute_loss ---------------------------------------------------------------------------------------


@IN_THE_BUG
def test_compute_loss_passed_through_to_the_trainer(observe, tmp_path, monkeypatch):
    """An override that hands every argument to ``super().compute_loss`` (``*args, **kwargs``), as
    hiyouga/LLaMA-Factory src/llamafactory/train/pt/trainer.py (``CustomTrainer.compute_loss``) and
    src/llamafactory/train/sft/trainer.py do. Stands for hiyouga/LLaMA-Factory src/llamafactory/train/pt/trainer.py."""
    from transformers import Trainer

    class PassThrough(Trainer):
        def compute_loss(self, model, inputs, *args, **kwargs):
            return super().compute_loss(model, inputs, *args, **kwargs)

    _observe(observe, _train(tmp_path, monkeypatch, _model(), trainer_cls=PassThrough, evaluate=True))


@IN_THE_BUG
def test_compute_loss_returning_outputs_for_metrics(observe, tmp_path, monkeypatch):
    """An override that calls ``super().compute_loss(..., return_outputs=True, num_items_in_batch=...)`` and reads
    the (gathered) logits for a token accuracy metric, as huggingface/trl trl/trainer/sft_trainer.py
    (``SFTTrainer.compute_loss``) does. Stands for huggingface/trl trl/trainer/sft_trainer.py."""
    from transformers import Trainer

    accuracies: list[float] = []

    class WithMetrics(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs["labels"]
            loss, outputs = super().compute_loss(
                model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
            )
            with torch.no_grad():
                predictions = outputs.logits[..., :-1, :].argmax(dim=-1)
                targets = labels[: len(predictions), 1:]  # the rows the outputs cover (4.51-4.56: one replica's)
                mask = targets != -100
                accuracies.append(float(((predictions == targets) & mask).sum() / mask.sum()))
            return (loss, outputs) if return_outputs else loss

    trainer = _train(tmp_path, monkeypatch, _model(), trainer_cls=WithMetrics)
    _observe(observe, trainer)
    observe("accuracies", accuracies)


def test_compute_loss_without_the_count_scaled_for_accumulation(observe, tmp_path, monkeypatch):
    """An override that calls ``super().compute_loss`` without the count and divides the loss by the gradient
    accumulation steps itself when Trainer gave a count and the model takes loss kwargs, as modelscope/ms-swift
    swift/trainers/trainer.py (``Trainer.compute_loss``) does; gradient accumulation 2. The count never reaches the
    model, on any release. Stands for modelscope/ms-swift swift/trainers/trainer.py."""
    from transformers import Trainer

    class OwnAccumulation(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss, outputs = super().compute_loss(model, inputs, return_outputs=True)
            if num_items_in_batch is not None and self.model_accepts_loss_kwargs:
                loss = loss / self.args.gradient_accumulation_steps
            return (loss, outputs) if return_outputs else loss

    trainer = _train(tmp_path, monkeypatch, _model(), trainer_cls=OwnAccumulation, gradient_accumulation_steps=2)
    _observe(observe, trainer)


def _process_scaled_trainer():
    """A ``compute_loss`` of its own that passes the count to the model and, with ``average_tokens_across_devices``,
    multiplies the loss by the number of processes, as the releases before 4.57.1 did and as modelscope/ms-swift
    swift/trainers/seq2seq_trainer.py (``Seq2SeqTrainer.compute_loss``) still does: no ``n_gpu`` scale."""
    from transformers import Trainer

    class ProcessScaled(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            counted = self.model_accepts_loss_kwargs and num_items_in_batch is not None
            outputs = model(**inputs, **({"num_items_in_batch": num_items_in_batch} if counted else {}))
            loss = outputs.loss
            if counted and self.args.average_tokens_across_devices:
                loss = loss * self.accelerator.num_processes
            return (loss, outputs) if return_outputs else loss

    return ProcessScaled


@IN_THE_BUG
@SCALAR_LOSSES
def test_compute_loss_scaled_by_processes_only(observe, tmp_path, monkeypatch):
    """The override of ``_process_scaled_trainer`` on full batches: ``1/n_gpu`` of the batch loss on both builds
    (upstream's contract since 4.57.1 is that ``compute_loss`` multiplies the replicas' losses by ``n_gpu``).
    Stands for modelscope/ms-swift swift/trainers/seq2seq_trainer.py."""
    _observe(observe, _train(tmp_path, monkeypatch, _model(), trainer_cls=_process_scaled_trainer()))


@IN_THE_BUG
@SCALAR_LOSSES
@_declared_scale(
    "a compute_loss that passes the count but does not multiply by n_gpu gets 1/n_gpu of the batch loss by "
    "upstream's contract since 4.57.1; pristine gave a last batch that one replica runs the whole count, which by "
    "accident was right there, and +fixed gives it the share that makes Trainer's own compute_loss right: 1/n_gpu, "
    "as on its full batches"
)
def test_compute_loss_scaled_by_processes_only_on_a_last_smaller_batch(observe, tmp_path, monkeypatch):
    """The same override on 5 rows: a full batch, then a last batch of one row that one replica runs."""
    trainer_cls = _process_scaled_trainer()
    _observe(observe, _train(tmp_path, monkeypatch, _model(), trainer_cls=trainer_cls, rows=5))


def _recompiled_compute_loss() -> Callable[..., Any]:
    """``Trainer.compute_loss`` compiled anew from the installed release's own source, with ``loss *=`` written as
    ``loss = loss *`` and the module's names as its globals: what unslothai/unsloth unsloth/models/_utils.py
    (``patch_gradient_accumulation_fix``) does to the installed Trainer before it trains."""
    import transformers.trainer
    from transformers import Trainer

    source = textwrap.dedent(inspect.getsource(Trainer.compute_loss))
    namespace = dict(vars(transformers.trainer))
    exec(compile(re.sub(r"loss\s*\*=", "loss = loss *", source), "<compute_loss>", "exec"), namespace)
    return namespace["compute_loss"]


@IN_THE_BUG
def test_compute_loss_recompiled_from_its_source(observe, tmp_path, monkeypatch):
    """Trainer's own ``compute_loss`` recompiled from its source (``_recompiled_compute_loss``), under
    DataParallel, then evaluation: it runs as the release's method does on the same build.
    Stands for unslothai/unsloth unsloth/models/_utils.py."""
    from transformers import Trainer

    recompiled = _recompiled_compute_loss()

    class Recompiled(Trainer):
        compute_loss = recompiled

    _observe(observe, _train(tmp_path, monkeypatch, _model(), trainer_cls=Recompiled, evaluate=True))


@IN_THE_BUG
def test_compute_loss_wrapped_on_the_instance(observe, tmp_path, monkeypatch):
    """``trainer.compute_loss`` replaced on the instance by a wrapper that calls the original and hands the loss to a
    callback, as axolotl-ai-cloud/axolotl src/axolotl/integrations/llm_compressor/plugin.py
    (``compute_loss_wrapper``) does: the losses the callback saw (shape and mean).
    Stands for axolotl-ai-cloud/axolotl src/axolotl/integrations/llm_compressor/plugin.py."""
    seen: list[tuple[list[int], float]] = []

    def notifying(compute_loss):
        @functools.wraps(compute_loss)
        def wrapper(model, *args, **kwargs):
            loss = compute_loss(model, *args, **kwargs)
            if model.training:
                seen.append((list(loss.shape), float(loss.detach().mean())))
            return loss

        return wrapper

    from transformers import Trainer

    class Wrapped(Trainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.compute_loss = notifying(self.compute_loss)  # type: ignore[has-type]

    trainer = _train(tmp_path, monkeypatch, _model(), trainer_cls=Wrapped)
    _observe(observe, trainer)
    observe("shapes", [shape for shape, _ in seen])
    observe("means", [mean for _, mean in seen])


# --- Trainer._wrap_model ----------------------------------------------------------------------------------------


def test_wrap_model_with_n_gpu_hidden(observe, tmp_path, monkeypatch):
    """A ``_wrap_model`` patch that sets ``args._n_gpu = 1`` while the original runs, so that the model is not wrapped
    in DataParallel while ``args.n_gpu`` stays 2 everywhere else, as unslothai/unsloth unsloth/models/_utils.py
    (``_patch_transformers_trainer_data_parallel``) does for models it marks. Nothing scatters the count: the model
    gets it whole. Stands for unslothai/unsloth unsloth/models/_utils.py."""
    from transformers import Trainer

    class HidesNGpu(Trainer):
        def _wrap_model(self, model, *args, **kwargs):
            n_gpu = self.args._n_gpu
            self.args._n_gpu = 1
            try:
                return super()._wrap_model(model, *args, **kwargs)
            finally:
                self.args._n_gpu = n_gpu

    trainer = _train(tmp_path, monkeypatch, _model(), trainer_cls=HidesNGpu, evaluate=True)
    observe("wrapped", type(trainer.model_wrapped).__name__)
    _observe(observe, trainer)


@IN_THE_BUG
def test_wrap_model_delegating_to_the_trainer(observe, tmp_path, monkeypatch):
    """A ``_wrap_model`` override that returns the model it was given in some cases and otherwise calls
    ``super()._wrap_model(model, training=training)``, dropping ``dataloader``, as hiyouga/LLaMA-Factory
    src/llamafactory/train/hyper_parallel/trainer.py does; training and evaluation both wrap through it.
    Stands for hiyouga/LLaMA-Factory src/llamafactory/train/hyper_parallel/trainer.py."""
    from transformers import Trainer

    class Delegating(Trainer):
        def _wrap_model(self, model, training=True, dataloader=None):
            if getattr(model, "already_sharded", False):
                return model
            return super()._wrap_model(model, training=training)

    _observe(observe, _train(tmp_path, monkeypatch, _model(), trainer_cls=Delegating, evaluate=True))


_RAISED_FIRST = "+fixed raised in the first step (see raised): nothing it would have recorded or warned"
_ONE_REPLICA = "transformers>=4.51,<4.57"


def _own_data_parallel_trainer():
    """A copy of an older ``Trainer._wrap_model`` that wraps the model in ``nn.DataParallel`` itself when
    ``n_gpu > 1``, as huggingface/optimum optimum/onnxruntime/trainer.py (``ORTTrainer._wrap_model``) does."""
    from torch import nn
    from transformers import Trainer

    class OwnDataParallel(Trainer):
        def _wrap_model(self, model, training=True, dataloader=None):
            if self.accelerator.unwrap_model(model) is not model:
                return model
            if self.args.n_gpu > 1:
                model = nn.DataParallel(model)
            return model

    return OwnDataParallel


def _built_its_own_data_parallel(test):
    """Where pristine is in the bug (4.51-4.56: one replica runs), +fixed raises on the first step."""
    test = pytest.mark.intended(
        "raised",
        reason="in the bug on pristine 4.51-4.56: the count, unsqueezed to [1], is chunked into one piece and only one "
        "replica runs (the rest of the batch is dropped); +fixed hands it on as one device gets it, 0-d, which a "
        "plain nn.DataParallel cannot scatter (the bug's own error, as on pristine 4.50). Build the model through "
        "super()._wrap_model to have it shared",
        when=_ONE_REPLICA,
    )(test)
    for key in ("losses", "weights", "grad_norms", "warnings", "eval_loss"):
        test = pytest.mark.intended(key, reason=_RAISED_FIRST, when=_ONE_REPLICA)(test)
    return test


@_built_its_own_data_parallel
def test_wrap_model_building_its_own_data_parallel(observe, tmp_path, monkeypatch):
    """The trainer of ``_own_data_parallel_trainer``; training and evaluation both wrap through its ``_wrap_model``.
    Trainer's own ``compute_loss`` passes the count to that plain ``nn.DataParallel``, which must scatter it as on
    pristine. Stands for huggingface/optimum optimum/onnxruntime/trainer.py."""
    trainer_cls = _own_data_parallel_trainer()
    _observe(observe, _train(tmp_path, monkeypatch, _model(), trainer_cls=trainer_cls, evaluate=True))


@_built_its_own_data_parallel
def test_wrap_model_building_its_own_data_parallel_not_averaging(observe, tmp_path, monkeypatch):
    """The same with ``average_tokens_across_devices=False``: then nothing multiplies the replicas' losses, and each
    replica divides by its share of the count (pristine: ``num_items_in_batch // n_gpu``). Every batch holds an even
    count, so that pristine's floor division, which is off for an odd count (the bug), is exact here."""
    trainer_cls = _own_data_parallel_trainer()
    trainer = _train(
        tmp_path,
        monkeypatch,
        _model(),
        trainer_cls=trainer_cls,
        evaluate=True,
        supervised=[6, 2, 4, 2, 4, 6, 2, 4],
        average_tokens_across_devices=False,
    )
    _observe(observe, trainer)


# --- the count: Trainer.get_batch_samples / Trainer._get_num_items_in_batch ---------------------------------------


@IN_THE_BUG
def test_get_batch_samples_of_the_trainer_called_by_a_subclass(observe, tmp_path, monkeypatch):
    """A subclass whose ``get_batch_samples(*args, **kwargs)`` calls ``Trainer.get_batch_samples(self, ...)`` by
    name (skipping its other parents'), as hiyouga/LLaMA-Factory src/llamafactory/train/kto/trainer.py and
    src/llamafactory/train/dpo/trainer.py do.
    Stands for hiyouga/LLaMA-Factory src/llamafactory/train/kto/trainer.py."""
    from transformers import Trainer

    class Delegating(Trainer):
        def get_batch_samples(self, *args, **kwargs):
            return Trainer.get_batch_samples(self, *args, **kwargs)

    _observe(observe, _train(tmp_path, monkeypatch, _model(), trainer_cls=Delegating, evaluate=True))


def test_get_batch_samples_replaced_by_a_per_replica_count(observe, tmp_path, monkeypatch):
    """``Trainer.get_batch_samples`` replaced by one that counts the shifted labels itself and, under DataParallel,
    returns one count per replica (``count.unsqueeze(0).repeat(n_gpu)``), as unslothai/unsloth-zoo
    unsloth_zoo/loss_utils.py (``_unsloth_get_batch_samples``, which unslothai/unsloth unsloth/models/_utils.py
    installs on ``Trainer``) does. A per-replica count is not one count: DataParallel scatters it as before.
    Stands for unslothai/unsloth-zoo unsloth_zoo/loss_utils.py, unslothai/unsloth unsloth/models/_utils.py."""
    from transformers import Trainer

    class PerReplicaCount(Trainer):
        def get_batch_samples(self, epoch_iterator, num_batches, device=None, *args, **kwargs):
            batches = []
            for _ in range(num_batches):
                try:
                    batches.append(next(epoch_iterator))
                except StopIteration:
                    break
            if not batches:
                return batches, None
            count = sum((b["labels"][..., 1:] != -100).sum() for b in batches)
            if self.args.n_gpu > 1:
                count = count.unsqueeze(0).repeat(self.args.n_gpu)
            return batches, count

    _observe(observe, _train(tmp_path, monkeypatch, _model(), trainer_cls=PerReplicaCount))


def test_sources_that_patchers_check(observe):
    """What unslothai/unsloth unsloth/models/_utils.py (``patch_gradient_accumulation_fix``) reads before it
    replaces Trainer's methods: whether the source of ``Trainer.get_batch_samples`` ends with
    ``return batch_samples, num_items_in_batch`` (it raises otherwise), and whether the source of
    ``Trainer.compute_loss`` has a ``loss *=`` to rewrite; and the signatures of the three patched methods.
    Stands for unslothai/unsloth unsloth/models/_utils.py."""
    from transformers import Trainer

    observe(
        "get_batch_samples_ends_with_its_return",
        inspect.getsource(Trainer.get_batch_samples).strip().endswith("return batch_samples, num_items_in_batch"),
    )
    compute_loss_source = inspect.getsource(Trainer.compute_loss)
    observe("compute_loss_has_loss_times_equals", bool(re.search(r"loss\s*\*=", compute_loss_source)))
    observe(
        "signatures",
        {
            name: str(inspect.signature(getattr(Trainer, name)))
            for name in ("compute_loss", "_wrap_model", "get_batch_samples")
        },
    )
