"""What a task's splits and batches are: :class:`Split` (a split as tensors), the batches :class:`TokenBatch`,
:class:`LMBatch` and :class:`ImageBatch`, and the helpers every task uses to build them."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor

__all__ = ["SPLITS", "IGNORE_INDEX", "Split", "TokenBatch", "LMBatch", "ImageBatch", "to_device", "pad_sequences"]

SPLITS = ("train", "val", "test")
IGNORE_INDEX = -100  # a target or label where nothing is predicted (cross_entropy's ignore_index)


@dataclass
class TokenBatch:
    ids: Tensor  # (B, N) int64
    mask: Tensor  # (B, N) bool, True = real token
    labels: Tensor  # (B,) int64; masked_lm: (B, N), the original token where predicted, IGNORE_INDEX elsewhere


@dataclass
class LMBatch:
    ids: Tensor  # (B, N) int64 inputs
    targets: Tensor  # (B, N) int64, the next token of each position


@dataclass
class ImageBatch:
    images: Tensor  # (B, C, H, W) float
    labels: Tensor  # (B,) int64


@dataclass
class Split:
    """One split as tensors. Token tasks: ``ids`` (M, N) int64 right-padded with ``pad_id`` and
    ``lengths`` (M,); language modelling: ``ids`` (M, N + 1) windows; images: ``images`` (M, C, H, W)."""

    labels: Tensor | None = None
    ids: Tensor | None = None
    lengths: Tensor | None = None
    images: Tensor | None = None

    def __len__(self) -> int:
        for t in (self.labels, self.ids, self.images):
            if t is not None:
                return t.shape[0]
        return 0


def to_device(batch: TokenBatch | LMBatch | ImageBatch, device: torch.device) -> TokenBatch | LMBatch | ImageBatch:
    """The batch with every tensor on ``device`` (the same object when already there)."""
    tensors = {f.name: getattr(batch, f.name) for f in fields(batch)}
    if all(t.device == device for t in tensors.values()):
        return batch
    return type(batch)(**{name: t.to(device) for name, t in tensors.items()})


def pad_sequences(sequences: list[list[int]], pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """Right-pad integer sequences into (M, max length) int64 ids and their (M,) lengths."""
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)
    ids = torch.full((len(sequences), int(lengths.max()) if len(sequences) else 0), pad_id, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    return ids, lengths
