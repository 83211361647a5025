"""Guards for T5 (transformers 5.24.0, 0004-keep-non-persistent-buffers.patch): the loads next to #48892.

The bug: a non-persistent buffer that a model computes in ``__init__`` and that ``_init_weights`` does not set comes
back from ``from_pretrained`` as uninitialised memory. The fix keeps the value of such a buffer where the model was
built off the meta device, and otherwise gives it the value of a second build of the model (parameters on meta)
when ``_init_weights`` left it unwritten. Next to it, and unchanged: buffers that come from the checkpoint
(persistent ones), tied weights, buffers that ``_init_weights`` sets (transformers' own Llama rotary ``inv_freq``,
and a custom model's written with ``.copy_``, through ``.data`` or replaced by a new tensor), a ``device_map`` load
that places part of the model on disk, a load under ``torch.inference_mode()`` or with ``dtype=torch.bfloat16``, and
a model whose ``__init__`` takes more than its config (the second build cannot run there: the fix warns).

And, mined from public code (docs/proof-contract.md#guards-mined-from-public-code), the ways downstream code builds
the model so that its buffers are real tensors before the load moves them (``get_init_context`` overridden or
wrapped), which take the fix's other branch (a buffer not on meta keeps its value).

Recorded: every parameter and buffer (device, dtype, sums, and the values of the small buffers), the outputs of a
fixed input, what a load raised, and the warnings and log records.
"""

from __future__ import annotations

import contextlib
import importlib

import pytest
import torch

import guardkit
import tiny_llama

pytestmark = pytest.mark.guard(package="transformers")
HIDDEN = 8
X = torch.linspace(-1, 1, 2 * HIDDEN).reshape(2, HIDDEN)


# ---------------------------------------------------------------------------------------------------------------
# Tiny models


def _table(dim: int) -> torch.Tensor:
    return 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))


def _classes():
    """A custom model (not one of transformers' own): a persistent buffer ``counts`` (the checkpoint holds it), a
    non-persistent ``inv_freq`` in a submodule without parameters (as a rotary module holds it), which the model's
    ``_init_weights`` writes as ``config.write`` says (``copy_``, ``data``: assigned through ``.data``, ``new-tensor``:
    the buffer replaced by a new tensor, ``none``: not at all), and ``ArgsModel``, whose ``__init__`` takes a
    ``base`` argument besides its config."""
    from transformers import PretrainedConfig, PreTrainedModel

    class BufferConfig(PretrainedConfig):
        model_type = "guard-t5-buffers"

        def __init__(self, hidden=HIDDEN, write="copy_", **kwargs):
            self.hidden = hidden
            self.write = write
            super().__init__(**kwargs)

    class Table(torch.nn.Module):
        def __init__(self, dim, base=10000.0):
            super().__init__()
            self.base = base
            self.register_buffer("inv_freq", self.compute(dim), persistent=False)

        def compute(self, dim, device=None):
            return 1.0 / (self.base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))

    class BufferModel(PreTrainedModel):
        config_class = BufferConfig
        base_model_prefix = "buffers"

        def __init__(self, config):
            super().__init__(config)
            self.proj = torch.nn.Linear(config.hidden, config.hidden)
            self.table = Table(config.hidden)
            self.register_buffer("counts", torch.zeros(config.hidden))
            self.post_init()

        @torch.no_grad()
        def _init_weights(self, module):
            super()._init_weights(module)
            if not isinstance(module, Table) or self.config.write == "none":
                return
            value = module.compute(self.config.hidden, device=module.inv_freq.device).to(module.inv_freq.dtype)
            if self.config.write == "copy_":
                module.inv_freq.copy_(value)
            elif self.config.write == "data":
                module.inv_freq.data = value
            else:
                module.inv_freq = value

        def forward(self, x):
            return self.proj(x) * (1 + self.counts) + self.table.inv_freq.repeat(2)

    class ArgsModel(BufferModel):
        def __init__(self, config, base):
            PreTrainedModel.__init__(self, config)
            self.proj = torch.nn.Linear(config.hidden, config.hidden)
            self.table = Table(config.hidden, base=base)
            self.register_buffer("counts", torch.zeros(config.hidden))
            self.post_init()

    return BufferConfig, BufferModel, ArgsModel


CLASSES = _classes()


@pytest.fixture(scope="module")
def custom(tmp_path_factory):
    """One seeded ``BufferModel`` saved, with its persistent ``counts`` away from what ``__init__`` gives it."""
    config_class, model_class, _ = CLASSES
    torch.manual_seed(0)
    model = model_class(config_class())
    with torch.no_grad():
        model.counts.copy_(torch.arange(HIDDEN, dtype=torch.float32) / 8)
    path = tmp_path_factory.mktemp("t5-custom")
    model.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A seeded tiny Llama with tied input and output embeddings, saved once."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_llama.small_config(tie_word_embeddings=True))
    path = tmp_path_factory.mktemp("t5-llama")
    model.save_pretrained(path)
    return str(path)


# ---------------------------------------------------------------------------------------------------------------
# What is recorded


def _tensors(model: torch.nn.Module, values: bool = True) -> dict:
    """Every parameter and buffer: device, dtype, and (not on meta) two sums; the values of the small buffers.
    ``values=False`` leaves the non-persistent buffers' values out (a load that leaves them undefined)."""
    named = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers(remove_duplicate=False))
    persistent = set(model.state_dict())
    out = {}
    for name, t in sorted(named.items()):
        row: list = [t.device.type, str(t.dtype)]
        if t.device.type != "meta" and (values or name in persistent):
            row += [float(t.detach().double().sum()), float(t.detach().double().abs().sum())]
            if name not in dict(model.named_parameters(remove_duplicate=False)) and t.numel() <= 16:
                row.append(t.detach().double().tolist())
        out[name] = row
    return out


def _llama(observe, model, values: bool = True) -> None:
    observe("tensors", _tensors(model, values))
    observe("tied", model.lm_head.weight is model.model.embed_tokens.weight)
    observe("device_map", {k: str(v) for k, v in (getattr(model, "hf_device_map", None) or {}).items()})
    if values:
        with torch.no_grad():
            logits = model(tiny_llama.INPUT).logits
        observe("logits", [float(logits.double().sum()), logits[0, -1, :4].double().tolist()])


def _custom(observe, model) -> None:
    observe("tensors", _tensors(model))
    with torch.no_grad():
        observe("output", model(X.to(model.proj.weight.dtype)).double())


# ---------------------------------------------------------------------------------------------------------------
# Transformers' own Llama: its rotary inv_freq is set by _init_weights; tied embeddings


@pytest.mark.parametrize(
    "form", ["plain", "device_map-cpu", "dtype-bfloat16", "inference_mode", "deterministic"], ids=str
)
def test_llama_loads(observe, llama, form):
    """A tiny ``LlamaForCausalLM`` with tied embeddings, whose non-persistent rotary ``inv_freq`` its
    ``_init_weights`` sets: plain, with ``device_map="cpu"``, with ``dtype=torch.bfloat16``, under
    ``torch.inference_mode()``, and with deterministic algorithms (new memory filled with NaN)."""
    from transformers import AutoModelForCausalLM

    kwargs = {"device_map": "cpu"} if form == "device_map-cpu" else {}
    if form == "dtype-bfloat16":
        kwargs["dtype"] = torch.bfloat16
    contexts = {"inference_mode": torch.inference_mode, "deterministic": guardkit.deterministic}
    context = contexts.get(form, contextlib.nullcontext)
    with context():
        model = AutoModelForCausalLM.from_pretrained(llama, **kwargs)
        _llama(observe, model)
    observe("inference", [p.is_inference() for p in (model.model.embed_tokens.weight, model.model.rotary_emb.inv_freq)])


@pytest.mark.parametrize("where", ["layer", "layer-and-rotary"])
def test_llama_device_map_with_disk_offload(observe, llama, tmp_path, where):
    """A ``device_map`` that places a decoder layer (and the rotary module, whose only tensor is the non-persistent
    ``inv_freq``) on ``"disk"``, with an ``offload_folder``: the offloaded weights stay on meta on purpose."""
    from transformers import AutoModelForCausalLM

    device_map = {
        "model.embed_tokens": "cpu",
        "model.layers.0": "cpu",
        "model.layers.1": "disk",
        "model.norm": "cpu",
        "model.rotary_emb": "disk" if where == "layer-and-rotary" else "cpu",
        "lm_head": "cpu",
    }
    model = AutoModelForCausalLM.from_pretrained(llama, device_map=device_map, offload_folder=str(tmp_path / "off"))
    _llama(observe, model)


@pytest.mark.parametrize("rope_theta", [10000.0, 500.0], ids=["checkpoint-config", "config-changed"])
def test_llama_with_a_config_passed(observe, llama, rope_theta):
    """A load given ``config=`` (the checkpoint's, or one whose ``rope_theta`` differs, so that the rotary
    ``inv_freq`` that ``_init_weights`` computes differs from the saved model's) and, for reference, the model that
    ``from_config`` builds from the same config (no load: every buffer as ``__init__`` computes it)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(llama)
    config.rope_parameters = {**(getattr(config, "rope_parameters", None) or {}), "rope_theta": rope_theta}
    torch.manual_seed(1)
    built = AutoModelForCausalLM.from_config(config)
    observe("built_inv_freq", built.model.rotary_emb.inv_freq)
    _llama(observe, AutoModelForCausalLM.from_pretrained(llama, config=config))


# ---------------------------------------------------------------------------------------------------------------
# A custom model: a persistent buffer from the checkpoint, a non-persistent one that _init_weights writes


@pytest.mark.parametrize("write", ["copy_", "data", "new-tensor"])
@pytest.mark.parametrize("form", ["plain", "device_map-cpu", "dtype-bfloat16", "inference_mode"])
def test_custom_init_weights_writes_its_buffer(observe, custom, write, form):
    """A custom model whose ``_init_weights`` writes its non-persistent buffer with ``.copy_``, through ``.data``, or
    by replacing it with a new tensor, and whose persistent buffer the checkpoint holds (its value differs from
    the one ``__init__`` computes): loaded plain, with ``device_map="cpu"``, in ``bfloat16``, and under
    ``torch.inference_mode()``."""
    config_class, model_class, _ = CLASSES
    config = config_class.from_pretrained(custom)
    config.write = write
    kwargs = {"device_map": "cpu"} if form == "device_map-cpu" else {}
    if form == "dtype-bfloat16":
        kwargs["dtype"] = torch.bfloat16
    with torch.inference_mode() if form == "inference_mode" else contextlib.nullcontext():
        model = model_class.from_pretrained(custom, config=config, **kwargs)
        _custom(observe, model)


def _load_args_model(observe, custom, write):
    config_class, _, args_class = CLASSES
    config = config_class.from_pretrained(custom)
    config.write = write
    with guardkit.deterministic():
        model = args_class.from_pretrained(custom, 10000.0, config=config)
    observe("tensors", _tensors(model))
    observe("nan", bool(model.table.inv_freq.isnan().any()))


def test_custom_init_takes_more_than_its_config(observe, custom):
    """A custom model whose ``__init__`` takes an argument besides its config (``from_pretrained(path, base)``
    passes it) and whose ``_init_weights`` sets its non-persistent buffer, loaded with deterministic algorithms (new
    memory is NaN): the buffer holds the value ``_init_weights`` gives it, and nothing builds the model again."""
    _load_args_model(observe, custom, "copy_")


@pytest.mark.intended(
    "logs",
    reason="where _init_weights does not set the buffer, the fix builds the model again to compute it; that "
    "build cannot pass the extra argument of __init__, and the fix says so (the buffer stays uninitialised, as on "
    "pristine)",
    match=r"^WARNING transformers\.modeling_utils: The non-persistent buffers \['table\.inv_freq'\] of ArgsModel",
)
def test_custom_init_takes_more_than_its_config_and_leaves_its_buffer(observe, custom):
    """The same model whose ``_init_weights`` does not set the buffer: it stays NaN (uninitialised) on both builds,
    and the +fixed build warns that its second build of the model failed, naming the buffer (declared)."""
    _load_args_model(observe, custom, "none")


def test_custom_model_in_inference_mode_leaves_no_placeholder(observe, custom):
    """The same custom model loaded twice in one process, the second time under ``torch.inference_mode()``: the
    first load's tensors are untouched by the second (nothing of one load is shared with the next)."""
    config_class, model_class, _ = CLASSES
    first = model_class.from_pretrained(custom)
    before = _tensors(first)
    with torch.inference_mode():
        second = model_class.from_pretrained(custom)
    observe("first", before)
    observe("first_after", _tensors(first))
    observe("second", _tensors(second))


# ---------------------------------------------------------------------------------------------------------------
# Mined from public code: the model built off the meta device by an overridden or wrapped get_init_context


def _no_init_weights():
    return importlib.import_module("transformers.initialization").no_init_weights


def _off_meta(observe, model, prefix: str) -> None:
    """A model built off the meta device: its parameters and persistent buffers, and separately the values of its
    non-persistent buffers and its output (NaN on pristine, where the load leaves the buffers uninitialised)."""
    observe(f"{prefix}tensors", _tensors(model, values=False))
    persistent = set(model.state_dict())
    observe(
        f"{prefix}nonpersistent",
        {name: b.double().tolist() for name, b in model.named_buffers() if name not in persistent},
    )
    with torch.no_grad():
        out = model(tiny_llama.INPUT).logits[0, -1, :4] if hasattr(model, "lm_head") else model(X)
    observe(f"{prefix}output", out.double())


BUILT_OFF_META = (
    "the model is built off the meta device, so its non-persistent buffers hold the values __init__ computed "
    "when the load moves them; pristine replaces them with new, uninitialised memory (NaN here, deterministic "
    "algorithms) that _init_weights does not write on a model built so, and the fix keeps their values: the bug, "
    "on a model built otherwise"
)


@pytest.mark.intended("llama_nonpersistent", reason=BUILT_OFF_META)
@pytest.mark.intended("llama_output", reason=BUILT_OFF_META)
@pytest.mark.intended("custom_nonpersistent", reason=BUILT_OFF_META)
@pytest.mark.intended("custom_output", reason=BUILT_OFF_META)
def test_get_init_context_overridden_to_build_on_the_device(observe, custom, llama):
    """Stands for NVIDIA BioNeMo's TransformerEngine ESM-2 (NVIDIA/bionemo-framework
    bionemo-recipes/models/esm2/src/esm/modeling_esm_te.py, ``NVEsmPreTrainedModel.get_init_context``): a
    ``PreTrainedModel`` subclass whose ``get_init_context`` classmethod returns an empty list, so that the model is
    built on a real device (its TransformerEngine layers pick their device from the default device); its buffers
    are then real tensors when the load moves the non-persistent ones. Here a Llama and the custom model (whose
    ``_init_weights`` sets its buffer), each with such a class method, with deterministic algorithms: pristine gives
    their non-persistent buffers uninitialised memory (NaN), +fixed the values ``__init__`` computed (declared:
    the bug, reached by this pattern); everything else is compared."""
    from transformers import LlamaForCausalLM

    _, model_class, _ = CLASSES

    class LlamaOnDevice(LlamaForCausalLM):
        @classmethod
        def get_init_context(cls, *args, **kwargs):
            return []

    class CustomOnDevice(model_class):  # type: ignore[misc, valid-type]
        @classmethod
        def get_init_context(cls, *args, **kwargs):
            return []

    with guardkit.deterministic():
        _off_meta(observe, LlamaOnDevice.from_pretrained(llama), "llama_")
        _off_meta(observe, CustomOnDevice.from_pretrained(custom), "custom_")


@pytest.mark.parametrize("device_map", [None, "cpu"], ids=["no-device_map", "device_map-cpu"])
def test_get_init_context_overridden_with_empty_weights(observe, llama, custom, device_map):
    """Stands for turbo-alignment's ``PreTrainedModelWithMPU`` (turbo-llm/turbo-alignment
    turbo_alignment/modeling/pretrained_model.py): ``get_init_context`` returns ``[no_init_weights(),
    init_empty_weights()]``, accelerate's context, which puts the parameters on meta and leaves the buffers on the
    CPU with the values ``__init__`` computed: the load meets non-persistent buffers that are real tensors. Here a
    Llama and the custom model behind such a base class."""
    from accelerate import init_empty_weights
    from transformers import LlamaForCausalLM

    _, model_class, _ = CLASSES
    no_init_weights = _no_init_weights()

    class WithOwnInit:
        @classmethod
        def get_init_context(cls, *args, **kwargs):
            return [no_init_weights(), init_empty_weights()]

    class LlamaWithOwnInit(WithOwnInit, LlamaForCausalLM):
        pass

    class CustomWithOwnInit(WithOwnInit, model_class):  # type: ignore[misc, valid-type]
        pass

    kwargs = {} if device_map is None else {"device_map": device_map}
    _llama(observe, LlamaWithOwnInit.from_pretrained(llama, **kwargs))
    model = CustomWithOwnInit.from_pretrained(custom, **kwargs)
    observe("custom", _tensors(model))
    with torch.no_grad():
        observe("custom_output", model(X))


@pytest.mark.intended("nonpersistent", reason=BUILT_OFF_META)
@pytest.mark.intended("output", reason=BUILT_OFF_META)
def test_get_init_context_wrapped_to_drop_the_meta_device(observe, custom):
    """Stands for NeMo Automodel's retry without the meta device (NVIDIA-NeMo/Automodel
    nemo_automodel/_transformers/model_init.py, ``_patched_get_init_context`` inside ``no_hf_meta_device()``):
    ``PreTrainedModel.get_init_context`` replaced by a classmethod that calls the original and drops the
    ``torch.device("meta")`` entries of its list, for a load whose model must not be built on meta. Here the custom
    model, whose ``_init_weights`` sets its non-persistent buffer, with deterministic algorithms: pristine builds it
    on the CPU and leaves the buffer uninitialised (NaN), +fixed gives it the value ``__init__`` computes (declared:
    the bug, reached by this pattern); its weights and persistent buffer are compared. (Whether the wrapper still
    finds the meta device in the list is the nested-load fix's: test_nested_from_pretrained.py.)"""
    from transformers import PreTrainedModel

    _, model_class, _ = CLASSES
    original = PreTrainedModel.get_init_context.__func__

    def _patched(cls, *args, **kwargs):
        return [c for c in original(cls, *args, **kwargs) if not (isinstance(c, torch.device) and c.type == "meta")]

    saved = vars(PreTrainedModel)["get_init_context"]
    PreTrainedModel.get_init_context = classmethod(_patched)
    try:
        with guardkit.deterministic():
            model = model_class.from_pretrained(custom)
    finally:
        PreTrainedModel.get_init_context = saved
    _off_meta(observe, model, "")


@pytest.mark.parametrize("model", ["llama", "custom", "llama-without-post_init"])
def test_move_missing_keys_monkeypatched_with_the_release_signature(observe, llama, custom, model):
    """Stands for TRELLIS.2's Colab compatibility patch (PotentiallyARobot/TRELLIS.2 trellis2/_colab_compat.py,
    ``patch_transformers_missing_all_tied_weights_keys``): ``PreTrainedModel._move_missing_keys_from_meta_to_device``
    (and ``mark_tied_weights_as_initialized``) replaced by functions of the release's positional signature
    ``(self, missing_keys, device_map, device_mesh, hf_quantizer)`` that give a model without ``post_init()`` an
    empty ``all_tied_weights_keys`` and call the original; the hub's remote-code models that skip ``post_init()``
    load through it. Here a Llama, the custom model, and a Llama class that skips ``post_init()``, with
    deterministic algorithms."""
    from transformers import AutoModelForCausalLM, PreTrainedModel

    original_move = PreTrainedModel._move_missing_keys_from_meta_to_device
    original_mark = PreTrainedModel.mark_tied_weights_as_initialized
    calls: list[int] = []

    def move(self, missing_keys, device_map, device_mesh, hf_quantizer):
        calls.append(len(missing_keys))
        if not hasattr(self, "all_tied_weights_keys"):
            self.all_tied_weights_keys = {}
        return original_move(self, missing_keys, device_map, device_mesh, hf_quantizer)

    def mark(self, *args, **kwargs):
        if not hasattr(self, "all_tied_weights_keys"):
            return None
        return original_mark(self, *args, **kwargs)

    PreTrainedModel._move_missing_keys_from_meta_to_device = move
    PreTrainedModel.mark_tied_weights_as_initialized = mark
    torch.manual_seed(0)  # a class without post_init() does not tie lm_head: the load initialises it
    try:
        with guardkit.deterministic():
            if model == "custom":
                loaded = CLASSES[1].from_pretrained(custom)
            elif model == "llama":
                loaded = AutoModelForCausalLM.from_pretrained(llama)
            else:
                loaded = tiny_llama.no_post_init_llama().from_pretrained(llama)
    finally:
        PreTrainedModel._move_missing_keys_from_meta_to_device = original_move
        PreTrainedModel.mark_tied_weights_as_initialized = original_mark
    observe("calls", calls)
    observe("tensors", _tensors(loaded))
    with torch.no_grad():
        out = loaded(X) if model == "custom" else loaded(tiny_llama.INPUT).logits[0, -1, :4]
    observe("output", out.double())
