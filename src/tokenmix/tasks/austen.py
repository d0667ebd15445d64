"""Task "austen": which of Jane Austen's six novels a passage of ``length`` tokens comes from.

A long-sequence classification task in the spirit of the long-input benchmarks of Yamada et al. (2022) section
3.2.3 (IMDb, Reuters, WikiText-103 with inputs of thousands of tokens), built from text that ships with
Debian (:mod:`tokenmix.data.austen`).

Splits are by position inside each novel, so no text is shared between them: the first 80 % of each
novel's tokens is the train region, the next 10 % val, the last 10 % test. A passage is ``length``
consecutive tokens starting at a seeded uniformly random position of its split's region, and lies
wholly inside that region (passages of one split may overlap each other; passages of different splits
never do; at long lengths a small val/test region holds few disjoint passages, so its passages overlap
heavily -- :meth:`describe` reports ``<split>_disjoint_per_class``). Classes are balanced: each split
holds ``size // 6`` passages of every novel (the remainder goes one each to the first novels);
:meth:`describe` reports the counts. Labels are novel indices in
publication order (``self.classes``).

Units: ``"bytes"`` -- the UTF-8 bytes of the text, id = byte + 1 (1..256), pad 0; ``"words"`` -- lower-
cased words and punctuation marks, ids from a vocabulary of the ``vocab_size`` most frequent tokens of the
TRAIN regions only (pad 0, unknown 1, words from 2).

Presets: ``quick`` (length 256, 1200/240/240 passages, words vocabulary 5,000) and ``paper`` (length 4,096
as the long inputs of Yamada et al. (2022) section 3.2.3, 6000/600/600 passages, words vocabulary 20,000).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from ..validate import is_positive_int
from ..data.austen import AUSTEN_SOURCE, load_austen
from .base import Task, TaskShape
from .batches import Split
from .registry import register_task

__all__ = ["AustenTask", "DEFAULT_SOURCE_FACTS", "PRESETS", "FRACTIONS", "tokenize_words"]

PRESETS = {
    "quick": {"length": 256, "train_size": 1200, "val_size": 240, "test_size": 240, "vocab_size": 5000},
    "paper": {"length": 4096, "train_size": 6000, "val_size": 600, "test_size": 600, "vocab_size": 20000},
}
FRACTIONS = {"train": (0.0, 0.8), "val": (0.8, 0.9), "test": (0.9, 1.0)}
PAD_ID, UNK_ID = 0, 1
# The default source (the six novels of r-cran-janeaustenr) as this module splits and tokenizes it, so that
# the task can state its shape without the novels (``stated_shape``); tests/test_data_command.py checks these
# against the data where they are installed.
DEFAULT_SOURCE_FACTS = {
    "novels": 6,
    "train_word_types": 13_187,  # distinct "words" tokens in the six train regions
    "shortest_region": {"bytes": 43_341, "words": 9_242},  # the smallest split region of any novel
}
_WORD = re.compile(r"[a-z0-9]+(?:['\u2019][a-z]+)*|[^\sa-z0-9]")


def tokenize_words(text: str) -> list[str]:
    """Lower-cased words (with inner apostrophes) and single punctuation marks."""
    return _WORD.findall(text.lower())


def _regions(n: int) -> dict[str, tuple[int, int]]:
    return {split: (int(n * lo), int(n * hi)) for split, (lo, hi) in FRACTIONS.items()}


@register_task("austen", description="which of Jane Austen's six novels a passage of `length` bytes/words "
                                     "comes from; splits by position in each novel (80/10/10)",
               kind="classification", metric="accuracy",
               source="Debian r-cran-janeaustenr (Project Gutenberg texts), or a directory of .txt files",
               seed_draws="the passages of every split, test included (each split's region of the novels is fixed)")
class AustenTask(Task):
    data_source = AUSTEN_SOURCE

    def __init__(self, *, length: int | None = None, unit: str = "bytes", vocab_size: int | None = None,
                 train_size: int | None = None, val_size: int | None = None, test_size: int | None = None,
                 preset: str = "quick", seed: int = 0, source: str | Path | None = None) -> None:
        length, vocab_size, sizes = self._config(length, unit, vocab_size, train_size, val_size, test_size, preset,
                                                 seed)

        novels = load_austen(source)
        if len(novels) < 2:
            self._fail(f"need at least 2 novels to classify, got {len(novels)}")
        self.classes = tuple(novels)
        self.num_classes = len(self.classes)
        self.unit, self.length, self.preset, self.seed = unit, length, preset, seed

        # Token streams per novel, and each split's region [lo, hi) of token positions.
        if unit == "bytes":
            streams = [np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64) + 1
                       for text in novels.values()]
            self.vocab_size, self.words = 257, None
        else:
            words = [tokenize_words(text) for text in novels.values()]
            counts = Counter()
            for toks in words:
                counts.update(toks[slice(*_regions(len(toks))["train"])])
            self.words = [w for w, _ in counts.most_common(vocab_size)]
            index = {w: i + 2 for i, w in enumerate(self.words)}
            streams = [np.fromiter((index.get(w, UNK_ID) for w in toks), dtype=np.int64, count=len(toks))
                       for toks in words]
            self.vocab_size = len(self.words) + 2
        self.pad_id = PAD_ID
        self.max_len = length
        self.regions = {title: _regions(len(s)) for title, s in zip(self.classes, streams)}

        # Balanced, seeded sampling of passages inside each region.
        self.spans: dict[str, list[tuple[int, int, int]]] = {}  # split -> [(label, start, end)] per row
        self.splits = {}
        for split_index, (split, size) in enumerate(sizes.items()):
            rng = np.random.default_rng([seed, split_index])
            per_class = [size // self.num_classes + (k < size % self.num_classes) for k in range(self.num_classes)]
            labels, starts = [], []
            for k, (title, count) in enumerate(zip(self.classes, per_class)):
                if count == 0:
                    continue
                lo, hi = self.regions[title][split]
                if hi - lo < length:
                    self._fail(f"the {split} region of {title!r} holds {hi - lo} {unit}, fewer than "
                               f"length={length}; use a smaller length or longer texts")
                labels += [k] * count
                starts += rng.integers(lo, hi - length + 1, size=count).tolist()
            order = rng.permutation(len(labels))
            labels = [labels[i] for i in order]
            starts = [starts[i] for i in order]
            ids = torch.from_numpy(np.stack([streams[k][s:s + length] for k, s in zip(labels, starts)]))
            self.spans[split] = [(k, s, s + length) for k, s in zip(labels, starts)]
            self.splits[split] = Split(labels=torch.tensor(labels, dtype=torch.long), ids=ids,
                                       lengths=torch.full((len(labels),), length, dtype=torch.long))
        self._unk_rate = None
        if unit == "words":
            self._unk_rate = {split: round(float((s.ids == UNK_ID).float().mean()), 4)
                              for split, s in self.splits.items()}

    @classmethod
    def _config(cls, length: int | None, unit: str, vocab_size: int | None, train_size: int | None,
                val_size: int | None, test_size: int | None, preset: str,
                seed: int) -> tuple[int, int | None, dict[str, int]]:
        """(length, vocab_size (None for bytes), {split: size}) with the preset's defaults, options checked."""
        if preset not in PRESETS:
            cls._fail(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        if unit not in ("bytes", "words"):
            cls._fail(f"unit must be 'bytes' or 'words', got {unit!r}")
        p = PRESETS[preset]
        length = p["length"] if length is None else length
        sizes = {"train": train_size, "val": val_size, "test": test_size}
        sizes = {k: p[f"{k}_size"] if v is None else v for k, v in sizes.items()}
        for name, value in (("length", length), *((f"{k}_size", v) for k, v in sizes.items())):
            if not is_positive_int(value):
                cls._fail(f"{name} must be a positive int, got {value!r}")
        if unit == "bytes" and vocab_size is not None:
            cls._fail("vocab_size applies to unit='words' only (bytes use 256 ids)")
        if unit == "words":
            vocab_size = p["vocab_size"] if vocab_size is None else vocab_size
            if not is_positive_int(vocab_size):
                cls._fail(f"vocab_size must be a positive int, got {vocab_size!r}")
        if not isinstance(seed, int):
            cls._fail(f"seed must be an int, got {seed!r}")
        return length, vocab_size, sizes

    @classmethod
    def stated_shape(cls, *, length: int | None = None, unit: str = "bytes", vocab_size: int | None = None,
                     train_size: int | None = None, val_size: int | None = None, test_size: int | None = None,
                     preset: str = "quick", seed: int = 0, source: str | Path | None = None) -> TaskShape | None:
        """The shape from the options and what is known of the default source (:data:`DEFAULT_SOURCE_FACTS`);
        None for another ``source``, or a ``length`` longer than the shortest region (building fails then)."""
        length, vocab_size, sizes = cls._config(length, unit, vocab_size, train_size, val_size, test_size, preset,
                                                seed)
        facts = DEFAULT_SOURCE_FACTS
        if source is not None or length > facts["shortest_region"][unit]:
            return None
        vocab = 257 if unit == "bytes" else min(vocab_size, facts["train_word_types"]) + 2
        return TaskShape(sizes, num_classes=facts["novels"], vocab_size=vocab, max_len=length, pad_id=PAD_ID)

    def describe(self) -> dict:
        out = super().describe()
        out.update(unit=self.unit, length=self.length, vocab_size=self.vocab_size, classes=list(self.classes))
        for split, data in self.splits.items():
            out[f"{split}_per_class"] = torch.bincount(data.labels, minlength=self.num_classes).tolist()
            # passages of one split may overlap: how many disjoint ones the smallest region holds
            out[f"{split}_disjoint_per_class"] = min((r[split][1] - r[split][0]) // self.length
                                                     for r in self.regions.values())
        out["region_sizes"] = {title: {s: hi - lo for s, (lo, hi) in r.items()} for title, r in self.regions.items()}
        if self._unk_rate is not None:
            out["unk_rate"] = self._unk_rate
        return out
