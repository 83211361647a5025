"""Guards for T6 (transformers 5.24.0, 0005-nested-from-pretrained.patch): the loads next to a ``from_pretrained``
inside a model's ``__init__``.

The bug: ``Outer.from_pretrained`` builds ``Outer`` under the loader's own meta device, and the
``AutoModel.from_pretrained`` that ``Outer.__init__`` calls takes that context for a user's and raises. The fix
builds on meta through a context that records the device outside (``get_init_context``), and a ``from_pretrained``
called inside that build loads as outside of it. Next to it, and unchanged: a user's own meta context around
``from_pretrained`` (``with torch.device("meta")``, ``torch.set_default_device("meta")``), which must raise as
pristine does, also around a model that loads a sub-model; such a model built with its constructor or
``_from_config``, outside any ``from_pretrained``; an ordinary load; a subclass whose ``from_pretrained`` calls
``super().from_pretrained``; a class whose ``get_init_context`` adds its own context to the release's list.

And, mined from public code (docs/proof-contract.md#guards-mined-from-public-code), the ways downstream code meets
the two patched entry points, ``from_pretrained`` (called in ``__init__``, replaced by a wrapper) and
``get_init_context`` (overridden to build off meta, wrapped to drop the meta device).

Recorded: every parameter and buffer (device, dtype, sums), the outputs of a fixed input, the device a model's
``__init__`` saw, what a load raised, and the warnings and log records.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch

import guardkit
import nested_models
import tiny_llama
from proofkit import reset_default_device

pytestmark = pytest.mark.guard(package="transformers")


def _classes():
    return nested_models.classes("guard-t6-nested")


CLASSES = _classes()


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> str:
    return tiny_llama.save_small(tmp_path_factory.mktemp("t6-encoder"))


@pytest.fixture(scope="module")
def nested_config(encoder):
    config_class, _ = CLASSES
    return config_class(encoder_path=encoder)


def _tensors(model: torch.nn.Module, nonpersistent: bool = True) -> dict:
    """Every parameter and buffer: device, dtype and (not on meta) two sums; ``nonpersistent=False`` leaves the sums
    of the buffers no checkpoint holds out (they are recorded apart, where a load leaves them undefined)."""
    named = dict(model.named_parameters()) | dict(model.named_buffers())
    persistent = set(model.state_dict())
    return {
        name: [t.device.type, str(t.dtype)]
        + (
            []
            if t.device.type == "meta" or (not nonpersistent and name not in persistent)
            else [float(t.detach().double().sum()), float(t.detach().double().abs().sum())]
        )
        for name, t in sorted(named.items())
    }


def _nonpersistent(model: torch.nn.Module) -> dict:
    persistent = set(model.state_dict())
    return {name: b.double().tolist() for name, b in model.named_buffers() if name not in persistent}


def _nested(observe, model, prefix: str = "") -> None:
    """A model that loaded a sub-model: its weights and persistent buffers, the device its ``__init__`` ran under,
    and apart, its non-persistent buffers' values and its output (which depends on them)."""
    observe(f"{prefix}tensors", _tensors(model, nonpersistent=False))
    observe(f"{prefix}init_device", model.init_device)
    observe(f"{prefix}nonpersistent", _nonpersistent(model))
    with torch.no_grad():
        observe(f"{prefix}output", model(tiny_llama.INPUT)[0, -1].double())


#: A model built off the meta device meets the non-persistent-buffers fix (0004): pristine gives the buffers of the
#: sub-model its __init__ loaded new, uninitialised memory (NaN with deterministic algorithms), +fixed keeps them.
BUILT_OFF_META = (
    "the model is built off the meta device, so the outer load meets the sub-model's non-persistent buffers (its "
    "rotary inv_freq) holding values: pristine replaces them with uninitialised memory (NaN here), the fix of "
    "0004-keep-non-persistent-buffers keeps them (#48892 reached by this pattern)"
)


def _llama(observe, model, prefix: str = "") -> None:
    observe(f"{prefix}type", type(model).__name__)
    observe(f"{prefix}tensors", _tensors(model))
    observe(f"{prefix}device_map", {k: str(v) for k, v in (getattr(model, "hf_device_map", None) or {}).items()})
    with torch.no_grad():
        out = model(tiny_llama.INPUT)
    hidden = out.logits if hasattr(out, "logits") else out.last_hidden_state
    observe(f"{prefix}output", hidden[0, -1, :4].double())


@contextlib.contextmanager
def _user_meta(style: str) -> Iterator[None]:
    """A user's own meta context: ``with torch.device("meta")`` or ``torch.set_default_device("meta")``."""
    if style == "with-torch.device":
        with torch.device("meta"):
            yield
        return
    torch.set_default_device("meta")
    try:
        yield
    finally:
        reset_default_device()


@contextlib.contextmanager
def _replaced(owner, name: str, value) -> Iterator[None]:
    saved = vars(owner)[name]
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


# ---------------------------------------------------------------------------------------------------------------
# Ordinary loads, and a user's own meta context


@pytest.mark.parametrize("form", ["plain", "device_map-cpu", "dtype-bfloat16", "AutoModel"])
def test_ordinary_llama_load(observe, encoder, form):
    """An ordinary tiny Llama: plain, with ``device_map="cpu"``, in ``bfloat16``, and its base model through
    ``AutoModel``."""
    from transformers import AutoModel, AutoModelForCausalLM

    kwargs = {"device_map": "cpu"} if form == "device_map-cpu" else {}
    if form == "dtype-bfloat16":
        kwargs["dtype"] = torch.bfloat16
    loader = AutoModel if form == "AutoModel" else AutoModelForCausalLM
    _llama(observe, loader.from_pretrained(encoder, **kwargs))


@pytest.mark.parametrize("style", ["with-torch.device", "set_default_device"])
@pytest.mark.parametrize("model", ["llama", "nested"])
def test_user_meta_context_around_from_pretrained_raises(observe, encoder, nested_config, tmp_path, style, model):
    """``from_pretrained`` inside a user's own meta context, of a Llama and of a model that loads a sub-model in
    its ``__init__``: transformers refuses it (its ``RuntimeError`` about a meta device context manager), on both
    builds alike."""
    from transformers import AutoModelForCausalLM

    if model == "nested":
        _, model_class = CLASSES
        torch.manual_seed(0)
        model_class(nested_config).save_pretrained(tmp_path / "nested")
        load = lambda: model_class.from_pretrained(tmp_path / "nested")  # noqa: E731
    else:
        load = lambda: AutoModelForCausalLM.from_pretrained(encoder)  # noqa: E731
    observe("model", model)
    with _user_meta(style):
        load()


@pytest.mark.parametrize("style", ["with-torch.device", "set_default_device"])
def test_user_meta_context_around_from_pretrained_with_a_device_map(observe, nested_config, tmp_path, style):
    """The outer load given ``device_map="cpu"`` inside a user's own meta context: transformers lets it through (the
    device map decides), and the build of the model that loads a sub-model in its ``__init__`` happens inside that
    context; the inner load refuses the user's meta context, on both builds alike (the device outside the build is
    the user's meta device: nothing to load on)."""
    _, model_class = CLASSES
    torch.manual_seed(0)
    model_class(nested_config).save_pretrained(tmp_path / "nested")
    observe("style", style)
    with _user_meta(style):
        model_class.from_pretrained(tmp_path / "nested", device_map="cpu")


@pytest.mark.parametrize("style", ["with-torch.device", "set_default_device"])
def test_user_meta_context_around_a_model_that_loads_a_sub_model(observe, nested_config, style):
    """A model whose ``__init__`` calls ``AutoModel.from_pretrained``, built with its constructor inside a user's
    own meta context (no ``from_pretrained`` around it): the inner load refuses the user's context, on both builds
    alike."""
    _, model_class = CLASSES
    observe("style", style)
    with _user_meta(style):
        model_class(nested_config)


# ---------------------------------------------------------------------------------------------------------------
# Subclasses: from_pretrained overridden, get_init_context extended


@pytest.mark.parametrize("device_map", [None, "cpu"], ids=["no-device_map", "device_map-cpu"])
def test_subclass_overrides_from_pretrained(observe, encoder, device_map):
    """A ``LlamaForCausalLM`` subclass whose ``from_pretrained`` classmethod takes ``(path, *model_args,
    **kwargs)``, calls ``super().from_pretrained`` with them, and then changes the model it got (freezes the
    embeddings, sets an attribute)."""
    from transformers import LlamaForCausalLM

    class FrozenEmbeddingsLlama(LlamaForCausalLM):
        @classmethod
        def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
            model = super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
            model.model.embed_tokens.weight.requires_grad_(False)
            model.loaded_by_subclass = True
            return model

    kwargs = {} if device_map is None else {"device_map": device_map}
    model = FrozenEmbeddingsLlama.from_pretrained(encoder, **kwargs)
    _llama(observe, model)
    observe("subclass", [type(model).__name__, model.loaded_by_subclass])
    observe("trainable", sorted(n for n, p in model.named_parameters() if not p.requires_grad))


@pytest.mark.parametrize("where", ["appended", "prepended"])
def test_get_init_context_extended_with_an_own_context(observe, encoder, where):
    """A ``LlamaForCausalLM`` subclass whose ``get_init_context`` returns the release's list (``super()``'s) with a
    context of its own after or before it; the context records the default device when it is entered, and the
    model's ``__init__`` records the one it runs under (the meta device of the build, on both builds)."""
    from transformers import LlamaForCausalLM

    seen: dict[str, str] = {}

    @contextlib.contextmanager
    def own_context():
        seen["entered_on"] = str(torch.empty(0).device)
        yield
        seen["exited"] = "yes"

    class LlamaWithOwnContext(LlamaForCausalLM):
        def __init__(self, config):
            super().__init__(config)
            seen["init_on"] = str(torch.empty(0).device)

        @classmethod
        def get_init_context(cls, *args, **kwargs):
            contexts = list(super().get_init_context(*args, **kwargs))
            return contexts + [own_context()] if where == "appended" else [own_context(), *contexts]

    _llama(observe, LlamaWithOwnContext.from_pretrained(encoder))
    observe("seen", seen)


# ---------------------------------------------------------------------------------------------------------------
# Mined from public code: from_pretrained called in a model's __init__, outside any from_pretrained


@pytest.mark.parametrize("build", ["constructor", "_from_config", "constructor-device_cpu"])
def test_model_that_loads_a_sub_model_built_outside_from_pretrained(observe, nested_config, build):
    """Stands for TabSTAR's ``TabStarModel`` (alanarazi7/TabSTAR src/tabstar/arch/arch.py): a ``PreTrainedModel``
    whose ``__init__`` loads its text encoder with ``AutoModel.from_pretrained`` and then adds its own heads and
    calls ``post_init()``; training builds it from its config (``TabStarModel(config)``), not through
    ``from_pretrained``. Here built with the constructor, with ``_from_config``, and with the constructor inside
    ``with torch.device("cpu")``: the encoder loads its checkpoint's weights, the head is seeded."""
    _, model_class = CLASSES
    torch.manual_seed(0)
    if build == "_from_config":
        model = model_class._from_config(nested_config)
    elif build == "constructor-device_cpu":
        with torch.device("cpu"):
            model = model_class(nested_config)
    else:
        model = model_class(nested_config)
    _nested(observe, model)


def test_sub_models_loaded_by_a_helper_without_post_init(observe, encoder):
    """Stands for vec2text's ``InversionModel`` (jxmorris12/vec2text vec2text/models/inversion.py, with
    ``load_embedder_and_tokenizer`` and ``load_encoder_decoder`` of vec2text/models/model_utils.py): a
    ``PreTrainedModel`` whose ``__init__`` loads two sub-models through helper functions that call
    ``from_pretrained`` (one with a dtype), adds a projection, and never calls ``post_init()``; built with its
    constructor from its config."""
    from transformers import AutoModel, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

    def load_embedder(path, dtype):
        return AutoModel.from_pretrained(path, dtype=dtype)

    def load_decoder(path):
        return AutoModelForCausalLM.from_pretrained(path)

    class InversionConfig(PretrainedConfig):
        model_type = "guard-t6-inversion"

        def __init__(self, embedder_path="", decoder_path="", **kwargs):
            self.embedder_path = embedder_path
            self.decoder_path = decoder_path
            super().__init__(**kwargs)

    class Inversion(PreTrainedModel):
        config_class = InversionConfig

        def __init__(self, config):
            super().__init__(config=config)
            self.embedder = load_embedder(config.embedder_path, torch.float32)
            self.decoder = load_decoder(config.decoder_path)
            hidden = self.embedder.config.hidden_size
            self.transform = torch.nn.Linear(hidden, hidden)

    torch.manual_seed(0)
    model = Inversion(InversionConfig(embedder_path=encoder, decoder_path=encoder))
    observe("tensors", _tensors(model))
    with torch.no_grad():
        embedded = model.transform(model.embedder(tiny_llama.INPUT).last_hidden_state.mean(1))
        observe("embedded", embedded[0, :4].double())
        observe("logits", model.decoder(tiny_llama.INPUT).logits[0, -1, :4].double())


# ---------------------------------------------------------------------------------------------------------------
# Mined from public code: from_pretrained replaced by a wrapper that calls the original


def test_from_pretrained_replaced_by_a_wrapper_of_the_original(observe, encoder, nested_config):
    """Stands for ms-swift's ``patch_automodel`` (modelscope/ms-swift swift/model/patcher.py):
    ``PreTrainedModel.from_pretrained`` replaced, for the load, by a classmethod that does its own work and calls
    the original function (``PreTrainedModel.from_pretrained.__func__``) with ``(cls, *args, **kwargs)``, restored
    afterwards. Here with an ordinary load, and with a model that loads a sub-model in its ``__init__`` built by its
    constructor while the wrapper is in place (its inner load goes through the wrapper)."""
    from transformers import AutoModelForCausalLM, PreTrainedModel

    original = PreTrainedModel.from_pretrained.__func__
    calls: list[str] = []

    def wrapper(cls, *args, **kwargs):
        calls.append(cls.__name__)
        return original(cls, *args, **kwargs)

    _, model_class = CLASSES
    with _replaced(PreTrainedModel, "from_pretrained", classmethod(wrapper)):
        _llama(observe, AutoModelForCausalLM.from_pretrained(encoder), "llama_")
        torch.manual_seed(0)
        _nested(observe, model_class(nested_config), "nested_")
    observe("calls", calls)


# ---------------------------------------------------------------------------------------------------------------
# Mined from public code: get_init_context overridden or wrapped to build off the meta device


@pytest.mark.parametrize("override", ["empty-list", "no_init_weights-only"])
@pytest.mark.intended("nonpersistent", reason=BUILT_OFF_META)
@pytest.mark.intended("output", reason=BUILT_OFF_META)
def test_get_init_context_overridden_for_a_model_that_loads_a_sub_model(observe, nested_config, tmp_path, override):
    """Stands for the classes whose ``get_init_context`` returns a list of their own without the meta device, so
    that their ``__init__`` runs on a real device: NVIDIA BioNeMo's TransformerEngine ESM-2 (NVIDIA/bionemo-framework
    bionemo-recipes/models/esm2/src/esm/modeling_esm_te.py, an empty list) and turbo-alignment's
    ``PreTrainedModelWithMPU`` (turbo-llm/turbo-alignment turbo_alignment/modeling/pretrained_model.py, its own
    contexts). Here on the model that loads a sub-model in its ``__init__``: with the meta device gone, its
    ``from_pretrained`` works on both builds (the inner load sees no meta context at all). With deterministic
    algorithms; the sub-model's non-persistent buffers, and the output, differ as declared (0004's fix)."""
    from transformers.initialization import no_init_weights

    _, model_class = CLASSES

    class OffMeta(model_class):  # type: ignore[misc, valid-type]
        @classmethod
        def get_init_context(cls, *args, **kwargs):
            return [] if override == "empty-list" else [no_init_weights()]

    torch.manual_seed(0)
    model_class(nested_config).save_pretrained(tmp_path / "nested")
    with guardkit.deterministic():
        _nested(observe, OffMeta.from_pretrained(tmp_path / "nested"))


@pytest.mark.parametrize("model", ["nested", "item-in-init"])
@pytest.mark.intended("nonpersistent", reason=BUILT_OFF_META)
def test_get_init_context_wrapped_to_drop_the_meta_device(observe, nested_config, encoder, tmp_path, model):
    """Stands for the code that filters the meta device out of the release's list: NeMo Automodel's retry without
    the meta device (NVIDIA-NeMo/Automodel nemo_automodel/_transformers/model_init.py, ``_patched_get_init_context``:
    ``PreTrainedModel.get_init_context`` replaced by a classmethod that drops the ``torch.device`` entries of type
    meta from the original's list), and the composite models whose own ``get_init_context`` drops them from
    ``super()``'s list so that the source encoders their ``__init__`` loads with ``from_pretrained`` load outside
    the outer meta context. Here on the model that loads a sub-model, and on one whose ``__init__`` reads a number
    out of a tensor it computes (``.item()``, as drop-path schedules do), which only works off the meta device.
    Recorded: how many entries the filter dropped, the device ``__init__`` ran under, and the load (with
    deterministic algorithms: its non-persistent buffers differ as declared, 0004's fix)."""
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel

    original = PreTrainedModel.get_init_context.__func__
    dropped: list[int] = []

    def _patched(cls, *args, **kwargs):
        contexts = original(cls, *args, **kwargs)
        kept = [c for c in contexts if not (isinstance(c, torch.device) and c.type == "meta")]
        dropped.append(len(contexts) - len(kept))
        return kept

    class ItemInInit(LlamaForCausalLM):
        config_class = LlamaConfig

        def __init__(self, config):
            super().__init__(config)
            self.init_device = str(torch.empty(0).device)
            self.drop_rate = float(torch.arange(config.num_hidden_layers, dtype=torch.float32).sum().item())

    torch.manual_seed(0)
    if model == "nested":
        _, model_class = CLASSES
        model_class(nested_config).save_pretrained(tmp_path / "saved")
    else:
        model_class = ItemInInit
        LlamaForCausalLM.from_pretrained(encoder).save_pretrained(tmp_path / "saved")
    try:
        with _replaced(PreTrainedModel, "get_init_context", classmethod(_patched)), guardkit.deterministic():
            loaded = model_class.from_pretrained(tmp_path / "saved")
    finally:
        observe("dropped", dropped)
    observe("init_device", loaded.init_device)
    observe("tensors", _tensors(loaded, nonpersistent=False))
    observe("nonpersistent", _nonpersistent(loaded))


# ---------------------------------------------------------------------------------------------------------------
# Mined from public code: a copy of the release's own get_init_context installed over it


@pytest.mark.parametrize("model", ["llama", "nested"])
@pytest.mark.may_skip(
    reason="the pristine release's copy comes from the pristine run (--guard-exchange); a +fixed run without one "
    "has no copy to install"
)
def test_copy_of_the_pristine_get_init_context(observe, encoder, nested_config, tmp_path, exchange, model):
    """Stands for a project's own copy of the release's modeling code, whose ``from_pretrained`` calls its own
    ``get_init_context`` (vipulSharma18/Getting-Started-with-Quantization low_bit_inference/utils/modeling_utils.py,
    d70a4dda, 3 Sep 2025, removed the next day), and for the classes that install their own version of the method
    written for one release. The copy is the pristine release's own ``get_init_context``, read at run time
    (``inspect.getsource``) on the pristine build and handed to the +fixed build through the exchange folder, which
    installs it over the fixed method for one load: a Llama loads, and the model that loads a sub-model in its
    ``__init__`` fails as on pristine (the copy builds on the plain meta device). Nothing of upstream's code is kept
    in this repository."""
    import importlib
    import importlib.metadata
    import inspect
    import textwrap

    from transformers import AutoModelForCausalLM, PreTrainedModel

    modeling_utils = importlib.import_module("transformers.modeling_utils")
    if "+fixed" in importlib.metadata.version("transformers"):
        try:
            source = (exchange.read("copy") / "get_init_context.py").read_text()
        except Exception as exc:  # noqa: BLE001 - no exchange: only the pristine run can make the copy
            pytest.skip(f"no copy of the pristine get_init_context: {exc}")
    else:
        source = textwrap.dedent(inspect.getsource(PreTrainedModel.get_init_context.__func__))
        (exchange.write("copy") / "get_init_context.py").write_text(source)
    namespace = dict(vars(modeling_utils))
    exec(compile(source, "<copy of the pristine get_init_context>", "exec"), namespace)  # noqa: S102 - the copy
    copied = namespace["get_init_context"]
    replacement = copied if isinstance(copied, classmethod) else classmethod(copied)
    observe("model", model)
    torch.manual_seed(0)
    if model == "nested":
        _, model_class = CLASSES
        model_class(nested_config).save_pretrained(tmp_path / "nested")
    with _replaced(PreTrainedModel, "get_init_context", replacement):
        if model == "llama":
            _llama(observe, AutoModelForCausalLM.from_pretrained(encoder))
        else:
            model_class.from_pretrained(tmp_path / "nested")
