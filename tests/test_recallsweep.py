"""The recall sweep's files are what tokenmix.training.recallsweep writes, and its claims name labels the files
train."""

from pathlib import Path

import pytest

from tokenmix.training.experiment import load_experiment
from tokenmix.training.recallsweep import CELLS, SEEDS, claims, file_text

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


@pytest.mark.parametrize("length", list(CELLS))
def test_the_committed_file_is_what_the_plan_writes(length):
    assert (EXPERIMENTS / f"002-zoology-mqar-{length}.toml").read_text() == file_text(length)


@pytest.mark.parametrize("length", list(CELLS))
def test_every_claim_compares_labels_the_file_trains_and_seeds_can_decide_it(length):
    experiment = load_experiment(EXPERIMENTS / f"002-zoology-mqar-{length}.toml")
    labels = {entry.label for entry in experiment.mixers}
    for claim in claims(length):
        assert claim["a"] in labels and (isinstance(claim["b"], float) or claim["b"] in labels), claim["text"]
    # every training sequence seen once: no example repeats across the steps
    assert experiment.task["train_size"] >= experiment.train["max_steps"] * experiment.train["batch_size"]
    # Holm over the file's family at the smallest attainable p stays ten times below 0.05: 8 v 8 seeds for the
    # comparisons (1 / C(16, 8)), 8 seeds above a constant for the sign test (1 / 2^8)
    assert experiment.seeds == SEEDS and len(SEEDS) == 8
    assert len(claims(length)) / 12870 < 0.005 and 1 / 2 ** 8 < 0.005
