"""The two-tower classifier of the Long Range Arena's Retrieval task (Tay et al., 2021, §3.4): one encoder reads
both documents of a pair, and a two-layer MLP classifies ``[u, v, u * v, u - v]`` of their pooled
representations ``u`` and ``v`` (the combination LRA takes from Conneau et al., 2017)."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from .classifier import SequenceClassifier
from .layers import POOLINGS

__all__ = ["DualEncoderClassifier"]


class DualEncoderClassifier(SequenceClassifier):
    """A :class:`~tokenmix.models.classifier.SequenceClassifier` (every argument the same; ``max_len`` counts the
    tokens of one document) whose head is ``Linear(4 dim, dim) -> ReLU -> Linear(dim, num_classes)`` over
    ``[u, v, u * v, u - v]``.

    ``forward(ids, mask=None)``: ``ids`` (B, 2 N), the first document in ``[:, :N]`` and the second in
    ``[:, N:]``, each right-padded; ``mask`` (B, 2 N) bool, True = real token. The two documents go through the
    encoder as one batch of 2 B, so both are read by the same weights."""

    poolings = POOLINGS  # each document is pooled to one vector: no "tokens"

    def _make_head(self, dim: int, num_classes: int) -> nn.Module:
        return nn.Sequential(nn.Linear(4 * dim, dim), nn.ReLU(), nn.Linear(dim, num_classes))

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """``ids`` (B, 2 N), ``mask`` (B, 2 N) or None -> logits (B, num_classes)."""
        if ids.dim() != 2 or ids.shape[1] % 2:
            raise ValueError(f"DualEncoderClassifier: ids must be (B, 2 N), two documents side by side; got shape "
                             f"{tuple(ids.shape)}")
        n = ids.shape[1] // 2
        pair_ids = torch.cat([ids[:, :n], ids[:, n:]])
        pair_mask = None if mask is None else torch.cat([mask[:, :n], mask[:, n:]])
        u, v = self.encode(pair_ids, pair_mask).chunk(2)
        return self.head(torch.cat([u, v, u * v, u - v], dim=-1))
