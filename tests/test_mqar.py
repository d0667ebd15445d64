"""The MQAR task (Arora et al. 2023, Zoology): every sequence re-read by a plain loop, the splits disjoint and
seeded, the gap law, the loss and accuracy on the queries alone, and the no-mixing model at chance."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from tokenmix.tasks import LMBatch, TaskShape, create_task, planned_task
from tokenmix.tasks.batches import IGNORE_INDEX
from tokenmix.tasks.mqar import gap_probabilities

SMALL = dict(seq_len=32, num_pairs=4, vocab_size=64, train_size=400, val_size=50, test_size=50)


@pytest.fixture(scope="module")
def small():
    return create_task("mqar", seed=3, **SMALL)


def read_sequence(ids: list[int], targets: list[int], p: int, vocab: int) -> None:
    """Check one sequence against the definition, position by position."""
    half = vocab // 2
    keys, values = ids[0:2 * p:2], ids[1:2 * p:2]
    assert all(1 <= k < half for k in keys) and len(set(keys)) == p
    assert all(half <= v < vocab for v in values) and len(set(values)) == p
    assert all(t == IGNORE_INDEX for t in targets[:2 * p])
    asked = []
    for pos in range(2 * p, len(ids)):
        if targets[pos] == IGNORE_INDEX:
            assert 1 <= ids[pos] < vocab  # a filler: any token but padding
            continue
        assert (pos - 2 * p) % 2 == 0, "queries sit on the even slots after the pairs"
        assert ids[pos] in keys
        assert targets[pos] == values[keys.index(ids[pos])]
        asked.append(ids[pos])
    assert sorted(asked) == sorted(keys), "every key is asked exactly once"


def test_every_sequence_is_pairs_then_each_key_asked_once_with_its_value(small):
    assert (small.vocab_size, small.max_len, small.num_values) == (64, 32, 32)
    for split in small.splits.values():
        assert split.ids.shape == split.labels.shape == (len(split), 32)
        for ids, targets in zip(split.ids.tolist(), split.labels.tolist()):
            read_sequence(ids, targets, 4, 64)


def test_splits_are_disjoint_seeded_and_independent_of_each_others_size(small):
    rows = [tuple(r) for s in small.splits.values() for r in s.ids.tolist()]
    assert len(set(rows)) == len(rows) == 500
    again = create_task("mqar", seed=3, **SMALL)
    for name, split in small.splits.items():
        assert torch.equal(again.splits[name].ids, split.ids) and torch.equal(again.splits[name].labels, split.labels)
    other = create_task("mqar", seed=4, **SMALL)
    assert not torch.equal(other.splits["test"].ids, small.splits["test"].ids)
    bigger_train = create_task("mqar", seed=3, **{**SMALL, "train_size": 800})
    assert torch.equal(bigger_train.splits["test"].ids, small.splits["test"].ids)


def test_repeated_sequences_are_drawn_again():
    # 2 pairs among 3 keys and 5 values, every slot a query: few distinct sequences, so repeats are certain
    task = create_task("mqar", seq_len=8, num_pairs=2, vocab_size=10, train_size=60, val_size=20, test_size=20)
    rows = [tuple(r) for s in task.splits.values() for r in s.ids.tolist()]
    assert len(set(rows)) == len(rows) == 100


def test_query_gaps_follow_the_power_law():
    p = gap_probabilities(5, 0.5)
    assert torch.allclose(p, torch.tensor([1.0, 2 ** -0.5, 3 ** -0.5, 4 ** -0.5, 5 ** -0.5], dtype=torch.float64)
                          / sum(k ** -0.5 for k in range(1, 6)))
    assert torch.allclose(gap_probabilities(7, 1.0), torch.full((7,), 1 / 7, dtype=torch.float64))

    def mean_query_slot(gap_power: float) -> float:
        task = create_task("mqar", seq_len=128, num_pairs=4, vocab_size=256, gap_power=gap_power,
                           train_size=2_000, val_size=2, test_size=2)
        where = (task.splits["train"].labels != IGNORE_INDEX).nonzero()[:, 1]
        return float(((where - 8) / 2).float().mean())

    # 60 slots: uniform gaps average 29.5; Zoology's a = 0.01 crowds the queries towards the pairs
    assert abs(mean_query_slot(1.0) - 29.5) < 1.0
    assert mean_query_slot(0.01) < 20


def test_loss_and_accuracy_count_the_queries_alone(small):
    class Oracle(nn.Module):
        """Right at every query, confidently wrong everywhere else."""

        def __init__(self, task):
            super().__init__()
            self.task, self.anchor = task, nn.Parameter(torch.zeros(()))

        def forward(self, ids):
            val = self.task.splits["val"]
            targets = {tuple(r): t for r, t in zip(val.ids.tolist(), val.labels)}
            logits = torch.zeros(*ids.shape, self.task.vocab_size)
            for b, row in enumerate(ids.tolist()):
                t = targets[tuple(row)]
                logits[b, torch.arange(len(row)), torch.where(t == IGNORE_INDEX, 0, t)] = 50.0
            return logits + self.anchor

    result = small.evaluate(Oracle(small), "val", batch_size=16)
    assert result["accuracy"] == 1.0 and result["loss"] < 1e-6
    batch = next(small.batches("val", 8))
    assert isinstance(batch, LMBatch) and int((batch.targets != IGNORE_INDEX).sum()) == 8 * 4
    uniform = nn.Module()
    uniform.anchor = nn.Parameter(torch.zeros(()))
    uniform.forward = lambda ids: torch.zeros(*ids.shape, 64) + uniform.anchor
    assert small.loss(uniform, batch).item() == pytest.approx(math.log(64))


def test_options_are_checked_naming_the_task():
    for options, word in ((dict(seq_len=33), "seq_len must be even"), (dict(num_pairs=17), "num_pairs"),
                          (dict(vocab_size=17), "vocab_size"), (dict(gap_power=0.0), "gap_power"),
                          (dict(gap_power=True), "gap_power"), (dict(train_size=0), "train_size"),
                          (dict(preset="huge"), "unknown preset")):
        with pytest.raises(ValueError, match=rf"task 'mqar'.*{word}"):
            create_task("mqar", **options)


def test_the_stated_shape_is_the_built_one(small):
    stated = planned_task("mqar", seed=3, **SMALL)
    assert TaskShape.of(stated) == TaskShape.of(small)


def test_a_no_mixing_model_is_at_chance_and_a_matching_one_is_not():
    """What a model that mixes nothing sees at a query -- its key and its position -- says nothing about the
    value: the best classifier of those features, fitted on 6,000 sequences' queries, stays at chance (1/32) on
    held-out ones, while the same probe given the key's neighbour in the pairs gets every query right."""
    task = create_task("mqar", seed=1, seq_len=32, num_pairs=4, vocab_size=64, train_size=6_000, val_size=2,
                       test_size=3_000)

    def queries(split: str, cheat: bool) -> tuple[torch.Tensor, torch.Tensor]:
        ids, targets = task.splits[split].ids, task.splits[split].labels
        b, pos = (targets != IGNORE_INDEX).nonzero(as_tuple=True)
        key, value = ids[b, pos], targets[b, pos] - 32
        x = [nn.functional.one_hot(key, 64), nn.functional.one_hot(pos, 32)]
        if cheat:
            neighbour = ids[b, (ids[b, 0:8:2] == key[:, None]).float().argmax(1) * 2 + 1] - 32
            x.append(nn.functional.one_hot(neighbour, 32))
        return torch.cat(x, 1).float(), value

    def probe_accuracy(cheat: bool) -> float:
        torch.manual_seed(0)
        x, y = queries("train", cheat)
        linear = nn.Linear(x.shape[1], 32)
        opt = torch.optim.Adam(linear.parameters(), lr=0.05)
        for _ in range(150):
            opt.zero_grad()
            nn.functional.cross_entropy(linear(x), y).backward()
            opt.step()
        x_test, y_test = queries("test", cheat)
        with torch.no_grad():
            return float((linear(x_test).argmax(1) == y_test).float().mean())

    assert probe_accuracy(cheat=False) < 1 / 32 + 0.015  # 12,000 held-out queries: sd 0.0016 at chance
    assert probe_accuracy(cheat=True) > 0.99


def test_the_head_read_at_the_queries_alone_gives_the_full_models_loss_and_accuracy(small):
    model = small.build_model("softmax", dim=16, depth=1, num_heads=2)
    batch = next(small.batches("val", 16))
    full = model(batch.ids)
    scored = batch.targets != IGNORE_INDEX
    expected = nn.functional.cross_entropy(full[scored], batch.targets[scored])
    assert torch.allclose(small.loss(model, batch), expected, atol=1e-6)
    logits, targets = small.scored_predictions(model, batch)
    assert torch.allclose(logits, full[scored], atol=1e-6) and torch.equal(targets, batch.targets[scored])


def test_a_causal_lm_without_positions_steps_as_it_runs_and_sees_order_only_through_its_mixers():
    from tokenmix.models import CausalLM

    torch.manual_seed(0)
    model = CausalLM(64, ["baseconv", "softmax"], 16, 2, 32, positions=False, dropout=0.0).eval()
    assert model.position_embedding is None
    ids = torch.randint(1, 64, (2, 12))
    full = model(ids)
    states = [block.mixer.init_state(2) for block in model.blocks]
    for t in range(12):
        logits, states = model._step(ids[:, t], t, states)
        assert torch.allclose(logits, full[:, t], atol=1e-5)
    # with no positions and no mixing, a token's output is the same wherever it stands
    pointwise = CausalLM(64, "mlp", 16, 1, 32, positions=False, dropout=0.0).eval()
    same = torch.full((1, 5), 7)
    out = pointwise(same)
    assert torch.allclose(out[0, 0], out[0, 4])
