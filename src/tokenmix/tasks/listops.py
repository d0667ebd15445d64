"""ListOps (Nangia & Bowman 2018) as generated for the Long Range Arena (Tay et al. 2021).

An example is a nested list expression such as ``[MAX 4 3 [MIN 2 3 ] 1 0 [MED 1 5 8 9 2 ] ]`` and its
label is the expression's value, a digit (10 classes). The generator follows LRA's
``lra_benchmarks/data/listops.py``:

* operators ``MIN``, ``MAX``, ``MED`` (``int(np.median(args))``: the lower-middle mean, floored, for an
  even number of arguments) and ``SM`` (sum modulo 10); values are the digits 0-9;
* ``generate_tree(depth=1)``: below ``max_depth`` a node is a leaf (a uniform random digit) with
  probability ``leaf_prob`` (LRA: 0.75, i.e. an operator when ``random() <= VALUE_P = 0.25``), otherwise an
  operator (uniform among the four) with ``randint(2, max_args)`` children, each a tree one level
  deeper; at ``depth == max_depth`` it is always a leaf. The root has depth 1, so a root-to-leaf path has
  at most ``max_depth`` nodes;
* the length of a tree counts 2 per operator (its ``[OP`` token and its closing ``]``) and 1 per leaf;
  this is exactly the number of tokens of an example here (with ``close_brackets=True``);
* trees whose length lies in ``[min_length, max_length]`` (both inclusive) are kept; LRA keeps
  ``500 < length < 2000``, so the "paper" preset is ``min_length=501, max_length=1999``;
* duplicates are dropped: no token sequence occurs twice in a split or in two splits (LRA de-duplicates
  the trees with a Python set and slices train/val/test from it). The first ``train_size`` distinct
  accepted sequences form the training split, the next ``val_size`` the validation split, the next
  ``test_size`` the test split.

Generation draws from ``random.Random(seed)`` only, so a seed fixes the data set. It is rejection
sampling, as LRA's, but a tree is abandoned as soon as the tokens emitted so far plus those that must
still follow (the closing brackets of the open operators and at least one token per child not yet
generated) exceed ``max_length``; this leaves the distribution of the accepted trees unchanged.

**Token vocabulary** (``vocab_size = 16``, :data:`VOCAB`): ``0`` = padding, ``1 + d`` = the digit ``d``
(ids 1-10), ``11`` = ``[MIN``, ``12`` = ``[MAX``, ``13`` = ``[MED``, ``14`` = ``[SM``, ``15`` = ``]`` (the close of
the innermost open operator). The opening bracket is part of the operator token, and LRA's extra
parentheses (its ``to_string`` wraps every binary node of its tuple representation in ``( ... )``) are not
emitted, so a token sequence is the expression in prefix form with explicit closes and parses back
unambiguously.

Note on LRA's own tokenisation: LRA's input pipeline encodes the text with
``tfds.deprecated.text.TokenTextEncoder`` and a default (``alphanum_only``) ``Tokenizer``, which drops every
non-alphanumeric character -- the parentheses, the ``[`` of the operators, and the closing ``]`` as well --
so its model sees only ``MIN MAX MED SM`` and digits, and the nesting is ambiguous. ``close_brackets=False``
reproduces that (the ``]`` tokens are left out of the sequences; the vocabulary and the length filter, on
the tree length as in LRA, are unchanged). The default keeps ``]``, as Nangia & Bowman and later LRA
re-implementations (e.g. the S4 code base) do.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from ..validate import is_positive_int
from .base import Task, TaskShape
from .batches import Split, pad_sequences
from .registry import register_task

__all__ = ["ListOpsTask", "VOCAB", "PAD", "DIGIT0", "MIN", "MAX", "MED", "SM", "CLOSE", "OPERATORS",
           "evaluate_operator"]

PAD = 0
DIGIT0 = 1  # digit d has id DIGIT0 + d
MIN, MAX, MED, SM = 11, 12, 13, 14
CLOSE = 15
OPERATORS = (MIN, MAX, MED, SM)
VOCAB = ("<pad>", *(str(d) for d in range(10)), "[MIN", "[MAX", "[MED", "[SM", "]")

PRESETS = {
    # Runs in seconds on 2 CPU cores.
    "quick": dict(min_length=20, max_length=100, train_size=2_000, val_size=500, test_size=500),
    # LRA ListOps: 500 < length < 2000, 96,000 / 2,000 / 2,000 examples.
    "paper": dict(min_length=501, max_length=1_999, train_size=96_000, val_size=2_000, test_size=2_000),
}


def evaluate_operator(op: int, args: list[int]) -> int:
    """The value of operator token ``op`` applied to the digits ``args`` (LRA's ``to_value``)."""
    if op == MIN:
        return min(args)
    if op == MAX:
        return max(args)
    if op == MED:  # int(np.median(args)) for non-negative ints
        s = sorted(args)
        n = len(s)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2
    if op == SM:
        return sum(args) % 10
    raise ValueError(f"listops: not an operator token: {op}")


class _TooLong(Exception):
    pass


class _Generator:
    """Draws LRA trees as token lists, abandoning one as soon as it cannot fit in ``max_length``."""

    def __init__(self, rng: random.Random, max_depth: int, max_args: int, leaf_prob: float, max_length: int) -> None:
        self.rng, self.max_depth, self.max_args = rng, max_depth, max_args
        self.leaf_prob, self.max_length = leaf_prob, max_length

    def draw(self) -> tuple[list[int], int] | None:
        """(tokens with closes, value) of one tree, or None if it grew longer than ``max_length``."""
        self.out: list[int] = []
        try:
            value = self._node(1, 0)
        except _TooLong:
            return None
        return self.out, value

    def _node(self, depth: int, reserve: int) -> int:
        # ``reserve``: tokens that must follow this subtree (ancestors' closes, >= 1 per pending sibling).
        rng, out = self.rng, self.out
        if depth >= self.max_depth or rng.random() < self.leaf_prob:
            digit = rng.randrange(10)
            out.append(DIGIT0 + digit)
            if len(out) + reserve > self.max_length:
                raise _TooLong
            return digit
        n = rng.randint(2, self.max_args)
        op = OPERATORS[rng.randrange(4)]
        out.append(op)
        # The operator, its close and one token per child at least.
        if len(out) + n + 1 + reserve > self.max_length:
            raise _TooLong
        args = [self._node(depth + 1, reserve + n - i) for i in range(n)]  # n - i = own close + later kids
        out.append(CLOSE)
        return evaluate_operator(op, args)


@register_task(
    "listops",
    description="LRA ListOps: value (0-9) of a nested MIN/MAX/MED/SM expression over digits, "
                "tokens: pad, digits, 4 operators, ']'",
    kind="classification",
    metric="accuracy",
    source="Nangia & Bowman (2018); Tay et al. (2021) Long Range Arena, lra_benchmarks/data/listops.py",
    seed_draws="every example of every split, test included (generated from it)",
)
class ListOpsTask(Task):
    """Generated ListOps. Options (``None`` = from ``preset``): ``max_depth``, ``max_args``, ``min_length``,
    ``max_length`` (inclusive bounds on the tree length), ``train_size``, ``val_size``, ``test_size``,
    ``leaf_prob``, ``close_brackets``. See the module docstring for the generator and the vocabulary."""

    num_classes = 10
    vocab_size = len(VOCAB)
    pad_id = PAD
    vocab = VOCAB
    data_source = None  # generated

    def __init__(self, preset: str = "quick", seed: int = 0, max_depth: int = 10, max_args: int = 10,
                 min_length: int | None = None, max_length: int | None = None, train_size: int | None = None,
                 val_size: int | None = None, test_size: int | None = None, leaf_prob: float = 0.75,
                 close_brackets: bool = True, max_attempts: int | None = None) -> None:
        cfg = self._config(preset, seed, max_depth, max_args, min_length, max_length, train_size, val_size, test_size,
                           leaf_prob, close_brackets, max_attempts)
        sizes = (cfg["train_size"], cfg["val_size"], cfg["test_size"])
        total, max_attempts = sum(sizes), cfg["max_attempts"]
        self.preset, self.seed = preset, seed
        self.max_depth, self.max_args, self.leaf_prob = max_depth, max_args, float(leaf_prob)
        self.min_length, self.max_length = cfg["min_length"], cfg["max_length"]
        self.close_brackets = close_brackets
        self.max_len = self.max_length

        generator = _Generator(random.Random(seed), max_depth, max_args, self.leaf_prob, self.max_length)
        lo = self.min_length
        seen: set[bytes] = set()
        rows: list[np.ndarray] = []
        labels: list[int] = []
        attempts = 0
        while len(rows) < total:
            if attempts >= max_attempts:
                self._fail(f"only {len(rows)} of {total} distinct trees with length in [{lo}, {self.max_length}] "
                           f"after {attempts} draws (max_depth={max_depth}, max_args={max_args}, "
                           f"leaf_prob={leaf_prob}); widen the length range or ask for fewer examples")
            attempts += 1
            drawn = generator.draw()
            if drawn is None or len(drawn[0]) < lo:
                continue
            tokens, value = drawn
            key = bytes(tokens) if close_brackets else bytes(t for t in tokens if t != CLOSE)
            if key in seen:
                continue
            seen.add(key)
            rows.append(np.frombuffer(key, dtype=np.uint8).copy())
            labels.append(value)
        self.attempts = attempts

        self.splits = {}
        start = 0
        for name, size in zip(("train", "val", "test"), sizes):
            ids, lengths = pad_sequences(rows[start:start + size], PAD)
            self.splits[name] = Split(labels=torch.tensor(labels[start:start + size], dtype=torch.long),
                                      ids=ids, lengths=lengths)
            start += size

    @classmethod
    def _config(cls, preset: str, seed: int, max_depth: int, max_args: int, min_length: int | None,
                max_length: int | None, train_size: int | None, val_size: int | None, test_size: int | None,
                leaf_prob: float, close_brackets: bool, max_attempts: int | None) -> dict[str, int]:
        """The length bounds, split sizes and ``max_attempts`` with the preset's defaults filled in, after
        checking every option."""
        if preset not in PRESETS:
            cls._fail(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        given = dict(min_length=min_length, max_length=max_length, train_size=train_size, val_size=val_size,
                     test_size=test_size)
        cfg = {k: (PRESETS[preset][k] if v is None else v) for k, v in given.items()}
        for name, value in (("seed", seed), ("max_depth", max_depth), ("max_args", max_args), *cfg.items()):
            if isinstance(value, bool) or not isinstance(value, int):
                cls._fail(f"{name} must be an int, got {value!r}")
        if max_depth < 1:
            cls._fail(f"max_depth must be >= 1, got {max_depth}")
        if max_args < 2:
            cls._fail(f"max_args must be >= 2, got {max_args}")
        if not 1 <= cfg["min_length"] <= cfg["max_length"]:
            cls._fail(f"need 1 <= min_length <= max_length, got {cfg['min_length']} and {cfg['max_length']}")
        for name in ("train_size", "val_size", "test_size"):
            if cfg[name] < 1:
                cls._fail(f"{name} must be >= 1, got {cfg[name]}")
        if isinstance(leaf_prob, bool) or not isinstance(leaf_prob, (int, float)) or not 0.0 <= leaf_prob <= 1.0:
            cls._fail(f"leaf_prob must be a number in [0, 1], got {leaf_prob!r}")
        if not isinstance(close_brackets, bool):
            cls._fail(f"close_brackets must be a bool, got {close_brackets!r}")
        if max_attempts is None:
            max_attempts = 2_000 * (cfg["train_size"] + cfg["val_size"] + cfg["test_size"]) + 1_000_000
        elif not is_positive_int(max_attempts):
            cls._fail(f"max_attempts must be a positive int or None, got {max_attempts!r}")
        return {**cfg, "max_attempts": max_attempts}

    @classmethod
    def stated_shape(cls, preset: str = "quick", seed: int = 0, max_depth: int = 10, max_args: int = 10,
                     min_length: int | None = None, max_length: int | None = None, train_size: int | None = None,
                     val_size: int | None = None, test_size: int | None = None, leaf_prob: float = 0.75,
                     close_brackets: bool = True, max_attempts: int | None = None) -> TaskShape:
        """The shape from the options alone (see :class:`~tokenmix.tasks.base.Task`); that the generator finds
        enough distinct trees shows only when the task is built."""
        cfg = cls._config(preset, seed, max_depth, max_args, min_length, max_length, train_size, val_size, test_size,
                          leaf_prob, close_brackets, max_attempts)
        return TaskShape({s: cfg[f"{s}_size"] for s in ("train", "val", "test")}, num_classes=cls.num_classes,
                         vocab_size=cls.vocab_size, max_len=cfg["max_length"], pad_id=cls.pad_id)

    @staticmethod
    def decode(ids) -> str:
        """Token ids (padding dropped) back to the expression text, e.g. ``"[MAX 2 9 ]"``."""
        return " ".join(VOCAB[int(t)] for t in ids if int(t) != PAD)
