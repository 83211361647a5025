"""Proof for T3: a 0-d ``num_items_in_batch`` through ``nn.DataParallel``.

Bug: with ``TrainingArguments.n_gpu > 1`` (several GPUs visible, no torchrun), Trainer wraps the model in
``nn.DataParallel`` and passes the batch's token count, a 0-d tensor, as a model kwarg; DataParallel's scatter
chunks it and fails: ``RuntimeError: chunk expects at least a 1-dimensional tensor`` (transformers 4.50.0 - 4.50.3,
and 4.46.2 - 4.47.0). Upstream's 4.51 ``unsqueeze(0)`` stopped the crash but a ``[1]`` tensor is chunked into one
piece and torch's scatter zips kwargs to the shortest, so only one replica ran and the rest of every batch was
dropped (until 4.57.1). From 4.57.1 (still in 5.23.0) the count is expanded to ``[n_gpu, 1]``, so every replica runs
on a ``[1, 1]`` slice, and ``compute_loss`` scales the loss by ``n_gpu`` before ``training_step`` takes the replicas'
mean: wrong whenever fewer replicas run than ``n_gpu`` (a last batch with fewer rows, in training, and in evaluation
where 5.23.0 passes the count too) and for a ``compute_loss`` override that passes the count itself; and the count
that ``get_batch_samples`` returns and ``compute_loss_func`` receives is that ``[n_gpu, 1]`` tensor, which neither
``int()`` nor ``.item()`` accepts, where one device gives a 0-d count.

A correct fix runs every replica on its share of the batch and gives the loss and gradients of one device on the
whole batch, however the count reaches the replicas: Trainer's ``compute_loss``, a subclass's ``compute_loss`` that
passes it to the model itself, a tensor or an ``int`` count, with either ``average_tokens_across_devices``; a
``compute_loss_func`` gets the count it gets on one device. And it leaves alone what never passed the count: a model
that does not take it, a ``compute_loss`` override that does not pass it, and a model that takes ``**kwargs`` but
returns its own mean loss keep the mean of their replicas' losses (``training_step`` takes the replicas' mean). The
tests judge losses and weights, not how the fix hands the count over.

Simulation (see dataparallel_sim.py): the real Trainer with ``n_gpu`` forced to 2 (it then wraps DataParallel,
doubles the batch and takes the replica losses' mean or sum), and ``nn.DataParallel`` keeping torch's own
forward/scatter/scatter_kwargs with only the CUDA scatter replaced by ``chunk``. Rows carry different numbers of
supervised tokens, so a wrong normalisation shows. ``test_gpu_dataparallel_same_device_twice`` is the GPU form.

The bug's symptoms, each raised as ``BugSymptom``: fewer replicas ran than the batch had room for (4.51 - 4.56),
a loss exactly ``n_gpu`` or ``1/n_gpu`` times the one-device loss (a mean scaled by the number of replicas, as
4.57.1 does, on a batch with fewer rows than replicas; or an unscaled mean, as for an ``int`` count) or times the
mean of the replicas' own losses (a model that ignores the count, scaled by ``n_gpu`` with
``average_tokens_across_devices=True``), and a count of another shape than one device gives, seen by
``compute_loss_func`` or a ``get_batch_samples`` override (4.57.1 - 5.23.0). Any other difference is another
failure, not the bug.
"""

from __future__ import annotations

import copy

import pytest
import torch

import tiny_models
from dataparallel_sim import REPLICAS, simulate
from proofkit import BugSymptom
from tiny_llama import small_config

# 4.50.x crashes; 4.51 - 4.56 run one replica only; a fix that scales the mean gets the last batch wrong, and
# the [n_gpu, 1] count it passes around (4.57.1 - 5.23.0) is not the count one device gives.
pytestmark = pytest.mark.proof(
    package="transformers",
    signatures=[
        ("RuntimeError", r"^chunk expects at least a 1-dimensional tensor"),
        (
            "BugSymptom",
            r"replicas ran|times the (one-device loss|mean of the replicas' own losses)|got a count of shape \(",
        ),
    ],
)

SEQ = 8
SUPERVISED = [7, 2, 5, 1, 4]  # supervised (non -100) label positions per row
BATCH = 4  # rows per optimizer step, split over the replicas


def _model(cls=None):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return (cls or LlamaForCausalLM)(small_config(vocab_size=64, use_cache=False))


def _rows(n, supervised=SUPERVISED):
    g = torch.Generator().manual_seed(1)
    rows = []
    for i in range(n):
        ids = torch.randint(1, 64, (SEQ,), generator=g)
        labels = ids.clone()
        labels[: SEQ - supervised[i % len(supervised)]] = -100  # the first positions are prompt
        rows.append({"input_ids": ids, "labels": labels, "attention_mask": torch.ones(SEQ, dtype=torch.long)})
    return rows


def _train(
    model,
    rows,
    tmp_path,
    steps,
    monkeypatch,
    base=None,
    n_gpu=REPLICAS,
    args_kw=None,
    simulated=True,
    device="cpu",
    **trainer_kw,
):
    """The real Trainer (``base``, a Trainer subclass, if given) with ``n_gpu`` forced; records batches and losses.
    ``args_kw``: more ``TrainingArguments``. ``simulated=False``: no stand-in, torch's own ``nn.DataParallel`` on a
    machine without accelerators, which has no device to scatter to and runs the module itself. ``device="cuda"``
    (the GPU form): torch's own ``nn.DataParallel`` on CUDA, each replica's rows recorded as the stand-in does."""
    from transformers import Trainer, TrainingArguments

    class RecordingTrainer(base or Trainer):  # type: ignore[misc]
        def training_step(self, model, inputs, num_items_in_batch=None):
            if device != "cpu":
                self.replica_log.append([])  # the replicas' forwards of this step (count_rows)
            self.batches.append({k: v.clone() for k, v in inputs.items()})
            loss = super().training_step(model, inputs, num_items_in_batch)
            self.losses.append(loss.item())
            return loss

        def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
            self.eval_batches.append({k: v.clone() for k, v in inputs.items()})
            loss, logits, labels = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
            self.eval_losses.append(loss.item())
            return loss, logits, labels

    log = simulate(monkeypatch) if simulated else []
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=BATCH // n_gpu,
        per_device_eval_batch_size=BATCH // n_gpu,
        max_steps=steps,
        learning_rate=0.5,
        optim="sgd",
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
        report_to=[],
        use_cpu=device == "cpu",
        save_strategy="no",
        logging_steps=1,
        seed=0,
        dataloader_drop_last=False,
        **(args_kw or {}),
    )
    assert args.device.type == device
    args._n_gpu = n_gpu  # what n_gpu visible GPUs give; the real Trainer then wraps DataParallel and scales the batch
    trainer = RecordingTrainer(model=model, args=args, train_dataset=rows, **trainer_kw)
    trainer.batches, trainer.losses, trainer.replica_log = [], [], log
    if device != "cpu":

        def count_rows(module, args, kwargs):  # each replica shares the module's hooks
            trainer.replica_log[-1].append({"input_ids": kwargs["input_ids"]})

        model.register_forward_pre_hook(count_rows, with_kwargs=True)
    trainer.eval_batches, trainer.eval_losses = [], []
    trainer.train()
    if n_gpu > 1:
        assert isinstance(trainer.model_wrapped, torch.nn.DataParallel)
        assert trainer.replica_log or not simulated, "the simulated DataParallel saw no forward"
    return trainer


def _tokens(batch):
    return int((batch["labels"] != -100).sum())


def _reference(model, batches, lr=0.5, loss_of=lambda model, batch: model(**batch).loss):
    """One device, whole batches: plain mean over all supervised tokens (or ``loss_of``), plain SGD."""
    losses = []
    for batch in batches:
        model.zero_grad()
        loss = loss_of(model, batch)
        loss.backward()
        losses.append(loss.item())
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    return losses


def _check_replicas(log, expected):
    """Rows per replica per step; fewer replicas than rows allow is the bug's symptom (the rest was dropped)."""
    got = [[r["input_ids"].shape[0] for r in step] for step in log]
    for i, (g, e) in enumerate(zip(got, expected, strict=False), 1):  # (a length mismatch: the assert below)
        if len(g) < len(e) and sum(g) < sum(e):
            raise BugSymptom(
                f"step {i}: only {len(g)} of {len(e)} replicas ran ({sum(g)} of {sum(e)} rows): "
                "the rest of the batch was dropped"
            )
    assert got == expected, f"rows per replica: {got}, expected {expected}"


def _check_losses(got, reference, replicas=REPLICAS, what="step", of="the one-device loss"):
    """Trainer's losses against the reference (``of``: one device on the whole batch, unless said otherwise); a
    factor of exactly n_gpu or 1/n_gpu is the bug's symptom."""
    assert len(got) == len(reference), (got, reference)
    for i, (g, r) in enumerate(zip(got, reference, strict=True), 1):
        if g == pytest.approx(r, rel=1e-5, abs=1e-6):
            continue
        for factor in (replicas, 1 / replicas):
            if g == pytest.approx(r * factor, rel=1e-5):
                raise BugSymptom(
                    f"{what} {i}: loss {g:.6f} is {factor:g} times {of} {r:.6f} "
                    "(the replicas' losses were scaled by their number)"
                )
        raise AssertionError(
            f"{what} {i}: loss {g:.6f} differs from {of} ({r:.6f}) by a factor "
            f"{g / r:.4f}, which no known form of this bug gives"
        )


def _check_one_count(where, n):
    """What ``int()`` and ``.item()`` need, and one device gives: one number. A count with one entry per replica,
    as the Trainer makes it for DataParallel, is the bug's symptom."""
    if torch.is_tensor(n) and n.numel() != 1:
        raise BugSymptom(
            f"{where} got a count of shape {tuple(n.shape)}, not the one number it gets on one device "
            "(the count was reshaped for the replicas)"
        )


def _shares(batch):
    """The batch's rows as DataParallel splits them over the replicas (``chunk`` along dim 0)."""
    return [
        dict(zip(batch, part, strict=True)) for part in zip(*(v.chunk(REPLICAS) for v in batch.values()), strict=True)
    ]


def _check_evaluation(trainer, model, rows):
    """``evaluate`` under DataParallel, batches of 4 then 1 rows. Replicas given the count each return their share
    of the batch loss, so the batch's eval loss must be the one-device loss; replicas given no count return their own
    mean, and the eval loss is the mean of those (as before the count was passed in evaluation)."""
    first = len(trainer.replica_log)
    trainer.evaluate(eval_dataset=rows)
    log = trainer.replica_log[first:]
    _check_replicas(log, [[2, 2], [1]])
    model.eval()
    with torch.no_grad():
        one_device = [model(**batch).loss.item() for batch in trainer.eval_batches]
        replica_means = [
            torch.stack([model(**share).loss for share in _shares(batch)]).mean().item()
            for batch in trainer.eval_batches
        ]
    given = {"num_items_in_batch" in r for step in log for r in step}
    assert len(given) == 1, "some replicas got the count, others not"
    if given == {True}:
        _check_losses(trainer.eval_losses, one_device, what="eval batch")
    else:
        assert trainer.eval_losses == pytest.approx(replica_means, rel=1e-5, abs=1e-6)


def _assert_same_weights(a, b):
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")


def test_dataparallel_step_runs_every_replica_and_matches_one_device(tmp_path, monkeypatch):
    model = _model()
    start = copy.deepcopy(model)
    trainer = _train(model, _rows(4), tmp_path, 1, monkeypatch)
    _check_replicas(trainer.replica_log, [[2, 2]])
    (step,) = trainer.replica_log
    for r in step:
        n = r["num_items_in_batch"]
        assert torch.is_tensor(n) and n.numel() == 1, f"each replica gets a count, one element; got {n!r}"
    _check_losses(trainer.losses, _reference(start, trainer.batches))
    _assert_same_weights(model, start)  # same gradients: SGD without clipping moved both alike


def test_last_smaller_batch(tmp_path, monkeypatch):
    """5 rows, batches of 4 then 1: the last batch has fewer rows than replicas; in training, then in evaluation."""
    model = _model()
    start = copy.deepcopy(model)
    trainer = _train(model, _rows(5), tmp_path, 2, monkeypatch)
    _check_replicas(trainer.replica_log, [[2, 2], [1]])
    _check_losses(trainer.losses, _reference(start, trainer.batches))
    _assert_same_weights(model, start)
    _check_evaluation(trainer, model, _rows(5))


def test_int_and_item_on_num_items_keep_working(tmp_path, monkeypatch):
    """A model that calls int() on the count, and a custom loss function that calls .item() on it. The model's rows
    hold an even count: a replica may divide by its share of the count (half of it on two replicas), which int()
    would truncate for an odd count, as it truncates upstream's ``num_items_in_batch // n_gpu``."""
    from transformers import LlamaForCausalLM

    class IntCountLlama(LlamaForCausalLM):
        def forward(self, input_ids=None, labels=None, num_items_in_batch=None, **kwargs):
            count = int(num_items_in_batch) if num_items_in_batch is not None else None
            return super().forward(input_ids=input_ids, labels=labels, num_items_in_batch=count, **kwargs)

    model = _model(IntCountLlama)
    start = copy.deepcopy(model)
    even = [7, 3, 5, 1]
    assert sum(even) % REPLICAS == 0
    trainer = _train(model, _rows(4, supervised=even), tmp_path, 1, monkeypatch)
    _check_replicas(trainer.replica_log, [[2, 2]])
    _check_losses(trainer.losses, _reference(start, trainer.batches))

    seen = []

    def token_mean_loss(outputs, labels, num_items_in_batch):
        _check_one_count("compute_loss_func", num_items_in_batch)
        n = num_items_in_batch.item()
        seen.append(n)
        logits = outputs.logits[:, :-1].reshape(-1, outputs.logits.shape[-1]).float()
        return (
            torch.nn.functional.cross_entropy(logits, labels[:, 1:].reshape(-1), ignore_index=-100, reduction="sum") / n
        )

    model = _model()
    start = copy.deepcopy(model)
    trainer = _train(model, _rows(4), tmp_path / "custom", 1, monkeypatch, compute_loss_func=token_mean_loss)
    assert seen == [sum(_tokens(b) for b in trainer.batches)]
    _check_losses(trainer.losses, _reference(start, trainer.batches))


def test_compute_loss_func_gets_the_count_it_gets_on_one_device(tmp_path, monkeypatch):
    """``compute_loss_func`` runs on the gathered outputs: it gets the 0-d global count, as without DataParallel."""
    got: dict[int, list] = {}

    def loss_func(n_gpu):
        def token_mean_loss(outputs, labels, num_items_in_batch):
            got[n_gpu].append(num_items_in_batch)
            if outputs.logits.shape[0] < labels.shape[0]:
                raise BugSymptom(
                    f"outputs for {outputs.logits.shape[0]} of {labels.shape[0]} rows: not all replicas ran "
                    "(the rest of the batch was dropped)"
                )
            logits = outputs.logits[:, :-1].reshape(-1, outputs.logits.shape[-1]).float()
            loss = torch.nn.functional.cross_entropy(
                logits, labels[:, 1:].reshape(-1), ignore_index=-100, reduction="sum"
            )
            return loss / num_items_in_batch

        got[n_gpu] = []
        return token_mean_loss

    one = _train(_model(), _rows(5), tmp_path / "one", 2, monkeypatch, n_gpu=1, compute_loss_func=loss_func(1))
    model = _model()
    start = copy.deepcopy(model)
    trainer = _train(model, _rows(5), tmp_path / "dp", 2, monkeypatch, compute_loss_func=loss_func(REPLICAS))
    _check_replicas(trainer.replica_log, [[2, 2], [1]])
    for step, (batch, n, n_one) in enumerate(zip(trainer.batches, got[REPLICAS], got[1], strict=True), 1):
        assert torch.is_tensor(n_one) and n_one.dim() == 0, f"one device: {n_one!r}"  # what it gets without DP
        if torch.is_tensor(n) and n.shape != n_one.shape:
            raise BugSymptom(
                f"step {step}: compute_loss_func got a count of shape {tuple(n.shape)}, where one device gives "
                f"shape {tuple(n_one.shape)} (the count was reshaped for the replicas)"
            )
        assert (torch.is_tensor(n), n.shape, n.dtype) == (True, n_one.shape, n_one.dtype), (
            f"step {step}: compute_loss_func got {n!r}, one device gets {n_one!r}"
        )
        assert int(n) == _tokens(batch) == int(n_one), f"step {step}: count {n!r}, batch has {_tokens(batch)} tokens"
    assert [_tokens(b) for b in trainer.batches] == [_tokens(b) for b in one.batches]
    _check_losses(trainer.losses, _reference(start, trainer.batches))
    _assert_same_weights(model, start)


def test_int_count_from_get_batch_samples(tmp_path, monkeypatch):
    """A ``get_batch_samples`` override that returns an ``int`` count: each replica gets it, the losses add up. It
    runs with ``average_tokens_across_devices=False`` (the 4.x default; the other tests run with 5.x's ``True``): the
    count must be the whole batch's with either."""
    from transformers import Trainer

    class IntCountTrainer(Trainer):
        def get_batch_samples(self, epoch_iterator, num_batches, *args, **kwargs):
            batches, count = super().get_batch_samples(epoch_iterator, num_batches, *args, **kwargs)
            _check_one_count("a get_batch_samples override", count)
            return batches, None if count is None else int(count)

    model = _model()
    start = copy.deepcopy(model)
    not_averaged = {"average_tokens_across_devices": False}
    trainer = _train(model, _rows(5), tmp_path, 2, monkeypatch, base=IntCountTrainer, args_kw=not_averaged)
    _check_replicas(trainer.replica_log, [[2, 2], [1]])
    assert all("num_items_in_batch" in r for step in trainer.replica_log for r in step)
    _check_losses(trainer.losses, _reference(start, trainer.batches))
    _assert_same_weights(model, start)


def test_compute_loss_override_that_passes_the_count(tmp_path, monkeypatch):
    """A Trainer subclass whose ``compute_loss`` hands ``num_items_in_batch`` to the model itself and returns the
    model's loss as it is, with ``average_tokens_across_devices=False``: no release scales the replicas' losses then,
    so the replicas' mean must be the batch loss. Every row holds an even count: the floor division by ``n_gpu``
    that 4.57.1 - 5.23.0 apply without averaging is exact on a full batch, and the last batch shows the bug. (With
    averaging, the releases since 4.57.1 multiply the replicas' losses by ``n_gpu`` in ``compute_loss``, and an override
    that does not is ``1/n_gpu`` of the batch loss on full batches by that contract: a guard, not a proof.)"""
    from transformers import Trainer

    class OwnLossTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            outputs = model(**inputs, num_items_in_batch=num_items_in_batch)
            return (outputs.loss, outputs) if return_outputs else outputs.loss

    model = _model()
    start = copy.deepcopy(model)
    rows = _rows(5, supervised=[6, 2, 4, 2, 4])
    not_averaged = {"average_tokens_across_devices": False}
    trainer = _train(model, rows, tmp_path, 2, monkeypatch, base=OwnLossTrainer, args_kw=not_averaged)
    _check_replicas(trainer.replica_log, [[2, 2], [1]])
    assert all("num_items_in_batch" in r for step in trainer.replica_log for r in step)
    _check_losses(trainer.losses, _reference(start, trainer.batches))
    _assert_same_weights(model, start)


def _release_loss_trainer():
    """A Trainer subclass whose ``compute_loss`` does for the model's own loss what the release's does (public code
    copies upstream's method): it passes the count to the model when the model takes loss kwargs and, with
    ``average_tokens_across_devices``, multiplies the loss by ``n_gpu`` under DataParallel (by the number of
    processes otherwise), as the releases do since 4.57.1. Transformers 4 before 4.57 turns the setting off in a
    single process, so there the override scales nothing, as those releases' own method."""
    from transformers import Trainer

    class ReleaseLossTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            counted = self.model_accepts_loss_kwargs and num_items_in_batch is not None
            outputs = model(**inputs, **({"num_items_in_batch": num_items_in_batch} if counted else {}))
            loss = outputs.loss
            if counted and self.args.average_tokens_across_devices:
                loss = loss * (self.args.n_gpu if self.args.n_gpu > 1 else self.accelerator.num_processes)
            return (loss, outputs) if return_outputs else loss

    return ReleaseLossTrainer


def test_copy_of_the_release_compute_loss(tmp_path, monkeypatch):
    """The copy of the release's ``compute_loss`` of ``_release_loss_trainer``: it must give the one-device loss, on
    a full batch and on the last, smaller one."""
    model = _model()
    start = copy.deepcopy(model)
    trainer = _train(model, _rows(5), tmp_path, 2, monkeypatch, base=_release_loss_trainer())
    _check_replicas(trainer.replica_log, [[2, 2], [1]])
    assert all("num_items_in_batch" in r for step in trainer.replica_log for r in step)
    _check_losses(trainer.losses, _reference(start, trainer.batches))
    _assert_same_weights(model, start)


def test_copy_of_the_release_compute_loss_without_devices(tmp_path, monkeypatch):
    """The same copy under ``nn.DataParallel`` on a machine without accelerators, which runs the module itself on the
    whole batch: one replica, given the count the copy passes. Its loss is the batch loss."""
    model = _model()
    start = copy.deepcopy(model)
    trainer = _train(model, _rows(4), tmp_path, 1, monkeypatch, base=_release_loss_trainer(), simulated=False)
    assert not trainer.model_wrapped.device_ids, "this machine has an accelerator: DataParallel scatters here"
    _check_losses(trainer.losses, _reference(start, trainer.batches))
    _assert_same_weights(model, start)


@pytest.mark.parametrize("kind", ["numpy-int64", "numpy-0-d-array"])
def test_numpy_count_from_get_batch_samples(tmp_path, monkeypatch, kind):
    """A ``get_batch_samples`` override that counts the batch's tokens with NumPy (``np.sum``: a ``numpy.int64``,
    or a 0-d array), for a model that reads its count with ``float()`` (which a 0-d array needs: torch cannot divide
    by one). The count must be shared as any other number is: every replica's loss over its share, on a full batch
    and on the last, smaller one."""
    float_count_llama, numpy_count_trainer = tiny_models.numpy_count_classes(kind)

    model = _model(float_count_llama)
    start = copy.deepcopy(model)
    trainer = _train(model, _rows(5), tmp_path, 2, monkeypatch, base=numpy_count_trainer)
    _check_replicas(trainer.replica_log, [[2, 2], [1]])
    assert all("num_items_in_batch" in r for step in trainer.replica_log for r in step)
    _check_losses(trainer.losses, _reference(start, trainer.batches))
    _assert_same_weights(model, start)


def test_dataparallel_without_devices_runs_the_module_as_one_replica(tmp_path, monkeypatch):
    """``nn.DataParallel`` on a machine without accelerators (``n_gpu`` forced to 2, as upstream's tests do on CPU)
    has no device to scatter to and runs the module itself on the whole batch: one replica. Its loss is the batch
    loss, as for any batch that one replica runs."""
    model = _model()
    start = copy.deepcopy(model)
    trainer = _train(model, _rows(4), tmp_path, 1, monkeypatch, simulated=False)
    assert not trainer.model_wrapped.device_ids, "this machine has an accelerator: DataParallel scatters here"
    _check_losses(trainer.losses, _reference(start, trainer.batches))
    _assert_same_weights(model, start)


def _replica_means(model, batches):
    """One device, each replica's rows alone, the mean of the replicas' mean losses, plain SGD: what DataParallel
    gives a model that returns its own mean loss (the count never reached it, or it ignored it)."""
    return _reference(
        model, batches, loss_of=lambda m, b: torch.stack([m(**share).loss for share in _shares(b)]).mean()
    )


def _check_replica_means(trainer, model, start):
    _check_replicas(trainer.replica_log, [[2, 2], [1]])
    _check_losses(trainer.losses, _replica_means(start, trainer.batches), of="the mean of the replicas' own losses")
    _assert_same_weights(model, start)


@pytest.mark.regression
def test_model_without_loss_kwargs_keeps_the_mean_of_its_replicas(tmp_path, monkeypatch):
    """A model that does not take the count (``accepts_loss_kwargs = False``) is unchanged: each replica returns
    its own token mean and ``training_step`` averages them, as before."""
    from transformers import LlamaForCausalLM

    class MeanLossLlama(LlamaForCausalLM):
        accepts_loss_kwargs = False

    model = _model(MeanLossLlama)
    start = copy.deepcopy(model)
    trainer = _train(model, _rows(5), tmp_path, 2, monkeypatch)
    assert all("num_items_in_batch" not in r for step in trainer.replica_log for r in step)
    _check_replica_means(trainer, model, start)
    assert trainer.losses[0] != pytest.approx(_reference(_model(MeanLossLlama), trainer.batches[:1])[0], rel=1e-3)


@pytest.mark.regression
@pytest.mark.parametrize("scaled_for_ga", [None, False], ids=["default", "loss_is_scaled_for_ga-False"])
def test_compute_loss_override_without_the_count_keeps_the_mean(tmp_path, monkeypatch, scaled_for_ga):
    """The most common custom Trainer: ``compute_loss`` calls ``model(**inputs)`` and returns ``outputs.loss``
    without passing the count. Each replica returns its own mean, and the step's loss is their mean, as before,
    also with ``loss_is_scaled_for_ga = False`` (5.x's switch for trainers that compute their own loss; with
    gradient accumulation 1 it changes nothing)."""
    from transformers import Trainer

    class OwnMeanTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            outputs = model(**inputs)
            return (outputs.loss, outputs) if return_outputs else outputs.loss

    if scaled_for_ga is not None:
        OwnMeanTrainer.loss_is_scaled_for_ga = scaled_for_ga
    model = _model()
    start = copy.deepcopy(model)
    trainer = _train(model, _rows(5), tmp_path, 2, monkeypatch, base=OwnMeanTrainer)
    _check_replica_means(trainer, model, start)


def _mean_loss_llama():
    """A model whose ``forward`` takes ``**kwargs``, so Trainer passes it the count, but returns its own mean loss,
    as sequence-classification heads do."""
    from transformers import LlamaForCausalLM

    class IgnoresCountLlama(LlamaForCausalLM):
        def forward(self, input_ids=None, attention_mask=None, labels=None, num_items_in_batch=None, **kwargs):
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **kwargs)

    return _model(IgnoresCountLlama)


def test_model_that_ignores_the_count_keeps_the_mean_of_its_replicas(tmp_path, monkeypatch):
    """A model that takes ``**kwargs`` but ignores the count, with ``average_tokens_across_devices=False``: the
    mean of its replicas' losses, as 5.x gives it (on 4.x, where Trainer turns the setting off in one process, the
    count fails to pass, or only one replica runs)."""
    model = _mean_loss_llama()
    start = copy.deepcopy(model)
    trainer = _train(model, _rows(5), tmp_path, 2, monkeypatch, args_kw={"average_tokens_across_devices": False})
    _check_replica_means(trainer, model, start)


@pytest.mark.may_skip(reason="the GPU form runs real nn.DataParallel and needs CUDA")
@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU form: needs at least one CUDA device")
def test_gpu_dataparallel_same_device_twice(tmp_path, monkeypatch):
    """GPU form of ``test_last_smaller_batch`` in training: torch's own ``nn.DataParallel`` on CUDA (its scatter,
    replicate, parallel_apply and gather) with two replicas, on two GPUs or on one GPU listed twice. Trainer wraps
    ``nn.DataParallel(model)``, which takes every visible device: with one GPU, that one twice."""
    from torch.nn.parallel import data_parallel

    devices = [0, 1] if torch.cuda.device_count() > 1 else [0, 0]
    if devices == [0, 0]:
        monkeypatch.setattr(data_parallel, "_get_all_device_indices", lambda: [0, 0])
    model = _model()
    start = copy.deepcopy(model).cuda()
    trainer = _train(model, _rows(5), tmp_path, 2, monkeypatch, simulated=False, device="cuda")
    assert trainer.model_wrapped.device_ids == devices
    _check_replicas(trainer.replica_log, [[2, 2], [1]])
    _check_losses(trainer.losses, _reference(start, trainer.batches))
    _assert_same_weights(model, start)
