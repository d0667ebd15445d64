"""Task "lm": language modelling on Jane Austen's novels, the protocol of Chen (2023) section 6.

As in Chen (2023) (Table 1): a Hugging Face ``tokenizers`` byte-level BPE tokenizer with a vocabulary of 5,000
and a context window of 128 tokens; the corpus is Austen's six novels (:mod:`tokenmix.data.austen`) in
place of Chen (2023)'s 100 Gutenberg children's books.

* Splits by position inside each novel: the first 90 % of its characters is train, the next 5 % val,
  the last 5 % test (each cut moved forward to the next line break, so no word is cut).
* The tokenizer is trained on the TRAIN text only and cached in the data cache
  (``lm/bpe-<vocab>-<hash>.json``, keyed by a hash of the training text and the vocabulary size).
  Token 0 is the special ``<|endoftext|>``, used as ``pad_id``.
* Each (novel, split) segment is tokenized on its own and cut into windows of ``context + 1`` tokens,
  starting every ``stride`` tokens (default ``context``: consecutive windows share one token, so every
  token after a segment's first is a target exactly once); no window crosses a novel or a split.
* ``train_size``/``val_size``/``test_size`` cap the number of windows per split (a seeded random subset,
  kept in text order); ``None`` in the preset means all. ``quick``: 400/64/64 windows, vocabulary 2,000;
  ``paper``: all windows, vocabulary 5,000, and models built with ``init_std=0.01`` (Chen (2023) §6).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from ..protocols import PAPER_004_INIT_STD
from ..validate import is_positive_int
from ..data.austen import AUSTEN_SOURCE, load_austen
from .base import Task, TaskShape
from .batches import Split
from .registry import register_task

__all__ = ["DEFAULT_SOURCE_FACTS", "LMTask", "PRESETS", "FRACTIONS", "SPECIAL_TOKEN", "train_tokenizer"]

PRESETS = {
    "quick": {"vocab_size": 2000, "train_size": 400, "val_size": 64, "test_size": 64},
    "paper": {"vocab_size": 5000, "train_size": None, "val_size": None, "test_size": None},
}
FRACTIONS = {"train": (0.0, 0.9), "val": (0.9, 0.95), "test": (0.95, 1.0)}
SPECIAL_TOKEN = "<|endoftext|>"
_TOKENIZER_VERSION = "bytelevel-bpe-v1"  # part of the cache key: change it when the recipe changes
# The default source (the six novels of r-cran-janeaustenr) as this module splits and tokenizes it, so that
# the task can state its shape without the novels (``stated_shape``); tests/test_data_command.py checks these
# against the data where they are installed.
DEFAULT_SOURCE_FACTS = {
    # BPE learns its merges in the same order whatever the vocabulary, so a smaller one is a prefix: the
    # train text yields the full 5,000 tokens asked for, hence every vocabulary up to 5,000 too.
    "vocab_reached": 5_000,
    # The longest segment (one novel's part) of the split whose longest is shortest (test, at 5,000; longer at
    # smaller vocabularies).
    "longest_segment": 11_448,
}


def _cut(text: str, fraction: float) -> int:
    """Character position ~``fraction`` of the way through ``text``, moved to just after a line break."""
    if fraction <= 0.0:
        return 0
    if fraction >= 1.0:
        return len(text)
    pos = int(len(text) * fraction)
    nl = text.find("\n", pos)
    return len(text) if nl < 0 else nl + 1


def _model_defaults(preset: str) -> dict[str, float]:
    """The paper preset is Chen (2023) §6's setting, whose models start from N(0, 0.01) (every mixer alike)."""
    return {"init_std": PAPER_004_INIT_STD} if preset == "paper" else {}


def split_text(text: str) -> dict[str, str]:
    """``{"train": ..., "val": ..., "test": ...}``: consecutive pieces of ``text`` (see the module doc)."""
    out = {}
    for split, (lo, hi) in FRACTIONS.items():
        out[split] = text[_cut(text, lo):_cut(text, hi)]
    return out


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``texts``; cached by content and vocab size."""
    from tokenizers import Tokenizer

    from ..data.cache import cached

    key = hashlib.sha256()
    key.update(f"{_TOKENIZER_VERSION}\0{vocab_size}\0".encode())
    for text in texts:
        key.update(hashlib.sha256(text.encode("utf-8")).digest())

    def build(path: Path) -> None:
        from tokenizers import decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[SPECIAL_TOKEN],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(texts, trainer)
        tok.save(str(path))

    path = cached(f"lm/bpe-{vocab_size}-{key.hexdigest()[:16]}.json", build)
    return Tokenizer.from_file(str(path)), path


@register_task("lm", description="next-token language modelling on Jane Austen's novels (byte-level BPE "
                                 "vocabulary 5,000, context 128, as Chen (2023) section 6); splits 90/5/5 per novel",
               kind="language_model", metric="perplexity",
               source="Debian r-cran-janeaustenr (Project Gutenberg texts), or a directory of .txt files",
               seed_draws="only which windows a capped split keeps; the text of each split, test included, is fixed")
class LMTask(Task):
    data_source = AUSTEN_SOURCE

    def __init__(self, *, context: int = 128, stride: int | None = None, vocab_size: int | None = None,
                 train_size: int | None = None, val_size: int | None = None, test_size: int | None = None,
                 preset: str = "quick", seed: int = 0, source: str | Path | None = None) -> None:
        vocab_size, stride, caps = self._config(context, stride, vocab_size, train_size, val_size, test_size, preset,
                                                seed)

        novels = load_austen(source)
        self.titles = tuple(novels)
        self.texts = {title: split_text(text) for title, text in novels.items()}  # title -> split -> text
        train_texts = [parts["train"] for parts in self.texts.values()]
        self.tokenizer, self.tokenizer_path = train_tokenizer(train_texts, vocab_size)
        self.vocab_size = self.tokenizer.get_vocab_size()
        self.pad_id = self.tokenizer.token_to_id(SPECIAL_TOKEN)
        self.max_len = self.context = context
        self.stride, self.preset, self.seed = stride, preset, seed
        self.model_defaults = _model_defaults(preset)

        width = context + 1
        self.token_counts: dict[str, int] = {}
        self.available: dict[str, int] = {}
        self.splits = {}
        for split_index, split in enumerate(FRACTIONS):
            windows, total = [], 0
            for title in self.titles:
                ids = np.asarray(self.tokenizer.encode(self.texts[title][split]).ids, dtype=np.int64)
                total += len(ids)
                if len(ids) >= width:
                    starts = np.arange(0, len(ids) - width + 1, stride)
                    windows.append(ids[starts[:, None] + np.arange(width)])
            if not windows:
                self._fail(f"the {split} text is shorter than one window of context + 1 = {width} tokens")
            windows = np.concatenate(windows)
            self.token_counts[split], self.available[split] = total, len(windows)
            cap = caps[split]
            if cap is not None and cap < len(windows):
                rng = np.random.default_rng([seed, split_index])
                windows = windows[np.sort(rng.choice(len(windows), size=cap, replace=False))]
            self.splits[split] = Split(ids=torch.from_numpy(np.ascontiguousarray(windows)))

    @classmethod
    def _config(cls, context: int, stride: int | None, vocab_size: int | None, train_size: int | None,
                val_size: int | None, test_size: int | None, preset: str,
                seed: int) -> tuple[int, int, dict[str, int | None]]:
        """(vocab_size, stride, {split: window cap or None}) with the preset's defaults, options checked."""
        if preset not in PRESETS:
            cls._fail(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        p = PRESETS[preset]
        vocab_size = p["vocab_size"] if vocab_size is None else vocab_size
        stride = context if stride is None else stride
        for name, value in (("context", context), ("stride", stride), ("vocab_size", vocab_size)):
            if not is_positive_int(value):
                cls._fail(f"{name} must be a positive int, got {value!r}")
        if vocab_size < 258:
            cls._fail(f"vocab_size must be at least 258 (256 byte tokens + {SPECIAL_TOKEN} + 1 merge), "
                      f"got {vocab_size}")
        caps = {"train": train_size, "val": val_size, "test": test_size}
        caps = {k: p[f"{k}_size"] if v is None else v for k, v in caps.items()}
        for split, cap in caps.items():
            if cap is not None and not is_positive_int(cap):
                cls._fail(f"{split}_size must be a positive int, got {cap!r}")
        if not isinstance(seed, int):
            cls._fail(f"seed must be an int, got {seed!r}")
        return vocab_size, stride, caps

    @classmethod
    def stated_shape(cls, *, context: int = 128, stride: int | None = None, vocab_size: int | None = None,
                     train_size: int | None = None, val_size: int | None = None, test_size: int | None = None,
                     preset: str = "quick", seed: int = 0, source: str | Path | None = None) -> TaskShape | None:
        """The shape from the options and what is known of the default source (:data:`DEFAULT_SOURCE_FACTS`):
        the window counts only the tokenized text can tell (``None``). None for another ``source``, a
        vocabulary past the one checked, or a window longer than the shortest split's longest segment."""
        vocab_size, stride, caps = cls._config(context, stride, vocab_size, train_size, val_size, test_size, preset,
                                               seed)
        facts = DEFAULT_SOURCE_FACTS
        if source is not None or vocab_size > facts["vocab_reached"] or context + 1 > facts["longest_segment"]:
            return None
        return TaskShape(dict.fromkeys(FRACTIONS), vocab_size=vocab_size, max_len=context, pad_id=0,
                         model_defaults=_model_defaults(preset))

    def decode(self, ids) -> str:
        """Text of a sequence of token ids."""
        return self.tokenizer.decode([int(i) for i in ids])

    def describe(self) -> dict:
        out = super().describe()
        out.update(context=self.context, stride=self.stride, vocab_size=self.vocab_size,
                   tokenizer=str(self.tokenizer_path))
        for split in self.splits:
            out[f"{split}_tokens"] = self.token_counts[split]
            out[f"{split}_windows_available"] = self.available[split]
        chars = sum(len(parts["train"]) for parts in self.texts.values())
        out["train_chars_per_token"] = round(chars / max(self.token_counts["train"], 1), 2)
        return out
