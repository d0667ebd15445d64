"""The recall sweep's files are what tokenmix.training.recallsweep writes, and its claims name labels the files
train."""

from pathlib import Path

import pytest

from tokenmix.training.experiment import load_experiment
from tokenmix.training.recallsweep import (CELLS, CONV_FILE, CONV_WIDTHS, REACH, SEEDS, SHORTCONV_FILE,
                                          SHORTCONV_FILES, SHORTCONV_MECHANISMS, SHORTCONV_SIZE, WINDOW_FILE,
                                          WINDOWS, claims, conv_claims, conv_file_text, file_text, shortconv_claims,
                                          shortconv_file_text, window_claims, window_file_text, window_reach)

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def _reuses_the_sweep_runs(name, claims, length=64):
    """The added file ``name``: its claims compare its labels, it has the ``length``-token file's task, training and
    seeds, and every label that file has is trained exactly as there (so its rows are reused, not retrained).
    Returns the file and those shared labels."""
    experiment = load_experiment(EXPERIMENTS / f"{name}.toml")
    labels = {entry.label for entry in experiment.mixers}
    assert all(claim["a"] in labels and claim["b"] in labels for claim in claims)
    base = load_experiment(EXPERIMENTS / f"002-zoology-mqar-{length}.toml")
    assert (experiment.task, experiment.train, experiment.seeds) == (base.task, base.train, base.seeds)
    same = {e.label: e for e in base.mixers}
    for entry in experiment.mixers:
        if entry.label in same:
            assert entry == same[entry.label]
    return experiment, same


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


def test_the_window_file_is_what_the_plan_writes_and_its_claims_compare_its_labels():
    assert (EXPERIMENTS / f"{WINDOW_FILE}.toml").read_text() == window_file_text()
    experiment = load_experiment(EXPERIMENTS / f"{WINDOW_FILE}.toml")
    labels = {entry.label for entry in experiment.mixers}
    assert all(claim["a"] in labels and claim["b"] in labels for claim in window_claims())
    # the 64-token file's task and training, so its rows read beside that file's
    base = load_experiment(EXPERIMENTS / "002-zoology-mqar-64.toml")
    assert (experiment.task, experiment.train, experiment.seeds) == (base.task, base.train, base.seeds)
    assert {e.label: e.options for e in experiment.mixers if e.mixer == "window_linear"} == {
        f"window_linear-w{w}-d64": {"window": w} for w in WINDOWS}


def test_window_reach_counts_the_queries_whose_value_the_window_holds():
    # the nearest a query stands to its pair's value is 1 token (the last pair asked first), so a window of one
    # token (the query alone) holds none, the whole sequence holds all; the two windows swept hold few and most
    assert window_reach(1) == 0.0 and window_reach(64) == 1.0
    assert 0 < window_reach(2) < window_reach(WINDOWS[0]) < 0.15 < 0.7 < window_reach(WINDOWS[1]) < 1


def test_the_long_convolution_file_is_what_the_plan_writes_and_shares_the_64_token_runs():
    assert (EXPERIMENTS / f"{CONV_FILE}.toml").read_text() == conv_file_text()
    # softmax and the short filter exactly as the 64-token file trains them (so its rows are reused, not retrained)
    experiment, same = _reuses_the_sweep_runs(CONV_FILE, conv_claims())
    assert {"softmax-d64", "baseconv-d64"} <= {e.label for e in experiment.mixers} & set(same)
    assert {e.label: (e.options, e.model["dim"]) for e in experiment.mixers if e.label not in same} == {
        f"baseconv-long-d{w}": ({"kernel_size": None}, w) for w in CONV_WIDTHS}
    # the short filter's reach quoted in the first claim's source: 2 layers of 3 taps see 4 tokens back
    assert f"lies that close for {100 * window_reach(5):.1f} % of the queries" in REACH
    assert len(conv_claims()) / 12870 < 0.005


@pytest.mark.parametrize("length", list(SHORTCONV_FILES))
def test_the_short_convolution_files_are_what_the_plan_writes_and_share_the_sweep_runs(length):
    name = SHORTCONV_FILES[length]
    assert (EXPERIMENTS / f"{name}.toml").read_text() == shortconv_file_text(length)
    # the bare layers, linear and softmax attention exactly as the sweep's file trains them (their rows reused)
    experiment, same = _reuses_the_sweep_runs(name, shortconv_claims(length), length)
    labels = {e.label for e in experiment.mixers}
    assert {"softmax-d64", "linear-d64", *(f"{m}-d64" for m in SHORTCONV_MECHANISMS)} <= labels & set(same)
    assert {e.label: (e.mixer, e.options, e.model["dim"]) for e in experiment.mixers if e.label not in same} == {
        f"{m}-conv{SHORTCONV_SIZE}-d64": (m, {"conv_size": SHORTCONV_SIZE}, 64) for m in SHORTCONV_MECHANISMS}
    # each layer with and without its filter is a claim, and the file's family leaves room at 8 v 8 seeds
    pairs = {(c["a"], c["b"]) for c in shortconv_claims(length)}
    assert all((f"{m}-conv{SHORTCONV_SIZE}-d64", f"{m}-d64") in pairs for m in SHORTCONV_MECHANISMS)
    assert len(shortconv_claims(length)) / 12870 < 0.005
    assert all(f"{length} tokens" in c["text"] for c in shortconv_claims(length))
    assert experiment.task["seq_len"] == length and SHORTCONV_FILE == SHORTCONV_FILES[64]
