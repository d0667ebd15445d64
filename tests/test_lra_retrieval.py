"""LRA Retrieval at its lengths on Austen bytes (same novel or not) and the two-tower classifier it trains: one
encoder reads both documents, padding does not reach real positions, the pairs are balanced and honest."""

from __future__ import annotations

import pytest
import torch

from tokenmix.models import DualEncoderClassifier
from tokenmix.tasks import create_task, planned_task


def test_the_two_towers_share_one_encoder_and_ignore_padding():
    torch.manual_seed(0)
    model = DualEncoderClassifier(20, 2, "linear", 16, 2, max_len=8, pooling="mean", dropout=0.0).eval()
    first, second = torch.randint(1, 20, (3, 8)), torch.randint(1, 20, (3, 8))
    mask = torch.ones(3, 16, dtype=torch.bool)
    mask[:, 5:8] = False  # the first document is 5 bytes long
    logits = model(torch.cat([first, second], dim=1), mask)
    u, v = model.encode(first, mask[:, :8]), model.encode(second, mask[:, 8:])
    torch.testing.assert_close(logits, model.head(torch.cat([u, v, u * v, u - v], dim=-1)))
    other = first.clone()
    other[:, 5:] = torch.randint(1, 20, (3, 3))  # other content under the padding
    torch.testing.assert_close(model(torch.cat([other, second], dim=1), mask), logits)
    with pytest.raises(ValueError, match=r"ids must be \(B, 2 N\)"):
        model(torch.randint(1, 20, (3, 15)))


def test_pairs_are_balanced_honest_and_from_their_split(six_novels_dir):
    task = create_task("lra_retrieval", source=six_novels_dir, min_bytes=50, max_bytes=120, train_size=40, val_size=10,
                       test_size=10, seed=2)
    texts = [(six_novels_dir / f"{t}.txt").read_bytes() for t in task.titles]
    for split, data in task.splits.items():
        assert int(data.labels.sum()) * 2 == len(data) and data.ids.shape == (len(data), 240)
        for row, documents in enumerate(task.spans[split]):
            (k0, s0, e0), (k1, s1, e1) = documents
            assert int(data.labels[row]) == int(k0 == k1)
            if k0 == k1:
                assert e0 <= s1 or e1 <= s0  # two passages of one novel never overlap
            for half, (k, start, end) in enumerate(documents):
                n = end - start
                assert 50 <= n <= 120
                window = data.ids[row, half * 120:(half + 1) * 120]
                assert bytes((window[:n] - 1).tolist()) == texts[k][start:end] and bool((window[n:] == 0).all())
                lo, hi = (int(len(texts[k]) * f) for f in {"train": (0, .8), "val": (.8, .9), "test": (.9, 1)}[split])
                assert lo <= start and end <= hi
    batch = next(task.batches("train", 4))
    assert torch.equal(batch.mask, batch.ids != 0)
    model = task.build_model("softmax", dim=16, depth=1, num_heads=2)
    assert isinstance(model, DualEncoderClassifier) and task.logits(model, batch).shape == (4, 2)
    assert isinstance(planned_task("lra_retrieval").build_model("linear", dim=16, depth=1), DualEncoderClassifier)
    with pytest.raises(ValueError, match="reads one document; this task gives a pair"):
        task.build_model("relation", dim=16, depth=1, protocol="paper-000")
    with pytest.raises(ValueError, match="train_size must be even"):
        create_task("lra_retrieval", source=six_novels_dir, min_bytes=10, max_bytes=20, train_size=5)
