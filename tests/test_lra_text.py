"""LRA Text at its lengths on Austen bytes: binary (first three novels published or last three), documents of
uniform random length, padded; splits by position never share text; length tells nothing of the class."""

from __future__ import annotations

import pytest
import torch

from tokenmix.tasks import create_task, planned_task


def test_documents_are_balanced_padded_and_from_their_split(six_novels_dir):
    task = create_task("lra_text", source=six_novels_dir, min_bytes=100, max_bytes=300, train_size=60, val_size=12,
                       test_size=12, seed=1)
    titles = list(task.titles)
    texts = [(six_novels_dir / f"{t}.txt").read_bytes() for t in titles]
    assert task.max_len == 300 and task.vocab_size == 257 and task.num_classes == 2
    for split, data in task.splits.items():
        assert int(data.labels.sum()) * 2 == len(data) and data.ids.shape == (len(data), 300)
        assert bool(((data.lengths >= 100) & (data.lengths <= 300)).all())
        for row, (novel, start, end) in enumerate(task.spans[split]):
            n = int(data.lengths[row])
            assert end - start == n and int(data.labels[row]) == novel // 3  # first three novels: class 0
            assert bytes((data.ids[row, :n] - 1).tolist()) == texts[novel][start:end]
            assert bool((data.ids[row, n:] == 0).all())  # padded after the document
            lo, hi = (int(len(texts[novel]) * f) for f in {"train": (0, .8), "val": (.8, .9), "test": (.9, 1)}[split])
            assert lo <= start and end <= hi
    again = create_task("lra_text", source=six_novels_dir, min_bytes=100, max_bytes=300, train_size=60, val_size=12,
                        test_size=12, seed=1)
    assert torch.equal(again.splits["train"].ids, task.splits["train"].ids)
    shape = planned_task("lra_text", min_bytes=100, max_bytes=300, train_size=60, val_size=12, test_size=12)
    assert shape.split_sizes() == task.split_sizes() and shape.max_len == 300


def test_length_tells_nothing_of_the_class(six_novels_dir):
    task = create_task("lra_text", source=six_novels_dir, min_bytes=100, max_bytes=300, train_size=600, val_size=2,
                       test_size=2)
    data = task.splits["train"]
    lengths = data.lengths.float()
    means = [float(lengths[data.labels == k].mean()) for k in (0, 1)]
    assert abs(means[0] - means[1]) < 15  # same uniform draw for both classes (sd of a mean of 300: ~3.4)


def test_bad_options_are_refused(six_novels_dir):
    with pytest.raises(ValueError, match="min_bytes .* must be <= max_bytes"):
        create_task("lra_text", source=six_novels_dir, min_bytes=500, max_bytes=300)
    with pytest.raises(ValueError, match="train_size must be even"):
        create_task("lra_text", source=six_novels_dir, min_bytes=10, max_bytes=30, train_size=7)
    with pytest.raises(ValueError, match="fewer than a document"):
        create_task("lra_text", source=six_novels_dir, min_bytes=10_000, max_bytes=20_000, train_size=6, val_size=2,
                    test_size=2)
    (six_novels_dir / "Emma.txt").rename(six_novels_dir / "Emma Woodhouse.txt")
    with pytest.raises(ValueError, match="needs the six novels by their titles"):
        create_task("lra_text", source=six_novels_dir, min_bytes=10, max_bytes=30, train_size=6, val_size=2,
                    test_size=2)
