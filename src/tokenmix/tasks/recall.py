"""Associative recall: find the value stored under a query key.

A sequence is ``k_1 v_1 k_2 v_2 ... k_P v_P SEP q`` (length ``2 P + 2``, ``P = num_pairs``): ``P`` key-value
pairs, a separator, and a query key ``q`` that is one of the ``k_i``; the label is the value paired with it,
``v_i`` for the ``i`` with ``k_i = q`` (``num_classes = num_values``).

It tests the use of context, and is built so that **no single position says anything about the label**:

* keys are ``P`` distinct keys drawn uniformly (without replacement) from ``num_keys``, in random order;
* the values are *balanced*: every one of the ``num_values`` values occurs exactly ``P / num_values`` times
  (so ``num_values`` must divide ``num_pairs``), in a uniformly random order independent of the keys;
* the query is one of the ``P`` keys, uniformly.

Then the label is uniform over the values given the token at any one position (the query alone, a key
alone, a value alone: a value ``a`` at position ``i`` is the answer with probability ``1/P`` and otherwise
another copy of ``a`` is, with probability ``(P/V - 1)/(P - 1)``, adding up to ``1/V``). Even the bag of
values carries nothing: it is the same multiset in every sequence. (Were values drawn independently, a
model could guess "a value that occurs in the sequence", beating chance without matching keys.) A model
that mixes nothing across positions ("mlp") should therefore stay at chance, ``1 / num_values``; the
answer needs the query matched against the keys and the matching key's neighbour read.

Token ids (``vocab_size = num_keys + num_values + 2``): ``0`` = padding (never used: all sequences have
the same length), key ``k`` = ``1 + k``, value ``v`` = ``1 + num_keys + v``, separator = ``1 + num_keys +
num_values``. The label is the value's index ``v``.

Sequences are drawn from ``random.Random(seed)``; no sequence occurs twice, within a split or across splits.
"""

from __future__ import annotations

import math
import random

import torch

from .base import Task, TaskShape
from .batches import Split, pad_sequences
from .registry import register_task

__all__ = ["RecallTask"]

PRESETS = {
    # Runs in seconds on 2 CPU cores: length 18, chance 1/8.
    "quick": dict(num_pairs=8, num_keys=32, num_values=8, train_size=4_000, val_size=500, test_size=500),
    # Larger (no paper in this project fixes it): length 66, chance 1/32.
    "paper": dict(num_pairs=32, num_keys=128, num_values=32, train_size=20_000, val_size=2_000, test_size=2_000),
}


@register_task(
    "recall",
    description="associative recall: key-value pairs, a separator and a query key; predict the query's value",
    kind="classification",
    metric="accuracy",
    source="associative recall (e.g. Ba et al. 2016; Dao et al. 2022, H3), balanced so single positions are "
           "uninformative",
    seed_draws="every sequence of every split, test included (generated from it)",
)
class RecallTask(Task):
    """Options (``None`` = from ``preset``): ``num_pairs``, ``num_keys`` (>= ``num_pairs``), ``num_values``
    (divides ``num_pairs``), ``train_size``, ``val_size``, ``test_size``. See the module docstring."""

    pad_id = 0
    data_source = None  # generated

    def __init__(self, preset: str = "quick", seed: int = 0, num_pairs: int | None = None,
                 num_keys: int | None = None, num_values: int | None = None, train_size: int | None = None,
                 val_size: int | None = None, test_size: int | None = None) -> None:
        cfg = self._config(preset, seed, num_pairs, num_keys, num_values, train_size, val_size, test_size)
        p, k, v = cfg["num_pairs"], cfg["num_keys"], cfg["num_values"]
        sizes = (cfg["train_size"], cfg["val_size"], cfg["test_size"])
        total, copies = sum(sizes), p // v
        self.preset, self.seed = preset, seed
        self.num_pairs, self.num_keys, self.num_values = p, k, v
        self.num_classes = v
        self.vocab_size = k + v + 2
        self.sep_id = k + v + 1
        self.max_len = 2 * p + 2

        rng = random.Random(seed)
        keys_range = range(k)
        value_pool = list(range(v)) * copies
        seen: set[tuple[int, ...]] = set()
        rows: list[list[int]] = []
        labels: list[int] = []
        while len(rows) < total:
            keys = rng.sample(keys_range, p)
            values = value_pool[:]
            rng.shuffle(values)
            q = rng.randrange(p)
            seq = []
            for key, value in zip(keys, values):
                seq += (1 + key, 1 + k + value)
            seq += (self.sep_id, 1 + keys[q])
            t = tuple(seq)
            if t in seen:
                continue
            seen.add(t)
            rows.append(seq)
            labels.append(values[q])

        self.splits = {}
        start = 0
        for name, size in zip(("train", "val", "test"), sizes):
            ids, lengths = pad_sequences(rows[start:start + size], self.pad_id)
            self.splits[name] = Split(labels=torch.tensor(labels[start:start + size], dtype=torch.long),
                                      ids=ids, lengths=lengths)
            start += size

    @classmethod
    def _config(cls, preset: str, seed: int, num_pairs: int | None, num_keys: int | None, num_values: int | None,
                train_size: int | None, val_size: int | None, test_size: int | None) -> dict[str, int]:
        """The options with the preset's defaults filled in, checked."""
        if preset not in PRESETS:
            cls._fail(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        given = dict(num_pairs=num_pairs, num_keys=num_keys, num_values=num_values, train_size=train_size,
                     val_size=val_size, test_size=test_size)
        cfg = {k: (PRESETS[preset][k] if v is None else v) for k, v in given.items()}
        for name, value in (("seed", seed), *cfg.items()):
            if isinstance(value, bool) or not isinstance(value, int):
                cls._fail(f"{name} must be an int, got {value!r}")
        for name, value in cfg.items():
            if value < 1:
                cls._fail(f"{name} must be >= 1, got {value}")
        p, k, v = cfg["num_pairs"], cfg["num_keys"], cfg["num_values"]
        if p < 2:
            cls._fail(f"num_pairs must be >= 2 (with one pair the query gives the answer away), got {p}")
        if k < p:
            cls._fail(f"num_keys ({k}) must be >= num_pairs ({p}): keys are distinct within a sequence")
        if v < 2 or p % v:
            cls._fail(f"num_values ({v}) must be >= 2 and divide num_pairs ({p}): every value occurs "
                      f"num_pairs / num_values times, so that no single position predicts the label")
        total = cfg["train_size"] + cfg["val_size"] + cfg["test_size"]
        distinct = math.perm(k, p) * (math.factorial(p) // math.factorial(p // v) ** v) * p
        if total > distinct // 2:
            cls._fail(f"{total} examples asked for, but only {distinct} distinct sequences exist with "
                      f"num_pairs={p}, num_keys={k}, num_values={v}; ask for at most half of them")
        return cfg

    @classmethod
    def stated_shape(cls, preset: str = "quick", seed: int = 0, num_pairs: int | None = None,
                     num_keys: int | None = None, num_values: int | None = None, train_size: int | None = None,
                     val_size: int | None = None, test_size: int | None = None) -> TaskShape:
        """The shape from the options alone (see :class:`~tokenmix.tasks.base.Task`)."""
        cfg = cls._config(preset, seed, num_pairs, num_keys, num_values, train_size, val_size, test_size)
        p, k, v = cfg["num_pairs"], cfg["num_keys"], cfg["num_values"]
        return TaskShape({s: cfg[f"{s}_size"] for s in ("train", "val", "test")}, num_classes=v, vocab_size=k + v + 2,
                         max_len=2 * p + 2, pad_id=cls.pad_id)
