"""The mixer registry: the only coupling between mechanisms and the models/tasks that use them.

A mechanism registers its class with :func:`register_mixer`; everything else reaches it by name
through :func:`create_mixer`, and learns what it can do from :func:`mixer_info`.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import torch.nn as nn

__all__ = ["MixerInfo", "register_mixer", "list_mixers", "mixer_info", "create_mixer", "create_heads",
           "building_projections"]

# Arguments every mixer takes from create_mixer itself; everything else is a mechanism option.
_COMMON_ARGS = ("dim", "num_heads", "causal", "max_len")


@dataclass(frozen=True)
class MixerInfo:
    """What a registered mechanism is and what it can do.

    Attributes:
        name: registry name.
        paper: citation of the paper (and equations) the mechanism implements.
        complexity: time complexity in sequence length N and width d, e.g. ``"O(N d^2)"``.
        causal: it can run causally (``create_mixer(..., causal=True)``).
        bidirectional: it can run non-causally (``causal=False``).
        padding: it supports a padding mask in ``forward(x, mask)``.
        spatial: it needs the 2-D grid ``hw`` of its input (vision mixers).
        recurrent: it has an incremental ``step()`` for decoding.
        multihead: ``num_heads`` > 1 is meaningful for it.
        alternate: options a model applies to every second layer (e.g. Swin's ``shift=True``), as
            (name, value) pairs; empty for most mechanisms.
        sliding_window: ``max_len`` is a window (only the last ``max_len`` tokens are seen) rather than a
            cap on N, so any length works.
        needs_max_len: some configuration of it (see its docstring) has a fixed length and requires
            ``max_len``; models should always pass one.
        residual: the mechanism's formula already ends with its own residual connection and
            normalisation (Average Attention's ``LayerNorm(h~ + x)``), so a model block must not add another
            pre-norm and residual around it.
        options: names of the mechanism-specific options it accepts.
        qkv: it is an attention rule between queries, keys and values it projects itself (a ``QKVMixer``): a
            host model's own Q/K/V projections (PyTorch's ``in_proj``, a Hugging Face attention's) can feed it.
        weights: it forms the N x N attention weights, so a host asking for them (``need_weights``,
            ``output_attentions``) can have them (``softmax``).
        hidden: its rule takes a host's own queries, keys and values too, and computes its gates (writing strengths,
            decays, output gates) from the hidden states they were projected from: ``attend_heads(q, k, v, mask,
            hidden=x)`` (DeltaNet, Gated DeltaNet, GLA, retention, Mamba-2); a Hugging Face attention module can
            feed it.
    """

    name: str
    paper: str
    complexity: str
    causal: bool
    bidirectional: bool
    padding: bool
    spatial: bool
    recurrent: bool
    multihead: bool
    needs_max_len: bool
    sliding_window: bool
    alternate: tuple[tuple[str, Any], ...]
    options: tuple[str, ...]
    residual: bool = False
    qkv: bool = False
    weights: bool = False
    hidden: bool = False

    def supports(self, *, causal: bool) -> bool:
        """Whether the mechanism can run in the given mode (causal, or bidirectional)."""
        return self.causal if causal else self.bidirectional

    def heads(self, num_heads: int | None) -> int | None:
        """The ``num_heads`` a model passes to this mechanism when the model was given ``num_heads``: the
        value itself for a multi-head mechanism, None (the mechanism's single head) for one without heads.
        One model-level head count can thus be used with every mixer in a sweep."""
        return num_heads if self.multihead else None


_REGISTRY: dict[str, tuple[MixerInfo, type[nn.Module]]] = {}

M = TypeVar("M", bound=type)


def register_mixer(
    name: str,
    *,
    paper: str,
    complexity: str,
    causal: bool,
    bidirectional: bool = True,
    padding: bool = True,
    spatial: bool = False,
    recurrent: bool = False,
    multihead: bool = True,
    needs_max_len: bool = False,
    sliding_window: bool = False,
    alternate: dict[str, Any] | None = None,
    residual: bool = False,
) -> Callable[[M], M]:
    """Class decorator that registers a mixer under ``name``.

    The class must accept ``dim, *, num_heads, causal, max_len`` plus keyword-only options; the options
    are read off its ``__init__`` signature so that :func:`create_mixer` can reject unknown ones.
    """

    def decorate(cls: M) -> M:
        if name in _REGISTRY:
            raise ValueError(f"a mixer named {name!r} is already registered")
        if "info" in vars(cls):
            raise ValueError(f"{cls.__name__} is already registered as {cls.info.name!r}; subclass it instead")
        params = inspect.signature(cls.__init__).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            raise TypeError(f"mixer {name!r}: **kwargs would swallow unknown options; list them explicitly")
        unknown_alternate = sorted(set(alternate or {}) - set(params))
        if unknown_alternate:
            raise TypeError(f"mixer {name!r}: alternate names options it does not have: {unknown_alternate}")
        missing = [a for a in _COMMON_ARGS if a not in params]
        if missing:
            raise TypeError(f"mixer {name!r}: __init__ lacks the common arguments {missing}")
        options = tuple(p for p in params if p != "self" and p not in _COMMON_ARGS)
        info = MixerInfo(
            name=name,
            paper=paper,
            complexity=complexity,
            causal=causal,
            bidirectional=bidirectional,
            padding=padding,
            spatial=spatial,
            recurrent=recurrent,
            multihead=multihead,
            needs_max_len=needs_max_len,
            sliding_window=sliding_window,
            alternate=tuple((alternate or {}).items()),
            options=options,
            residual=residual,
            qkv=bool(getattr(cls, "takes_qkv", False)),  # QKVMixer sets it; the registry imports no mixer
            hidden=bool(getattr(cls, "takes_hidden", False)),
            weights=bool(getattr(cls, "forms_attention_matrix", False)),
        )
        cls.info = info
        _REGISTRY[name] = (info, cls)
        return cls

    return decorate


def list_mixers(include_hidden: bool = False) -> list[str]:
    """Sorted names of the registered mixers; names starting with ``_`` (test doubles) only with
    ``include_hidden=True``."""
    return sorted(n for n in _REGISTRY if include_hidden or not n.startswith("_"))


def _lookup(name: str) -> tuple[MixerInfo, type[nn.Module]]:
    if name not in _REGISTRY:
        raise ValueError(f"unknown mixer {name!r}; available: {', '.join(list_mixers())}")
    return _REGISTRY[name]


def mixer_info(name: str) -> MixerInfo:
    """The :class:`MixerInfo` of a registered mixer; ``ValueError`` listing the names if unknown."""
    return _lookup(name)[0]


def create_mixer(
    name: str,
    dim: int,
    /,
    *,
    num_heads: int = 1,
    causal: bool = False,
    max_len: int | None = None,
    **options: Any,
) -> nn.Module:
    """Build the mixer registered as ``name``.

    ``options`` are the mechanism's own keyword options (see ``mixer_info(name).options``); an option
    the mechanism does not have, or a setting it cannot honour, raises ``ValueError`` naming both.
    """
    info, cls = _lookup(name)
    unknown = sorted(set(options) - set(info.options))
    if unknown:
        accepted = ", ".join(info.options) or "none"
        raise ValueError(f"mixer {name!r} has no option(s) {unknown}; its options are: {accepted}")
    if num_heads != 1 and not info.multihead:
        raise ValueError(f"mixer {name!r} has no heads; num_heads={num_heads} is unsupported (use 1)")
    return cls(dim, num_heads=num_heads, causal=causal, max_len=max_len, **options)


_PROJECTIONS: ContextVar[bool] = ContextVar("tokenmix_projections", default=True)


def building_projections() -> bool:
    """Whether the Q/K/V mixer being built gets its projections: False only inside :func:`create_heads`."""
    return _PROJECTIONS.get()


@contextlib.contextmanager
def _without_projections() -> Iterator[None]:
    token = _PROJECTIONS.set(False)
    try:
        yield
    finally:
        _PROJECTIONS.reset(token)


def create_heads(
    name: str,
    /,
    *,
    num_heads: int,
    head_dim: int,
    causal: bool = False,
    max_len: int | None = None,
    **options: Any,
) -> nn.Module:
    """The attention rule of the Q/K/V mechanism ``name`` without its projections (``W_Q``, ``W_K``, ``W_V``,
    ``W_out``): what a host model with its own projections uses (Hugging Face models, ``linearize``). It holds only
    the rule's own parameters (learned feature maps, gates of the rule, a window weight) and computes on per-head
    tensors: ``attend_heads(q, k, v, mask)``, ``step_heads``, ``prefill_heads``, ``attention_weights_of_heads``.
    A mechanism with gates (``mixer_info(name).hidden``) keeps the projections of its gates and takes the hidden
    states as well (``attend_heads(q, k, v, mask, hidden=x)``). Options as in :func:`create_mixer`; a mechanism that
    does not take Q, K and V raises ``ValueError`` naming it."""
    info, _ = _lookup(name)
    if not (info.qkv or info.hidden) or info.spatial:
        raise ValueError(f"create_heads: mixer {name!r} does not compute on a host's Q, K and V (its "
                         f"mixer_info(name).qkv is False{' and it is spatial' if info.spatial else ''})")
    with _without_projections():
        return create_mixer(name, num_heads * head_dim, num_heads=num_heads, causal=causal, max_len=max_len,
                            **options)
