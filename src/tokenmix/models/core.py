"""Models built around an interchangeable token mixer.

Every model reaches its mechanism only through the registry (:func:`tokenmix.create_mixer`) and decides
what to pass to it only from :func:`tokenmix.mixer_info`; no model knows a mechanism by name.

* :class:`Block` -- one pre-LN layer, ``x + drop(mixer(LN(x))) + drop(FFN(LN(.)))`` (004 eqs. 9-20).
* :class:`SequenceClassifier` -- a stack of blocks with CLS / mean / first-token pooling.
* :class:`CausalLM` -- the decoder of 004 section 4 (eqs. 4-22), with causal mixers.
* :class:`RelationNet` -- the single-layer protocol of 000 section 3.2.1 (mixer, one pointwise layer,
  first token, dropout, linear head; Glorot init); ``mixer="mlp"`` is 000's Baseline.

Paper references: 000 = Yamada, Baladram, Lin (2022), "Relation is an option for processing context
information"; 004 = Chen (2023), "Attention Is Not All You Need Anymore" (arXiv 2308.07661).

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

from ..ops.init import normal_init_
from ..registry import create_mixer, mixer_info
from ..validate import check_positive_int as _check_positive_int
from .patterns import LayerMixer, layer_mixers, pattern_names

__all__ = [
    "sinusoidal_positions",
    "FeedForward",
    "Block",
    "SequenceClassifier",
    "CausalLM",
    "RelationNet",
]

_POSITIONALS = ("sinusoidal", "learned", "none")
_POOLINGS = ("cls", "mean", "first")
_ACTIVATIONS = ("relu", "gelu")


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------


def _check_dropout(p: float, owner: str) -> None:
    if not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{owner}: dropout must be in [0, 1), got {p!r}")


def _check_ids(ids: object, vocab_size: int, max_len: int, owner: str) -> Tensor:
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


def _check_mask(mask: object, ids: Tensor, owner: str) -> Tensor:
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"{owner}: mask must be a bool tensor (True = real token), got {got}")
    if mask.shape != ids.shape:
        raise ValueError(f"{owner}: mask must have the shape of ids {tuple(ids.shape)}, got {tuple(mask.shape)}")
    if mask.device != ids.device:
        raise ValueError(f"{owner}: mask is on {mask.device} but ids are on {ids.device}")
    return mask


def _mixer_kwargs(mixer: str, num_heads: int | None, max_len: int | None, owner: str) -> dict[str, object]:
    """The common create_mixer arguments a model passes, decided from ``mixer_info`` alone.

    ``num_heads`` is the model's head count: passed to every mechanism with heads and not to those without
    (``MixerInfo.heads``: Relation, Average Attention, the Extractors, the MLP run as their single
    "head"), so one model-level value serves every mixer of a sweep. ``max_len`` is passed whenever the caller has one: every mechanism accepts
    it (a common create_mixer argument: a cap on N, or the window of a ``sliding_window`` mechanism),
    and those flagged ``needs_max_len`` need it in some configuration (e.g. a causal mechanism whose
    horizon is ``max_len``). A mechanism flagged ``needs_max_len`` without one is an error here.
    """
    info = mixer_info(mixer)
    if info.spatial:
        raise ValueError(f"{owner}: mixer {mixer!r} is spatial (it needs a 2-D grid) and cannot mix a 1-D sequence")
    kwargs: dict[str, object] = {}
    if num_heads is not None:
        _check_positive_int(num_heads, "num_heads", owner)
    if info.heads(num_heads) is not None:
        kwargs["num_heads"] = num_heads
    if max_len is not None:
        kwargs["max_len"] = max_len
    elif info.needs_max_len:
        raise ValueError(f"{owner}: mixer {mixer!r} has a fixed length and needs max_len")
    return kwargs


def _block_mask(mask: Tensor | None, mixers: list[str], owner: str) -> Tensor | None:
    """None when nothing is padded (so mechanisms without mask support still run); else the mask."""
    if mask is None or bool(mask.all()):
        return None
    for mixer in mixers:
        if not mixer_info(mixer).padding:
            raise ValueError(f"{owner}: mixer {mixer!r} does not support padding masks, but the batch has padding")
    return mask


def _check_init_std(init_std: object, owner: str) -> None:
    if init_std is not None and (isinstance(init_std, bool) or not isinstance(init_std, (int, float))
                                 or not math.isfinite(init_std) or init_std <= 0):
        raise ValueError(f"{owner}: init_std must be a positive float or None, got {init_std!r}")


def _blocks(dim: int, mixer: object, depth: int, mixer_options: dict[str, object] | None, owner: str,
            **block_args: object) -> nn.ModuleList:
    """``depth`` :class:`Block` s, layer ``i`` with the ``i``-th mixer of the pattern (see
    :mod:`tokenmix.models.patterns`)."""
    return nn.ModuleList(Block(dim, layer.name, mixer_options=dict(layer.options), **block_args)
                         for layer in layer_mixers(mixer, depth, mixer_options, owner))


def _depth_options(mixer: str, inner_dim: int | None) -> dict[str, object]:
    """000's mixer settings for a mixing depth ``d = inner_dim`` (see :class:`RelationNet`), for the options
    ``mixer`` has; empty when ``inner_dim`` is None."""
    if inner_dim is None:
        return {}
    wanted = {"inner_dim": inner_dim, "out_proj": False, "normalize": False}
    return {k: v for k, v in wanted.items() if k in mixer_info(mixer).options}


def sinusoidal_positions(n: int, dim: int) -> Tensor:
    """Sinusoidal position encodings of Vaswani et al. (2017, section 3.5), shape ``(n, dim)``.

    ``PE[p, 2i] = sin(p / 10000^(2i/dim))`` and ``PE[p, 2i+1] = cos(p / 10000^(2i/dim))``; an odd ``dim``
    gets one more sine than cosine column. Used by 000 section 3.2.1 ("positional encoding similar to that
    of Transformer").
    """
    _check_positive_int(n, "n", "sinusoidal_positions")
    _check_positive_int(dim, "dim", "sinusoidal_positions")
    position = torch.arange(n, dtype=torch.float64)[:, None]
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
    angles = position * inv_freq  # (n, ceil(dim / 2))
    pe = torch.zeros(n, dim, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : dim // 2])
    return pe.to(torch.get_default_dtype())


class _Positions(nn.Module):
    """Additive positions for the first ``n`` slots: sinusoidal (a buffer), learned, or none."""

    def __init__(self, kind: str, max_len: int, dim: int, owner: str) -> None:
        super().__init__()
        if kind not in _POSITIONALS:
            raise ValueError(f"{owner}: positional must be one of {_POSITIONALS}, got {kind!r}")
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
    """The position-wise FFN sub-layer, ``act(x W1 + b1) W2 + b2`` (004 eq. 19, ReLU with biases).

    ``dropout`` acts on the hidden activations (004 eq. 19 has none, hence :class:`Block` passes 0; the
    residual dropout of eq. 20 is the block's). ``activation`` is ``"relu"`` (004) or ``"gelu"``.
    """

    def __init__(self, dim: int, hidden: int, dropout: float = 0.0, activation: str = "relu") -> None:
        super().__init__()
        _check_positive_int(dim, "dim", "FeedForward")
        _check_positive_int(hidden, "hidden", "FeedForward")
        _check_dropout(dropout, "FeedForward")
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
    """One pre-LN layer with an interchangeable mixer in place of self-attention (004 eqs. 9-20)::

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
        _check_positive_int(dim, "dim", "Block")
        _check_dropout(dropout, "Block")
        if mixer_options is not None and not isinstance(mixer_options, dict):
            raise ValueError(f"Block: mixer_options must be a dict or None, got {type(mixer_options).__name__}")
        kwargs = _mixer_kwargs(mixer, num_heads, max_len, "Block")
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


# ------------------------------------------------------------------------------------------------
# models
# ------------------------------------------------------------------------------------------------
class SequenceClassifier(nn.Module):
    """Encoder classifier: embeddings + positions, ``depth`` pre-LN :class:`Block` s, final LayerNorm,
    pooling, linear head (the layer of 004 eqs. 9-20, bidirectional, with 004 eq. 21's final
    layernorm and a linear classifier in place of the LM head).

    Args:
        positional: ``"sinusoidal"`` (Vaswani et al. 2017), ``"learned"`` (004 eq. 5) or ``"none"``.
        pooling: ``"cls"`` prepends a learned CLS token (real, position 0; the mixers get ``max_len + 1``
            so that ``max_len`` counts input tokens only) and classifies its output; ``"mean"`` averages
            the real tokens; ``"first"`` takes the first token's output (000 section 3.2.1), zero if it
            is padding.
        pad_id: when given and ``forward`` gets no mask, ``mask = ids != pad_id``.
        mixer: a registry name, or a layer pattern repeated over ``depth`` (see
            :mod:`tokenmix.models.patterns`, e.g. ``["linear", "softmax"]``).
        init_std: when given, every parameter of the model (embeddings, CLS token, every mixer's, FFNs, head)
            is re-drawn from ``N(0, init_std)``, biases zero, norm gains one (:func:`~tokenmix.ops.init.
            normal_init_`, Chen 2023 §6's rule); None keeps PyTorch's and each mixer's own defaults.

    ``forward(ids, mask=None)``: ``ids`` (B, N) integer with N <= ``max_len``; ``mask`` (B, N) bool,
    True = real token. Returns logits ``(B, num_classes)``. See the module docstring for padding.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        mixer: str | list,
        dim: int,
        depth: int,
        *,
        num_heads: int | None = None,
        max_len: int = 512,
        ffn_dim: int | None = None,
        dropout: float = 0.1,
        positional: str = "sinusoidal",
        pooling: str = "cls",
        pad_id: int | None = None,
        mixer_options: dict[str, object] | None = None,
        init_std: float | None = None,
    ) -> None:
        super().__init__()
        owner = "SequenceClassifier"
        for value, what in ((vocab_size, "vocab_size"), (num_classes, "num_classes"), (dim, "dim"),
                            (depth, "depth"), (max_len, "max_len")):
            _check_positive_int(value, what, owner)
        _check_dropout(dropout, owner)
        _check_init_std(init_std, owner)
        if pooling not in _POOLINGS:
            raise ValueError(f"{owner}: pooling must be one of {_POOLINGS}, got {pooling!r}")
        if positional not in _POSITIONALS:
            raise ValueError(f"{owner}: positional must be one of {_POSITIONALS}, got {positional!r}")
        if pad_id is not None and (isinstance(pad_id, bool) or not isinstance(pad_id, int)
                                   or not 0 <= pad_id < vocab_size):
            raise ValueError(f"{owner}: pad_id must be an int in [0, {vocab_size}) or None, got {pad_id!r}")
        self.vocab_size = vocab_size
        self.num_classes = num_classes
        self.mixer_names = pattern_names(mixer, owner)
        self.max_len = max_len
        self.pooling = pooling
        self.pad_id = pad_id
        slots = max_len + 1 if pooling == "cls" else max_len
        self.embedding = nn.Embedding(vocab_size, dim)
        if pooling == "cls":
            self.cls_token = nn.Parameter(torch.randn(dim))
        self.positions = _Positions(positional, slots, dim, owner)
        self.drop = nn.Dropout(dropout)
        self.blocks = _blocks(dim, mixer, depth, mixer_options, owner, num_heads=num_heads, causal=False,
                              max_len=slots, ffn_dim=ffn_dim, dropout=dropout)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        if init_std is not None:
            normal_init_(self, init_std)

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """``ids`` (B, N) integer, ``mask`` (B, N) bool or None -> logits (B, num_classes)."""
        owner = "SequenceClassifier"
        ids = _check_ids(ids, self.vocab_size, self.max_len, owner)
        if mask is not None:
            mask = _check_mask(mask, ids, owner)
        elif self.pad_id is not None:
            mask = ids != self.pad_id
        x = self.embedding(ids)
        if self.pooling == "cls":
            x = torch.cat([self.cls_token.to(x.dtype).expand(x.shape[0], 1, -1), x], dim=1)
            if mask is not None:
                mask = torch.cat([mask.new_ones(mask.shape[0], 1), mask], dim=1)
        x = self.drop(self.positions(x))
        block_mask = _block_mask(mask, self.mixer_names, owner)
        for block in self.blocks:
            x = block(x, block_mask)
        x = self.norm(x)
        if self.pooling == "cls":
            pooled = x[:, 0]
        elif self.pooling == "first":
            pooled = x[:, 0] if mask is None else x[:, 0] * mask[:, :1].to(x.dtype)
        elif mask is None:
            pooled = x.mean(dim=1)
        else:
            weights = mask.to(x.dtype)[..., None]
            pooled = (x * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return self.head(pooled)


class CausalLM(nn.Module):
    """The decoder-only language model of 004 section 4, with the mixer in place of self-attention.

    * token and learned position embeddings (eqs. 4-5), both multiplied by ``sqrt(dim)`` when
      ``scale_embedding`` (004 section 4, after Vaswani et al. 2017), summed, then dropout (eqs. 6-7);
    * ``depth`` pre-LN :class:`Block` s with ``causal=True`` mixers (eqs. 9-20) -- a mechanism that cannot
      run causally makes the registry raise ``ValueError`` naming it;
    * final layernorm and a linear head with bias (eq. 21). ``forward`` returns the logits, not the
      softmax; ``softmax(logits[:, i])`` is the next-token distribution of eq. 22.

    ``init_std`` (004 section 6 uses 0.01): every parameter of the model, every mixer's whatever its module
    type included, is drawn from ``N(0, init_std)``, every bias is zero, and LayerNorm gains are 1 and
    biases 0 (:func:`~tokenmix.ops.init.normal_init_`). With ``init_std=None`` PyTorch's / the mixer's
    defaults are kept. ``tie_weights`` shares the head's weight with the token embedding. ``mixer`` is a
    registry name or a layer pattern (:mod:`tokenmix.models.patterns`).
    """

    def __init__(
        self,
        vocab_size: int,
        mixer: str | list,
        dim: int,
        depth: int,
        max_len: int,
        *,
        num_heads: int | None = None,
        ffn_dim: int | None = None,
        dropout: float = 0.1,
        init_std: float | None = None,
        scale_embedding: bool = True,
        tie_weights: bool = False,
        mixer_options: dict[str, object] | None = None,
    ) -> None:
        super().__init__()
        owner = "CausalLM"
        for value, what in ((vocab_size, "vocab_size"), (dim, "dim"), (depth, "depth"), (max_len, "max_len")):
            _check_positive_int(value, what, owner)
        _check_dropout(dropout, owner)
        _check_init_std(init_std, owner)
        self.vocab_size = vocab_size
        self.mixer_names = pattern_names(mixer, owner)
        self.dim = dim
        self.max_len = max_len
        self.scale_embedding = bool(scale_embedding)
        self.token_embedding = nn.Embedding(vocab_size, dim)   # W[emb_tok], eq. 4
        self.position_embedding = nn.Embedding(max_len, dim)   # W[emb_pos], eq. 5
        self.drop = nn.Dropout(dropout)                        # eq. 7
        self.blocks = _blocks(dim, mixer, depth, mixer_options, owner, num_heads=num_heads, causal=True,
                              max_len=max_len, ffn_dim=ffn_dim, dropout=dropout)
        self.norm = nn.LayerNorm(dim)                          # eq. 21 layernorm
        self.head = nn.Linear(dim, vocab_size)                 # W[soft], b[soft], eq. 21
        if init_std is not None:
            self.reset_parameters(init_std)
        if tie_weights:
            self.head.weight = self.token_embedding.weight

    def reset_parameters(self, std: float) -> None:
        """Every parameter ~ N(0, std), biases 0, LayerNorm gain 1 and bias 0 (004 section 6)."""
        normal_init_(self, std)

    def embed(self, ids: Tensor) -> Tensor:
        """``X[emb_tok] + X[emb_pos]`` (eqs. 4-5), times ``sqrt(dim)`` when ``scale_embedding``; no dropout."""
        ids = _check_ids(ids, self.vocab_size, self.max_len, "CausalLM")
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.token_embedding(ids) + self.position_embedding(positions)
        return x * math.sqrt(self.dim) if self.scale_embedding else x

    def forward(self, ids: Tensor) -> Tensor:
        """``ids`` (B, N) integer, N <= ``max_len`` -> next-token logits (B, N, vocab_size) (eqs. 4-21)."""
        x = self.drop(self.embed(ids))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    @property
    def can_step(self) -> bool:
        """Every layer's mixer decodes incrementally (``mixer_info(name).recurrent``)."""
        return all(mixer_info(name).recurrent for name in self.mixer_names)

    def generate(
        self,
        prompt_ids: Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_p: float | None = None,
        seed: int | None = None,
        use_step: bool | None = None,
    ) -> Tensor:
        """Sample ``max_new_tokens`` continuations of ``prompt_ids`` (B, P); returns (B, P + new).

        With ``use_step`` None (default) the mixers' incremental ``step`` is used when every layer has one
        (cost per token independent of the prefix for the recurrent mechanisms), otherwise the whole
        prefix is recomputed for each token; ``use_step=False`` forces recomputation. Both give the same
        tokens for the same ``seed``. ``temperature=0`` is greedy decoding; ``top_p`` keeps the smallest
        set of tokens whose probability reaches ``top_p`` (nucleus sampling). The model is in eval mode
        while generating. The learned positions cap ``P + max_new_tokens`` at ``max_len``.
        """
        owner = "CausalLM.generate"
        ids = _check_ids(prompt_ids, self.vocab_size, self.max_len, owner)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"{owner}: max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
        if ids.shape[1] + max_new_tokens > self.max_len:
            raise ValueError(f"{owner}: prompt length {ids.shape[1]} + {max_new_tokens} new tokens exceeds "
                             f"max_len={self.max_len} (the learned positions)")
        if not isinstance(temperature, (int, float)) or temperature < 0:
            raise ValueError(f"{owner}: temperature must be >= 0, got {temperature!r}")
        if top_p is not None and not 0.0 < top_p <= 1.0:
            raise ValueError(f"{owner}: top_p must be in (0, 1], got {top_p!r}")
        if use_step and not self.can_step:
            raise ValueError(f"{owner}: mixer(s) {self.mixer_names} lack an incremental step; use use_step=False")
        stepping = self.can_step if use_step is None else use_step
        # inference_mode: no autograd bookkeeping at all (cheaper per token than no_grad); the result is
        # cloned outside it, so that callers may use it in autograd-recorded code
        with torch.inference_mode():
            ids = self._generate(ids, max_new_tokens, temperature, top_p, seed, stepping)
        return ids.clone()

    def _generate(self, ids: Tensor, max_new_tokens: int, temperature: float, top_p: float | None,
                  seed: int | None, stepping: bool) -> Tensor:
        generator = torch.Generator(device=ids.device)
        generator.manual_seed(seed if seed is not None else int(torch.randint(2**62, ()).item()))
        was_training = self.training
        self.eval()
        try:
            if stepping:
                states = [block.mixer.init_state(ids.shape[0]) for block in self.blocks]
                for t in range(ids.shape[1]):
                    logits, states = self._step(ids[:, t], t, states)
            else:
                logits = self(ids)[:, -1]
            for i in range(max_new_tokens):
                token = _sample(logits, temperature, top_p, generator)
                ids = torch.cat([ids, token[:, None]], dim=1)
                if i + 1 == max_new_tokens:
                    break
                if stepping:
                    logits, states = self._step(token, ids.shape[1] - 1, states)
                else:
                    logits = self(ids)[:, -1]
        finally:
            self.train(was_training)
        return ids

    def _step(self, tokens: Tensor, position: int, states: list) -> tuple[Tensor, list]:
        """Next-token logits (B, vocab) after feeding ``tokens`` (B,) at ``position`` through every layer."""
        x = self.token_embedding(tokens) + self.position_embedding.weight[position]
        x = x * math.sqrt(self.dim) if self.scale_embedding else x
        new_states = []
        for block, state in zip(self.blocks, states):
            x, state = block.step(x, state)
            new_states.append(state)
        return self.head(self.norm(x)), new_states

    def loss(self, ids: Tensor) -> Tensor:
        """Mean next-token cross-entropy: ``logits[:, :-1]`` against ``ids[:, 1:]`` (eq. 22); needs N >= 2."""
        if isinstance(ids, Tensor) and ids.dim() == 2 and ids.shape[1] < 2:
            raise ValueError(f"CausalLM.loss: needs at least 2 tokens per row, got shape {tuple(ids.shape)}")
        logits = self(ids)
        return F.cross_entropy(logits[:, :-1].reshape(-1, self.vocab_size), ids[:, 1:].reshape(-1).long())


def _sample(logits: Tensor, temperature: float, top_p: float | None, generator: torch.Generator) -> Tensor:
    """One token per row from ``logits`` (B, vocab): greedy at temperature 0, else softmax sampling,
    restricted to the nucleus of probability ``top_p`` when given."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p is not None and top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of the more likely tokens
        sorted_probs = sorted_probs * (before < top_p)  # the most likely token always stays
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    # inverse-CDF sampling: one uniform per row (torch.multinomial draws an exponential per vocabulary entry,
    # which costs more than a whole decoding step of a small model)
    cdf = probs.double().cumsum(dim=-1)  # float64: u and the bin edges never coincide on a float32 grid
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=cdf.dtype) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp_(max=probs.shape[-1] - 1).squeeze(-1)


class RelationNet(nn.Module):
    """The single-layer benchmark network of 000 section 3.2.1::

        h = embedding(ids) + PE          # token embedding + sinusoidal positional encoding
        h = mixer(h, mask)               # Attention (eq. 4), Linear Attention (eqs. 5-6), Relation (eqs. 7-12)
        h = relu(h W + b)                # a single point-wise MLP layer
        logits = dropout(h[:, 0]) W_o + b_o   # the first token's vector -> linear head

    ``init="glorot"``: every ``nn.Linear`` / ``nn.Embedding`` weight (the mixer's included) is Glorot-uniform
    and every such bias zero ("for all networks", 000 section 3.2.1); other parameters a mixer owns keep its
    own initialisation. ``init="default"`` keeps PyTorch's / the mixer's. ``dropout`` defaults to 000's 0.5.

    ``dim`` is the embedding width ``m`` (000 uses 100, GloVe-initialised; GloVe cannot be fetched offline,
    so the embeddings here are Glorot-random). ``inner_dim`` is 000's separate mixing depth ``d`` (64, 128 or
    256): every mixer with an ``inner_dim`` option projects ``m -> d`` (``W_Q, W_K, W_V in R^{m x d}``,
    eqs. 1-3; ``W_G, W_H``, eqs. 7-8), and, because eqs. 4, 5 and 12 have no output projection and eq. 5 no
    denominator, gets ``out_proj=False`` and ``normalize=False`` where it has those options; the point-wise
    layer then reads ``d``-wide vectors (the mixer's ``out_dim``). ``inner_dim=None`` keeps the mixers'
    own defaults (width ``dim``, output projections on).

    000's Baseline is ``RelationNet(..., mixer="mlp")``: the ``"mlp"`` mixer is a point-wise two-layer
    MLP of ``4 dim^2`` parameters at ``bias=False`` (the budget of attention's Q, K, V, output
    projections), so mixer + point-wise layer are the Baseline's three point-wise layers and it sees no
    context. ``hidden`` (default: the mixer's output width) is the width of the point-wise layer.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        mixer: str,
        dim: int,
        *,
        max_len: int = 512,
        hidden: int | None = None,
        dropout: float = 0.5,
        mixer_options: dict[str, object] | None = None,
        num_heads: int | None = None,
        init: str = "glorot",
        inner_dim: int | None = None,
    ) -> None:
        super().__init__()
        owner = "RelationNet"
        for value, what in ((vocab_size, "vocab_size"), (num_classes, "num_classes"), (dim, "dim"),
                            (max_len, "max_len")):
            _check_positive_int(value, what, owner)
        if inner_dim is not None:
            _check_positive_int(inner_dim, "inner_dim", owner)
        _check_dropout(dropout, owner)
        if init not in ("glorot", "default"):
            raise ValueError(f"{owner}: init must be 'glorot' or 'default', got {init!r}")
        if mixer_options is not None and not isinstance(mixer_options, dict):
            raise ValueError(f"{owner}: mixer_options must be a dict or None, got {type(mixer_options).__name__}")
        self.vocab_size = vocab_size
        self.num_classes = num_classes
        self.mixer_name = mixer
        self.max_len = max_len
        self.embedding = nn.Embedding(vocab_size, dim)
        self.positions = _Positions("sinusoidal", max_len, dim, owner)
        kwargs = _mixer_kwargs(mixer, num_heads, max_len, owner)
        options = {**_depth_options(mixer, inner_dim), **(mixer_options or {})}
        self.mixer = create_mixer(mixer, dim, causal=False, **kwargs, **options)
        width = getattr(self.mixer, "out_dim", dim)
        hidden = width if hidden is None else hidden
        _check_positive_int(hidden, "hidden", owner)
        self.pointwise = nn.Linear(width, hidden)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, num_classes)
        if init == "glorot":
            self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Glorot-uniform weights and zero biases for every Linear / Embedding (000 section 3.2.1)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.xavier_uniform_(module.weight)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """``ids`` (B, N) integer, ``mask`` (B, N) bool or None -> logits (B, num_classes).

        The first token's vector is zero when the first token is padding (see the module docstring).
        """
        owner = "RelationNet"
        ids = _check_ids(ids, self.vocab_size, self.max_len, owner)
        if mask is not None:
            mask = _check_mask(mask, ids, owner)
        h = self.positions(self.embedding(ids))
        h = self.mixer(h, _block_mask(mask, [self.mixer_name], owner))
        first = F.relu(self.pointwise(h[:, 0]))  # the point-wise layer, needed only at the first token
        if mask is not None:
            first = first * mask[:, :1].to(first.dtype)
        return self.head(self.drop(first))
