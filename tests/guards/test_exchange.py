"""Guards of what a build writes: what +fixed writes must load on pristine, and what pristine writes on +fixed.

Each guard writes an artifact with the build it runs on and loads the one its ``exchange`` fixture names (conftest):
the pristine run loads its own, the +fixed run pristine's, and the read-back run (pristine again) +fixed's; what it
loaded is compared with what pristine loaded from its own. Artifacts: ``torch.save`` of the Trainer's wrapped model
under DataParallel (the CPU stand-in of dataparallel_sim.py) loaded whole and with ``weights_only=True``, the
Trainer's checkpoint (``_save_checkpoint``: weights, optimizer, scheduler, trainer state, arguments) loaded and
resumed from, ``save_model`` / ``save_pretrained`` loaded by ``from_pretrained``, and accelerate's ``save_state`` of
a prepared model loaded by ``load_state``.

The models take no count (``accepts_loss_kwargs = False``), so no release is in T3's bug here and every run writes.
"""

from __future__ import annotations

import json

import pytest
import torch

import guardkit
from dataparallel_sim import simulate
from tiny_llama import small_config

pytestmark = pytest.mark.guard(package="transformers")

ROWS, SEQ, BATCH = 8, 8, 4


def _rows(n=ROWS):
    g = torch.Generator().manual_seed(5)
    out = []
    for _ in range(n):
        ids = torch.randint(1, 64, (SEQ,), generator=g)
        out.append({"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones(SEQ, dtype=torch.long)})
    return out


def _llama_class():
    """A Llama that takes no count, a global of this module so that a pickle of it loads in the other run."""
    if "NoCountLlama" not in globals():
        from transformers import LlamaForCausalLM

        cls = type("NoCountLlama", (LlamaForCausalLM,), {"accepts_loss_kwargs": False, "__module__": __name__})
        globals()["NoCountLlama"] = cls
    return globals()["NoCountLlama"]


def _model(seed=0):
    torch.manual_seed(seed)
    return _llama_class()(small_config(vocab_size=64, use_cache=False))


def _trainer(output_dir, monkeypatch, model, *, steps=1, n_gpu=2, **args_kw):
    from transformers import Trainer

    if n_gpu > 1:
        simulate(monkeypatch, n_gpu)
    args = guardkit.trainer_args(str(output_dir), n_gpu, BATCH, steps, **args_kw)
    return Trainer(model=model, args=args, train_dataset=_rows())


def _weights(model):
    return [float(sum(p.detach().double().sum() for p in model.parameters())), float(len(model.state_dict()))]


def _logits(model):
    model.eval()
    with torch.no_grad():
        return float(model(input_ids=_rows(2)[0]["input_ids"][None]).logits.double().sum())


def _load(load):
    """What loading gives: ``load()``'s observation, or what it raised (the other build may refuse an artifact)."""
    try:
        return {"loaded": load(), "raised": None}
    except Exception as exc:  # noqa: BLE001 - a refusal is the observation
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is None or tb.tb_frame.f_code.co_filename == __file__:
            raise  # the guard's own code failed: an error of the guard (conftest), not an observation
        lines = str(exc).strip().splitlines() or [""]
        named = [line.strip() for line in lines if "GLOBAL" in line or "global" in line]  # what a pickle names
        return {"loaded": None, "raised": {"type": type(exc).__name__, "message": lines[0], "names": named}}


@pytest.mark.intended(
    "weights_only.raised.names",
    reason="Trainer's DataParallel wrapper pickles as nn.DataParallel through copyreg._reconstructor (the form that "
    "may name a base class), which torch's weights-only loader names where it names DataParallel for pristine's "
    "pickle; both refuse a pickled module",
    readback="only",
)
def test_torch_save_of_the_wrapped_model(observe, exchange, tmp_path, monkeypatch):
    """``torch.save(trainer.model_wrapped)`` after a DataParallel step: loaded whole, the wrapper's type, module and
    weights; with ``weights_only=True`` (torch's default), which refuses a module, the global it names."""
    trainer = _trainer(tmp_path / "out", monkeypatch, _model())
    trainer.train()
    torch.save(trainer.model_wrapped, exchange.write("wrapped") / "wrapped.pt")
    monkeypatch.undo()  # the loading side is a plain process: no simulated DataParallel
    path = exchange.read("wrapped") / "wrapped.pt"

    def whole():
        wrapped = torch.load(path, weights_only=False)
        return {
            "type": f"{type(wrapped).__module__}.{type(wrapped).__qualname__}",
            "is_data_parallel": isinstance(wrapped, torch.nn.DataParallel),
            "module": type(wrapped.module).__name__,
            "weights": _weights(wrapped.module),
            "logits": _logits(wrapped.module),
        }

    observe("whole", _load(whole))
    observe("weights_only", _load(lambda: type(torch.load(path, weights_only=True)).__name__))


@pytest.mark.intended(
    "logs",
    match=r"^WARNING transformers\.trainer: You are resuming training from a checkpoint trained with",
    reason="the checkpoint's config.json records the transformers version that wrote it, and a +fixed build's is "
    "X+fixed: resuming on the other build says that the versions differ, as between any two releases",
    readback=True,
)
def test_trainer_checkpoint(observe, exchange, monkeypatch):
    """The checkpoint a DataParallel Trainer saves after its first step (``save_steps=1``): its files, the weights
    ``from_pretrained`` loads, the trainer state, the pickled arguments, and a Trainer that resumes from it for a
    second step (optimizer, scheduler, RNG states and trainer state loaded)."""
    out = exchange.write("run")
    _trainer(out, monkeypatch, _model(), save_strategy="steps", save_steps=1).train()
    checkpoint = exchange.read("run") / "checkpoint-1"
    observe("files", sorted(p.name for p in checkpoint.iterdir()))
    observe("weights", _load(lambda: _weights(_llama_class().from_pretrained(checkpoint))))
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    observe("state", {"global_step": state["global_step"], "log_history": state["log_history"]})

    def arguments():
        args = torch.load(checkpoint / "training_args.bin", weights_only=False)
        return {"type": type(args).__name__, "n_gpu": args.n_gpu, "max_steps": args.max_steps}

    observe("training_args", _load(arguments))
    model = _model(seed=1)  # other weights: resuming loads the checkpoint's
    resumed = _trainer(exchange.write("resumed"), monkeypatch, model, steps=2)
    observe("resumed", _load(lambda: [resumed.train(resume_from_checkpoint=str(checkpoint)).global_step]))
    observe("resumed_weights", _weights(model))


def test_save_model_and_save_pretrained(observe, exchange, monkeypatch):
    """``trainer.save_model`` under DataParallel and the model's own ``save_pretrained``, each loaded by
    ``from_pretrained``: the weights and logits."""
    model = _model()
    trainer = _trainer(exchange.write("scratch"), monkeypatch, model)
    trainer.train()
    trainer.save_model(str(exchange.write("save_model")))
    model.save_pretrained(exchange.write("save_pretrained"))
    monkeypatch.undo()
    for name in ("save_model", "save_pretrained"):
        path = exchange.read(name)

        def load(path=path):
            loaded = _llama_class().from_pretrained(path)
            return {"weights": _weights(loaded), "logits": _logits(loaded)}

        observe(name, _load(load))


@pytest.mark.guard(package="accelerate")
def test_accelerate_save_state(observe, exchange):
    """accelerate's ``save_state`` of a prepared model and optimizer after a step, loaded by ``load_state`` into a
    model prepared with other weights."""
    from accelerate import Accelerator

    def prepared(seed):
        accelerator = Accelerator(cpu=True)
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return (accelerator, *accelerator.prepare(model, optimizer))

    accelerator, model, optimizer = prepared(0)
    accelerator.backward(model(torch.ones(3, 4)).sum())
    optimizer.step()
    accelerator.save_state(str(exchange.write("state")))
    accelerator, other, other_optimizer = prepared(1)
    path = str(exchange.read("state"))

    def load():
        accelerator.load_state(path)
        momentum = [float(s["momentum_buffer"].double().sum()) for s in other_optimizer.state_dict()["state"].values()]
        return {"weights": float(sum(p.detach().double().sum() for p in other.parameters())), "momentum": momentum}

    observe("loaded", _load(load))
