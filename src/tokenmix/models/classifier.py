"""The encoder classifier: embeddings, a stack of :class:`~tokenmix.models.layers.Block` s, pooling, a head."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from ..ops.init import normal_init_
from ..validate import check_positive_int
from .layers import (
    POOLINGS,
    POSITIONALS,
    Positions,
    build_blocks,
    check_dropout,
    check_ids,
    check_init_std,
    check_mask,
    mask_for_blocks,
)
from .patterns import pattern_names

__all__ = ["SequenceClassifier"]


class SequenceClassifier(nn.Module):
    """Encoder classifier: embeddings + positions, ``depth`` pre-LN :class:`Block` s, final LayerNorm,
    pooling, linear head (the layer of Chen (2023) eqs. 9-20, bidirectional, with Chen (2023) eq. 21's final
    layernorm and a linear classifier in place of the LM head).

    Args:
        positional: ``"sinusoidal"`` (Vaswani et al. 2017), ``"learned"`` (Chen (2023) eq. 5) or ``"none"``.
        pooling: ``"cls"`` prepends a learned CLS token (real, position 0; the mixers get ``max_len + 1``
            so that ``max_len`` counts input tokens only) and classifies its output; ``"mean"`` averages
            the real tokens; ``"first"`` takes the first token's output (Yamada et al. (2022) section 3.2.1), zero if it
            is padding; ``"tokens"`` pools nothing: the head reads every position's output, so ``forward`` returns
            ``(B, N, num_classes)`` logits, zero at padded positions (token tagging; with ``num_classes`` the
            vocabulary, a masked language model whose weights fit a classifier of the same encoder by name).
        pad_id: when given and ``forward`` gets no mask, ``mask = ids != pad_id``.
        mixer: a registry name, or a layer pattern repeated over ``depth`` (see
            :mod:`tokenmix.models.patterns`, e.g. ``["linear", "softmax"]``).
        init_std: when given, every parameter of the model (embeddings, CLS token, every mixer's, FFNs, head)
            is re-drawn from ``N(0, init_std)``, biases zero, norm gains one (:func:`~tokenmix.ops.init.
            normal_init_`, Chen 2023 §6's rule); None keeps PyTorch's and each mixer's own defaults.

    ``forward(ids, mask=None)``: ``ids`` (B, N) integer with N <= ``max_len``; ``mask`` (B, N) bool,
    True = real token. Returns logits ``(B, num_classes)``. See the module docstring for padding.
    """

    poolings: tuple[str, ...] = (*POOLINGS, "tokens")

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
            check_positive_int(value, what, owner)
        check_dropout(dropout, owner)
        check_init_std(init_std, owner)
        if pooling not in self.poolings:
            raise ValueError(f"{type(self).__name__}: pooling must be one of {self.poolings}, got {pooling!r}")
        if positional not in POSITIONALS:
            raise ValueError(f"{owner}: positional must be one of {POSITIONALS}, got {positional!r}")
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
        self.positions = Positions(positional, slots, dim, owner)
        self.drop = nn.Dropout(dropout)
        self.blocks = build_blocks(dim, mixer, depth, mixer_options, owner, num_heads=num_heads, causal=False,
                              max_len=slots, ffn_dim=ffn_dim, dropout=dropout)
        self.norm = nn.LayerNorm(dim)
        self.head = self._make_head(dim, num_classes)
        if init_std is not None:
            normal_init_(self, init_std)

    def _make_head(self, dim: int, num_classes: int) -> nn.Module:
        """The classifier on the pooled representation: one linear layer."""
        return nn.Linear(dim, num_classes)

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """``ids`` (B, N) integer, ``mask`` (B, N) bool or None -> logits (B, num_classes); (B, N, num_classes)
        with ``pooling="tokens"``, zero at padded positions."""
        if self.pooling != "tokens":
            return self.head(self.encode(ids, mask))
        x, mask = self._outputs(ids, mask)
        logits = self.head(x)
        return logits if mask is None else logits * mask[..., None].to(logits.dtype)

    def _outputs(self, ids: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """Every position's final output (B, N, dim) (the CLS token first with ``pooling="cls"``) and the mask
        it was computed with (from ``pad_id`` when none is given; with the CLS token's column)."""
        owner = type(self).__name__
        ids = check_ids(ids, self.vocab_size, self.max_len, owner)
        if mask is not None:
            mask = check_mask(mask, ids, owner)
        elif self.pad_id is not None:
            mask = ids != self.pad_id
        x = self.embedding(ids)
        if self.pooling == "cls":
            x = torch.cat([self.cls_token.to(x.dtype).expand(x.shape[0], 1, -1), x], dim=1)
            if mask is not None:
                mask = torch.cat([mask.new_ones(mask.shape[0], 1), mask], dim=1)
        x = self.drop(self.positions(x))
        block_mask = mask_for_blocks(mask, self.mixer_names, owner)
        for block in self.blocks:
            x = block(x, block_mask)
        return self.norm(x), mask

    def encode(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """The pooled representation (B, dim) the head classifies (every position's, (B, N, dim), with
        ``pooling="tokens"``): ``ids`` (B, N), ``mask`` (B, N) or None."""
        x, mask = self._outputs(ids, mask)
        if self.pooling == "tokens":
            return x
        if self.pooling == "cls":
            pooled = x[:, 0]
        elif self.pooling == "first":
            pooled = x[:, 0] if mask is None else x[:, 0] * mask[:, :1].to(x.dtype)
        elif mask is None:
            pooled = x.mean(dim=1)
        else:
            weights = mask.to(x.dtype)[..., None]
            pooled = (x * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return pooled
