"""Layer patterns: which mixer (with which options) each layer of a model gets.

A model's ``mixer`` argument is one mechanism for every layer, or a pattern repeated over the depth:

* ``"softmax"`` -- every layer;
* ``["twins_lsa", "twins_gsa"]`` -- Twins' SSSA (Chu et al. 2021; Ruggeri 2022 §3.3): LSA in layers 0, 2, ...,
  GSA in layers 1, 3, ...;
* ``["swin", "swin:shift=True"]`` -- Swin's W-MSA / SW-MSA pairs (Liu et al. 2021);
* ``["scalable_iwsa", "scalable_ssa"]`` -- ScalableViT's alternating IWSA / SSA (Yang et al. 2022);
* ``["sparse_strided:factorization=merged"]`` -- options in the entry itself.

In Twins' SSSA pattern GSA takes one representative per LSA window (Ruggeri 2022 §3.3), so a ``twins_gsa``
layer without its own ``sr_ratio`` gets the ``window_size`` of the pattern's ``twins_lsa`` layers, whatever
that window is (not only at the default sizes).

An entry is ``"name"``, ``"name:option=value,option=value"`` (values are read as ``true``/``false``,
``none``, ints, floats, else strings), a ``{"name": ..., option: value, ...}`` mapping (the form experiment
files use) or a :class:`LayerMixer`. The depth must be a multiple of the pattern's length. The model-wide
``mixer_options`` apply to every layer; an entry's own options override them. On the command line a
comma-separated list of entries is read by :func:`split_mixer_list`: a comma followed by ``option=value``
continues the entry before it, a comma followed by a name starts the next entry.

A single mechanism given as a plain name keeps its registry ``alternate`` options on every second layer
(Swin's shifted windows); an explicit pattern says what every layer gets, so nothing is added to it.

>>> [layer.label for layer in layer_mixers(["twins_lsa:window_size=4", "twins_gsa"], depth=4)]
['twins_lsa:window_size=4', 'twins_gsa:sr_ratio=4', 'twins_lsa:window_size=4', 'twins_gsa:sr_ratio=4']
>>> parse_layer_mixer("sparse_strided:factorization=merged").options
(('factorization', 'merged'),)
>>> split_mixer_list("swin,swin:shift=True,window_size=2")
['swin', 'swin:shift=True,window_size=2']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..registry import mixer_info

__all__ = ["LayerMixer", "parse_layer_mixer", "parse_option_value", "layer_mixers", "pattern_names",
           "split_mixer_list"]


@dataclass(frozen=True)
class LayerMixer:
    """One layer's mechanism: its registry name and its options."""

    name: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        """``name`` or ``name:option=value,...`` -- the string form :func:`parse_layer_mixer` reads back."""
        if not self.options:
            return self.name
        return f"{self.name}:" + ",".join(f"{k}={_format_value(v)}" for k, v in self.options)


def _format_value(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_option_value(text: str) -> Any:
    """``"true"``/``"false"`` -> bool, ``"none"`` -> None, ints and floats as numbers, anything else as is."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def parse_layer_mixer(entry: str | Mapping[str, Any] | LayerMixer, owner: str = "model") -> LayerMixer:
    """One pattern entry as a :class:`LayerMixer`; the name must be registered (ValueError listing them)."""
    if isinstance(entry, LayerMixer):
        mixer_info(entry.name)
        return entry
    if isinstance(entry, str):
        name, _, rest = entry.partition(":")
        options: dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in rest.split(","))):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise ValueError(f"{owner}: mixer entry {entry!r}: expected option=value, got {item!r}")
            options[key.strip()] = parse_option_value(value)
    elif isinstance(entry, Mapping):
        if not isinstance(entry.get("name"), str):
            raise ValueError(f"{owner}: a mixer mapping needs a string 'name', got {dict(entry)!r}")
        name = entry["name"]
        options = {k: v for k, v in entry.items() if k != "name"}
    else:
        raise ValueError(f"{owner}: a mixer entry must be a name, 'name:option=value,...' or a mapping with "
                         f"'name'; got {type(entry).__name__}")
    name = name.strip()
    mixer_info(name)  # ValueError listing the registered names
    return LayerMixer(name, tuple(options.items()))


def split_mixer_list(text: str, option: str = "--mixer") -> list[str]:
    """The entries of a comma-separated list such as ``twins_lsa,twins_gsa`` or
    ``swin,swin:shift=True,window_size=2``: a part that is ``option=value`` belongs to the entry before it (its
    inline options), any other part starts a new entry. ``option`` names the command-line option in errors."""
    entries: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise ValueError(f"{option}: empty entry in {text!r} (two commas in a row, or one at an end)")
        key, eq, _ = part.partition("=")
        if eq and ":" not in key:  # option=value: the previous entry's option
            if not entries:
                raise ValueError(f"{option}: {text!r} starts with the option {part!r}; write it after its mixer, "
                                 f"as name:{part}")
            entries[-1] += f",{part}" if ":" in entries[-1] else f":{part}"
        else:
            entries.append(part)
    return entries


def _pattern(mixer: str | Mapping[str, Any] | LayerMixer | Sequence, owner: str) -> tuple[list[LayerMixer], bool]:
    """The parsed pattern, and whether it was a single plain name (which keeps the ``alternate`` options)."""
    if isinstance(mixer, (str, Mapping, LayerMixer)):
        entry = parse_layer_mixer(mixer, owner)
        return [entry], isinstance(mixer, str) and not entry.options
    if not isinstance(mixer, Sequence) or not mixer:
        raise ValueError(f"{owner}: mixer must be a name or a non-empty list of them, got {mixer!r}")
    return [parse_layer_mixer(entry, owner) for entry in mixer], False


def layer_mixers(mixer: str | Mapping[str, Any] | LayerMixer | Sequence, depth: int,
                 mixer_options: Mapping[str, Any] | None = None, owner: str = "model") -> list[LayerMixer]:
    """The mixer of each of ``depth`` layers: the pattern repeated, ``mixer_options`` under each entry's own
    options, and a single plain name's ``alternate`` options on the odd layers."""
    if mixer_options is not None and not isinstance(mixer_options, Mapping):
        raise ValueError(f"{owner}: mixer_options must be a dict or None, got {type(mixer_options).__name__}")
    pattern, plain = _pattern(mixer, owner)
    if depth % len(pattern):
        raise ValueError(f"{owner}: depth {depth} is not a multiple of the mixer pattern's length "
                         f"{len(pattern)} ({[e.label for e in pattern]})")
    layers = []
    for i in range(depth):
        entry = pattern[i % len(pattern)]
        options = dict(mixer_options or {})
        if plain and i % 2 == 1:
            options.update(mixer_info(entry.name).alternate)
        options.update(entry.options)
        layers.append(LayerMixer(entry.name, tuple(options.items())))
    return _tie_twins(layers, owner)


def _tie_twins(layers: list[LayerMixer], owner: str) -> list[LayerMixer]:
    """SSSA: every ``twins_gsa`` layer without an ``sr_ratio`` sub-samples one key/value per window of the
    pattern's ``twins_lsa`` layers (their common ``window_size``; a ValueError when they differ or the window
    is not square, since GSA's cell is)."""
    lsa = [dict(layer.options).get("window_size") for layer in layers if layer.name == "twins_lsa"]
    gsa_untied = [i for i, layer in enumerate(layers)
                  if layer.name == "twins_gsa" and "sr_ratio" not in dict(layer.options)]
    if not lsa or not gsa_untied:
        return layers
    windows = {_square_window(w, owner) for w in lsa}
    if len(windows) > 1:
        raise ValueError(f"{owner}: the twins_lsa layers have different window sizes {sorted(windows, key=str)}; give "
                         "twins_gsa an explicit sr_ratio")
    window = windows.pop()
    if window is None:  # the LSA default window: GSA's default sr_ratio is that same window
        return layers
    tied = list(layers)
    for i in gsa_untied:
        tied[i] = LayerMixer("twins_gsa", (*layers[i].options, ("sr_ratio", window)))
    return tied


def _square_window(window: Any, owner: str) -> int | None:
    if window is None or isinstance(window, int):
        return window
    if isinstance(window, (tuple, list)) and len(window) == 2 and window[0] == window[1]:
        return int(window[0])
    raise ValueError(f"{owner}: twins_gsa's sr_ratio follows the twins_lsa window, which must be square to tie "
                     f"them; got window_size={window!r}: give twins_gsa an explicit sr_ratio")


def pattern_names(mixer: str | Mapping[str, Any] | LayerMixer | Sequence, owner: str = "model") -> list[str]:
    """The distinct registry names a pattern uses, in order of first appearance."""
    names: list[str] = []
    for entry in _pattern(mixer, owner)[0]:
        if entry.name not in names:
            names.append(entry.name)
    return names
