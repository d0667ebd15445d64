"""Austen data (R lazy-load database, text files, cache) and the "austen" / "lm" tasks, on fake novels."""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
import struct
import zlib
from pathlib import Path

import pytest
import torch

import tokenmix.data.austen as austen_data
from tokenmix.data.austen import (
    AUSTEN_NOVELS,
    AustenNotFoundError,
    load_austen,
    read_lazyload_index,
    read_lazyload_object,
)
from tokenmix.data.cache import ChecksumError, cache_dir, cached, checksum
from tokenmix.tasks import LMBatch, TokenBatch, create_task, list_tasks
from tokenmix.tasks.lm import train_tokenizer

pytest.importorskip("rdata")
pytest.importorskip("tokenizers")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own cache dir and can never reach apt or an installed package."""
    monkeypatch.setenv("TOKENMIX_DATA", str(tmp_path / "cache"))
    monkeypatch.setattr(austen_data, "INSTALLED_ROOTS", ())
    monkeypatch.setattr(austen_data, "APT_GET", "tokenmix-test-no-such-apt-get")


# -- a tiny R serializer (XDR, format version 3) -----------------------------------------------------------
NILVALUE, STRSXP, VECSXP, INTSXP, LGLSXP, LISTSXP, SYMSXP, CHARSXP = 254, 16, 19, 13, 10, 2, 1, 9
HAS_ATTR, HAS_TAG, UTF8 = 1 << 9, 1 << 10, 8 << 12


def _int(v: int) -> bytes:
    return struct.pack(">i", v)


def _charsxp(s: str | None) -> bytes:
    if s is None:  # NA_character_
        return _int(CHARSXP) + _int(-1)
    raw = s.encode("utf-8")
    return _int(CHARSXP | UTF8) + _int(len(raw)) + raw


def _strsxp(values: list[str | None]) -> bytes:
    return _int(STRSXP) + _int(len(values)) + b"".join(_charsxp(v) for v in values)


def _named_list(items: dict[str, bytes]) -> bytes:
    """VECSXP of already-serialized elements with a names attribute."""
    body = _int(VECSXP | HAS_ATTR) + _int(len(items)) + b"".join(items.values())
    names = _int(LISTSXP | HAS_TAG) + _int(SYMSXP) + _charsxp("names") + _strsxp(list(items)) + _int(NILVALUE)
    return body + names


def r_serialize(obj_bytes: bytes) -> bytes:
    header = b"X\n" + _int(3) + _int(0x040201) + _int(0x030500) + _int(5) + b"UTF-8"
    return header + obj_bytes


def make_lazyload_db(objects: dict[str, list[str | None]], *, gzip_index: bool = True) -> tuple[bytes, bytes]:
    """(rdx, rdb) bytes of a lazy-load database of character vectors, as R's makeLazyLoadDB writes it."""
    rdb, positions = b"", {}
    for name, lines in objects.items():
        raw = r_serialize(_strsxp(lines))
        record = struct.pack(">I", len(raw)) + zlib.compress(raw)
        positions[name] = _int(INTSXP) + _int(2) + _int(len(rdb)) + _int(len(record))
        rdb += record
    index = r_serialize(_named_list({
        "variables": _named_list(positions),
        "references": _int(VECSXP) + _int(0),
        "compressed": _int(LGLSXP) + _int(1) + _int(1),
    }))
    rdx = gzip.compress(index) if gzip_index else struct.pack(">I", len(index)) + zlib.compress(index)
    return rdx, rdb


def fake_novel(title: str, n_lines: int = 400) -> list[str]:
    """Distinct, position-unique lines (so a substring identifies where it came from)."""
    word = title.lower().replace(" ", "")[:5]
    return [f"[{word}:{i:05d}] said the {word} to it." if i % 7 else "" for i in range(n_lines)]


# -- R lazy-load reading -----------------------------------------------------------------------------------
@pytest.mark.parametrize("gzip_index", [True, False])
def test_lazyload_index_and_objects(gzip_index):
    objects = {"emma": ["EMMA", "", "By Jane Austen", None, "caf\u00e9"], "persuasion": ["Persuasion"]}
    rdx, rdb = make_lazyload_db(objects, gzip_index=gzip_index)
    index = read_lazyload_index(rdx)
    assert set(index) == {"emma", "persuasion"}
    assert index["emma"][0] == 0 and sum(index["persuasion"]) == len(rdb)
    emma = read_lazyload_object(rdb, *index["emma"])
    assert austen_data.r_strings(emma) == ["EMMA", "", "By Jane Austen", "", "caf\u00e9"]
    assert austen_data.r_strings(read_lazyload_object(rdb, *index["persuasion"])) == ["Persuasion"]
    with pytest.raises(ValueError, match="outside"):
        read_lazyload_object(rdb, len(rdb) - 2, 10)


def _write_fake_package(root: Path, base: str = "data/Rdata") -> dict[str, str]:
    objects = {name: fake_novel(title) for name, title in AUSTEN_NOVELS.items()}
    rdx, rdb = make_lazyload_db(objects)
    (root / base).parent.mkdir(parents=True, exist_ok=True)
    (root / f"{base}.rdx").write_bytes(rdx)
    (root / f"{base}.rdb").write_bytes(rdb)
    return {AUSTEN_NOVELS[name]: "\n".join(lines) for name, lines in objects.items()}


@pytest.mark.parametrize("base", ["data/Rdata", "R/sysdata"])
def test_load_austen_from_package_dir(tmp_path, base):
    expected = _write_fake_package(tmp_path / "janeaustenr", base)
    novels = load_austen(tmp_path / "janeaustenr")
    assert novels == expected and list(novels) == list(AUSTEN_NOVELS.values())


def test_load_austen_default_route_is_cached(tmp_path, monkeypatch):
    expected = _write_fake_package(tmp_path / "pkg")
    monkeypatch.setattr(austen_data, "INSTALLED_ROOTS", (tmp_path / "pkg",))
    assert load_austen() == expected
    path = cache_dir() / austen_data.CACHE_NAME
    assert json.loads(path.read_text()) == expected
    assert (path.parent / (path.name + ".sha256")).read_text().strip() == checksum(path)
    shutil.rmtree(tmp_path / "pkg")  # now served from the cache alone
    assert load_austen() == expected


def test_load_austen_text_files(tmp_path):
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "B.txt").write_text("beta text\r\nline two\n", encoding="utf-8")
    (tmp_path / "texts" / "A.txt").write_text("alpha text", encoding="utf-8")
    assert load_austen(tmp_path / "texts") == {"A": "alpha text", "B": "beta text\nline two\n"}


def test_missing_source_says_how_to_get_it(tmp_path):
    with pytest.raises(AustenNotFoundError) as info:
        load_austen()
    message = str(info.value)
    assert "apt-get download r-cran-janeaustenr" in message and "apt-get install r-cran-janeaustenr" in message
    assert "source=" in message and "TOKENMIX_DATA" in message
    (tmp_path / "empty").mkdir()
    with pytest.raises(AustenNotFoundError, match="r-cran-janeaustenr"):
        load_austen(tmp_path / "empty")


# -- cache ---------------------------------------------------------------------------------------------------
def test_cached_is_idempotent_and_checks(tmp_path):
    calls = []

    def build(path: Path) -> None:
        calls.append(path)
        path.write_text("hello")

    first = cached("x/hello.txt", build)
    assert first == cache_dir() / "x" / "hello.txt" and first.read_text() == "hello"
    assert cached("x/hello.txt", build) == first and len(calls) == 1
    digest = checksum(first)
    assert cached("x/hello.txt", build, sha256=digest) == first and len(calls) == 1
    first.write_text("tampered")  # no longer matches the record: rebuilt
    assert cached("x/hello.txt", build).read_text() == "hello" and len(calls) == 2
    with pytest.raises(ChecksumError, match="expected"):
        cached("x/other.txt", build, sha256="0" * 64)
    assert not (cache_dir() / "x" / "other.txt").exists()
    assert sorted(p.name for p in (cache_dir() / "x").iterdir()) == ["hello.txt", "hello.txt.sha256"]


def test_cached_directory_entry():
    def build(path: Path) -> None:
        path.mkdir()
        (path / "a").write_text("1")
        (path / "b").write_text("2")

    entry = cached("tree", build)
    assert sorted(p.name for p in entry.iterdir()) == ["a", "b"]
    assert cached("tree", lambda p: pytest.fail("rebuilt")) == entry


# -- the "austen" task ---------------------------------------------------------------------------------------
@pytest.fixture
def novels_dir(tmp_path) -> Path:
    d = tmp_path / "novels"
    d.mkdir()
    for title in AUSTEN_NOVELS.values():
        (d / f"{title}.txt").write_text("\n".join(fake_novel(title, 300 + 40 * len(title))), encoding="utf-8")
    return d


def test_registered():
    assert {"austen", "lm"} <= set(list_tasks())


@pytest.mark.parametrize("unit", ["bytes", "words"])
def test_austen_splits_never_share_text(novels_dir, unit):
    task = create_task("austen", source=novels_dir, unit=unit, length=64, train_size=61, val_size=13,
                       test_size=12, seed=3, **({"vocab_size": 50} if unit == "words" else {}))
    assert task.num_classes == 6 and task.max_len == 64
    sizes = {s: len(task.splits[s]) for s in ("train", "val", "test")}
    assert sizes == {"train": 61, "val": 13, "test": 12}
    for split, data in task.splits.items():
        counts = torch.bincount(data.labels, minlength=6)
        assert counts.max() - counts.min() <= 1  # balanced
        assert (data.lengths == 64).all() and data.ids.shape == (len(data), 64)
        for (label, start, end), row_label in zip(task.spans[split], data.labels.tolist()):
            lo, hi = task.regions[task.classes[label]][split]
            assert label == row_label and lo <= start < end <= hi
    for label, start, end in task.spans["train"]:
        for other in ("val", "test"):
            assert all(k != label or end <= s or e <= start for k, s, e in task.spans[other])
    if unit == "bytes":  # the same, by content: each line is unique, so compare decoded text
        texts = {t: (novels_dir / f"{t}.txt").read_bytes() for t in task.classes}
        decode = lambda row: bytes((row - 1).tolist())  # noqa: E731
        for split, data in task.splits.items():
            for row, (label, start, end) in zip(data.ids, task.spans[split]):
                assert decode(row) == texts[task.classes[label]][start:end]
        # every 64-byte passage holds a whole line tag "[word:NNNNN]"; no tag is seen in two splits
        tags = {s: {t for r in d.ids for t in re.findall(rb"\[\w+:\d{5}\]", decode(r))}
                for s, d in task.splits.items()}
        assert all(tags.values()) and not tags["train"] & (tags["val"] | tags["test"])
    else:
        assert task.vocab_size == len(task.words) + 2 and set(task.words) <= {
            w for t in task.classes
            for w in austen_data_words(novels_dir / f"{t}.txt", task.regions[t]["train"])}
    batch = next(task.batches("train", 8, shuffle=True, seed=0))
    assert isinstance(batch, TokenBatch) and batch.mask.all()
    model = task.build_model("softmax", dim=16, depth=1)
    assert torch.isfinite(task.loss(model, batch))
    assert 0.0 <= task.evaluate(model, "test")["accuracy"] <= 1.0


def austen_data_words(path: Path, region: tuple[int, int]) -> set[str]:
    from tokenmix.tasks.austen import tokenize_words

    return set(tokenize_words(path.read_text(encoding="utf-8"))[slice(*region)])


def test_austen_seeded_and_validated(novels_dir):
    a = create_task("austen", source=novels_dir, length=16, train_size=12, val_size=6, test_size=6, seed=1)
    b = create_task("austen", source=novels_dir, length=16, train_size=12, val_size=6, test_size=6, seed=1)
    c = create_task("austen", source=novels_dir, length=16, train_size=12, val_size=6, test_size=6, seed=2)
    assert torch.equal(a.splits["train"].ids, b.splits["train"].ids)
    assert not torch.equal(a.splits["train"].ids, c.splits["train"].ids)
    with pytest.raises(ValueError, match="fewer than length"):
        create_task("austen", source=novels_dir, length=10_000, train_size=6, val_size=6, test_size=6)
    with pytest.raises(ValueError, match="unit"):
        create_task("austen", source=novels_dir, unit="chars")
    with pytest.raises(ValueError, match="no option"):
        create_task("austen", source=novels_dir, lenght=16)


# -- the "lm" task -------------------------------------------------------------------------------------------
@pytest.fixture
def lm_dir(tmp_path) -> Path:
    """Fake novels whose held-out tail repeats a word that never occurs in the train part."""
    d = tmp_path / "lm"
    d.mkdir()
    for k, title in enumerate(AUSTEN_NOVELS.values()):
        train = "\n".join(f"the {title.split()[0].lower()} walked to house {i} and sat down." for i in range(400))
        tail = "\n".join("zyxwvut zyxwvut zyxwvut zyxwvut." for i in range(20))  # < 5 %: test only
        (d / f"{k}.txt").write_text(train + "\n" + tail + "\n", encoding="utf-8")
    return d


def test_lm_task(lm_dir):
    task = create_task("lm", source=lm_dir, context=16, vocab_size=1000, train_size=50, seed=0)
    # the tokenizer saw only the train text: the held-out word never became a token
    assert all("zyxwvut" not in t for t in task.tokenizer.get_vocab())
    assert any("walked" in t for t in task.tokenizer.get_vocab())
    leaky, _ = train_tokenizer([p.read_text() for p in sorted(lm_dir.glob("*.txt"))], 1000)  # the control
    assert any("zyxwvut" in t for t in leaky.get_vocab())
    assert all("zyxwvut" not in parts["train"] and "zyxwvut" in parts["test"] for parts in task.texts.values())
    assert task.vocab_size == task.tokenizer.get_vocab_size() <= 1000 and task.max_len == 16
    assert len(task.splits["train"]) == 50 and task.available["train"] > 50
    for split, data in task.splits.items():
        assert data.ids.shape[1] == 17 and len(data) > 0 and data.ids.dtype == torch.long
    # every window is a run of consecutive tokens of its split's text
    val_ids = [task.tokenizer.encode(parts["val"]).ids for parts in task.texts.values()]
    first = task.splits["val"].ids[0].tolist()
    assert any(first == ids[i:i + 17] for ids in val_ids for i in range(len(ids)))
    batch = next(task.batches("train", 4))
    assert isinstance(batch, LMBatch) and batch.ids.shape == (4, 16)
    assert torch.equal(batch.ids[:, 1:], batch.targets[:, :-1])
    assert torch.equal(batch.targets, task.splits["train"].ids[:4, 1:])
    model = task.build_model("softmax", dim=16, depth=1)
    assert torch.isfinite(task.loss(model, batch))
    result = task.evaluate(model, "val")
    assert math.isfinite(result["perplexity"]) and result["perplexity"] == pytest.approx(math.exp(result["loss"]))
    # the tokenizer is cached by (train text, vocab size): a second build trains nothing new
    cached_files = sorted((cache_dir() / "lm").glob("*.json"))
    again = create_task("lm", source=lm_dir, context=16, vocab_size=1000, train_size=50, seed=0)
    assert sorted((cache_dir() / "lm").glob("*.json")) == cached_files and again.tokenizer_path == task.tokenizer_path
    assert torch.equal(again.splits["train"].ids, task.splits["train"].ids)


def test_lm_stride_and_caps(lm_dir):
    full = create_task("lm", source=lm_dir, context=16, vocab_size=300, preset="paper")
    half = create_task("lm", source=lm_dir, context=16, stride=8, vocab_size=300, preset="paper")
    assert len(half.splits["train"]) >= 2 * len(full.splits["train"]) - 6
    with pytest.raises(ValueError, match="vocab_size"):
        create_task("lm", source=lm_dir, vocab_size=100)


# -- the real Debian package -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_real_janeaustenr(monkeypatch):
    """Fetches r-cran-janeaustenr with apt (or uses an installed copy); run with -m slow."""
    import os

    monkeypatch.undo()  # real cache, real apt
    if os.environ.get("TOKENMIX_DATA") is None and shutil.which("apt-get") is None and not any(
            p.is_dir() for p in austen_data.INSTALLED_ROOTS):
        pytest.skip("no apt-get and no installed janeaustenr")
    novels = load_austen()
    assert list(novels) == list(AUSTEN_NOVELS.values())
    assert all(len(text) > 400_000 for text in novels.values())
    assert novels["Emma"].startswith("EMMA") and "Woodhouse" in novels["Emma"]
    assert "Elizabeth" in novels["Pride & Prejudice"] and "Elliot" in novels["Persuasion"]


def test_lm_paper_preset_initialises_every_parameter_like_004(lm_dir):
    """Chen (2023) §6: the paper preset's models start from N(0, 0.01), every mixer alike (and quick keeps
    the defaults)."""
    paper = create_task("lm", source=lm_dir, context=16, vocab_size=1000, train_size=50, preset="paper", seed=0)
    model = paper.build_model("softmax", dim=64, depth=1)
    q = model.blocks[0].mixer.q_proj.weight
    assert abs(q.std().item() - 0.01) < 0.0015 and torch.count_nonzero(model.head.bias) == 0
    quick = create_task("lm", source=lm_dir, context=16, vocab_size=1000, train_size=50, seed=0)
    assert quick.build_model("softmax", dim=64, depth=1).blocks[0].mixer.q_proj.weight.std().item() > 0.03
