"""The training batches of :func:`tokenmix.training.loop.train`: which ones a step takes (the same for every model),
each rank's rows of them under data parallelism, and the tokens they hold."""

from __future__ import annotations

from dataclasses import fields
from itertools import islice
from typing import Any, Iterator

import torch.nn as nn

from ..tasks.base import Task
from ..tasks.batches import ImageBatch, LMBatch, TokenBatch

__all__ = ["remaining_batches", "shard", "count_tokens"]


def remaining_batches(task: Task, batch_size: int, seed: int, steps_per_epoch: int, step: int) -> Iterator[Any]:
    """The batches of the epoch that ``step`` falls in, from ``step``'s position in it on. Epoch ``e``'s batches
    are ``task.batches("train", batch_size, shuffle=True, seed=seed * 1000 + e, drop_last=True)``."""
    epoch, position = divmod(step, steps_per_epoch)
    batches = task.batches("train", batch_size, shuffle=True, seed=seed * 1000 + epoch, drop_last=True)
    return islice(batches, position, None)


def shard(batch: Any, rank: int, world: int) -> Any:
    """Rows ``rank::world`` of every tensor of the batch."""
    if world == 1:
        return batch
    return type(batch)(**{f.name: getattr(batch, f.name)[rank::world] for f in fields(batch)})


def count_tokens(batch: Any, model: nn.Module) -> int:
    """Real tokens of a (global) batch: ``mask.sum()`` for classification, ``ids.numel()`` for language
    modelling, images x patches for image tasks (images when the model has no ``grid``)."""
    if isinstance(batch, TokenBatch):
        return int(batch.mask.sum())
    if isinstance(batch, LMBatch):
        return batch.ids.numel()
    if isinstance(batch, ImageBatch):
        grid = getattr(model, "grid", None)
        per_image = int(grid[0]) * int(grid[1]) if grid is not None else 1
        return batch.images.shape[0] * per_image
    raise TypeError(f"unknown batch type {type(batch).__name__}")
