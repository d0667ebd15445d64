"""Tests of tokenmix.steptime and tokenmix.timing: the rows' shape and order, that a timed step trains, the
slope fit on made-up rows, and the CLI end to end. Tiny models; no assertion on how long anything takes."""

from __future__ import annotations

import csv
import math
import struct

import numpy as np
import pytest
import torch

from tokenmix.cli import main
from tokenmix.training.experiment import Experiment
from tokenmix.steptime import COLUMNS, slopes, step_summary, time_scaling, time_training_steps, training_cases
from tokenmix.timing import measure, median_interval

TINY = {"name": "tiny", "seeds": [0, 1],
        "task": {"name": "listops", "preset": "quick", "train_size": 32, "val_size": 8, "test_size": 8},
        "model": {"dim": 8, "depth": 1, "heads": 1}, "train": {"max_steps": 20, "batch_size": 4},
        "report": {"baseline": False}, "mixers": ["softmax", "linear"]}
FAST = {"min_run_time": 1e-3}


@pytest.fixture(scope="module")
def tiny() -> Experiment:
    return Experiment.from_dict(TINY)


def test_measure_reports_the_blocks():
    timing = measure(lambda: sum(range(100)), min_run_time=1e-3, warmup=1)
    assert timing.runs == len(timing.times) >= 1 and timing.number_per_run >= 1
    assert timing.median > 0 and timing.mean > 0 and timing.iqr >= 0


def test_every_label_every_round_interleaved(tiny):
    rows = time_training_steps(tiny, rounds=2, **FAST)
    assert [(r["label"], r["round"]) for r in rows] == [("softmax", 1), ("linear", 1), ("softmax", 2), ("linear", 2)]
    for row in rows:
        assert list(row) == COLUMNS
        assert row["kind"] == "experiment" and row["experiment"] == "tiny" and row["threads"] == 1
        assert row["batch"] == 4 and row["length"] > 0 and row["step_s"] > 0 and row["peak_mb"] == ""
    rotated = time_training_steps(tiny, rounds=2, rotate=True, labels=["linear", "softmax"], **FAST)
    assert [r["label"] for r in rotated] == ["linear", "softmax", "softmax", "linear"]


def test_a_time_budget_keeps_whole_rounds(tiny):
    with pytest.warns(UserWarning, match="stopped after 1 of 5 rounds"):
        rows = time_training_steps(tiny, rounds=5, budget=1e-9, **FAST)
    assert [r["round"] for r in rows] == [1, 1]


def test_unknown_label_is_named(tiny):
    with pytest.raises(ValueError, match="nope"):
        time_training_steps(tiny, rounds=1, labels=["nope"], **FAST)


def test_a_timed_step_trains(tiny):
    case = training_cases(tiny, labels=["linear"])[0]
    before = [p.detach().clone() for p in case.model.parameters()]
    loss = case.step()
    assert math.isfinite(loss)
    assert any(not torch.equal(a, p) for a, p in zip(before, case.model.parameters()))


def test_slopes_recover_known_exponents():
    rows = []
    for round_ in range(1, 8):
        noise = 1 + 0.1 * round_  # a disturbance that hits a whole round alike leaves the slope alone
        for n in (256, 512, 1024, 2048):
            rows.append({"label": "quad", "round": round_, "length": n, "step_s": 3e-9 * n ** 2 * noise})
            rows.append({"label": "lin", "round": round_, "length": str(n), "step_s": str(2e-6 * n * noise)})
    fitted = slopes(rows)
    assert list(fitted) == ["quad", "lin"]
    assert fitted["quad"].median == pytest.approx(2.0) and len(fitted["quad"].per_round) == 7
    assert fitted["lin"].low == pytest.approx(1.0) and fitted["lin"].high == pytest.approx(1.0)


def test_median_interval_order_statistics():
    values = list(range(10, 0, -1))  # 1..10, unsorted
    assert median_interval(values) == (5.5, 2, 9)  # n = 10: the 2nd and 9th smallest (97.9%)
    assert median_interval([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)  # too few for 95%: the range


def test_scaling_rows_and_memory(tiny):
    rows = time_scaling(tiny, [8, 32], rounds=2, labels=["softmax"], memory=False, **FAST)
    assert [(r["length"], r["round"]) for r in rows] == [(8, 1), (32, 1), (8, 2), (32, 2)]
    assert all(r["kind"] == "scaling" and r["batch"] == 1 and r["peak_mb"] == "" for r in rows)
    assert set(slopes(rows)) == {"softmax"}
    # longer than the task's own sequences (100 tokens): the model is built for them
    rows = time_scaling(tiny, [128], rounds=1, labels=["linear"], memory=True, **FAST)
    assert isinstance(rows[0]["peak_mb"], float) and rows[0]["peak_mb"] >= 0 and rows[0]["memory"] == "once"


def test_memory_every_round_is_a_fresh_measurement_per_round(tiny, monkeypatch):
    import tokenmix.steptime as steptime

    calls = []
    monkeypatch.setattr(steptime, "_peak_mb", lambda *args: calls.append((args[1].label, args[4])) or
                        float(len(calls)))
    rows = time_scaling(tiny, [8, 32], rounds=2, memory_rounds=True, **FAST)
    # every round measures every (label, length) anew, in rounds over the cases, before any timing
    assert calls == [("softmax", 8), ("softmax", 32), ("linear", 8), ("linear", 32)] * 2
    assert {(r["label"], r["length"], r["round"]): r["peak_mb"] for r in rows} == {
        ("softmax", 8, 1): 1.0, ("softmax", 32, 1): 2.0, ("linear", 8, 1): 3.0, ("linear", 32, 1): 4.0,
        ("softmax", 8, 2): 5.0, ("softmax", 32, 2): 6.0, ("linear", 8, 2): 7.0, ("linear", 32, 2): 8.0}
    assert {r["memory"] for r in rows} == {"round"}
    summary = {(s["label"], s["length"]): s["peak_mb"] for s in step_summary(rows)}
    assert summary[("softmax", 8)] == 3.0 and summary[("linear", 32)] == 6.0  # the median over the rounds
    with pytest.raises(ValueError, match="memory_rounds measures memory"):
        time_scaling(tiny, [8], rounds=1, memory=False, memory_rounds=True, **FAST)


def test_inference_rows_time_a_forward_pass_without_gradients(tiny):
    rows = time_scaling(tiny, [8, 32], rounds=2, labels=["linear", "softmax"], memory=False, inference=True, **FAST)
    assert {r["kind"] for r in rows} == {"inference"} and len(rows) == 8
    assert all(r["step_s"] > 0 and r["peak_mb"] == "" and r["memory"] == "" for r in rows)
    with pytest.raises(ValueError, match="inference pass records no memory"):
        time_scaling(tiny, [8], rounds=1, inference=True, **FAST)


def test_an_inference_case_is_eval_mode_and_leaves_no_gradients(tiny):
    from tokenmix.steptime import _inference_case, _shell
    from tokenmix.training.build import make_task

    task = make_task(tiny)
    run = next(r for r in tiny.runs(task.info.kind) if r.label == "softmax")
    case = _inference_case(_shell(task, 16, (4, 4)), run, 16, 2, 0)
    before = [p.detach().clone() for p in case.model.parameters()]
    case.step()
    assert not case.model.training
    assert all(p.grad is None for p in case.model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, case.model.parameters()))


def test_memory_every_round_in_fresh_processes(tiny):
    rows = time_scaling(tiny, [64], rounds=2, labels=["linear"], memory_rounds=True, **FAST)
    assert [r["memory"] for r in rows] == ["round", "round"]
    assert all(isinstance(r["peak_mb"], float) and r["peak_mb"] >= 0 for r in rows)


def _fashion_files(root) -> None:
    """Tiny Fashion-MNIST IDX files (20 training and 4 test images)."""
    rng = np.random.default_rng(0)
    root.mkdir()
    for prefix, n in (("train", 20), ("t10k", 4)):
        images, labels = rng.integers(0, 256, (n, 28, 28)), rng.integers(0, 10, n)
        for kind, array in (("images-idx3", images), ("labels-idx1", labels)):
            header = struct.pack(">I", 0x0800 | array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
            (root / f"{prefix}-{kind}-ubyte").write_bytes(header + array.astype(np.uint8).tobytes())


def test_image_task_counts_patches_and_takes_square_grids(tmp_path):
    _fashion_files(tmp_path / "fm")
    experiment = Experiment.from_dict({**TINY, "task": {"name": "fashion", "root": str(tmp_path / "fm"),
                                                        "val_size": 4}})
    assert [c.length for c in training_cases(experiment)] == [49, 49]  # 28 x 28 in 4 x 4 patches
    with pytest.warns(UserWarning, match=r"square.*\[10\]"):
        rows = time_scaling(experiment, [4, 9, 10], rounds=1, memory=False, **FAST)
    assert [(r["label"], r["length"]) for r in rows] == [("softmax", 4), ("linear", 4), ("softmax", 9), ("linear", 9)]


def test_cli_end_to_end(tmp_path, capsys, monkeypatch):
    config = tmp_path / "tiny.toml"
    config.write_text('name = "tiny"\nseeds = [0]\nmixers = ["softmax", "linear"]\n'
                      '[task]\nname = "listops"\ntrain_size = 32\nval_size = 8\ntest_size = 8\n'
                      '[model]\ndim = 8\ndepth = 1\nheads = 1\n[train]\nmax_steps = 20\nbatch_size = 4\n'
                      '[report]\nbaseline = false\n')
    monkeypatch.setattr("os.getloadavg", lambda: (99.0, 99.0, 99.0))
    out = tmp_path / "steps.csv"
    main(["steptime", "--config", str(config), "--rounds", "2", "--min-run-time", "0.001", "--out", str(out)])
    printed = capsys.readouterr()
    assert "timings are unreliable" in printed.err
    # outside a checkout there is no docs/reproduction to default to: the error says what to pass, before timing
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="no folder 'docs/reproduction' here .*pass --out FILE.csv"):
        main(["steptime", "--config", str(config), "--rounds", "1"])
    assert not (tmp_path / "docs").exists()
    assert "s/epoch" in printed.out and "x softmax" in printed.out
    with open(out, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == COLUMNS and len(rows) == 4
    assert [s["label"] for s in step_summary(rows)] == ["softmax", "linear"]
    scaling = tmp_path / "scaling.csv"
    main(["steptime", "--config", str(config), "--rounds", "1", "--min-run-time", "0.001", "--lengths", "8,16",
          "--no-memory", "--labels", "linear", "--out", str(scaling)])
    assert "slope" in capsys.readouterr().out
    with open(scaling, newline="") as f:
        assert [(r["kind"], r["length"]) for r in csv.DictReader(f)] == [("scaling", "8"), ("scaling", "16")]
    # --scaling: at the file's [report] harness_lengths
    with pytest.raises(SystemExit, match="tiny sets no \\[report\\] harness_lengths; give --lengths"):
        main(["steptime", "--config", str(config), "--scaling", "--out", str(scaling)])
    config.write_text(config.read_text().replace("baseline = false\n", "baseline = false\nharness_lengths = [4, 8]\n"))
    main(["steptime", "--config", str(config), "--rounds", "1", "--min-run-time", "0.001", "--no-memory", "--scaling",
          "--labels", "linear", "--out", str(scaling)])
    with open(scaling, newline="") as f:
        assert [(r["kind"], r["length"]) for r in csv.DictReader(f)] == [("scaling", "4"), ("scaling", "8")]
    # --inference: one forward pass per (label, N), no memory
    inference = tmp_path / "inference.csv"
    main(["steptime", "--config", str(config), "--rounds", "1", "--min-run-time", "0.001", "--scaling", "--inference",
          "--labels", "linear", "--out", str(inference)])
    with open(inference, newline="") as f:
        assert [(r["kind"], r["length"], r["peak_mb"]) for r in csv.DictReader(f)] == [("inference", "4", ""),
                                                                                       ("inference", "8", "")]
    for flag in ("--inference", "--memory-rounds", "--no-memory"):  # without lengths: refused, not ignored
        with pytest.raises(SystemExit, match=f"{flag} goes with synthetic lengths: give --lengths or --scaling"):
            main(["steptime", "--config", str(config), flag, "--out", str(inference)])
    with pytest.raises(SystemExit, match="--inference records no memory"):
        main(["steptime", "--config", str(config), "--scaling", "--inference", "--memory-rounds", "--out",
              str(inference)])
