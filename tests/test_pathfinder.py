"""Pathfinder (Linsley et al., 2018; LRA): generated pictures whose label is the truth (flood fill), seeded,
balanced, and with no shortcut through what a model could read without following a curve."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tokenmix.data.pathfinder import PathfinderConfig, connected, draw_pair, generate
from tokenmix.tasks import create_task, planned_task


@pytest.mark.parametrize("length", [6, 9, 14])
def test_the_label_is_whether_the_markers_are_joined(length):
    rng = np.random.default_rng(length)
    config = PathfinderConfig(length=length)
    for _ in range(25):
        (positive, p_markers), (negative, n_markers) = draw_pair(rng, config)
        assert connected(positive, *p_markers) and not connected(negative, *n_markers)
        for image, markers in ((positive, p_markers), (negative, n_markers)):
            assert image.shape == (32, 32) and set(np.unique(image)) == {0, 255}
            for r, c in markers:
                assert (image[r - 1:r + 2, c - 1:c + 2] == 255).all()  # a 3 x 3 marker
        distance = [float(np.hypot(*np.subtract(*m))) for m in (p_markers, n_markers)]
        assert distance[0] >= config.min_distance and abs(distance[0] - distance[1]) <= 1.0


def test_generation_is_seeded_and_balanced():
    images, labels = generate(40, seed=3, progress=False)
    again, labels_again = generate(40, seed=3, progress=False)
    assert np.array_equal(images, again) and np.array_equal(labels, labels_again)
    assert labels.sum() == 20 and images.shape == (40, 32, 32)
    other, _ = generate(40, seed=4, progress=False)
    assert not np.array_equal(images, other)
    with pytest.raises(ValueError, match="count must be an even int"):
        generate(3, seed=0)
    with pytest.raises(ValueError, match="pathfinder: length must be a positive int"):
        PathfinderConfig(length=0)


def _best_stump(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray) -> float:
    """Held-out accuracy of the best threshold (either direction) on one feature, chosen on the train half."""
    best, rule = 0.0, (0.0, 1)
    for threshold in np.unique(train_x):
        for sign in (1, -1):
            accuracy = float(((sign * (train_x - threshold) > 0) == train_y).mean())
            if accuracy > best:
                best, rule = accuracy, (threshold, sign)
    threshold, sign = rule
    return float(((sign * (test_x - threshold) > 0) == test_y).mean())


def test_no_shortcut_through_ink_or_marker_distance():
    """What a model could read without following a curve — how much ink there is, how far apart the markers are,
    where they sit — tells the class no better than chance (the best threshold on each, held out)."""
    rng = np.random.default_rng(0)
    features, labels = [], []
    for _ in range(300):
        for (image, markers), label in zip(draw_pair(rng, PathfinderConfig(length=9)), (1, 0)):
            (r0, c0), (r1, c1) = markers
            features.append([(image > 0).sum(), np.hypot(r0 - r1, c0 - c1), (r0 + r1) / 2, (c0 + c1) / 2])
            labels.append(label)
    x, y = np.array(features, dtype=float), np.array(labels)
    half = len(y) // 2
    for column in range(x.shape[1]):
        assert _best_stump(x[:half, column], y[:half], x[half:, column], y[half:]) < 0.6, column


def test_the_task_feeds_pixels_as_tokens(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENMIX_DATA", str(tmp_path))
    task = create_task("pathfinder", train_size=20, val_size=10, test_size=10, progress=False)
    train = task.splits["train"]
    assert train.ids.shape == (20, 1024) and set(train.ids.unique().tolist()) == {1, 2}
    assert int(train.labels.sum()) == 10 and bool((train.lengths == 1024).all())
    assert not torch.equal(task.splits["val"].ids[:10], train.ids[:10])  # each split its own draw
    assert list((tmp_path / "pathfinder").glob("*.npz"))  # cached
    again = create_task("pathfinder", train_size=20, val_size=10, test_size=10, progress=False)
    assert torch.equal(again.splits["train"].ids, train.ids)
    shape = planned_task("pathfinder", train_size=20, val_size=10, test_size=10)
    assert shape.split_sizes() == task.split_sizes() and shape.max_len == 1024 and shape.vocab_size == 3
    with pytest.raises(ValueError, match="train_size must be an even int"):
        create_task("pathfinder", train_size=21)


def test_tokenmix_data_pathfinder_show_draws_examples(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from tokenmix.cli import main

    out = tmp_path / "examples.png"
    main(["data", "pathfinder", "--show", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {out}" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--show draws the pictures of the task pathfinder only"):
        main(["data", "listops", "--show", str(out)])
