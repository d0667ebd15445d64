"""tokenmix compare and train from the CLI, on a tiny generated task."""

from __future__ import annotations

import csv

import pytest

from tokenmix.cli import main
from tokenmix.compare import COLUMNS, CompareSettings, compare, skip_reason
from tokenmix.tasks import create_task

TINY = CompareSettings(task="recall", mixers=["mlp", "softmax", "swin"], seeds=[0, 1], dim=16, depth=1,
                       max_steps=6, eval_every=3, batch_size=16)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    return out, compare(TINY, out)


def test_a_two_mixer_compare_writes_every_output(tiny_run):
    out, rows = tiny_run
    for name in ["results.csv", "report.md", "metric_vs_time.png", "metric_vs_epoch_time.png"]:
        assert (out / name).stat().st_size > 0
    with open(out / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == COLUMNS
    trained = [r for r in table if not r["skipped"]]
    expected = {(m, s) for m in ("mlp", "softmax") for s in ("0", "1")}
    assert {(r["mixer"], r["seed"]) for r in trained} == expected
    assert all(r["metric"] == "accuracy" and 0.0 <= float(r["value"]) <= 1.0 for r in trained)
    report = (out / "report.md").read_text()
    assert "| mlp |" in report and "| softmax |" in report


def test_skipped_mixers_appear_with_a_reason(tiny_run):
    out, rows = tiny_run
    skipped = [r for r in rows if r["skipped"]]
    assert [r["mixer"] for r in skipped] == ["swin"] and "spatial" in skipped[0]["skipped"]
    assert "swin: spatial" in (out / "report.md").read_text()


def test_the_same_seed_gives_identical_metrics(tiny_run, tmp_path):
    _, rows = tiny_run
    again = compare(CompareSettings(**{**TINY.__dict__, "mixers": ["softmax"], "seeds": [1]}), tmp_path)
    first = next(r for r in rows if r["mixer"] == "softmax" and r["seed"] == 1)
    assert again[0]["value"] == first["value"] and again[0]["best_val"] == first["best_val"]


def test_skip_reasons_follow_the_registry():
    classification = create_task("recall")
    assert skip_reason("softmax", classification) is None
    assert "causal only" in skip_reason("extractor_we", classification)
    assert "spatial" in skip_reason("pvt", classification)


def test_cli_train_and_compare(tmp_path, capsys):
    main(["train", "--task", "recall", "--mixer", "linear", "--max-steps", "4", "--dim", "16", "--depth", "1",
          "--batch-size", "16", "--eval-every", "2", "--out", str(tmp_path / "train")])
    assert "best val accuracy" in capsys.readouterr().out
    assert (tmp_path / "train" / "log.jsonl").exists()
    main(["compare", "--task", "recall", "--mixers", "mlp,relation", "--seeds", "0", "--max-steps", "4",
          "--out", str(tmp_path / "cmp")])
    assert "| relation |" in capsys.readouterr().out
    main(["compare", "--task", "recall", "--mixers", "relation", "--seeds", "0", "--max-steps", "2",
          "--out", str(tmp_path / "baseline")])
    assert "| mlp |" in capsys.readouterr().out  # the baseline is always on the leaderboard
