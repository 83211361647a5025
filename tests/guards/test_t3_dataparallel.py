"""Guards for T3 (``num_items_in_batch`` under ``nn.DataParallel``): what Trainer users next to the bug do.

Each scenario runs the real Trainer on a tiny Llama, with ``n_gpu`` forced to 2 and ``nn.DataParallel`` simulated
on CPU by torch's own scatter code (dataparallel_sim.py), or on one device. Batches are full (8 rows, 4 per step,
2 per replica), so no scenario is the bug's last smaller batch. Rows carry different numbers of supervised tokens,
so a changed normalisation shows in the losses. Recorded: each step's loss, the logged gradient norms, the weights
after training, evaluation and prediction results, and what the DataParallel wrapper exposes.

On transformers before 4.57, pristine Trainer cannot pass the count through DataParallel (4.50: the 0-d count's
``chunk`` fails; 4.51 to 4.56: one replica runs and the rest of the batch is dropped): scenarios in which Trainer's
own ``compute_loss`` passes it are in the bug there, not next to it, and declare so.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch

import guardkit
import tiny_models
from dataparallel_sim import simulate
from tiny_llama import small_config

pytestmark = pytest.mark.guard(package="transformers")

ROWS, SEQ, BATCH = 8, 8, 4
SUPERVISED = [7, 2, 5, 1, 4, 6, 3, 8]
IN_THE_BUG = pytest.mark.intended(
    "*",
    reason="pristine Trainer cannot pass the count through DataParallel before 4.57 (4.50: the 0-d count's chunk "
    "fails; 4.51-4.56: one replica runs): the scenario is in the bug there",
    when="transformers<4.57",
)
SCALAR_LOSSES = pytest.mark.intended(
    "warnings",
    match=r"^UserWarning: Was asked to gather along dimension 0, but all input tensors were scalars",
    reason="a compute_loss of its own passes the model the count Trainer gave it, 0-d as on one device (pristine "
    "gave [n_gpu, 1], and each replica divided by a [1, 1] slice of it): each replica's share and loss are 0-d, and "
    "torch's gather says that it stacks scalars, as it does for every DataParallel model not given the count. "
    "Trainer's own compute_loss passes the [n_gpu, 1] view pristine passed, and its gather is pristine's",
    when="transformers>=4.57",
)


def _rows(n=ROWS, supervised=SUPERVISED):
    g = torch.Generator().manual_seed(3)
    out = []
    for i in range(n):
        ids = torch.randint(1, 64, (SEQ,), generator=g)
        labels = ids.clone()
        labels[: SEQ - supervised[i % len(supervised)]] = -100
        out.append({"input_ids": ids, "labels": labels, "attention_mask": torch.ones(SEQ, dtype=torch.long)})
    return out


def _model(cls=None):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return (cls or LlamaForCausalLM)(small_config(vocab_size=64, use_cache=False))


def _mean_loss_model():
    """A model whose ``forward`` takes ``**kwargs`` (so Trainer passes it the count) but returns its own mean loss,
    ignoring the count, as sequence-classification heads do."""
    from transformers import LlamaForCausalLM

    class MeanLossLlama(LlamaForCausalLM):
        def forward(self, input_ids=None, attention_mask=None, labels=None, num_items_in_batch=None, **kwargs):
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **kwargs)

    return _model(MeanLossLlama)


def _no_count_llama():
    """A Llama that takes no count (``accepts_loss_kwargs = False``), made a global of this module so that an
    instance pickles (transformers is imported by the test, not when pytest collects this module)."""
    if "NoCountLlama" not in globals():
        from transformers import LlamaForCausalLM

        cls = type("NoCountLlama", (LlamaForCausalLM,), {"accepts_loss_kwargs": False, "__module__": __name__})
        globals()["NoCountLlama"] = cls
    return globals()["NoCountLlama"]


def _train(
    tmp_path,
    monkeypatch,
    model,
    *,
    n_gpu=2,
    trainer_cls=None,
    steps=2,
    evaluate=False,
    rows=ROWS,
    supervised=SUPERVISED,
    **args_kw,
):
    """The real Trainer under the simulated DataParallel (``n_gpu`` > 1), or on one device; ``rows``: how many rows
    it trains on (a number that is not a multiple of 4 leaves a last, smaller batch); ``supervised``: the supervised
    positions of each row, in turn."""
    from transformers import Trainer

    losses: list[float] = []

    class Recording(trainer_cls or Trainer):  # type: ignore[misc]
        def training_step(self, *args, **kwargs):
            loss = super().training_step(*args, **kwargs)
            losses.append(loss.item())
            return loss

    log = simulate(monkeypatch, n_gpu) if n_gpu > 1 else []
    args = guardkit.trainer_args(
        str(tmp_path / "out"), n_gpu, BATCH, steps, per_device_eval_batch_size=BATCH // n_gpu, **args_kw
    )
    trainer = Recording(
        model=model, args=args, train_dataset=_rows(rows, supervised), eval_dataset=_rows(BATCH, supervised)
    )
    trainer.replica_log = log
    trainer.train()
    trainer.guard = {
        "losses": losses,
        "grad_norms": [e["grad_norm"] for e in trainer.state.log_history if "grad_norm" in e],
        "weights": [float(sum(p.double().sum() for p in model.parameters())), float(_norm(model))],
    }
    if evaluate:
        trainer.guard["eval_loss"] = trainer.evaluate()["eval_loss"]
    return trainer


def _norm(model):
    return torch.sqrt(sum((p.double() ** 2).sum() for p in model.parameters()))


def _observe(observe, trainer):
    for key, value in trainer.guard.items():
        observe(key, value)


def test_one_device(observe, tmp_path, monkeypatch):
    """No DataParallel (n_gpu 1): training and evaluation as before."""
    _observe(observe, _train(tmp_path, monkeypatch, _model(), n_gpu=1, evaluate=True))


def _own_loss_trainer(scaled_for_ga):
    from transformers import Trainer

    class OwnLoss(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            outputs = model(**inputs)  # the count is not passed: each replica returns its own mean
            return (outputs.loss, outputs) if return_outputs else outputs.loss

    if scaled_for_ga is not None:
        OwnLoss.loss_is_scaled_for_ga = scaled_for_ga
    return OwnLoss


@pytest.mark.parametrize("scaled_for_ga", [None, False], ids=["default", "loss_is_scaled_for_ga-False"])
def test_compute_loss_override_without_the_count(observe, tmp_path, monkeypatch, scaled_for_ga):
    """The common custom Trainer: ``model(**inputs)``, ``outputs.loss``, no count; with gradient accumulation 2.
    ``loss_is_scaled_for_ga`` is upstream's switch (5.x) for trainers that compute their own loss."""
    trainer = _train(
        tmp_path,
        monkeypatch,
        _model(),
        trainer_cls=_own_loss_trainer(scaled_for_ga),
        gradient_accumulation_steps=2,
        evaluate=True,
    )
    _observe(observe, trainer)


def _declared_scale(reason):
    """The loss, gradients and updated weights of a scenario whose n_gpu scale the fix corrects (4.57, 5.x). The
    gradient norms differ only where Trainer logs them without clipping (5.x): 4.57 logs a norm only when it clips,
    and these guards do not clip, so there the updated weights show the gradients' scale."""

    def mark(test):
        for key, when in (
            ("losses", "transformers>=4.57"),
            ("grad_norms", "transformers>=5"),
            ("weights", "transformers>=4.57"),
        ):
            test = pytest.mark.intended(key, reason=reason, when=when)(test)
        return test

    return mark


@IN_THE_BUG
def test_mean_loss_model_averaging_tokens(observe, tmp_path, monkeypatch):
    """A model that takes ``**kwargs`` and returns its own mean loss, ``average_tokens_across_devices=True`` (the
    default since 4.57; 4.x before it turns it off in a single process, and says so). ``compute_loss`` multiplies
    the replicas' losses by ``n_gpu``, as for any model that takes loss kwargs (upstream's contract since 4.57.1): the
    model never used the count, so its loss is ``n_gpu`` times the mean of its replicas' losses, on both builds."""
    _observe(observe, _train(tmp_path, monkeypatch, _mean_loss_model(), average_tokens_across_devices=True))


def _passes_the_count_trainer(scales):
    """A Trainer subclass whose ``compute_loss`` passes the count to the model itself; ``scales``: and multiplies the
    loss by ``n_gpu`` with ``average_tokens_across_devices``, as the releases' own method does since 4.57.1 (public
    code copies it: huggingface/transformers src/transformers/trainer.py, ``Trainer.compute_loss``)."""
    from transformers import Trainer

    class PassesTheCount(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            outputs = model(**inputs, num_items_in_batch=num_items_in_batch)
            loss = outputs.loss
            if scales and self.args.average_tokens_across_devices and num_items_in_batch is not None:
                loss = loss * (self.args.n_gpu if self.args.n_gpu > 1 else self.accelerator.num_processes)
            return (loss, outputs) if return_outputs else loss

    return PassesTheCount


@IN_THE_BUG
@SCALAR_LOSSES
def test_copy_of_the_release_compute_loss(observe, tmp_path, monkeypatch):
    """A ``compute_loss`` copied from the release's: it passes the count and multiplies the replicas' losses by
    ``n_gpu`` (``average_tokens_across_devices``, the default since 4.57): the one-device loss on pristine's full
    batches, and on +fixed's. Stands for huggingface/transformers src/transformers/trainer.py."""
    trainer_cls = _passes_the_count_trainer(scales=True)
    _observe(observe, _train(tmp_path, monkeypatch, _model(), trainer_cls=trainer_cls, evaluate=True))


@IN_THE_BUG
@SCALAR_LOSSES
def test_compute_loss_override_that_passes_the_count_without_scaling(observe, tmp_path, monkeypatch):
    """A ``compute_loss`` override that passes the count but does not multiply by ``n_gpu``, with
    ``average_tokens_across_devices=True``: by upstream's contract since 4.57.1 (``compute_loss`` scales the replicas'
    losses), its loss is ``1/n_gpu`` of the batch's on full batches, on both builds. (Without averaging nothing
    scales and the loss is the batch's: a proof.)"""
    trainer_cls = _passes_the_count_trainer(scales=False)
    _observe(observe, _train(tmp_path, monkeypatch, _model(), trainer_cls=trainer_cls))


@IN_THE_BUG
@pytest.mark.parametrize("kind", ["numpy-int64", "numpy-0-d-array"])
def test_numpy_count_from_get_batch_samples(observe, tmp_path, monkeypatch, kind):
    """A ``get_batch_samples`` override that returns the count NumPy gives (``np.sum``: a ``numpy.int64``, or a 0-d
    array), for a model that reads it with ``float()``: on full batches, the one-device loss on pristine since 4.57
    (the replicas got it whole, and ``compute_loss`` multiplied their losses by ``n_gpu``), and on +fixed (a share
    each). Before 4.57 (nothing scaled) pristine's loss was ``1/n_gpu`` of it: in the bug there."""
    float_count_llama, numpy_count_trainer = tiny_models.numpy_count_classes(kind)

    _observe(observe, _train(tmp_path, monkeypatch, _model(float_count_llama), trainer_cls=numpy_count_trainer))


@IN_THE_BUG
def test_mean_loss_model_not_averaging_tokens(observe, tmp_path, monkeypatch):
    """The same with ``average_tokens_across_devices=False``: each replica's mean, averaged, as before."""
    _observe(observe, _train(tmp_path, monkeypatch, _mean_loss_model(), average_tokens_across_devices=False))


@IN_THE_BUG
@_declared_scale(
    "pristine multiplied the batch loss that the label smoother returns by n_gpu "
    "(average_tokens_across_devices=True): n_gpu times the loss of one device; it is the batch loss now"
)
def test_label_smoothing(observe, tmp_path, monkeypatch):
    """Trainer's label smoother (``label_smoothing_factor``) on the gathered outputs, with the count."""
    _observe(observe, _train(tmp_path, monkeypatch, _model(), label_smoothing_factor=0.1))


@IN_THE_BUG
def test_gradient_accumulation(observe, tmp_path, monkeypatch):
    """Trainer's own loss, which takes the count, over 2 accumulated full batches per step, then evaluation."""
    _observe(observe, _train(tmp_path, monkeypatch, _model(), steps=1, gradient_accumulation_steps=2, evaluate=True))


def test_evaluate_and_predict(observe, tmp_path, monkeypatch):
    """``evaluate`` and ``predict`` under DataParallel, before any training."""
    from transformers import Trainer, TrainingArguments

    simulate(monkeypatch)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_eval_batch_size=2, report_to=[], use_cpu=True, disable_tqdm=True
    )
    args._n_gpu = 2
    trainer = Trainer(model=_model(), args=args)
    metrics = trainer.evaluate(eval_dataset=_rows(BATCH))
    observe("eval_loss", metrics["eval_loss"])
    prediction = trainer.predict(_rows(BATCH))
    logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
    observe("predictions", {"shape": list(logits.shape), "sum": float(logits.astype("float64").sum())})
    observe("test_loss", prediction.metrics["test_loss"])


@pytest.mark.intended(
    "wrapper.type",
    reason="Trainer wraps the model in a DataParallel subclass that hands each replica its share of the count",
)
def test_the_wrapper(observe, tmp_path, monkeypatch):
    """What the wrapped model exposes: its type, ``module``, ``state_dict`` keys, public attributes, and its pickle,
    which must name a class that pristine has (``torch.save(trainer.model_wrapped)`` loads on either build; the
    exchange guards load it across builds). The model takes no count (``accepts_loss_kwargs = False``), so no
    release is in the bug here."""
    trainer = _train(tmp_path, monkeypatch, _model(_no_count_llama()), steps=1)
    wrapped = trainer.model_wrapped
    copy = pickle.loads(pickle.dumps(wrapped))
    observe(
        "wrapper",
        {
            "type": type(wrapped).__name__,
            "is_data_parallel": isinstance(wrapped, torch.nn.DataParallel),
            "module": type(wrapped.module).__name__,
            "module_is_trainer_model": wrapped.module is trainer.model,
            "state_dict": list(wrapped.state_dict()),
            "public_attributes": sorted(k for k in vars(wrapped) if not k.startswith("_")),
            "pickled_type": f"{type(copy).__module__}.{type(copy).__qualname__}",
            "pickled_state_dict_equal": all(
                torch.equal(a, b)
                for a, b in zip(wrapped.state_dict().values(), copy.state_dict().values(), strict=True)
            ),
        },
    )


@IN_THE_BUG
@pytest.mark.intended(
    "copied.type",
    reason="a copy of Trainer's DataParallel wrapper is of its class, as a copy of any module is (pristine's wrapper "
    "is nn.DataParallel itself); only its pickle names nn.DataParallel (on 4.50 pristine's first step fails)",
    when="transformers>=4.51",
)
@pytest.mark.parametrize("how", ["deepcopy", "copy"])
def test_copies_of_the_wrapped_model(observe, tmp_path, monkeypatch, how):
    """``copy.deepcopy`` and ``copy.copy`` of ``trainer.model_wrapped`` after a step (a copy to keep as a reference
    or averaged model): the copy's class, and the loss of Trainer's own ``compute_loss`` through the copy and through
    the wrapper, for the last batch and the count Trainer gave it."""
    import copy

    from transformers import Trainer

    class Counting(Trainer):
        def get_batch_samples(self, *args, **kwargs):
            batches, count = super().get_batch_samples(*args, **kwargs)
            self.last = (batches, count)
            return batches, count

    trainer = _train(tmp_path, monkeypatch, _model(), trainer_cls=Counting, steps=1)
    wrapped = trainer.model_wrapped
    copied = getattr(copy, how)(wrapped)
    (batch, *_), count = trainer.last
    inputs = trainer._prepare_inputs(batch)
    with torch.no_grad():
        through_copy = trainer.compute_loss(copied, dict(inputs), num_items_in_batch=count).mean().item()
        through_wrapper = trainer.compute_loss(wrapped, dict(inputs), num_items_in_batch=count).mean().item()
    observe(
        "copied",
        {
            "type": type(copied).__name__,
            "is_data_parallel": isinstance(copied, torch.nn.DataParallel),
            "module_is_the_wrapped_module": copied.module is wrapped.module,
            "loss": through_copy,
            "loss_through_the_wrapper": through_wrapper,
        },
    )


def _recording_llama():
    """A Llama whose ``forward`` takes the count and another keyword argument, ``scale``, as a model may; the count
    reaches the loss, ``scale`` is only received."""
    from transformers import LlamaForCausalLM

    class KwargsLlama(LlamaForCausalLM):
        def forward(self, input_ids=None, attention_mask=None, labels=None, num_items_in_batch=None, scale=None, **kw):
            return super().forward(
                input_ids=input_ids,
                attention_mask=attention_mask,
                labels=labels,
                num_items_in_batch=num_items_in_batch,
                **kw,
            )

    return _model(KwargsLlama)


#: What a ``compute_loss`` override may pass to the model besides the batch, other than the 0-d token count (T3's
#: bug, and an ``int`` count, which the proofs cover): each reaches the replicas as on pristine, on a full batch. The
#: per-replica view (``expand``, as 4.57's ``_get_num_items_in_batch`` made it) is what Trainer's own ``compute_loss``
#: passes on +fixed 4.57 and 5.x, which hands it on as ``nn.DataParallel`` scatters it when all replicas run.
PASSED: dict[str, Callable[[torch.Tensor], dict[str, Any]]] = {
    "count-None": lambda n: {"num_items_in_batch": None},
    "count-bool": lambda n: {"num_items_in_batch": True},
    "count-one-element": lambda n: {"num_items_in_batch": n.reshape(1)},
    "count-per-replica": lambda n: {"num_items_in_batch": n.reshape(1).expand(2).contiguous()},
    "count-per-replica-view": lambda n: {"num_items_in_batch": n.unsqueeze(0).expand(2, -1)},
    "other-0-d-tensor": lambda n: {"scale": torch.tensor(0.5)},
    "other-0-d-tensor-with-the-count": lambda n: {"num_items_in_batch": n, "scale": torch.tensor(0.5)},
}


@pytest.mark.parametrize("passed", list(PASSED))
def test_what_reaches_the_replicas(observe, tmp_path, monkeypatch, passed):
    """A ``compute_loss`` override that passes the model keyword arguments of its own: a count that is not a 0-d
    tensor or a number (``None``, a ``bool``, a 1-element or per-replica tensor), or another 0-d tensor, which
    DataParallel's scatter cannot split (pristine raises; +fixed leaves it alone, with or without the count). What
    each replica receives (type, dtype, shape, value) and the losses are compared."""
    from transformers import Trainer

    class PassesKwargs(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            count = (inputs["labels"] != -100).sum()
            outputs = model(**inputs, **PASSED[passed](count))
            return (outputs.loss.mean(), outputs) if return_outputs else outputs.loss.mean()

    trainer = _train(tmp_path, monkeypatch, _recording_llama(), trainer_cls=PassesKwargs, steps=1)
    received = [
        {
            k: {"type": type(v).__name__, "dtype": str(getattr(v, "dtype", None)), "value": v}
            for k, v in replica.items()
            if k in ("num_items_in_batch", "scale")
        }
        for step in trainer.replica_log
        for replica in step
    ]
    observe("received", received)
    _observe(observe, trainer)
