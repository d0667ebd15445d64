"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology", §3 and Appendix E; Arora et al. 2024, Based).

A sequence of ``seq_len`` tokens starts with ``P = num_pairs`` key-value pairs ``k_1 v_1 ... k_P v_P``; every
key is then asked once more, each at its own position in the rest of the sequence, and the model must give
the key's value **at the query's own position** (a causal model: it has seen the pairs, not what follows).
Between the queries stand random filler tokens. As in Zoology's generator:

* keys are ``P`` distinct tokens of the lower half of the vocabulary, values ``P`` distinct tokens of the
  upper half, each uniform and independent of the other;
* query ``j`` (of key ``k_{pi(j)}``) sits at position ``2 P + 2 g_j``: the gaps ``g`` are ``P`` distinct slots of
  the ``(seq_len - 2 P) / 2`` after the pairs, drawn without replacement with ``p(g) ∝ (g + 1)^(a - 1)``
  (``a = gap_power``; Zoology's 0.01 puts most queries soon after the pairs, ``1.0`` is uniform); slot ``i``
  gets key ``i``, so the order in which keys are asked follows the drawn gaps;
* every other position holds a token uniform over the whole vocabulary but the padding id (Zoology's
  ``random_non_queries``): fillers may repeat a key or a value, but carry no target;
* targets: the value at each query position, :data:`~tokenmix.tasks.batches.IGNORE_INDEX` everywhere else. The
  loss and the accuracy count the query positions only.

**A model that mixes nothing across positions is at chance, 1 / V** (``V = vocab_size - vocab_size // 2``
values): at a query it sees the query's key and position, and the key's value is uniform over the values
whatever the key, its position and its gap (the values are drawn independently of both). The audit
(``tokenmix data audit mqar``) checks it on held-out sequences. One step up, a model that reads the context
but never matches a key to its pair -- it copies *some* value of the context, say the first -- is right with
probability ``1 / P``: that, not ``1 / V``, is the floor a mechanism that mixes tokens must beat to show
recall, and the audit reports it beside the rule that does the task (match the key, read its neighbour).

Token ids: ``0`` = padding (never used: every sequence is ``seq_len`` long), keys ``1 .. vocab_size // 2 - 1``,
values ``vocab_size // 2 .. vocab_size - 1`` (Zoology's halves). Each split is drawn from its own generator
(the task's ``seed`` and the split); no sequence occurs twice, within a split or across splits.
"""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor

from .base import Task, TaskShape
from .batches import IGNORE_INDEX, LMBatch, Split
from .registry import register_task

__all__ = ["MQARTask", "PRESETS", "mqar_sequences", "gap_probabilities"]

SPLITS = ("train", "val", "test")
PRESETS = {
    # The main job's: 64 tokens, 8 pairs, 128 values (chance 1/128, the copy-a-value floor 1/8); on 2 CPU cores a
    # 2-layer model of width 64 trains in a minute or two and softmax attention solves it.
    "quick": dict(seq_len=64, num_pairs=8, vocab_size=256, gap_power=0.01, train_size=20_000, val_size=500,
                  test_size=1_000),
    # Zoology's Figure 2 setting at its shortest: 64 tokens, 4 pairs, vocabulary 8,192, 100,000 training and 3,000
    # test sequences (seq_len and num_pairs are options: 128/8, 256/16, 512/64 are the paper's others).
    "paper": dict(seq_len=64, num_pairs=4, vocab_size=8_192, gap_power=0.01, train_size=100_000, val_size=3_000,
                  test_size=3_000),
}
_CHUNK = 512  # sequences drawn at once (bounds the (chunk, vocab_size) scratch of the key draws)


def gap_probabilities(slots: int, gap_power: float) -> Tensor:
    """Zoology's query-gap law over ``slots`` slots: ``p(g) ∝ a (g + 1)^(a - 1)``, g = 0 .. slots - 1 (float64)."""
    p = gap_power * torch.arange(1, slots + 1, dtype=torch.float64) ** (gap_power - 1)
    return p / p.sum()


def _distinct(count: int, choose: int, rows: int, g: torch.Generator, weights: Tensor | None = None) -> Tensor:
    """``rows`` draws of ``choose`` distinct indices of ``range(count)`` without replacement, uniform or by
    ``weights``: (rows, choose) int64, in the order drawn. Uniform draws take the ``choose`` largest of ``count``
    independent uniforms (their ranks are a uniformly random permutation), four times faster than
    ``torch.multinomial`` at Zoology's vocabulary."""
    if weights is None:
        return torch.rand(rows, count, generator=g).topk(choose, dim=1).indices
    return torch.multinomial(weights.expand(rows, count), choose, replacement=False, generator=g)


def mqar_sequences(count: int, seq_len: int, num_pairs: int, vocab_size: int, gap_power: float,
                   g: torch.Generator) -> tuple[Tensor, Tensor]:
    """``count`` MQAR sequences (module docstring): ids (count, seq_len) and targets (same shape, the value at
    each query position, ``IGNORE_INDEX`` elsewhere), drawn from ``g``. Sequences may repeat; the task drops
    repeats."""
    half, p = vocab_size // 2, num_pairs
    context = 2 * p
    slots = (seq_len - context) // 2
    law = gap_probabilities(slots, gap_power)
    rows = torch.arange(count)[:, None]
    keys = 1 + _distinct(half - 1, p, count, g)
    values = half + _distinct(vocab_size - half, p, count, g)
    gaps = _distinct(slots, p, count, g, law)
    ids = torch.randint(1, vocab_size, (count, seq_len), generator=g)
    ids[:, 0:context:2], ids[:, 1:context:2] = keys, values
    where = context + 2 * gaps
    ids[rows, where] = keys
    targets = torch.full((count, seq_len), IGNORE_INDEX, dtype=torch.long)
    targets[rows, where] = values
    return ids, targets


def _split_generator(seed: int, split: str) -> torch.Generator:
    """A generator of its own per split (so that resizing one split leaves the others' draws as they were)."""
    return torch.Generator().manual_seed(seed * len(SPLITS) + SPLITS.index(split))


@register_task(
    "mqar",
    description="multi-query associative recall: key-value pairs, then every key asked again among filler "
                "tokens; predict each query's value at its position (causal)",
    kind="language_model",
    metric="accuracy",
    source="Arora et al. (2023), Zoology (multi-query associative recall, their generator's conventions)",
    seed_draws="every sequence of every split, test included (generated from it)",
)
class MQARTask(Task):
    """Options (``None`` = from ``preset``): ``seq_len`` (even), ``num_pairs`` (``4 num_pairs <= seq_len``, as
    Zoology asks), ``vocab_size`` (keys the lower half, values the upper; Zoology also asks it to exceed
    ``seq_len``, which nothing in the task needs), ``gap_power`` (the
    query-gap law's ``a`` in (0, 1]), ``train_size``, ``val_size``, ``test_size``. See the module docstring.

    Batches are :class:`~tokenmix.tasks.batches.LMBatch` ``(ids, targets)`` with the targets at the query positions
    only; the model is a ``CausalLM`` (every mixer runs causally) and the metric is the accuracy over queries."""

    pad_id = 0
    data_source = None  # generated
    # Zoology's models: no embedding or residual dropout, and token embeddings as drawn (N(0, 1)), not scaled by
    # sqrt(dim): scaled, the embeddings outweigh the mixers' outputs in the residual stream and softmax attention
    # stayed at the copy-a-value floor (0.11-0.13) after 1,000-1,500 steps, where unscaled it reached 0.999
    model_defaults = {"dropout": 0.0, "scale_embedding": False}

    def __init__(self, preset: str = "quick", seed: int = 0, seq_len: int | None = None,
                 num_pairs: int | None = None, vocab_size: int | None = None, gap_power: float | None = None,
                 train_size: int | None = None, val_size: int | None = None, test_size: int | None = None) -> None:
        cfg = self._config(preset, seed, seq_len, num_pairs, vocab_size, gap_power, train_size, val_size, test_size)
        self.preset, self.seed = preset, seed
        self.seq_len, self.num_pairs, self.vocab_size = cfg["seq_len"], cfg["num_pairs"], cfg["vocab_size"]
        self.gap_power = float(cfg["gap_power"])
        self.num_values = self.vocab_size - self.vocab_size // 2
        self.max_len = self.seq_len
        seen: set[bytes] = set()
        self.splits = {name: self._draw(name, cfg[f"{name}_size"], seen) for name in SPLITS}

    def _draw(self, split: str, size: int, seen: set[bytes]) -> Split:
        """``size`` sequences of their own (none in ``seen``, which gains them)."""
        g = _split_generator(self.seed, split)
        ids, targets, kept = [], [], 0
        while kept < size:
            chunk_ids, chunk_targets = mqar_sequences(min(_CHUNK, 2 * (size - kept)), self.seq_len, self.num_pairs,
                                                      self.vocab_size, self.gap_power, g)
            fresh = []
            for row, seq in enumerate(chunk_ids):
                digest = hashlib.blake2b(seq.numpy().tobytes(), digest_size=16).digest()
                if digest not in seen and kept + len(fresh) < size:
                    seen.add(digest)
                    fresh.append(row)
            ids.append(chunk_ids[fresh])
            targets.append(chunk_targets[fresh])
            kept += len(fresh)
        ids_t = torch.cat(ids)
        return Split(labels=torch.cat(targets), ids=ids_t, lengths=torch.full((size,), self.seq_len))

    def reference_levels(self) -> dict[str, float]:
        """Chance (what a model that mixes nothing gets) and the copy-a-value floor (module docstring)."""
        return {"chance, mixing nothing (1/V)": 1 / self.num_values,
                "copying one pair's value without matching keys (1/P)": 1 / self.num_pairs}

    def _batch(self, data: Split, index: Tensor) -> LMBatch:
        return LMBatch(data.ids[index], data.labels[index])

    @classmethod
    def _config(cls, preset: str, seed: int, seq_len: int | None, num_pairs: int | None, vocab_size: int | None,
                gap_power: float | None, train_size: int | None, val_size: int | None,
                test_size: int | None) -> dict[str, int | float]:
        """The options with the preset's defaults filled in, checked."""
        if preset not in PRESETS:
            cls._fail(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        given = dict(seq_len=seq_len, num_pairs=num_pairs, vocab_size=vocab_size, gap_power=gap_power,
                     train_size=train_size, val_size=val_size, test_size=test_size)
        cfg = {k: (PRESETS[preset][k] if v is None else v) for k, v in given.items()}
        for name, value in (("seed", seed), *((k, v) for k, v in cfg.items() if k != "gap_power")):
            if isinstance(value, bool) or not isinstance(value, int):
                cls._fail(f"{name} must be an int, got {value!r}")
            if name != "seed" and value < 1:
                cls._fail(f"{name} must be >= 1, got {value}")
        a = cfg["gap_power"]
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 < a <= 1:
            cls._fail(f"gap_power must be a number in (0, 1] (Zoology's power law; 1 = uniform gaps), got {a!r}")
        n, p, vocab = cfg["seq_len"], cfg["num_pairs"], cfg["vocab_size"]
        if n % 2:
            cls._fail(f"seq_len must be even (queries sit on every other slot after the pairs), got {n}")
        if p < 2 or 4 * p > n:
            cls._fail(f"num_pairs must be >= 2 and at most seq_len / 4 (= {n // 4}: the pairs, then room for every "
                      f"query with a filler after it), got {p}")
        if vocab // 2 - 1 < p:
            cls._fail(f"vocab_size must hold num_pairs ({p}) distinct keys in its lower half (vocab_size >= "
                      f"{2 * p + 2}), got {vocab}")
        return cfg

    @classmethod
    def stated_shape(cls, preset: str = "quick", seed: int = 0, seq_len: int | None = None,
                     num_pairs: int | None = None, vocab_size: int | None = None, gap_power: float | None = None,
                     train_size: int | None = None, val_size: int | None = None,
                     test_size: int | None = None) -> TaskShape:
        """The shape from the options alone (see :class:`~tokenmix.tasks.base.Task`)."""
        cfg = cls._config(preset, seed, seq_len, num_pairs, vocab_size, gap_power, train_size, val_size, test_size)
        return TaskShape({s: cfg[f"{s}_size"] for s in SPLITS}, vocab_size=cfg["vocab_size"], max_len=cfg["seq_len"],
                         pad_id=cls.pad_id, model_defaults=dict(cls.model_defaults))
