"""Guards mined from public code: how downstream projects call, wrap, subclass, override, copy and monkeypatch
``from_pretrained`` and the loading functions the transformers patches touch (``_load_pretrained_model``,
``get_init_context``), one process each. The distributed patterns are in test_usage_from_pretrained_ranks.py.

The patches meet these loads at: T1's plan gathering and warm-up (``from_pretrained`` ->
``_load_pretrained_model`` -> ``caching_allocator_warmup``, every load with a ``device_map``), T2a's
``get_init_context`` (4.50.3), T2b's checks of a ``device_map`` load (before the weights are read and before
dispatch), and the T4 warning's check of ``device_map="auto"``. Each guard stands for one pattern of public code
and names it (repository and path, a commit where the pattern has since changed); none copies it: each is written
here from what the pattern does, on the tiny random Llama of the proofs. How they were found, and the rule for a new
fix: docs/proof-contract.md#guards-mined-from-public-code.

Recorded: every parameter and buffer (device, dtype, sums), the device map, the logits of a fixed input, what the
pattern itself adds (a value head's output, a copy's weights), what a load raised, and the warnings and log records.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.metadata
import inspect
import os
import textwrap
import traceback
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import tiny_llama

pytestmark = pytest.mark.guard(package="transformers")
FLOAT32 = {"torch_dtype": torch.float32}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_llama.save_small(tmp_path_factory.mktemp("llama"))


def _tensors(module: torch.nn.Module, nonpersistent_values: bool = True) -> dict:
    """Every parameter and buffer: device, dtype, and (not on meta) two sums. ``nonpersistent_values=False`` keeps
    the sums of the tensors no checkpoint holds (non-persistent buffers) out, for a load that leaves them undefined on
    the release itself (uninitialised memory, which differs from run to run on either build)."""
    named = dict(module.named_parameters()) | dict(module.named_buffers())
    persistent = set(module.state_dict())
    return {
        name: [t.device.type, str(t.dtype)]
        + (
            []
            if t.device.type == "meta" or (not nonpersistent_values and name not in persistent)
            else [float(t.detach().double().sum()), float(t.detach().double().abs().sum())]
        )
        for name, t in sorted(named.items())
    }


def _summary(model: torch.nn.Module, defined: bool = True) -> dict:
    """What a user sees of a loaded model: its class, every tensor, its device map and its logits. ``defined=False``:
    the release leaves the non-persistent buffers undefined in this scenario, so neither they nor the logits that
    depend on them are recorded."""
    out = {
        "type": type(model).__name__,
        "tensors": _tensors(model, nonpersistent_values=defined),
        "device_map": {k: str(v) for k, v in (getattr(model, "hf_device_map", None) or {}).items()},
    }
    if defined:
        with torch.no_grad():
            result = model(tiny_llama.INPUT)
        out["logits"] = [float(result.logits.sum()), result.logits[0, -1, :4].tolist()]
    return out


def _library_error(exc: BaseException) -> dict:
    """An exception of the code under test as an observation; one raised by this module's own code (its innermost
    frame is here) is re-raised: an error of the guard, never an observation."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or os.path.realpath(frames[-1].filename) == os.path.realpath(__file__):
        raise exc
    return {"type": type(exc).__name__, "message": str(exc)}


def _load_or_raise(load) -> dict:
    """The load's summary, or what the library raised (a scenario that goes on after a failed load)."""
    try:
        model = load()
    except Exception as exc:  # noqa: BLE001 - what the load raised is the observation
        return {"raised": _library_error(exc)}
    return _summary(model)


def _no_init_weights():
    """The release's ``no_init_weights`` (``transformers.modeling_utils`` on 4.x, ``transformers.initialization``
    on 5.x), as each downstream project imports it."""
    for where in ("transformers.modeling_utils", "transformers.initialization"):
        try:
            found = getattr(importlib.import_module(where), "no_init_weights", None)
        except ImportError:
            continue
        if found is not None:
            return found
    raise AttributeError("no_init_weights")  # pragma: no cover - every release has one


@contextlib.contextmanager
def _replaced(owner, name: str, value) -> Iterator[None]:
    """``owner.name = value`` for the block, as a monkeypatch does, and the original (or its absence) back after."""
    had = name in vars(owner)
    saved = vars(owner).get(name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if had:
            setattr(owner, name, saved)
        else:
            delattr(owner, name)


# ---------------------------------------------------------------------------------------------------------------
# Wrappers and subclasses that call from_pretrained


def _value_head_wrapper():
    """A ``nn.Module`` that wraps a causal LM and adds a value head, with a ``from_pretrained`` classmethod that keeps
    its own keyword arguments and passes the rest through."""
    from transformers import AutoModelForCausalLM

    class ValueHeadWrapper(torch.nn.Module):
        transformers_parent_class = AutoModelForCausalLM
        supported_args = ("summary_dropout_prob",)

        def __init__(self, pretrained_model, summary_dropout_prob=0.0):
            super().__init__()
            self.pretrained_model = pretrained_model
            self.dropout = torch.nn.Dropout(summary_dropout_prob)
            torch.manual_seed(1)
            self.v_head = torch.nn.Linear(pretrained_model.config.hidden_size, 1)

        @classmethod
        def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
            own = {k: kwargs.pop(k) for k in list(kwargs) if k in cls.supported_args}
            model = cls.transformers_parent_class.from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
            return cls(model, **own)

        def forward(self, input_ids):
            out = self.pretrained_model(input_ids, output_hidden_states=True)
            return self.v_head(self.dropout(out.hidden_states[-1])).squeeze(-1)

    return ValueHeadWrapper


@pytest.mark.parametrize("device_map", [None, "auto"], ids=["no-device_map", "device_map-auto"])
def test_value_head_wrapper_classmethod_and_its_deep_copy(observe, checkpoint, device_map):
    """Stands for TRL's ``PreTrainedModelWrapper.from_pretrained`` (huggingface/trl trl/models/modeling_base.py,
    ``AutoModelForCausalLMWithValueHead`` in trl/models/modeling_value_head.py, now
    trl/experimental/ppo/modeling_value_head.py): a classmethod on a wrapper ``nn.Module`` that takes its own
    keyword arguments out and passes ``*model_args`` and the rest to ``transformers_parent_class.from_pretrained``,
    then adds a value head; and for ``create_reference_model`` (trl/models/modeling_base.py), which
    ``copy.deepcopy``-s the loaded wrapper for a frozen reference model."""
    kwargs = {**FLOAT32, **({} if device_map is None else {"device_map": device_map})}
    wrapper = _value_head_wrapper().from_pretrained(checkpoint, summary_dropout_prob=0.0, **kwargs)
    observe("model", _summary(wrapper.pretrained_model))
    with torch.no_grad():
        observe("values", wrapper(tiny_llama.INPUT))
    reference = copy.deepcopy(wrapper)
    observe("copy", _tensors(reference))
    observe(
        "copy_device_map",
        {k: str(v) for k, v in (reference.pretrained_model.hf_device_map or {}).items()}
        if hasattr(reference.pretrained_model, "hf_device_map")
        else None,
    )


def test_auto_class_wrapper_passes_revision_none(observe, checkpoint):
    """Stands for PEFT's ``AutoPeftModel.from_pretrained`` (huggingface/peft src/peft/auto.py), which loads the
    base model with ``target_class.from_pretrained(base_model_path, revision=base_model_revision, **kwargs)``:
    ``revision=None`` where the adapter names none, and the user's keyword arguments (here ``device_map="auto"``,
    ``low_cpu_mem_usage=True`` and a dtype) passed through."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        checkpoint, revision=None, device_map="auto", low_cpu_mem_usage=True, **FLOAT32
    )
    observe("model", _summary(model))


@pytest.mark.parametrize("form", ["train-or-export", "infer"])
def test_keyword_only_load_of_a_training_framework(observe, checkpoint, form, tmp_path):
    """Stands for LLaMA-Factory's ``load_model`` (hiyouga/LLaMA-Factory src/llamafactory/model/loader.py), which
    calls ``load_class.from_pretrained(**init_kwargs)``: the path as the keyword ``pretrained_model_name_or_path``,
    ``config=``, ``torch_dtype="auto"``, ``trust_remote_code``, ``cache_dir``, ``revision``, ``token`` and, from
    ``patch_config`` (src/llamafactory/model/patcher.py), ``low_cpu_mem_usage`` and the ``device_map`` that
    src/llamafactory/hparams/parser.py chooses: ``{"": get_current_device()}`` to train (a ``torch.device``, the
    CPU on this machine: src/llamafactory/extras/misc.py) and ``{"": torch.device("cpu")}`` to export, one
    scenario here; ``"auto"`` with an ``offload_folder`` to infer."""
    from transformers import AutoConfig, AutoModelForCausalLM

    device_map = {"train-or-export": {"": torch.device("cpu")}, "infer": "auto"}[form]
    init_kwargs = {
        "trust_remote_code": False,
        "cache_dir": None,
        "revision": "main",
        "token": None,
        "low_cpu_mem_usage": True,
        "device_map": device_map,
    }
    if form == "infer":
        init_kwargs["offload_folder"] = str(tmp_path / "offload")
    init_kwargs["config"] = AutoConfig.from_pretrained(checkpoint)
    init_kwargs["pretrained_model_name_or_path"] = checkpoint
    init_kwargs["torch_dtype"] = "auto"
    observe("model", _summary(AutoModelForCausalLM.from_pretrained(**init_kwargs)))


@pytest.mark.parametrize("device_map", [None, "auto"], ids=["no-device_map", "device_map-auto"])
def test_weights_given_as_a_state_dict_without_a_path(observe, checkpoint, device_map):
    """Stands for the conversion scripts that build a model from weights they already hold: ``from_pretrained(None,
    config=config, state_dict=state_dict)``, the form ``from_pretrained``'s own documentation gives for "both the
    configuration and state dictionary" (huggingface/transformers src/transformers/modeling_utils.py, the
    ``pretrained_model_name_or_path`` argument), here with weights read by ``safetensors`` and a ``device_map``."""
    from pathlib import Path

    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    state_dict = load_file(str(Path(checkpoint) / "model.safetensors"))
    kwargs = {**FLOAT32, **({} if device_map is None else {"device_map": device_map})}
    config = AutoConfig.from_pretrained(checkpoint)
    observe(
        "model",
        _load_or_raise(
            lambda: AutoModelForCausalLM.from_pretrained(None, config=config, state_dict=state_dict, **kwargs)
        ),
    )


def test_subclass_of_an_auto_class_calls_super_without_random_init(observe, checkpoint):
    """Stands for NeMo Automodel's ``NeMoAutoModelForCausalLM`` (NVIDIA-NeMo/Automodel
    nemo_automodel/_transformers/auto_model.py, ``_from_pretrained_parent_class``): a subclass of
    ``AutoModelForCausalLM`` whose classmethod calls ``super().from_pretrained(*args, **kwargs)`` with a dtype and
    an ``attn_implementation``, inside ``skip_random_init()`` (nemo_automodel/components/utils/model_utils.py),
    which sets the release's module-level ``_init_weights`` flag to False for the load."""
    from transformers import AutoModelForCausalLM

    class NeMoAutoModelForCausalLM(AutoModelForCausalLM):
        @classmethod
        def _from_pretrained_parent_class(cls, *args, **kwargs):
            return super().from_pretrained(*args, **kwargs)

    flag_owner = None
    for where in ("transformers.initialization", "transformers.modeling_utils"):  # 5.x, 4.x
        try:
            module = importlib.import_module(where)
        except ImportError:
            continue
        if hasattr(module, "_init_weights"):
            flag_owner = module
            break
    context = _replaced(flag_owner, "_init_weights", False) if flag_owner is not None else contextlib.nullcontext()
    with context:
        model = NeMoAutoModelForCausalLM._from_pretrained_parent_class(
            checkpoint, attn_implementation="eager", device_map="cpu", **FLOAT32
        )
    observe("model", _summary(model))


# ---------------------------------------------------------------------------------------------------------------
# from_pretrained replaced by a classmethod that calls the original


@pytest.mark.parametrize("model", ["llama", "skips-post_init"])
def test_from_pretrained_monkeypatched_to_fix_the_class_plan(observe, checkpoint, model):
    """Stands for ms-swift's ``patch_automodel`` (modelscope/ms-swift swift/model/patcher.py; its "fix tp_plan",
    fc859ae4 in swift/llm/model/patcher.py): ``PreTrainedModel.from_pretrained`` replaced, for the load, by a
    classmethod that sets ``cls._tp_plan = cls._tp_plan or {}`` and calls the original function
    (``PreTrainedModel.from_pretrained.__func__``) with ``(cls, *args, **kwargs)``, restored afterwards; here with a
    Llama and with a remote-code-style class whose ``__init__`` skips ``post_init()``, each with ``device_map``."""
    from transformers import AutoModelForCausalLM, PreTrainedModel

    original = PreTrainedModel.from_pretrained.__func__
    touched: list[Any] = []

    @classmethod  # type: ignore[misc]
    def _new_from_pretrained(cls, *args, **kwargs):
        if hasattr(cls, "_tp_plan"):
            if "_tp_plan" not in vars(cls):
                touched.append(cls)
            cls._tp_plan = cls._tp_plan or {}
        return original(cls, *args, **kwargs)

    loader = AutoModelForCausalLM if model == "llama" else tiny_llama.no_post_init_llama()
    plans = {}
    try:
        with _replaced(PreTrainedModel, "from_pretrained", _new_from_pretrained):
            loaded = loader.from_pretrained(checkpoint, device_map="auto", **FLOAT32)
            plans = {"class": dict(type(loaded)._tp_plan or {}), "instance": dict(loaded._tp_plan or {})}
    finally:
        for cls in touched:  # the pattern leaves the class attribute set; the next guard must not inherit it
            del cls._tp_plan
    observe("model", _summary(loaded))
    observe("plans", plans)


# ---------------------------------------------------------------------------------------------------------------
# get_init_context wrapped, overridden (T2a patches it on 4.50.3)


@pytest.mark.parametrize("strip_meta", [False, True], ids=["pass-through", "meta-stripped"])
@pytest.mark.parametrize("device_map", [None, "auto"], ids=["no-device_map", "device_map-auto"])
def test_get_init_context_wrapped_module_wide(observe, checkpoint, strip_meta, device_map):
    """Stands for NeMo Automodel's module-wide patch (NVIDIA-NeMo/Automodel nemo_automodel/_transformers/model_init.py,
    ``_patched_get_init_context``): ``PreTrainedModel.get_init_context`` replaced by a classmethod that calls the
    original function with ``(cls, *args, **kwargs)`` and, inside ``no_hf_meta_device()`` (its retry after "Cannot
    copy out of meta tensor"), drops the ``torch.device("meta")`` entries of the list it returns. With the meta device
    dropped, 5.x builds the model on the CPU and leaves its rotary ``inv_freq`` buffers uninitialised after the load
    (pristine and +fixed alike, a different value on each run): there the non-persistent buffers' values and the
    logits are not compared, everything else is. (On 4.x the list holds no ``torch.device``: both forms are one.)"""
    from transformers import AutoModelForCausalLM, PreTrainedModel

    original = PreTrainedModel.get_init_context.__func__

    def _patched(cls, *args, **kwargs):
        contexts = original(cls, *args, **kwargs)
        if strip_meta:
            return [c for c in contexts if not (isinstance(c, torch.device) and c.type == "meta")]
        return contexts

    kwargs = {**FLOAT32, **({"low_cpu_mem_usage": True} if device_map is None else {"device_map": device_map})}
    with _replaced(PreTrainedModel, "get_init_context", classmethod(_patched)):
        model = AutoModelForCausalLM.from_pretrained(checkpoint, **kwargs)
    observe("model", _summary(model, defined=not strip_meta))


def test_get_init_context_overridden_by_a_model_class(observe, checkpoint):
    """Stands for turbo-alignment's ``PreTrainedModelWithMPU`` (turbo-llm/turbo-alignment
    turbo_alignment/modeling/pretrained_model.py), a ``PreTrainedModel`` subclass whose ``get_init_context``
    classmethod returns its own list outside DeepSpeed ZeRO-3, ``[no_init_weights(), init_empty_weights()]``, and
    the model classes that put it before the release's class (``Gemma2ForCausalLMWithMPU(...,
    PreTrainedModelWithMPU, Gemma2ForCausalLM)``, turbo_alignment/modeling/gemma.py). Written with ``*args`` here,
    so that it takes each release's arguments (the project pins one release and its parameters)."""
    from accelerate import init_empty_weights
    from transformers import LlamaForCausalLM, PreTrainedModel

    no_init_weights = _no_init_weights()

    class PreTrainedModelWithOwnInit(PreTrainedModel):
        @classmethod
        def get_init_context(cls, *args, **kwargs):
            return [no_init_weights(), init_empty_weights()]

    class LlamaWithOwnInit(PreTrainedModelWithOwnInit, LlamaForCausalLM):
        pass

    loads = {}
    for name, kwargs in {"no-device_map": {}, "device_map-auto": {"device_map": "auto"}}.items():
        loads[name] = _load_or_raise(lambda kwargs=kwargs: LlamaWithOwnInit.from_pretrained(checkpoint, **kwargs))
    observe("loads", loads)


# ---------------------------------------------------------------------------------------------------------------
# Loads that a tool builds around from_pretrained


@pytest.mark.parametrize("fast_init", [True, False], ids=["_fast_init", "no-_fast_init"])
def test_cpu_load_with_initialisation_suspended(observe, checkpoint, fast_init):
    """Stands for GPTQModel's load of the model to quantize (ModelCloud/GPTQModel gptqmodel/models/loader.py, with
    ``suspend_hf_weight_init`` of gptqmodel/utils/hf.py): ``device_map={"": "cpu"}``, ``_fast_init`` from the model
    definition (``require_fast_init``), a dtype, inside a context that replaces ``torch.nn.init.kaiming_uniform_``,
    ``uniform_`` and ``normal_`` by no-ops, sets the release's ``_init_weights`` flag to False and enters
    ``no_init_weights()``."""
    from transformers import AutoModelForCausalLM

    skip = lambda *args, **kwargs: None  # noqa: E731 - the no-op initialiser of the pattern
    modeling_utils = importlib.import_module("transformers.modeling_utils")
    with contextlib.ExitStack() as stack:
        for name in ("kaiming_uniform_", "uniform_", "normal_"):
            stack.enter_context(_replaced(torch.nn.init, name, skip))
        if hasattr(modeling_utils, "_init_weights"):
            stack.enter_context(_replaced(modeling_utils, "_init_weights", False))
        stack.enter_context(_no_init_weights()())
        model = AutoModelForCausalLM.from_pretrained(
            checkpoint, device_map={"": "cpu"}, _fast_init=fast_init, **FLOAT32
        )
    observe("model", _summary(model))


def test_device_map_precomputed_on_an_empty_canvas(observe, checkpoint, tmp_path):
    """Stands for axolotl's ``_set_device_map_config`` with ``max_memory`` (axolotl-ai-cloud/axolotl
    src/axolotl/loaders/model.py): the model built as a canvas under ``init_empty_weights()`` with ``from_config``,
    ``tie_weights()``, then accelerate's ``infer_auto_device_map(canvas, max_memory=..., dtype=...)``, and the map it
    returns passed to ``from_pretrained`` with a dtype (here a memory limit small enough to put part of the model on
    disk, with an ``offload_folder``)."""
    from accelerate import infer_auto_device_map, init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(checkpoint)
    with init_empty_weights():
        canvas = AutoModelForCausalLM.from_config(config)
    canvas.tie_weights()
    device_map = infer_auto_device_map(canvas, max_memory={"cpu": "90KB"}, dtype=torch.float32)
    observe("device_map_in", {k: str(v) for k, v in device_map.items()})
    model = AutoModelForCausalLM.from_pretrained(
        checkpoint, device_map=device_map, offload_folder=str(tmp_path / "offload"), **FLOAT32
    )
    observe("model", _summary(model))


def _reward_model_class(post_init: bool):
    """A value model built at run time on the release's pretrained base class: the base model under its prefix, a
    linear value head, and non-persistent ``mean``/``std`` buffers read from the config."""
    from transformers import LlamaModel, LlamaPreTrainedModel

    class RewardModel(LlamaPreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            setattr(self, self.base_model_prefix, LlamaModel(config))
            self.score = torch.nn.Linear(config.hidden_size, 1, bias=False)
            self.register_buffer("mean", torch.zeros(1), persistent=False)
            self.register_buffer("std", torch.ones(1), persistent=False)
            if hasattr(config, "mean"):
                self.mean[0] = config.mean
                self.std[0] = config.std
            if post_init:
                self.post_init()

        def forward(self, input_ids):
            hidden = getattr(self, self.base_model_prefix)(input_ids).last_hidden_state
            return (self.score(hidden).squeeze(-1) - self.mean) / self.std

    return RewardModel


@pytest.mark.parametrize("post_init", [True, False], ids=["post_init", "no-post_init"])
@pytest.mark.parametrize("device_map", [None, "auto"], ids=["no-device_map", "device_map-auto"])
def test_value_model_class_built_on_the_pretrained_base(observe, checkpoint, post_init, device_map):
    """Stands for OpenRLHF's ``get_llm_for_sequence_regression`` (OpenRLHF/OpenRLHF openrlhf/models/model.py,
    ``_get_reward_model``/``_get_critic_model``): a class built at run time on ``base_class.__base__`` (here
    ``LlamaPreTrainedModel``), holding the base model and a value head, with non-persistent ``mean``/``std`` buffers
    set from the config, loaded with ``config=``, a dtype and a ``device_map``; its ``__init__`` calls
    ``post_init()`` since c0e2ee24 (2026) and skipped it before, as many remote-code models do. 5.x builds the
    buffers on meta and leaves them uninitialised after the load (pristine and +fixed alike, a different value on
    each run), so the buffers' values, and the rewards normalised by them, are not compared; the value head's raw
    scores and every tensor the checkpoint or the seeded initialisation fills are."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(checkpoint)
    config.normalize_reward = True
    config.mean, config.std = 0.5, 2.0
    kwargs = {**FLOAT32, **({} if device_map is None else {"device_map": device_map})}
    torch.manual_seed(0)  # the value head is not in the checkpoint: initialised at load, alike on both builds
    try:
        model = _reward_model_class(post_init).from_pretrained(checkpoint, config=config, **kwargs)
    except Exception as exc:  # noqa: BLE001 - 5.x refuses a model that skips post_init(), alike on both builds
        observe("raised_by_load", _library_error(exc))
        return
    observe("tensors", _tensors(model, nonpersistent_values=False))
    observe("device_map", {k: str(v) for k, v in (getattr(model, "hf_device_map", None) or {}).items()})
    with torch.no_grad():
        hidden = getattr(model, model.base_model_prefix)(tiny_llama.INPUT).last_hidden_state
        observe("scores", model.score(hidden).squeeze(-1))


# ---------------------------------------------------------------------------------------------------------------
# A user's copy of the release's own loading method


def _is_fixed_build() -> bool:
    return "+fixed" in importlib.metadata.version("transformers")


def _method_kind(owner: type, name: str) -> type:
    return type(inspect.getattr_static(owner, name))


@pytest.mark.parametrize("method", ["_load_pretrained_model", "from_pretrained"])
@pytest.mark.parametrize("device_map", [None, "auto"], ids=["no-device_map", "device_map-auto"])
@pytest.mark.may_skip(
    reason="the pristine release's copy comes from the pristine run (--guard-exchange); a +fixed "
    "run without one has no copy to load"
)
def test_copy_of_the_pristine_method(observe, checkpoint, exchange, method, device_map):
    """Stands for a project's own copy of the release's loading code installed over it:
    vipulSharma18/Getting-Started-with-Quantization low_bit_inference/utils/modeling_utils.py (a copy of
    modeling_utils from 31 Aug to 3 Sep 2025, d70a4dda, whose ``_load_pretrained_model`` calls
    ``caching_allocator_warmup(model_to_load, expanded_device_map, hf_quantizer)``), and the scripts that assign
    their own copy of ``_load_pretrained_model`` to ``PreTrainedModel`` (a Penguin-VL loader carries one written
    for 4.51.3). The copy is the pristine
    release's own method, read at run time (``inspect.getsource``) on the pristine build and handed to the +fixed
    build through the exchange folder; on the +fixed build it replaces the method for one load, as the user's copy
    does. Nothing of upstream's code is kept in this repository."""
    from transformers import AutoModelForCausalLM, PreTrainedModel

    modeling_utils = importlib.import_module("transformers.modeling_utils")
    kind = _method_kind(PreTrainedModel, method)
    if _is_fixed_build():
        try:
            source = (exchange.read("copy") / f"{method}.py").read_text()
        except Exception as exc:  # noqa: BLE001 - no exchange: only the pristine run can make the copy
            pytest.skip(f"no copy of the pristine {method}: {exc}")
    else:
        source = textwrap.dedent(
            inspect.getsource(
                getattr(PreTrainedModel, method).__func__ if kind is classmethod else getattr(PreTrainedModel, method)
            )
        )
        (exchange.write("copy") / f"{method}.py").write_text(source)
    namespace = dict(vars(modeling_utils))
    exec(compile(source, f"<copy of the pristine {method}>", "exec"), namespace)  # noqa: S102 - the user's copy
    copied = namespace[method]
    if isinstance(copied, classmethod | staticmethod):  # the decorators are in the copied source
        replacement = copied
    else:
        replacement = kind(copied)
    kwargs = {**FLOAT32, **({} if device_map is None else {"device_map": device_map})}
    with _replaced(PreTrainedModel, method, replacement):
        observe("model", _load_or_raise(lambda: AutoModelForCausalLM.from_pretrained(checkpoint, **kwargs)))
