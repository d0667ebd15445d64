"""Byte-level text classification at the Long Range Arena's lengths (Tay et al., 2021, "Text": IMDb reviews as
bytes, truncated or padded to 4,000), on text that is available offline: Jane Austen's novels.

A document is a passage of the novels' UTF-8 bytes whose length is drawn uniformly from ``[min_bytes,
max_bytes]`` (LRA's reviews run from about 1,000 to past 4,000 bytes), right-padded to ``max_bytes``; its label
is binary, as IMDb's: whether it comes from one of the three novels published first (*Sense and Sensibility*,
*Pride and Prejudice*, *Mansfield Park*, 1811-1814) or from the three published last (*Emma*, *Northanger
Abbey*, *Persuasion*, 1815-1817). Each class draws equally from its three novels, and the document length is
drawn independently of the class, so neither length nor padding tells the label.

**Retired as a stand-in** (no claim may be judged on it; it still trains): which novels a passage comes from is
largely vocabulary, which local byte statistics carry. A logistic regression on hashed byte 4-grams gets 0.91
(quick) / 0.93 (paper) of held-out documents right (``tokenmix data audit lra_text``), where LRA's softmax
Transformer scores about 0.64 on IMDb: a mechanism that only counts n-grams does well here.

Splits are by position inside each novel (the first 80 % of its bytes train, the next 10 % validation, the last
10 % test, as the ``austen`` task), so no text is shared between them; a document lies wholly inside its split's
region. Tokens: byte + 1 (1..256), padding 0 (``vocab_size = 257``). Presets: ``quick`` (1,000-2,000 bytes,
2,000 / 400 / 400 documents) and ``paper`` (LRA's 1,000-4,000 bytes, 8,000 / 1,000 / 1,000, against IMDb's
25,000 / 25,000 train / test: the size two CPU cores can train on).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..data.austen import AUSTEN_NOVELS, AUSTEN_SOURCE, load_austen
from ..validate import is_positive_int
from .austen import FRACTIONS
from .base import Task, TaskShape
from .batches import Split
from .registry import register_task

__all__ = ["LRATextTask", "ByteDocuments", "PRESETS", "CLASSES"]

PRESETS = {
    "quick": {"min_bytes": 1000, "max_bytes": 2000, "train_size": 2000, "val_size": 400, "test_size": 400},
    "paper": {"min_bytes": 1000, "max_bytes": 4000, "train_size": 8000, "val_size": 1000, "test_size": 1000},
}
CLASSES = ("published 1811-1814", "published 1815-1817")  # the first three novels, the last three
PAD_ID = 0


class ByteDocuments:
    """The options, checks and stated shape shared by the LRA byte-document tasks (``lra_text``,
    ``lra_retrieval``): ``preset`` (from the class's ``PRESETS``), ``seed``, ``min_bytes`` and ``max_bytes``
    (document lengths, uniform; padded to ``max_bytes``), even split sizes, ``source``."""

    PRESETS: dict[str, dict[str, int]]

    @classmethod
    def _config(cls, preset: str, seed: int, min_bytes: int | None, max_bytes: int | None,
                train_size: int | None, val_size: int | None, test_size: int | None) -> dict[str, int]:
        if preset not in cls.PRESETS:
            cls._fail(f"unknown preset {preset!r}; presets: {', '.join(cls.PRESETS)}")
        given = dict(min_bytes=min_bytes, max_bytes=max_bytes, train_size=train_size, val_size=val_size,
                     test_size=test_size)
        cfg = {k: (cls.PRESETS[preset][k] if v is None else v) for k, v in given.items()}
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            cls._fail(f"seed must be an int >= 0, got {seed!r}")
        for name, value in cfg.items():
            if not is_positive_int(value):
                cls._fail(f"{name} must be a positive int, got {value!r}")
        if cfg["min_bytes"] > cfg["max_bytes"]:
            cls._fail(f"min_bytes ({cfg['min_bytes']}) must be <= max_bytes ({cfg['max_bytes']})")
        for name in ("train_size", "val_size", "test_size"):
            if cfg[name] % 2:
                cls._fail(f"{name} must be even (the two classes balanced), got {cfg[name]}")
        return cfg

    @classmethod
    def stated_shape(cls, preset: str = "quick", seed: int = 0, min_bytes: int | None = None,
                     max_bytes: int | None = None, train_size: int | None = None, val_size: int | None = None,
                     test_size: int | None = None, source: str | Path | None = None) -> TaskShape:
        """The shape from the options alone (see :class:`~tokenmix.tasks.base.Task`)."""
        cfg = cls._config(preset, seed, min_bytes, max_bytes, train_size, val_size, test_size)
        return TaskShape({s: cfg[f"{s}_size"] for s in ("train", "val", "test")}, num_classes=2, vocab_size=257,
                         max_len=cfg["max_bytes"], pad_id=PAD_ID)


@register_task("lra_text", description="LRA Text at its lengths: 1,000-4,000-byte Austen passages, first three "
                                       "novels published or last three (binary), byte tokens",
               kind="classification", metric="accuracy",
               source="Tay et al. (2021) Long Range Arena (Text); Debian r-cran-janeaustenr for the text",
               seed_draws="the documents of every split, test included (each split's region of the novels is fixed)",
               retired="as a stand-in for LRA Text: a logistic regression on hashed byte 4-grams scores 0.91 (quick) / "
                       "0.93 (paper) on held-out documents (tokenmix data audit lra_text) where LRA's softmax "
                       "Transformer scores about 0.64 on IMDb, so the task measures local byte statistics, not long "
                       "context.")
class LRATextTask(ByteDocuments, Task):
    """Options (``None`` = from ``preset``): ``min_bytes``, ``max_bytes`` (document lengths, uniform; padded to
    ``max_bytes``), ``train_size``, ``val_size``, ``test_size``, ``source`` (as the ``austen`` task). See the
    module docstring."""

    PRESETS = PRESETS
    data_source = AUSTEN_SOURCE
    num_classes = 2
    vocab_size = 257
    pad_id = PAD_ID

    def __init__(self, preset: str = "quick", seed: int = 0, min_bytes: int | None = None,
                 max_bytes: int | None = None, train_size: int | None = None, val_size: int | None = None,
                 test_size: int | None = None, source: str | Path | None = None) -> None:
        cfg = self._config(preset, seed, min_bytes, max_bytes, train_size, val_size, test_size)
        novels = load_austen(source)
        if set(novels) != set(AUSTEN_NOVELS.values()):
            self._fail(f"needs the six novels by their titles {list(AUSTEN_NOVELS.values())} (the classes are the "
                       f"first three published and the last three), got {list(novels)}")
        self.titles = tuple(AUSTEN_NOVELS.values())  # publication order: the spans' novel index
        self.preset, self.seed, self.max_len = preset, seed, cfg["max_bytes"]
        streams = [np.frombuffer(novels[title].encode("utf-8"), dtype=np.uint8).astype(np.int64) + 1
                   for title in self.titles]
        self.splits, self.spans = {}, {}
        for index, split in enumerate(("train", "val", "test")):
            size = cfg[f"{split}_size"]
            rng = np.random.default_rng([seed, index])
            labels = np.repeat([0, 1], size // 2)
            novel = labels * 3 + np.tile(np.arange(size // 2) % 3, 2)  # each class from its three novels in turn
            lengths = rng.integers(cfg["min_bytes"], cfg["max_bytes"] + 1, size=size)
            ids = torch.full((size, self.max_len), PAD_ID, dtype=torch.long)
            spans = []
            for row, (k, n) in enumerate(zip(novel, lengths)):
                lo, hi = (int(len(streams[k]) * f) for f in FRACTIONS[split])
                if hi - lo < n:
                    self._fail(f"the {split} region of {self.titles[k]!r} holds {hi - lo} bytes, fewer than a "
                               f"document of {n}; use smaller max_bytes or longer texts")
                start = int(rng.integers(lo, hi - n + 1))
                ids[row, :n] = torch.from_numpy(streams[k][start:start + n])
                spans.append((int(k), start, start + int(n)))
            order = torch.from_numpy(rng.permutation(size))
            self.spans[split] = [spans[i] for i in order.tolist()]
            self.splits[split] = Split(labels=torch.from_numpy(labels)[order].long(), ids=ids[order],
                                       lengths=torch.from_numpy(lengths)[order].long())
