"""scripts/reproduction.py (docs/reproduction.md from the collected CSVs), scripts/collect_results.py: the exact
tests and Holm's correction against known values, verdicts on constructed data, the generated sections."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from tokenmix.compare import COLUMNS
from tokenmix.experiment import load_experiment, to_toml

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


rp = _script("reproduction")
collect_results = _script("collect_results")


# -- fixtures ----------------------------------------------------------------------------------------------
def _row(name: str, label: str, seed: int, metric: str = "accuracy", **values: float | str) -> dict:
    row = {"experiment": name, "task": "t", "label": label, "mixer": label, "seed": seed, "params": 1000,
           "metric": metric, "value": 0.7, "best_val": 0.7, "best_epoch": 1.0, "steps": 10, "time_per_epoch_s": 1.0,
           "time_to_target_s": "", "wall_s": 10.0, "tokens_per_s": 100.0, "peak_mem_mb": 50.0}
    row.update(values)
    return row


def _history(label: str, seed: int, losses: list[float], metric: float = 0.7) -> list[dict]:
    return [{"label": label, "seed": seed, "step": 10 * (i + 1), "epoch": 0.1 * (i + 1), "wall_s": 5.0 * (i + 1),
             "train_loss": loss, "val_loss": loss, "val_metric": metric} for i, loss in enumerate(losses)]


def write_000(data: Path, relation_epoch: list[float], chance: float = 0.6) -> None:
    """000 with 5 seeds: linear and softmax clearly slower than ``relation_epoch``; mlp at chance."""
    name = "000-time-to-accuracy"
    epochs = {"relation": relation_epoch, "linear": [2.0, 2.1, 2.2, 2.3, 2.4],
              "softmax": [10.0, 11.0, 12.0, 13.0, 14.0], "mlp": [0.5] * 5}
    rows, history = [], []
    for label, times in epochs.items():
        for seed, t in enumerate(times):
            reach = {"relation": 20.0 + seed, "linear": 30.0 + seed, "softmax": ""}.get(label, "")
            value = chance + (0.001 * (seed - 2) if label == "mlp" else 0.1)
            rows.append(_row(name, label, seed, value=value, time_per_epoch_s=t, time_to_target_s=reach))
            history += _history(label, seed, [0.7, 0.6, 0.5])
    collect_results.write_csv(data / f"{name}.csv", COLUMNS, rows)
    collect_results.write_csv(data / f"{name}-history.csv", collect_results.HISTORY_COLUMNS, history)
    collect_results.write_csv(data / f"{name}-chance.csv", collect_results.CHANCE_COLUMNS,
           [{"majority_class": 0, "train_rate": chance, "test_rate": chance}])


def write_004(data: Path) -> None:
    """004 with 3 seeds: SHE lowest, the others apart; training cost from three windows."""
    name = "004-extractors-lm"
    costs = {"softmax-1h": 6.0, "softmax-32h": 5.0, "SHE": 4.0, "HE": 4.5, "WE": 5.0, "ME": 6.0}
    rows, history = [], []
    for label, cost in costs.items():
        for seed in range(3):
            rows.append(_row(name, label, seed, metric="perplexity", value=math.exp(cost), best_val=math.exp(cost)))
            history += _history(label, seed, [9.0, cost + 0.01 * seed, cost - 1.0])
    collect_results.write_csv(data / f"{name}.csv", COLUMNS, rows)
    collect_results.write_csv(data / f"{name}-history.csv", collect_results.HISTORY_COLUMNS, history)


def section(text: str, start: str) -> str:
    """The document's level-2 section whose heading starts with ``start``."""
    for part in text.split("\n## "):
        if part.startswith(start):
            return part
    raise AssertionError(f"no section {start!r}")


# -- statistics --------------------------------------------------------------------------------------------
def test_mann_whitney_exact_values():
    assert rp.mann_whitney_p([4, 5, 6], [1, 2, 3]) == pytest.approx(0.05)  # 1 / C(6, 3)
    assert rp.mann_whitney_p([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]) == pytest.approx(1 / 252)  # 1 / C(10, 5)
    assert rp.mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(1.0)
    # U(a > b) = 1 for a = {1, 2, 4}, b = {3, 5, 6}: P(U >= 1) = 19/20, and for b over a P(U >= 8) = 2/20
    assert rp.mann_whitney_p([1, 2, 4], [3, 5, 6]) == pytest.approx(0.95)
    assert rp.mann_whitney_p([3, 5, 6], [1, 2, 4]) == pytest.approx(0.10)
    assert rp.mann_whitney_p([1.0, 1.0], [1.0, 1.0]) == pytest.approx(1.0)  # ties: no evidence either way
    assert rp.mann_whitney_p([math.inf, math.inf], [1.0, 2.0]) == pytest.approx(1 / 6)  # never reached = last


def test_sign_test_and_smallest_p():
    assert rp.sign_test_p(5, 5) == pytest.approx(1 / 32)
    assert rp.sign_test_p(4, 5) == pytest.approx(6 / 32)
    assert rp.sign_test_p(0, 5) == 1.0
    assert rp.smallest_p([1.0] * 3, [1.0] * 3) == pytest.approx(0.05)
    assert rp.smallest_p([1.0] * 5, 0.5) == pytest.approx(1 / 32)


def test_holm():
    assert rp.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert rp.holm([0.2]) == [0.2]
    assert rp.holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert rp.holm([0.3, 0.2, 0.01]) == pytest.approx([0.4, 0.4, 0.03])  # monotone: 0.3 x 1 < 0.2 x 2
    assert rp.holm([0.9, 0.8, 0.7]) == [1.0, 1.0, 1.0]  # capped at 1


# -- verdicts ----------------------------------------------------------------------------------------------
def _judge(claims: list, data: dict[str, list[float] | float]) -> list:
    return rp.judge(claims, lambda c: (data[c.a], data[c.b] if c.b else data["chance"], ""))


def _claim(relation: str, factor: float = 1.0, margin: float = 0.0, b: str | None = "b"):
    return rp.Claim("a vs b", "p", "a", b, "value", relation, factor, margin)


LOW, HIGH = [1.0, 1.1, 1.2, 1.3, 1.4], [2.0, 2.1, 2.2, 2.3, 2.4]


def test_clear_win_holds_clear_loss_does_not_overlap_is_inconclusive():
    win, loss, overlap = _judge([_claim("less")], {"a": LOW, "b": HIGH}), \
        _judge([_claim("less")], {"a": HIGH, "b": LOW}), \
        _judge([_claim("less")], {"a": [1.0, 2.0, 3.0, 4.0, 5.0], "b": [1.5, 2.5, 3.5, 4.5, 5.5]})
    assert win[0].verdict == rp.HOLDS and win[0].p_for == pytest.approx(1 / 252)
    assert loss[0].verdict == rp.FAILS and loss[0].p_against == pytest.approx(1 / 252)
    assert overlap[0].verdict == rp.OPEN and "Holm-adjusted p" in overlap[0].reason


def test_factor_scales_the_reference():
    # 1.0-1.4 s is below ½ x 11-11.4 s; it is below 1.5-1.9 s, but not below half of it
    assert _judge([_claim("less", 0.5)], {"a": LOW, "b": [10.0 + v for v in LOW]})[0].verdict == rp.HOLDS
    near = {"a": LOW, "b": [1.5, 1.6, 1.7, 1.8, 1.9]}
    assert _judge([_claim("less")], near)[0].verdict == rp.HOLDS
    assert _judge([_claim("less", 0.5)], near)[0].verdict == rp.FAILS


def test_three_seeds_and_holm_make_it_inconclusive():
    claims = [_claim("less"), _claim("greater")]
    outcomes = _judge(claims, {"a": [1.0, 1.1, 1.2], "b": [2.0, 2.1, 2.2]})
    assert outcomes[0].p_for == pytest.approx(0.05) and outcomes[0].adjusted == pytest.approx(0.1)
    assert [o.verdict for o in outcomes] == [rp.OPEN, rp.OPEN]
    assert "n = 3 vs 3 seeds: the smallest attainable p is 0.05" in outcomes[0].reason


def test_holm_across_claims_of_one_experiment():
    # raw p = 7/252 = 0.028: significant alone; after three clear wins (1/252) Holm's last step compares it
    # with 0.05 itself (holds); four such claims need 4 x 7/252 = 0.11 (inconclusive)
    data = {"weak": [1.0, 1.1, 1.2, 1.3, 2.25], "strong": LOW, "b": HIGH}
    claims = [rp.Claim(a, "p", a, "b", "value", "less") for a in ("strong", "strong", "strong", "weak")]
    samples = lambda c: (data[c.a], data[c.b], "")  # noqa: E731
    assert rp.judge([claims[3]], samples)[0].p_for == pytest.approx(7 / 252)
    outcomes = rp.judge(claims, samples)
    assert [o.verdict for o in outcomes] == [rp.HOLDS] * 4
    assert [o.adjusted for o in outcomes] == pytest.approx([4 / 252] * 3 + [7 / 252])
    outcomes = rp.judge([claims[3]] * 4, samples)
    assert [o.verdict for o in outcomes] == [rp.OPEN] * 4
    assert outcomes[0].adjusted == pytest.approx(28 / 252)


def test_approx_claims_by_two_one_sided_tests():
    same = {"a": [1.00, 1.01, 0.99, 1.02, 0.98], "b": [1.0, 1.01, 0.99, 1.0, 1.02]}
    apart = {"a": LOW, "b": HIGH}
    assert _judge([_claim("approx", margin=0.05)], same)[0].verdict == rp.HOLDS
    outcome = _judge([_claim("approx", margin=0.05)], apart)[0]
    assert outcome.verdict == rp.FAILS and outcome.p_against == pytest.approx(1 / 252)
    wide = {"a": [1.0, 1.3, 0.7, 1.2, 0.8], "b": [1.0, 1.25, 0.75, 1.1, 0.9]}
    assert _judge([_claim("approx", margin=0.05)], wide)[0].verdict == rp.OPEN


def test_approx_against_a_constant_uses_the_sign_test():
    near = _judge([_claim("approx", margin=0.05, b=None)], {"a": [0.6, 0.601, 0.599, 0.6, 0.602], "chance": 0.6})
    assert near[0].verdict == rp.HOLDS and near[0].p_for == pytest.approx(1 / 32)
    above = _judge([_claim("approx", margin=0.05, b=None)], {"a": [0.8, 0.81, 0.82, 0.83, 0.84], "chance": 0.6})
    assert above[0].verdict == rp.FAILS


def test_training_cost_is_the_median_of_the_last_three_windows():
    run = rp.Run("x", 0, {}, [{"train_loss": str(v)} for v in (9.0, 5.0, 4.0, 4.5)])
    assert rp.training_cost(run) == pytest.approx(4.5)
    assert rp.last_window_loss(run) == pytest.approx(4.5)
    assert rp.training_cost(rp.Run("x", 0, {}, [])) is None


# -- the document ------------------------------------------------------------------------------------------
def test_no_data_every_experiment_not_run_yet(tmp_path):
    out = tmp_path / "reproduction.md"
    assert rp.main([str(tmp_path / "data"), "--out", str(out), "--no-plots"]) == 0
    text = out.read_text()
    for name in ("004-extractors-lm", "000-time-to-accuracy", "001-kerformer-listops", "001-kerformer-fashion",
                 "002-vision-fashion", "003-contextualizer-reviews"):
        assert f"`tokenmix compare --config experiments/{name}.toml`" in text
        assert f"| `{name}` | all | not run yet |" in text
    body = text.split("## How the verdicts are computed")[1].split("\n## ", 1)[1]
    assert "**holds**" not in body and "inconclusive at this scale**" not in body
    assert "Not run yet" in section(text, "Gan et al. (2023)").split("Time and memory")[1]


def test_000_clear_win_holds_with_table_and_plot(tmp_path):
    data, out = tmp_path / "data", tmp_path / "doc" / "reproduction.md"
    data.mkdir()
    write_000(data, relation_epoch=[1.0, 1.1, 1.2, 1.3, 1.4])
    rp.main([str(data), "--out", str(out)])
    part = section(out.read_text(), "Yamada et al. (2022)")
    assert "| label | mixer | seeds | params | test accuracy | best val accuracy | s / epoch | time to 0.75 (s) |" \
        in part
    assert "| relation | relation | 5 | 1,000 | 0.7 ± 0 | 0.7 ± 0 | 1.2 ± 0.1581 | 22 ± 1.581 | 50 ± 0 |" in part
    assert "not reached" in part  # softmax never reached the target
    assert "Majority-class rate (test share of the train split's majority class): 0.6." in part
    assert part.count("| **holds** |") == 4
    assert (data / "img" / "000-time-to-accuracy-metric_vs_time.png").stat().st_size > 0
    assert "](../data/img/000-time-to-accuracy-metric_vs_time.png)" in part
    assert "**Not run yet.**" in section(out.read_text(), "Chen (2023)")


def test_000_clear_loss_does_not_hold_and_overlap_is_inconclusive(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_000(data, relation_epoch=[3.0, 3.1, 3.2, 3.3, 3.4])  # slower than linear's 2.0-2.4
    part = section(rp.render(data, tmp_path / "r.md", plots=False), "Yamada et al. (2022)")
    assert "| Relation's time per epoch is below linear attention's |" in part
    line = next(x for x in part.splitlines() if x.startswith("| Relation's time per epoch is below linear"))
    assert line.endswith("| **does not hold** |")
    write_000(data, relation_epoch=[1.9, 2.05, 2.15, 2.25, 2.5])  # interleaved with linear's
    part = section(rp.render(data, tmp_path / "r.md", plots=False), "Yamada et al. (2022)")
    line = next(x for x in part.splitlines() if x.startswith("| Relation's time per epoch is below linear"))
    assert "**inconclusive at this scale**: n = 5 vs 5 seeds: Holm-adjusted p" in line


def test_004_training_cost_three_seeds_generations(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_004(data)
    (data / "004-generations.txt").write_text("SHE: Once upon a time there was a little princess who sang\n")
    part = section(rp.render(data, tmp_path / "r.md", plots=False), "Chen (2023)")
    assert "training cost (median of the last 3 windows)" in part and "last window's training loss" in part
    assert "With 300 steps in all, those windows span the whole run" in part  # read from the experiment file
    assert "| SHE | SHE | 3 | 1,000 | 54.6 ± 0 | 54.6 ± 0 | 4.01 ± 0.01 | 3 ± 0 |" in part
    assert part.count("n = 3 vs 3 seeds: the smallest attainable p is 0.05, × 6 claims (Holm) = 0.3") == 6
    assert "```text\nSHE: Once upon a time there was a little princess who sang\n```" in part


def test_missing_label_is_not_measured(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_004(data)
    rows = [r for r in rp.read_csv(data / "004-extractors-lm.csv") if r["label"] != "ME"]
    collect_results.write_csv(data / "004-extractors-lm.csv", COLUMNS, rows)
    part = section(rp.render(data, tmp_path / "r.md", plots=False), "Chen (2023)")
    assert "**not measured**: no data for ME" in part


def test_speed_table(tmp_path):
    from tokenmix.speed import COLUMNS as SPEED_COLUMNS

    data = tmp_path / "data"
    data.mkdir()
    base = {c: "" for c in SPEED_COLUMNS} | {"pass": "fwd", "causal": "False", "value_range": 2.0, "dim": 64,
                                             "heads": 1, "device": "cpu"}
    rows = [base | {"mixer": "softmax", "length": 1024, "time_ms": 5.0, "peak_mem_mb": 8.0, "status": "ok"},
            base | {"mixer": "kerformer", "length": 1024, "time_ms": 2.0, "peak_mem_mb": 1.0, "status": "ok"},
            base | {"mixer": "softmax", "length": 4096, "status": "oom"},
            base | {"mixer": "kerformer", "length": 4096, "time_ms": 8.0, "peak_mem_mb": 4.0, "status": "ok"}]
    collect_results.write_csv(data / "001-speed.csv", SPEED_COLUMNS, rows)
    text = rp.render(data, tmp_path / "r.md", plots=False)
    part = section(text, "Gan et al. (2023)")
    assert "| softmax | 5 ms, 8 MiB | oom |" in part
    assert "| **fastest** | kerformer | kerformer |" in part
    vision = section(text, "Ruggeri (2022)")  # its own speed table is not there yet: the command to make it
    assert "Not run yet: `tokenmix speed --mixers swin," in vision and "002-speed.csv" in vision
    assert "| softmax |" not in vision


# -- collect_results ---------------------------------------------------------------------------------------
def test_collect_results_copies_only_csvs(tmp_path):
    experiment = load_experiment(ROOT / "experiments" / "001-kerformer-listops.toml",
                                 ["task.train_size=60", "task.val_size=20", "task.test_size=20"])
    run_dir, out = tmp_path / "runs" / experiment.name, tmp_path / "docs"
    (run_dir / "runs" / "kerformer" / "seed0").mkdir(parents=True)
    (run_dir / "config.toml").write_text(to_toml(experiment.to_dict()))
    collect_results.write_csv(run_dir / "results.csv", COLUMNS, [_row(experiment.name, "kerformer", 0)])
    history = [{"step": 5, "epoch": 0.5, "wall_s": 1.23456789, "train_loss": 2.0, "val_loss": 1.9, "val_metric": 0.3}]
    (run_dir / "runs" / "kerformer" / "seed0" / "result.json").write_text(json.dumps({"history": history}))
    (run_dir / "runs" / "kerformer" / "seed0" / "best.safetensors").write_bytes(b"weights")
    written = collect_results.collect(run_dir, out)
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{experiment.name}{s}.csv"
                                                           for s in ("", "-history", "-chance"))
    assert [p.parent for p in written] == [out] * 3
    assert rp.read_csv(out / f"{experiment.name}-history.csv") == [
        {"label": "kerformer", "seed": "0", "step": "5", "epoch": "0.5", "wall_s": "1.234568", "train_loss": "2.0",
         "val_loss": "1.9", "val_metric": "0.3"}]
    chance = rp.read_csv(out / f"{experiment.name}-chance.csv")[0]
    assert 0 < float(chance["test_rate"]) <= 1 and 0 < float(chance["train_rate"]) <= 1


def test_collect_results_needs_a_finished_sweep(tmp_path, capsys):
    assert collect_results.main([str(tmp_path), str(tmp_path / "out")]) == 1
    assert "results.csv" in capsys.readouterr().err
