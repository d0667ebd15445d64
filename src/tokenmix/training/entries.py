"""The compared configurations of an experiment file: its ``mixers`` list, each item a :class:`MixerEntry`.

An item is a mixer name with inline options (``"swin:shift=true"``) or a ``[[mixers]]`` table: a ``label``
(unique; it names the run folder), ``name`` (one mechanism) or ``pattern`` (one entry per layer), ``options``
(the mechanism's, every layer), ``model`` (``[model]`` settings for this entry only) and ``train`` (``[train]``
fields for this entry only, e.g. its ``lr``). :func:`parse_entry`
reads one and refuses, naming the item, whatever it cannot place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..models.patterns import parse_layer_mixer, pattern_names
from .schema import ENTRY_TRAIN_KEYS, check_keys, fail, nones

__all__ = ["MixerEntry", "parse_entry", "is_label"]

_ENTRY_KEYS = {"label", "name", "pattern", "options", "model", "train"}
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+=-]*$")


def is_label(text: Any) -> bool:
    """Whether ``text`` can name a run folder or an experiment: a simple word (letters, digits, _ . + = -)."""
    return isinstance(text, str) and bool(_LABEL.match(text))


@dataclass(frozen=True)
class MixerEntry:
    """One compared configuration: a label, the layer pattern, its options, and its [model] overrides."""

    label: str
    pattern: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)  # [train] fields for this entry only (e.g. its lr)

    @property
    def mixer(self) -> str | list[str]:
        return self.pattern[0] if len(self.pattern) == 1 else list(self.pattern)

    @property
    def names(self) -> list[str]:
        return pattern_names(list(self.pattern), f"mixer {self.label!r}")

    def to_dict(self) -> dict[str, Any]:
        """The entry as a ``[[mixers]]`` table (what ``config.toml`` holds)."""
        entry: dict[str, Any] = {"label": self.label}
        entry.update({"name": self.pattern[0]} if len(self.pattern) == 1 else {"pattern": list(self.pattern)})
        if self.options:
            entry["options"] = dict(self.options)
        if self.model:
            entry["model"] = dict(self.model)
        if self.train:
            entry["train"] = dict(self.train)
        return entry


def parse_entry(item: Any, index: int) -> MixerEntry:
    """The entry ``mixers[index]`` of a file: a name with inline options, or a ``[[mixers]]`` table."""
    where = f"mixers[{index}]"
    if isinstance(item, str):
        layer = parse_layer_mixer(item, f"experiment: {where}")
        return MixerEntry(item if is_label(item) else layer.name, (layer.name,), dict(layer.options))
    if not isinstance(item, dict):
        fail(f"{where} must be a mixer name or a table, got {type(item).__name__}")
    check_keys(item, _ENTRY_KEYS, where)
    if ("name" in item) == ("pattern" in item):
        fail(f"{where} needs exactly one of 'name' (one mechanism) or 'pattern' (a list per layer)")
    pattern = [item["name"]] if "name" in item else item["pattern"]
    if not isinstance(pattern, list) or not pattern or not all(isinstance(p, (str, dict)) for p in pattern):
        fail(f"{where}.pattern must be a non-empty list of mixer entries, got {pattern!r}")
    layers = [parse_layer_mixer(p, f"experiment: {where}") for p in pattern]
    label = item.get("label", "-".join(layer.name for layer in layers))
    if not is_label(label):
        fail(f"{where}.label must be a simple word (letters, digits, _ . + = -), got {label!r}")
    options, model, train = item.get("options", {}), item.get("model", {}), item.get("train", {})
    for key, value in (("options", options), ("model", model), ("train", train)):
        if not isinstance(value, dict):
            fail(f"{where}.{key} must be a table, got {type(value).__name__}")
    check_keys(train, ENTRY_TRAIN_KEYS, f"{where}.train")
    options = nones(options)  # as in [task], [model] and [train]: "none" is None (kernel_size = "none")
    if len(layers) == 1:  # one mechanism: its inline options join the entry's (the entry's win)
        return MixerEntry(label, (layers[0].name,), {**dict(layers[0].options), **options}, dict(model), dict(train))
    return MixerEntry(label, tuple(layer.label for layer in layers), dict(options), dict(model), dict(train))
