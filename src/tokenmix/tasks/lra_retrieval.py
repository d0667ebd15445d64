"""Byte-level document matching at the Long Range Arena's lengths (Tay et al., 2021, "Retrieval": do two papers of
the ACL Anthology Network cite each other?), on text available offline: are two passages of Jane Austen's novels
from the same novel?

An example is a pair of passages of the novels' UTF-8 bytes, each of a length drawn uniformly from
``[min_bytes, max_bytes]`` (LRA: up to 4,000 bytes each) and right-padded to ``max_bytes``, side by side: ids
``(2 max_bytes,)``, the first document in the first half. Half the pairs of a split are two passages of one novel
(the novel uniform, the passages never overlapping), half are passages of two different novels (a uniform pair
of distinct novels); the label is 1 for the same novel. Both documents are read by one encoder and classified on
``[u, v, u * v, u - v]`` (:class:`~tokenmix.models.dual.DualEncoderClassifier`, which ``build_model`` builds for
this task, ``pair_input``). Splits are by position inside each novel (80 / 10 / 10 % of its bytes, as the
``austen`` task), so no text is shared between them. Tokens: byte + 1 (1..256), padding 0.

Presets: ``quick`` (500-1,000 bytes a document, 2,000 / 400 / 400 pairs) and ``paper`` (LRA's up to 4,000:
1,000-4,000 bytes, 8,000 / 1,000 / 1,000 pairs, against AAN's 147,086 / 18,090 / 17,437: the size two CPU cores
can train on).

**Retired as a stand-in** (no claim may be judged on it; it still trains): "same novel?" reduces to classifying
each passage by its novel, which local byte statistics do well. Answering "same" when a byte 4-gram classifier puts
both passages in one novel gets 0.82 (quick) / 0.95 (paper) of held-out pairs right (``tokenmix data audit
lra_retrieval``), where LRA's softmax Transformer scores about 0.58 on AAN.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..data.austen import AUSTEN_SOURCE, load_austen
from .austen import FRACTIONS
from .base import Task
from .batches import Split, TokenBatch
from .registry import register_task
from .lra_text import ByteDocuments

__all__ = ["LRARetrievalTask", "PRESETS"]

PRESETS = {
    "quick": {"min_bytes": 500, "max_bytes": 1000, "train_size": 2000, "val_size": 400, "test_size": 400},
    "paper": {"min_bytes": 1000, "max_bytes": 4000, "train_size": 8000, "val_size": 1000, "test_size": 1000},
}
PAD_ID = 0


@register_task("lra_retrieval", description="LRA Retrieval at its lengths: are two Austen passages (bytes) from "
                                            "the same novel? a two-tower classifier",
               kind="classification", metric="accuracy",
               source="Tay et al. (2021) Long Range Arena (Retrieval); Debian r-cran-janeaustenr for the text",
               seed_draws="the pairs of every split, test included (each split's region of the novels is fixed)",
               retired="as a stand-in for LRA Retrieval: classifying each passage by its novel from hashed byte "
                       "4-grams and answering 'same novel' when the two predictions agree scores 0.82 (quick) / 0.95 "
                       "(paper) on held-out pairs (tokenmix data audit lra_retrieval) where LRA's softmax Transformer "
                       "scores about 0.58, so the task measures local byte statistics, not matching two documents.")
class LRARetrievalTask(ByteDocuments, Task):
    """Options (``None`` = from ``preset``): ``min_bytes``, ``max_bytes`` (each document's length, uniform;
    padded to ``max_bytes``), ``train_size``, ``val_size``, ``test_size`` (even), ``source`` (as the ``austen``
    task). ``max_len`` is one document's ``max_bytes``; an example holds two. See the module docstring."""

    PRESETS = PRESETS
    data_source = AUSTEN_SOURCE
    num_classes = 2
    vocab_size = 257
    pad_id = PAD_ID
    pair_input = True

    def __init__(self, preset: str = "quick", seed: int = 0, min_bytes: int | None = None,
                 max_bytes: int | None = None, train_size: int | None = None, val_size: int | None = None,
                 test_size: int | None = None, source: str | Path | None = None) -> None:
        cfg = self._config(preset, seed, min_bytes, max_bytes, train_size, val_size, test_size)
        novels = load_austen(source)
        if len(novels) < 2:
            self._fail(f"needs at least two novels, got {len(novels)}")
        self.titles = tuple(novels)
        self.preset, self.seed, self.max_len = preset, seed, cfg["max_bytes"]
        streams = [np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64) + 1
                   for text in novels.values()]
        self.splits, self.spans = {}, {}
        for index, split in enumerate(("train", "val", "test")):
            rng = np.random.default_rng([seed, index])
            size = cfg[f"{split}_size"]
            labels = np.repeat([1, 0], size // 2)[rng.permutation(size)]
            ids = torch.full((size, 2 * self.max_len), PAD_ID, dtype=torch.long)
            spans = []
            for row, same in enumerate(labels):
                pair = [int(rng.integers(len(streams)))] * 2 if same else rng.choice(len(streams), 2, replace=False)
                documents = self._passages(rng, streams, [int(k) for k in pair], split, cfg)
                for half, (k, start, end) in enumerate(documents):
                    ids[row, half * self.max_len:half * self.max_len + end - start] = torch.from_numpy(
                        streams[k][start:end])
                spans.append(tuple(documents))
            self.spans[split] = spans
            self.splits[split] = Split(labels=torch.from_numpy(labels).long(), ids=ids,
                                       lengths=torch.full((size,), 2 * self.max_len, dtype=torch.long))

    def _passages(self, rng: np.random.Generator, streams: list[np.ndarray], novels: list[int], split: str,
                  cfg: dict[str, int]) -> list[tuple[int, int, int]]:
        """(novel, start, end) of two passages of ``novels`` inside ``split``'s regions; two of one novel never
        overlap."""
        while True:
            documents = []
            for k in novels:
                n = int(rng.integers(cfg["min_bytes"], cfg["max_bytes"] + 1))
                lo, hi = (int(len(streams[k]) * f) for f in FRACTIONS[split])
                if hi - lo < 2 * n:
                    self._fail(f"the {split} region of {self.titles[k]!r} holds {hi - lo} bytes, too few for two "
                               f"documents of {n}; use smaller max_bytes or longer texts")
                start = int(rng.integers(lo, hi - n + 1))
                documents.append((k, start, start + n))
            (k0, s0, e0), (k1, s1, e1) = documents
            if k0 != k1 or e0 <= s1 or e1 <= s0:
                return documents

    def _batch(self, data: Split, index: Tensor) -> TokenBatch:
        """Both documents at full width (the first in ``[:, :max_len]``), real where the byte is not padding."""
        ids = data.ids[index]
        return TokenBatch(ids, ids != PAD_ID, data.labels[index])
