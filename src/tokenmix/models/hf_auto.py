"""A Hugging Face model whose attention tokenmix replaced, saved and loaded with the library's own calls.

:func:`tokenmix.replace_attention` turns the model into an instance of :func:`converted_class` of its class (a
subclass, so ``isinstance`` holds, named ``Tokenmix<Class>``) and records the replacement in its config
(``config.tokenmix``: the mechanism, its options, the modules replaced). Then:

* ``model.save_pretrained(folder)`` writes the weights as ``transformers`` does (the mechanisms' own included) and a
  ``config.json`` whose ``model_type`` is ``"tokenmix"``, whose ``attn_implementation`` is ``"tokenmix"`` and whose
  ``auto_map`` points the Auto classes to a three-line ``tokenmix_auto.py`` written beside it (it imports tokenmix).
* ``AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)`` (or the Auto class the model belongs to)
  rebuilds the same model: the base architecture, its attention replaced as it was, every weight loaded.
  :func:`tokenmix.load_converted` does the same without ``trust_remote_code``.
* Every other way refuses rather than giving a softmax model: without ``trust_remote_code`` the Auto classes do not
  know the model type ``"tokenmix"``; a class's own ``from_pretrained`` (``LlamaForCausalLM.from_pretrained``)
  fails on the unknown attention implementation, or, with tokenmix imported, at the first attention call, naming
  the two ways above.
* ``generate`` on a converted causal model decodes from the mechanisms' recurrent states (:func:`tokenmix.decoding`)
  unless the caller passes its own cache or ``use_cache=False``: constant memory for the kernel mechanisms.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from .hf import RECORD_KEY, HFMechanism, is_hf_model, replace_hf_attention
from .hf_cache import decodes_padding, recurrent_cache

__all__ = ["converted_class", "convert", "apply_records", "save_converted", "load_converted", "MODEL_TYPE",
           "LOADER_FILE"]

MODEL_TYPE = "tokenmix"  # the saved config's model_type: no Auto class maps it without trust_remote_code
LOADER_FILE = "tokenmix_auto.py"
_LOADER = ('"""Loads a Hugging Face model whose attention tokenmix replaced (pip install tokenmix)."""\n'
           "from tokenmix.models.hf_auto import TokenmixConfig, __getattr__  # noqa: F401\n")
_PREFIX = "Tokenmix"


@functools.lru_cache(maxsize=None)
def converted_class(base: type) -> type:
    """The subclass of a ``transformers`` model class that a tokenmix-converted model of that class becomes: built
    from a config with a ``tokenmix`` record, it replaces its attention as recorded; it saves so that the library's
    Auto classes load it back; its ``generate`` decodes from the recurrent states by default."""
    if base.__name__.startswith(_PREFIX):
        return base

    def __init__(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        from .hf import _register

        _register()  # the "tokenmix" attention the saved config names exists before the model checks it
        base.__init__(self, config, *args, **kwargs)
        if not any(hasattr(m, "tokenmix") for m in self.modules()):
            apply_records(self, getattr(config, RECORD_KEY, None) or {})

    def save_pretrained(self: Any, save_directory: str, *args: Any, **kwargs: Any) -> Any:
        result = base.save_pretrained(self, save_directory, *args, **kwargs)
        _mark_folder(Path(save_directory), base, type(self.config))
        return result

    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _generate(self, base, *args, **kwargs)

    return type(f"{_PREFIX}{base.__name__}", (base,), {
        "__module__": __name__, "__init__": __init__, "save_pretrained": save_pretrained, "generate": generate,
        "__doc__": f"{base.__name__} with its attention replaced by tokenmix (see tokenmix.models.hf_auto).",
        "register_for_auto_class": classmethod(lambda cls, auto_class="AutoModel": None),  # saves no package code
    })


def __getattr__(name: str) -> type:
    """``Tokenmix<Class>`` for any ``transformers`` model class, and ``TokenmixConfig``, as the saved ``auto_map``
    names them (made on first use: importing this module imports no ``transformers``)."""
    if name == "TokenmixConfig":
        return _config_class()
    if name.startswith(_PREFIX):  # only then: the import machinery asks for others (__path__, ...) without transformers
        import transformers

        if hasattr(transformers, name[len(_PREFIX):]):
            return converted_class(getattr(transformers, name[len(_PREFIX):]))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def apply_records(model: Any, record: dict[str, Any]) -> None:
    """Replace ``model``'s attention as ``record`` (a converted config's ``tokenmix`` entry) says: each of its
    ``replacements`` (mechanism, options, modules) in turn."""
    for step in record.get("replacements", []):
        replace_hf_attention(model, step["mechanism"], max_len=step.get("max_len"),
                             ignore_dropout=step.get("ignore_dropout", False),
                             filter=frozenset(step["replaced"]).__contains__, options=step["options"])


def _mark_folder(folder: Path, base: type, config_class: type) -> None:
    """Rewrite the saved ``config.json`` so that only tokenmix's loaders load it, and write the loader file."""
    config = json.loads((folder / "config.json").read_text())
    record = {**config[RECORD_KEY], "base_model_type": config["model_type"], "architecture": base.__name__}
    config.update(model_type=MODEL_TYPE, attn_implementation="tokenmix", architectures=[base.__name__],
                  auto_map=_auto_map(base, config_class), **{RECORD_KEY: record})
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (folder / LOADER_FILE).write_text(_LOADER)


def _auto_map(base: type, config_class: type) -> dict[str, str]:
    """AutoConfig and every Auto model class that gives ``base`` for its config, pointed at the loader file."""
    import transformers

    loader = LOADER_FILE.removesuffix(".py")
    mapping = {"AutoConfig": f"{loader}.TokenmixConfig"}
    for name in dir(transformers):
        auto = getattr(transformers, name, None) if name.startswith("AutoModel") else None
        table = getattr(auto, "_model_mapping", None)
        try:
            found = table[config_class] if table is not None else None
        except (KeyError, ValueError):
            continue
        if found is base:
            mapping[name] = f"{loader}.{_PREFIX}{base.__name__}"
    return mapping


def _generate(self: Any, base: type, *args: Any, **kwargs: Any) -> Any:
    """``generate``, from the mechanisms' recurrent states (as :func:`tokenmix.decoding` does) where every replaced
    attention is causal and the caller brings no cache of its own (``past_key_values``/``cache``) and does not turn
    caching off; with padding, only where every mechanism can skip a padded token
    (:func:`~.hf_cache.decodes_padding`)."""
    mechanisms = [m for m in self.modules() if isinstance(m, HFMechanism)]
    own = any(kwargs.get(k) is not None for k in ("past_key_values", "cache")) or kwargs.get("use_cache") is False
    padded = kwargs.get("attention_mask") is not None and not bool(kwargs["attention_mask"].bool().all())
    if own or not mechanisms or not all(m.mixer.causal for m in mechanisms) or any(m.decoding for m in mechanisms):
        return base.generate(self, *args, **kwargs)
    if padded and not all(decodes_padding(m.mixer) for m in mechanisms):  # the model's own cache, every key kept
        from transformers import DynamicCache  # (a sliding-window model's would drop the keys beyond its window)

        return base.generate(self, *args, **{_cache_argument(): DynamicCache()}, **kwargs)
    for mechanism in mechanisms:
        mechanism.decoding, mechanism.decoding_state = True, None
    try:
        return base.generate(self, *args, **{_cache_argument(): recurrent_cache(self)}, **kwargs)
    finally:
        for mechanism in mechanisms:
            mechanism.decoding, mechanism.decoding_state = False, None


def _cache_argument() -> str:
    """The name ``generate`` takes a cache under: ``cache`` in newer ``transformers`` 5 releases (which warn on
    the older ``past_key_values``), ``past_key_values`` before."""
    from transformers.generation import utils

    return "cache" if "cache" in getattr(utils, "ALL_CACHE_NAMES", ()) else "past_key_values"


@functools.lru_cache(maxsize=None)
def _config_class() -> type:
    try:
        from transformers import PreTrainedConfig as PretrainedConfig
    except ImportError:
        from transformers import PretrainedConfig

    class TokenmixConfig(PretrainedConfig):
        """The saved config of a tokenmix-converted model: loading it gives the base architecture's config (with the
        ``tokenmix`` record), which the Auto model classes then build as the converted class."""

        model_type = MODEL_TYPE

        @classmethod
        def from_pretrained(cls, pretrained_model_name_or_path: Any, **kwargs: Any) -> Any:
            from transformers import CONFIG_MAPPING

            config_dict, kwargs = PretrainedConfig.get_config_dict(pretrained_model_name_or_path, **kwargs)
            record = config_dict.get(RECORD_KEY) or {}
            if "base_model_type" not in record:
                raise ValueError(f"{pretrained_model_name_or_path}: config.json has model_type {MODEL_TYPE!r} but no "
                                 f"{RECORD_KEY!r} record naming the base model type")
            config_dict = {**config_dict, "model_type": record["base_model_type"]}
            return CONFIG_MAPPING[record["base_model_type"]].from_dict(config_dict, **kwargs)

    TokenmixConfig.__module__ = __name__
    return TokenmixConfig


def convert(model: Any, name: str, *, max_len: int | None, ignore_dropout: bool, filter: Any,
            options: dict[str, Any]) -> int:
    """:func:`~tokenmix.models.hf.replace_hf_attention`, then the model becomes its :func:`converted_class` (saves
    and loads with the library's calls, generates from the recurrent states); the modules replaced."""
    replaced = replace_hf_attention(model, name, max_len=max_len, ignore_dropout=ignore_dropout, filter=filter,
                                    options=options)
    model.__class__ = converted_class(type(model))
    return replaced


def save_converted(model: Any, folder: str, **notes: Any) -> None:
    """Save a ``transformers`` model whose attention tokenmix replaced (by :func:`tokenmix.replace_attention` or
    :func:`tokenmix.linearize`) into ``folder``: ``model.save_pretrained(folder)`` (which does the same), with
    ``notes`` (how it was converted: a recipe, its steps) kept in the config's ``tokenmix`` record. Load it back with
    :func:`load_converted` or the Auto class with ``trust_remote_code=True``; see :mod:`tokenmix.models.hf_auto`."""
    record = getattr(getattr(model, "config", None), RECORD_KEY, None)
    if not is_hf_model(model) or not record or not any(isinstance(m, HFMechanism) for m in model.modules()):
        raise ValueError("save_converted: the model is not a Hugging Face model with attention replaced by tokenmix")
    if notes:
        setattr(model.config, RECORD_KEY, {**record, "notes": {**record.get("notes", {}), **notes}})
    model.save_pretrained(folder)


def load_converted(folder: str, **kwargs: Any) -> Any:
    """The model :func:`save_converted` (or ``save_pretrained`` on a converted model) wrote into ``folder``: its
    architecture built from its config, its attention replaced as it was, every weight loaded through
    ``from_pretrained`` (``kwargs`` go to it: ``dtype``, ``device_map``, ...); a folder of an unconverted model
    raises."""
    import json
    from pathlib import Path

    import transformers

    saved = json.loads((Path(folder) / "config.json").read_text())
    record = saved.get(RECORD_KEY) or {}
    architecture = record.get("architecture")
    if architecture is None or not hasattr(transformers, architecture):
        raise ValueError(f"load_converted: {folder}/config.json is not a model converted by tokenmix (no "
                         f"{RECORD_KEY!r} record naming a transformers architecture)")
    config = _config_class().from_pretrained(folder)
    return converted_class(getattr(transformers, architecture)).from_pretrained(folder, config=config, **kwargs)
