"""The layers every model is built from, and the checks the models share.

Every model reaches its mechanism only through the registry (:func:`tokenmix.create_mixer`) and decides
what to pass to it only from :func:`tokenmix.mixer_info`; no model knows a mechanism by name.

* :class:`Block` -- one pre-LN layer, ``x + drop(mixer(LN(x))) + drop(FFN(LN(.)))`` (Chen 2023 eqs. 9-20);
* :class:`FeedForward` -- the position-wise FFN sub-layer;
* :func:`sinusoidal_positions` -- Vaswani et al. (2017)'s position encodings.

The models: :class:`~tokenmix.models.classifier.SequenceClassifier`, :class:`~tokenmix.models.lm.CausalLM`,
:class:`~tokenmix.models.relationnet.RelationNet`, :class:`~tokenmix.models.vit.ViT` and
:class:`~tokenmix.models.contextualizer.ContextualizerClassifier`.

Padding convention (all models): ``mask`` is ``(B, N)`` bool, True = real token. Mixers never let padded
positions influence real ones, and every other layer is pointwise, so logits never depend on the ids at
padded positions. A row whose mask is all False is allowed and gives finite logits: ``"mean"`` and
``"first"`` pooling give the zero vector (logits = the head's bias); ``"cls"`` pooling gives the output
of the CLS token, which then attends to nothing but itself.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..registry import create_mixer, mixer_info
from ..validate import check_positive_int
from .patterns import layer_mixers

__all__ = ["sinusoidal_positions", "FeedForward", "Block", "Positions", "build_blocks", "mask_for_blocks",
           "mixer_kwargs", "check_dropout", "check_ids", "check_mask", "check_init_std", "POOLINGS", "POSITIONALS"]

POSITIONALS = ("sinusoidal", "learned", "none")
POOLINGS = ("cls", "mean", "first")
_ACTIVATIONS = ("relu", "gelu")


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------


def check_dropout(p: float, owner: str) -> None:
    if not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{owner}: dropout must be in [0, 1), got {p!r}")


def check_ids(ids: object, vocab_size: int, max_len: int, owner: str) -> Tensor:
    """ids must be a (B, N) integer tensor with 1 <= N <= max_len and values in [0, vocab_size)."""
    if not isinstance(ids, Tensor):
        raise ValueError(f"{owner}: ids must be a torch.Tensor of token indices, got {type(ids).__name__}")
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise ValueError(f"{owner}: ids must be an integer tensor (e.g. torch.long), got {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"{owner}: ids must have shape (B, N); got rank {ids.dim()} with shape {tuple(ids.shape)}")
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"{owner}: ids must be non-empty, got shape {tuple(ids.shape)}")
    if ids.shape[1] > max_len:
        raise ValueError(f"{owner}: sequence length {ids.shape[1]} exceeds max_len={max_len}")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"{owner}: token ids must lie in [0, {vocab_size}); got values in [{lo}, {hi}]")
    return ids.long()


def check_mask(mask: object, ids: Tensor, owner: str) -> Tensor:
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"{owner}: mask must be a bool tensor (True = real token), got {got}")
    if mask.shape != ids.shape:
        raise ValueError(f"{owner}: mask must have the shape of ids {tuple(ids.shape)}, got {tuple(mask.shape)}")
    if mask.device != ids.device:
        raise ValueError(f"{owner}: mask is on {mask.device} but ids are on {ids.device}")
    return mask


def mixer_kwargs(mixer: str, num_heads: int | None, max_len: int | None, owner: str) -> dict[str, object]:
    """The common create_mixer arguments a model passes, decided from ``mixer_info`` alone.

    ``num_heads`` is the model's head count: passed to every mechanism with heads and not to those without
    (``MixerInfo.heads``: Relation, Average Attention, the Extractors, the MLP run as their single
    "head"), so one model-level value serves every mixer of a sweep. ``max_len`` is passed whenever the caller has one:
    every mechanism accepts
    it (a common create_mixer argument: a cap on N, or the window of a ``sliding_window`` mechanism),
    and those flagged ``needs_max_len`` need it in some configuration (e.g. a causal mechanism whose
    horizon is ``max_len``). A mechanism flagged ``needs_max_len`` without one is an error here.
    """
    info = mixer_info(mixer)
    if info.spatial:
        raise ValueError(f"{owner}: mixer {mixer!r} is spatial (it needs a 2-D grid) and cannot mix a 1-D sequence")
    kwargs: dict[str, object] = {}
    if num_heads is not None:
        check_positive_int(num_heads, "num_heads", owner)
    if info.heads(num_heads) is not None:
        kwargs["num_heads"] = num_heads
    if max_len is not None:
        kwargs["max_len"] = max_len
    elif info.needs_max_len:
        raise ValueError(f"{owner}: mixer {mixer!r} has a fixed length and needs max_len")
    return kwargs


def mask_for_blocks(mask: Tensor | None, mixers: list[str], owner: str) -> Tensor | None:
    """None when nothing is padded (so mechanisms without mask support still run); else the mask."""
    if mask is None or bool(mask.all()):
        return None
    for mixer in mixers:
        if not mixer_info(mixer).padding:
            raise ValueError(f"{owner}: mixer {mixer!r} does not support padding masks, but the batch has padding")
    return mask


def check_init_std(init_std: object, owner: str) -> None:
    if init_std is not None and (isinstance(init_std, bool) or not isinstance(init_std, (int, float))
                                 or not math.isfinite(init_std) or init_std <= 0):
        raise ValueError(f"{owner}: init_std must be a positive float or None, got {init_std!r}")


def build_blocks(dim: int, mixer: object, depth: int, mixer_options: dict[str, object] | None, owner: str,
            **block_args: object) -> nn.ModuleList:
    """``depth`` :class:`Block` s, layer ``i`` with the ``i``-th mixer of the pattern (see
    :mod:`tokenmix.models.patterns`)."""
    return nn.ModuleList(Block(dim, layer.name, mixer_options=dict(layer.options), **block_args)
                         for layer in layer_mixers(mixer, depth, mixer_options, owner))




def sinusoidal_positions(n: int, dim: int) -> Tensor:
    """Sinusoidal position encodings of Vaswani et al. (2017, section 3.5), shape ``(n, dim)``.

    ``PE[p, 2i] = sin(p / 10000^(2i/dim))`` and ``PE[p, 2i+1] = cos(p / 10000^(2i/dim))``; an odd ``dim``
    gets one more sine than cosine column. Used by Yamada et al. (2022) section 3.2.1 ("positional encoding similar to
    that
    of Transformer").
    """
    check_positive_int(n, "n", "sinusoidal_positions")
    check_positive_int(dim, "dim", "sinusoidal_positions")
    position = torch.arange(n, dtype=torch.float64)[:, None]
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
    angles = position * inv_freq  # (n, ceil(dim / 2))
    pe = torch.zeros(n, dim, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : dim // 2])
    return pe.to(torch.get_default_dtype())


class Positions(nn.Module):
    """Additive positions for the first ``n`` slots: sinusoidal (a buffer), learned, or none."""

    def __init__(self, kind: str, max_len: int, dim: int, owner: str) -> None:
        super().__init__()
        if kind not in POSITIONALS:
            raise ValueError(f"{owner}: positional must be one of {POSITIONALS}, got {kind!r}")
        self.kind = kind
        self.max_len = max_len
        if kind == "learned":
            self.embedding = nn.Embedding(max_len, dim)
        elif kind == "sinusoidal":
            self.register_buffer("table", sinusoidal_positions(max_len, dim), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        n = x.shape[1]
        if self.kind == "learned":
            return x + self.embedding(torch.arange(n, device=x.device))
        if self.kind == "sinusoidal":
            return x + self.table[:n].to(x.dtype)
        return x

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, max_len={self.max_len}"


# ------------------------------------------------------------------------------------------------
# layers
# ------------------------------------------------------------------------------------------------
class FeedForward(nn.Module):
    """The position-wise FFN sub-layer, ``act(x W1 + b1) W2 + b2`` (Chen (2023) eq. 19, ReLU with biases).

    ``dropout`` acts on the hidden activations (Chen (2023) eq. 19 has none, hence :class:`Block` passes 0; the
    residual dropout of eq. 20 is the block's). ``activation`` is ``"relu"`` (Chen (2023)) or ``"gelu"``.
    """

    def __init__(self, dim: int, hidden: int, dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        check_positive_int(dim, "dim", "FeedForward")
        check_positive_int(hidden, "hidden", "FeedForward")
        check_dropout(dropout, "FeedForward")
        if activation not in _ACTIVATIONS:
            raise ValueError(f"FeedForward: activation must be one of {_ACTIVATIONS}, got {activation!r}")
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.activation = activation
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """``(..., dim) -> (..., dim)``."""
        h = F.relu(self.fc1(x)) if self.activation == "relu" else F.gelu(self.fc1(x))
        return self.fc2(self.drop(h))


class Block(nn.Module):
    """One pre-LN layer with an interchangeable mixer in place of self-attention (Chen (2023) eqs. 9-20)::

        x = x + dropout(mixer(layernorm1(x), mask))      # eqs. 9-17 (the mixer replaces eqs. 10-17)
        x = x + dropout(ffn(layernorm2(x)))               # eqs. 18-20

    A mechanism whose formula has its own residual and normalisation (``mixer_info(mixer).residual``:
    Average Attention's ``LayerNorm(h~ + x)``, Zhang et al. 2018 §3) replaces the first line whole --
    ``x = mixer(x, mask)`` -- so that the block has one residual connection, not two.

    The mixer is ``create_mixer(mixer, dim, causal=causal, **mixer_options)``, with ``num_heads`` passed to
    mechanisms with heads and ``max_len`` when given (``max_len`` is required when
    ``mixer_info(mixer).needs_max_len``; the models always give it). The registry's
    ``ValueError`` surfaces unchanged for a setting the mechanism cannot honour (e.g. ``causal=True`` for
    a bidirectional-only mixer, ``num_heads > 1`` for one without heads, an unknown option).
    """

    def __init__(
        self,
        dim: int,
        mixer: str,
        *,
        num_heads: int | None = None,
        causal: bool = False,
        max_len: int | None = None,
        ffn_dim: int | None = None,
        dropout: float = 0.1,
        activation: str = "relu",
        mixer_options: dict[str, object] | None = None,
    ) -> None:
        super().__init__()
        check_positive_int(dim, "dim", "Block")
        check_dropout(dropout, "Block")
        if mixer_options is not None and not isinstance(mixer_options, dict):
            raise ValueError(f"Block: mixer_options must be a dict or None, got {type(mixer_options).__name__}")
        kwargs = mixer_kwargs(mixer, num_heads, max_len, "Block")
        self.mixer_name = mixer
        self.own_residual = mixer_info(mixer).residual
        self.ln1 = nn.Identity() if self.own_residual else nn.LayerNorm(dim)
        self.mixer = create_mixer(mixer, dim, causal=causal, **kwargs, **(mixer_options or {}))
        if getattr(self.mixer, "out_dim", dim) != dim:
            raise ValueError(f"Block: mixer {mixer!r} outputs width {self.mixer.out_dim}, but the residual needs "
                             f"dim={dim} (out_proj=False with inner_dim != dim is for RelationNet)")
        self.ln2 = nn.LayerNorm(dim)
        self.ffn = FeedForward(dim, ffn_dim if ffn_dim is not None else 4 * dim, 0.0, activation)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """``x`` (B, N, dim), ``mask`` (B, N) bool or None -> (B, N, dim)."""
        x = self.mixer(x, mask) if self.own_residual else x + self.drop(self.mixer(self.ln1(x), mask))
        return x + self.drop(self.ffn(self.ln2(x)))

    def step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """One decoding step of a causal block (no dropout): ``x_t`` (B, dim) -> (B, dim), new state."""
        mixed, state = self.mixer.step(self.ln1(x_t), state)
        x_t = mixed if self.own_residual else x_t + mixed
        return x_t + self.ffn(self.ln2(x_t)), state
