"""Text encoding shared by the text tasks: UTF-8 bytes, simple words with a frequency vocabulary,
sentence pairs, and a deterministic train/validation carve.

Conventions (every encoder here):

* id 0 is padding (:data:`PAD_ID`) and never stands for text;
* truncation to ``max_len`` keeps the *beginning* of the text (the first ``max_len`` tokens); with
  bytes a multi-byte UTF-8 character may be cut at the end, which is harmless for byte models;
* a text that encodes to no tokens at all (empty, or only punctuation for words) becomes one "unknown"
  token when it goes through :class:`TextEncoder`, so that every example has at least one real token
  (mean pooling over zero tokens is undefined).

Bytes: byte ``b`` has id ``b + 1`` (1..256), so the byte vocabulary has :data:`BYTE_VOCAB_SIZE` = 257
ids; pair tasks add :data:`BYTE_SEP_ID` = 257 as the separator (258 ids).

Words: :func:`simple_words` lower-cases and splits on every character that is not a letter or a digit
(Unicode-aware; ``_`` counts as a separator), except that an apostrophe (``'`` or ``’``, normalised to
``'``) *between* two letters/digits stays inside the word: ``"Don't stop 'til 2 o'clock!"`` gives
``["don't", "stop", "til", "2", "o'clock"]``. :class:`WordVocab` numbers words by count (descending),
ties broken alphabetically, after its specials (``<pad>`` = 0, ``<unk>`` = 1, then e.g. ``<sep>``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence, Union

import torch

from ..validate import is_positive_int

__all__ = [
    "PAD_ID", "UNK_ID", "BYTE_VOCAB_SIZE", "BYTE_SEP_ID", "byte_encode", "simple_words", "clean_html",
    "WordVocab", "join_pair", "TextEncoder", "carve_validation", "validation_size", "subsample", "length_stats",
    "Text",
]

PAD_ID = 0
UNK_ID = 1  # words only
BYTE_VOCAB_SIZE = 257  # pad + 256 byte values
BYTE_SEP_ID = 257  # the separator of sentence pairs in byte mode (vocabulary of 258)

# A text, or a (text_a, text_b) sentence pair.
Text = Union[str, tuple[str, str]]

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)


def _check_max_len(max_len: int | None) -> None:
    if max_len is not None and (not isinstance(max_len, int) or isinstance(max_len, bool) or max_len <= 0):
        raise ValueError(f"max_len must be a positive int or None, got {max_len!r}")


def byte_encode(text: str, max_len: int | None = None) -> list[int]:
    """UTF-8 bytes of ``text`` as ids ``byte + 1`` (1..256; 0 = padding), the first ``max_len`` kept."""
    _check_max_len(max_len)
    data = text.encode("utf-8")
    if max_len is not None:
        data = data[:max_len]
    return [b + 1 for b in data]


def simple_words(text: str) -> list[str]:
    """Lower-cased words: runs of letters/digits, an apostrophe kept only *inside* a word (module docs)."""
    return _WORD.findall(text.lower().replace("\u2019", "'"))


def clean_html(text: str) -> str:
    """Replace HTML line breaks (``<br />``, ``<br>``: IMDb and the food reviews have them) by a space."""
    return _BREAK.sub(" ", text)


@dataclass
class WordVocab:
    """A word vocabulary: ``tokens[i]`` is the word of id ``i``; specials first (``<pad>`` = 0, ``<unk>`` = 1)."""

    tokens: list[str]
    index: dict[str, int] = field(init=False, repr=False)
    pad_id: int = PAD_ID
    unk_id: int = UNK_ID

    def __post_init__(self) -> None:
        if self.tokens[:2] != ["<pad>", "<unk>"]:
            raise ValueError("a WordVocab starts with '<pad>', '<unk>'")
        self.index = {tok: i for i, tok in enumerate(self.tokens)}
        if len(self.index) != len(self.tokens):
            raise ValueError("a WordVocab has duplicate tokens")

    @classmethod
    def build(cls, texts: Iterable[str], max_size: int | None, min_count: int = 1,
              specials: Sequence[str] = ()) -> "WordVocab":
        """The ``max_size`` ids (specials included; ``None`` = no cap) for the most frequent words of
        ``texts`` seen at least ``min_count`` times; ties in count go alphabetically.

        ``specials`` (e.g. ``("<sep>",)``) get the ids right after ``<pad>`` and ``<unk>``; they are not
        words (:func:`simple_words` never yields ``<`` or ``>``), so text never encodes to them."""
        if not is_positive_int(min_count):
            raise ValueError(f"min_count must be an int >= 1, got {min_count!r}")
        head = ["<pad>", "<unk>", *specials]
        if max_size is not None and (not isinstance(max_size, int) or max_size < len(head)):
            raise ValueError(f"max_size must be an int >= {len(head)} (the special tokens) or None, got {max_size!r}")
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(simple_words(text))
        words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        if max_size is not None:
            words = words[: max_size - len(head)]
        return cls(head + words)

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def id(self, token: str) -> int:
        """The id of a word or special token (``unk_id`` when unknown)."""
        return self.index.get(token, self.unk_id)

    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        """Ids of the words of ``text`` (unknown words -> ``unk_id``), the first ``max_len`` kept."""
        _check_max_len(max_len)
        words = simple_words(text)
        if max_len is not None:
            words = words[:max_len]
        get, unk = self.index.get, self.unk_id
        return [get(w, unk) for w in words]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[i] for i in ids]


def join_pair(a: list[int], b: list[int], sep_id: int, max_len: int | None = None) -> list[int]:
    """``a + [sep_id] + b``, at most ``max_len`` ids: the longer side loses its *end* first, one token
    at a time ("longest first"), so both sentences keep their beginnings. Needs ``max_len >= 3``."""
    _check_max_len(max_len)
    if max_len is not None:
        if max_len < 3:
            raise ValueError(f"a sentence pair needs max_len >= 3, got {max_len}")
        budget = max_len - 1
        la, lb = len(a), len(b)
        if la + lb > budget:
            # Trim the longer side down to the shorter (or to what fits), then alternate.
            short = min(la, lb)
            if short * 2 >= budget:
                keep_a = keep_b = budget // 2
                if budget % 2:  # the odd token goes to the longer side (a on ties)
                    if la >= lb:
                        keep_a += 1
                    else:
                        keep_b += 1
            else:
                keep_a, keep_b = (budget - lb, lb) if la > lb else (la, budget - la)
            a, b = a[:keep_a], b[:keep_b]
    return [*a, sep_id, *b]


class TextEncoder:
    """Texts (or sentence pairs) -> ids, by ``unit`` ``"words"`` (a :class:`WordVocab` built from the
    training texts only) or ``"bytes"``. ``vocab_size`` and ``pad_id`` size the model.

    ``TextEncoder.fit(unit, train_texts, vocab_size=..., pairs=...)``: with ``pairs`` the training
    items are ``(a, b)`` tuples, both sides feed the vocabulary, and a separator id is reserved
    (``<sep>`` = 2 for words, :data:`BYTE_SEP_ID` for bytes)."""

    UNITS = ("words", "bytes")

    def __init__(self, unit: str, vocab: WordVocab | None = None, pairs: bool = False) -> None:
        if unit not in self.UNITS:
            raise ValueError(f"unit must be one of {self.UNITS}, got {unit!r}")
        if unit == "words" and vocab is None:
            raise ValueError("unit 'words' needs a WordVocab")
        self.unit, self.vocab, self.pairs = unit, vocab, pairs
        self.pad_id = PAD_ID
        if unit == "words":
            self.vocab_size = len(vocab)
            self.sep_id = vocab.index.get("<sep>") if pairs else None
            if pairs and self.sep_id is None:
                raise ValueError("pairs need a WordVocab with a '<sep>' special")
            self.empty_id = vocab.unk_id
        else:
            self.vocab_size = BYTE_VOCAB_SIZE + (1 if pairs else 0)
            self.sep_id = BYTE_SEP_ID if pairs else None
            self.empty_id = byte_encode(" ")[0]

    @classmethod
    def fit(cls, unit: str, train_texts: Sequence[Text], *, vocab_size: int | None = None, min_count: int = 1,
            pairs: bool = False, specials: Sequence[str] = ()) -> "TextEncoder":
        """The encoder of ``unit`` fitted on ``train_texts``; ``specials`` (words only, e.g. ``("<mask>",)``)
        reserve ids after ``<pad>``, ``<unk>`` (and ``<sep>`` for pairs) that no text encodes to."""
        if unit not in cls.UNITS:
            raise ValueError(f"unit must be one of {cls.UNITS}, got {unit!r}")
        if specials and unit != "words":
            raise ValueError(f"special tokens {list(specials)} need unit 'words' (bytes have a fixed vocabulary)")
        vocab = None
        if unit == "words":
            flat = (s for t in train_texts for s in (t if pairs else (t,)))
            reserved = (("<sep>",) if pairs else ()) + tuple(specials)
            vocab = WordVocab.build(flat, vocab_size, min_count, specials=reserved)
        return cls(unit, vocab, pairs)

    def _one(self, text: str, max_len: int | None) -> list[int]:
        return self.vocab.encode(text, max_len) if self.unit == "words" else byte_encode(text, max_len)

    def encode(self, text: Text, max_len: int | None = None) -> list[int]:
        """Ids of a text (or of ``a <sep> b`` for a pair, see :func:`join_pair`); never empty."""
        if self.pairs:
            if not (isinstance(text, tuple) and len(text) == 2):
                raise TypeError(f"a pair encoder takes (text_a, text_b) tuples, got {type(text).__name__}")
            ids = join_pair(self._one(text[0], None), self._one(text[1], None), self.sep_id, max_len)
        else:
            if not isinstance(text, str):
                raise TypeError(f"expected a str, got {type(text).__name__}")
            ids = self._one(text, max_len)
        return ids or [self.empty_id]


def validation_size(n: int, fraction: float) -> int:
    """How many of ``n`` examples :func:`carve_validation` puts in validation: ``round(fraction * n)``, at
    least 1 when ``fraction > 0`` and ``n >= 2``, never all."""
    if not (isinstance(fraction, (int, float)) and 0 <= fraction < 1):
        raise ValueError(f"val_fraction must be in [0, 1), got {fraction!r}")
    n_val = int(round(fraction * n))
    if fraction > 0 and n >= 2:
        n_val = max(n_val, 1)
    return min(n_val, n - 1) if n else 0


def carve_validation(n: int, fraction: float, seed: int,
                     labels: Sequence[int] | None = None) -> tuple[list[int], list[int]]:
    """(train indices, val indices) of ``range(n)``: a seeded random ``round(fraction * n)`` (at least 1
    when ``fraction > 0`` and ``n >= 2``, never all) go to validation; both lists sorted.

    With ``labels`` the carve is stratified: each class gives ``round(fraction * its count)`` (largest
    remainders first, so the total is still ``round(fraction * n)``), keeping the class balance of
    val equal to train's up to rounding."""
    n_val = validation_size(n, fraction)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    if labels is None:
        return sorted(perm[n_val:]), sorted(perm[:n_val])
    if len(labels) != n:
        raise ValueError(f"{len(labels)} labels for {n} examples")
    by_class: dict[int, list[int]] = {}
    for i in perm:  # each class's members in the seeded order
        by_class.setdefault(int(labels[i]), []).append(i)
    classes = sorted(by_class)
    exact = {c: n_val * len(by_class[c]) / n for c in classes}
    take = {c: int(exact[c]) for c in classes}
    for c in sorted(classes, key=lambda c: (-(exact[c] - take[c]), c))[: n_val - sum(take.values())]:
        take[c] += 1
    val = [i for c in classes for i in by_class[c][: take[c]]]
    chosen = set(val)
    return [i for i in range(n) if i not in chosen], sorted(val)


def subsample(n: int, cap: int | None, seed: int) -> list[int]:
    """All of ``range(n)``, or a seeded random ``cap`` of them (sorted) when ``n > cap``."""
    if cap is None or n <= cap:
        return list(range(n))
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return sorted(perm[:cap])


def length_stats(sequences: Sequence[Sequence[int]]) -> tuple[int, float, int]:
    """(min, mean, max) length."""
    lengths = [len(s) for s in sequences]
    if not lengths:
        return (0, 0.0, 0)
    return (min(lengths), sum(lengths) / len(lengths), max(lengths))
