"""scripts/reproduction.py (docs/reproduction.md through ``tokenmix report``), scripts/collect_results.py: the exact
tests and Holm's correction against known values, verdicts on constructed data, the generated sections."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("scipy")

from tokenmix.study import stats  # noqa: E402
from tokenmix.report.document import render  # noqa: E402
from tokenmix.report.measures import (Run, Values, cost_source, last_window_loss, read_csv,  # noqa: E402
                                      training_cost)
from tokenmix.study.verdict import HOLDS, OPEN, OPPOSITE, judge, smallest_p  # noqa: E402
from tokenmix.study import power  # noqa: E402
from tokenmix.study.claims import Claim  # noqa: E402
from tokenmix.training.experiment import load_experiment  # noqa: E402
from tokenmix.training.tomlfile import to_toml  # noqa: E402
from tokenmix.training.results import COLUMNS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
HARNESS = ["experiment", "label", "kind", "length", "batch", "round", "step_s", "threads", "peak_mb"]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


rp = _script("reproduction")
collect_results = _script("collect_results")


# -- fixtures ----------------------------------------------------------------------------------------------
def write_rows(data: Path, name: str, rows: list[dict]) -> None:
    """``rows`` of ``experiments/<name>.toml`` with the config_hash its runs have (so the report pools them)."""
    from tokenmix.tasks import task_info
    from tokenmix.training.results import HASH_COLUMN, ROW_COLUMNS, config_hash, run_config

    experiment = load_experiment(ROOT / "experiments" / f"{name}.toml")
    runs = {(r.label, r.seed): r for r in experiment.runs(task_info(experiment.task["name"]).kind)}
    hashed = [{**row, HASH_COLUMN: config_hash(run_config(experiment, runs[(row["label"], int(row["seed"]))],
                                                          experiment.threads()))} for row in rows]
    collect_results.write_csv(data / f"{name}.csv", ROW_COLUMNS, hashed)


def _row(name: str, label: str, seed: int, metric: str = "accuracy", **values: float | str) -> dict:
    row = {"experiment": name, "task": "t", "label": label, "mixer": label, "seed": seed, "params": 1000,
           "metric": metric, "value": 0.7, "best_val": 0.7, "best_epoch": 1.0, "steps": 10, "time_per_epoch_s": 1.0,
           "time_to_target_s": "", "wall_s": 10.0, "tokens_per_s": 100.0, "peak_mem_mb": 50.0}
    row.update(values)
    return row


def _history(label: str, seed: int, losses: list[float], metric: float | list[float] = 0.7) -> list[dict]:
    metrics = metric if isinstance(metric, list) else [metric] * len(losses)
    return [{"label": label, "seed": seed, "step": 10 * (i + 1), "epoch": 0.1 * (i + 1), "wall_s": 5.0 * (i + 1),
             "train_loss": loss, "val_loss": loss, "val_metric": m} for i, (loss, m) in enumerate(zip(losses, metrics))]


def write_harness(data: Path, name: str, steps: dict[str, list[float]], exponents: dict[str, float]) -> None:
    """The step-time harness: per label one step time per round (kind "experiment"), and per label a scaling
    sweep over N = 256-16,384 whose time grows as N ** exponent (a little noise per round)."""
    rows = []
    for label, times in steps.items():
        rows += [{"experiment": name, "label": label, "kind": "experiment", "length": 64, "batch": 8, "round": r + 1,
                  "step_s": t, "threads": 1, "peak_mb": ""} for r, t in enumerate(times)]
    for label, exponent in exponents.items():
        for r in range(10):
            rows += [{"experiment": name, "label": label, "kind": "scaling", "length": n, "batch": 1, "round": r + 1,
                      "step_s": 1e-6 * n ** exponent * (1 + 0.01 * ((r + n) % 3)), "threads": 1, "peak_mb": ""}
                     for n in (256, 512, 1024, 2048, 4096, 8192, 16384)]
    collect_results.write_csv(data / f"{name}-steptime.csv", HARNESS, rows)


def write_000(data: Path, relation_steps: list[float], chance: float = 0.17) -> None:
    """000 with every seed of the file (14): relation and linear reach the file's target (0.6, 10 in a row),
    softmax never; linear and softmax clearly slower per step than ``relation_steps`` (10 rounds); mlp at chance;
    linear scaling for relation and linear, quadratic for softmax. Seeds 7-13 repeat seeds 0-6."""
    name = "000-time-to-accuracy"
    rows, history = [], []
    seeds = load_experiment(EXPERIMENTS / f"{name}.toml").seeds
    for label in ("relation", "linear", "softmax", "mlp"):
        for seed in seeds:
            late = {"relation": 2 + seed % 7, "linear": 4 + seed % 7}.get(label)
            metrics = [0.5] * 12 if late is None else [0.4] * late + [0.8] * 10
            value = chance + (0.001 * (seed % 7 - 2) if label == "mlp" else 0.1)
            rows.append(_row(name, label, seed, value=value))
            history += _history(label, seed, [0.7] * len(metrics), metrics)
    write_rows(data, name, rows)
    collect_results.write_csv(data / f"{name}-history.csv", collect_results.HISTORY_COLUMNS, history)
    collect_results.write_csv(data / f"{name}-chance.csv", collect_results.CHANCE_COLUMNS,
                              [{"majority_class": 0, "train_rate": chance, "test_rate": chance}])
    steps = {"relation": relation_steps, "linear": [0.020 + 0.001 * r for r in range(10)],
             "softmax": [0.100 + 0.001 * r for r in range(10)]}
    write_harness(data, name, steps, {"relation": 1.0, "linear": 1.0, "softmax": 2.0})


def write_004(data: Path) -> None:
    """004 with 3 of the file's 5 seeds (a sweep not finished): SHE lowest, the others apart; training cost from
    three windows."""
    name = "004-extractors-lm"
    costs = {"softmax-1h": 6.0, "softmax-32h": 5.0, "SHE": 4.0, "HE": 4.5, "WE": 5.0, "ME": 6.0}
    rows, history = [], []
    for label, cost in costs.items():
        for seed in range(3):
            rows.append(_row(name, label, seed, metric="perplexity", value=math.exp(cost), best_val=math.exp(cost),
                             steps=30))
            history += _history(label, seed, [9.0, cost + 0.01 * seed, cost - 1.0])
    write_rows(data, name, rows)
    collect_results.write_csv(data / f"{name}-history.csv", collect_results.HISTORY_COLUMNS, history)


def section(text: str, start: str) -> str:
    """The document's level-2 section whose heading starts with ``start``."""
    for part in text.split("\n## "):
        if part.startswith(start):
            return part
    raise AssertionError(f"no section {start!r}")


def _line(part: str, start: str) -> str:
    return next(x for x in part.splitlines() if x.startswith(start))


def only(tmp_path: Path, *names: str) -> Path:
    """A folder holding only these experiment files: the fixture's claims are then the whole Holm family, as
    they would be in a report of these experiments alone (every file's claims count, run or not)."""
    folder = tmp_path / "experiments"
    folder.mkdir(exist_ok=True)
    for name in names:
        shutil.copy(EXPERIMENTS / f"{name}.toml", folder)
    return folder


# -- statistics --------------------------------------------------------------------------------------------
def test_mann_whitney_exact_values():
    assert stats.mann_whitney_greater([4, 5, 6], [1, 2, 3]) == pytest.approx(0.05)  # 1 / C(6, 3)
    assert stats.mann_whitney_greater([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]) == pytest.approx(1 / 252)  # 1 / C(10, 5)
    assert stats.mann_whitney_greater([1, 2, 3], [4, 5, 6]) == pytest.approx(1.0)
    # U(a > b) = 1 for a = {1, 2, 4}, b = {3, 5, 6}: P(U >= 1) = 19/20, and for b over a P(U >= 8) = 2/20
    assert stats.mann_whitney_greater([1, 2, 4], [3, 5, 6]) == pytest.approx(0.95)
    assert stats.mann_whitney_greater([3, 5, 6], [1, 2, 4]) == pytest.approx(0.10)
    assert stats.mann_whitney_greater([1.0, 1.0], [1.0, 1.0]) == pytest.approx(1.0)  # ties: no evidence either way
    assert stats.mann_whitney_greater([math.inf, math.inf], [1.0, 2.0]) == pytest.approx(1 / 6)  # never reached


def test_sign_test_and_smallest_p():
    assert stats.sign_test_greater(5, 5) == pytest.approx(1 / 32)
    assert stats.sign_test_greater(4, 5) == pytest.approx(6 / 32)
    assert stats.sign_test_greater(0, 5) == 1.0
    three = Values("seed", (0, 1, 2), (1.0,) * 3)
    assert smallest_p(three, three) == pytest.approx(0.05)
    assert smallest_p(Values("seed", tuple(range(5)), (1.0,) * 5), 0.5) == pytest.approx(1 / 32)


def test_holm():
    assert power.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert power.holm([0.2]) == [0.2]
    assert power.holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert power.holm([0.3, 0.2, 0.01]) == pytest.approx([0.4, 0.4, 0.03])  # monotone: 0.3 x 1 < 0.2 x 2
    assert power.holm([0.9, 0.8, 0.7]) == [1.0, 1.0, 1.0]  # capped at 1


# -- verdicts ----------------------------------------------------------------------------------------------
def _seeds(values: list[float]) -> Values:
    return Values("seed", tuple(range(len(values))), tuple(values))


def _judge(claims: list, data: dict[str, list[float] | float]) -> list:
    def sample(key: str):
        value = data[key]
        return value if isinstance(value, float) else _seeds(value)
    return judge(claims, lambda c: (sample(c.a), sample(c.b if isinstance(c.b, str) and c.b != "chance" else
                                                        "chance"), ""))


def _claim(relation: str, factor: float = 1.0, margin: float = 0.0, b: str = "b", a: str = "a"):
    return Claim("a vs b", "p", a, b, "value", relation, factor, margin)


LOW, HIGH = [1.0, 1.1, 1.2, 1.3, 1.4], [2.0, 2.1, 2.2, 2.3, 2.4]


def test_clear_win_holds_clear_loss_does_not_overlap_is_inconclusive():
    win, loss, overlap = _judge([_claim("less")], {"a": LOW, "b": HIGH}), \
        _judge([_claim("less")], {"a": HIGH, "b": LOW}), \
        _judge([_claim("less")], {"a": [1.0, 2.0, 3.0, 4.0, 5.0], "b": [1.5, 2.5, 3.5, 4.5, 5.5]})
    assert win[0].verdict == HOLDS and win[0].p_for == pytest.approx(1 / 252)
    assert loss[0].verdict == OPPOSITE and loss[0].p_against == pytest.approx(1 / 252)
    assert overlap[0].verdict == OPEN and "Holm-adjusted p" in overlap[0].reason


def test_factor_scales_the_reference():
    # 1.0-1.4 s is below ½ x 11-11.4 s; it is below 1.5-1.9 s, but not below half of it
    assert _judge([_claim("less", 0.5)], {"a": LOW, "b": [10.0 + v for v in LOW]})[0].verdict == HOLDS
    near = {"a": LOW, "b": [1.5, 1.6, 1.7, 1.8, 1.9]}
    assert _judge([_claim("less")], near)[0].verdict == HOLDS
    assert _judge([_claim("less", 0.5)], near)[0].verdict == OPPOSITE


def test_three_seeds_and_holm_make_it_inconclusive():
    claims = [_claim("less"), _claim("greater")]
    outcomes = _judge(claims, {"a": [1.0, 1.1, 1.2], "b": [2.0, 2.1, 2.2]})
    assert outcomes[0].p_for == pytest.approx(0.05) and outcomes[0].adjusted == pytest.approx(0.2)  # 2-sided, Holm
    assert [o.verdict for o in outcomes] == [OPEN, OPEN]
    assert "n = 3 vs 3 seeds: the smallest attainable two-sided p is 0.1" in outcomes[0].reason


def test_holm_across_claims_of_one_experiment():
    # two-sided p = 14/252 = 0.056 alone; after three clear wins (2/252) Holm's last step compares it with 0.05
    # itself (inconclusive alone? 0.056 > 0.05: the step-down keeps it at 14/252); four such claims: 56/252
    data = {"weak": _seeds([1.0, 1.1, 1.2, 1.3, 2.25]), "strong": _seeds(LOW), "b": _seeds(HIGH)}
    claims = [Claim(a, "p", a, "b", "value", "less") for a in ("strong", "strong", "strong", "weak")]
    samples = lambda c: (data[c.a], data[c.b], "")  # noqa: E731
    assert judge([claims[3]], samples)[0].p_for == pytest.approx(7 / 252)
    outcomes = judge(claims, samples)
    assert [o.verdict for o in outcomes] == [HOLDS] * 3 + [OPEN]
    assert [o.adjusted for o in outcomes] == pytest.approx([8 / 252] * 3 + [14 / 252])
    outcomes = judge([claims[3]] * 4, samples)
    assert [o.verdict for o in outcomes] == [OPEN] * 4
    assert outcomes[0].adjusted == pytest.approx(56 / 252)


def test_approx_claims_by_two_one_sided_tests():
    same = {"a": [1.00, 1.01, 0.99, 1.02, 0.98], "b": [1.0, 1.01, 0.99, 1.0, 1.02]}
    apart = {"a": LOW, "b": HIGH}
    assert _judge([_claim("approx", margin=0.05)], same)[0].verdict == HOLDS
    outcome = _judge([_claim("approx", margin=0.05)], apart)[0]
    assert outcome.verdict == OPPOSITE and outcome.p_against == pytest.approx(1 / 252)
    assert "below it" in outcome.reason
    wide = {"a": [1.0, 1.3, 0.7, 1.2, 0.8], "b": [1.0, 1.25, 0.75, 1.1, 0.9]}
    assert _judge([_claim("approx", margin=0.05)], wide)[0].verdict == OPEN


def test_approx_against_a_constant_uses_the_sign_test():
    near = _judge([_claim("approx", margin=0.05, b="chance")], {"a": [0.6, 0.601, 0.599, 0.6, 0.602], "chance": 0.6})
    assert near[0].verdict == HOLDS and near[0].p_for == pytest.approx(1 / 32)
    above = _judge([_claim("approx", margin=0.05, b="chance")], {"a": [0.8, 0.81, 0.82, 0.83, 0.84], "chance": 0.6})
    assert above[0].verdict == OPEN  # outside on either side: two tests, 2 x 2^-5 > 0.05
    above = _judge([_claim("approx", margin=0.05, b="chance")],
                   {"a": [0.8, 0.81, 0.82, 0.83, 0.84, 0.85], "chance": 0.6})
    assert above[0].verdict == OPPOSITE and "above it" in above[0].reason


def test_training_cost_is_the_median_of_the_last_three_windows():
    run = Run("x", 0, {}, [{"train_loss": str(v)} for v in (9.0, 5.0, 4.0, 4.5)])
    assert training_cost(run) == pytest.approx(4.5)
    assert last_window_loss(run) == pytest.approx(4.5)
    assert training_cost(Run("x", 0, {}, [])) is None
    # the results' own column (median of the per-batch losses over the last cost_batches batches) comes first
    assert training_cost(Run("x", 0, {"train_cost": "3.25", "cost_batches": "2000"}, run.history)) == 3.25


def test_the_cost_column_title_writes_its_batch_count_with_a_thousands_separator():
    runs = [Run("x", seed, {"train_cost": "3.25", "cost_batches": "2000"}, []) for seed in (0, 1)]
    assert cost_source(runs) == "median of the last 2,000 batches"
    assert cost_source([Run("x", 0, {"train_cost": "3.25", "cost_batches": "500"}, [])]) == \
        "median of the last 500 batches"


# -- the document ------------------------------------------------------------------------------------------
NAMES = ("004-extractors-lm", "000-time-to-accuracy", "001-kerformer-listops", "001-kerformer-fashion",
         "002-vision-fashion", "003-contextualizer-reviews")


def test_no_data_every_experiment_not_run_yet(tmp_path):
    out = tmp_path / "reproduction.md"
    (tmp_path / "data").mkdir()
    assert rp.main([str(tmp_path / "data"), "--out", str(out), "--no-plots"]) == 0
    text = out.read_text()
    for name in NAMES:
        assert f"`tokenmix compare --config experiments/{name}.toml`" in text
        assert f"| `{name}` | all | not run yet |" in text
    body = text.split("## How the verdicts are computed")[1].split("\n## ", 1)[1]
    assert "**holds**" not in body and "inconclusive at this scale**" not in body
    assert "Not run yet" in section(text, "Gan et al. (2023)").split("Time and memory")[1]


def test_000_clear_win_holds_with_table_and_plot(tmp_path):
    data, out = tmp_path / "data", tmp_path / "doc" / "reproduction.md"
    data.mkdir()
    write_000(data, relation_steps=[0.010 + 0.001 * r for r in range(10)])
    rp.main([str(data), "--out", str(out), "--experiments", str(only(tmp_path, "000-time-to-accuracy"))])
    part = section(out.read_text(), "Yamada et al. (2022)")
    assert ("| label | mixer | seeds | params | plateaued | test accuracy | best val accuracy | steps to 0.6 (10 in a "
            "row) | time to 0.6 (s, harness) | s / epoch in training (not tested) | step (ms, harness) | s / epoch "
            "(harness) | peak MiB |") in part
    # 100 steps per epoch (the history's step / epoch); streaks complete at steps 120-180; median step 14.5 ms
    assert "| relation | relation | 14 | 1,000 | 14/14 | 0.27 ± 0 | 0.7 ± 0 | 150 ± 20 | 2.2 ± 0.3 | 1 ± 0 | " \
           "14 ± 3 | 1.5 ± 0.3 | 50 ± 0 |" in part
    assert "| softmax | softmax | 14 | 1,000 | 14/14 | 0.27 ± 0 | 0.7 ± 0 | not reached | not reached |" in part
    assert "Majority-class rate (test share of the train split's majority class): 0.17." in part
    claims = len(load_experiment(EXPERIMENTS / "000-time-to-accuracy.toml").claims)
    assert part.count("| **holds** |") == claims == 10  # the paper's 4, the 3 added slopes, the 3 last doublings
    assert (data / "img" / "000-time-to-accuracy-metric_vs_time.png").stat().st_size > 0
    assert "](../data/img/000-time-to-accuracy-metric_vs_time.png)" in part


def test_a_claims_holm_family_is_fixed_when_it_is_registered(tmp_path):
    """Holm's family is the claims of one file registered together (here: uncommitted, so all of the file's paper
    claims), never the report's other files: adding a claim to another experiment file changes no verdict, p or
    reason here."""
    data = tmp_path / "data"
    data.mkdir()
    write_000(data, relation_steps=[0.010 + 0.001 * r for r in range(10)])
    studies = tmp_path / "experiments"
    shutil.copytree(EXPERIMENTS, studies)
    paper_000 = sum(not c.get("added", False) for c in load_experiment(studies / "000-time-to-accuracy.toml").claims)
    before = section(render(data, tmp_path / "r.md", studies, plots=False), "Yamada et al. (2022)")
    assert f"(of {paper_000})" in _line(before, "| Relation's time per epoch is below linear")
    other = studies / "004-extractors-depth.toml"
    labels = [e.label for e in load_experiment(other).mixers]
    other.write_text(other.read_text() + "\n[[claims]]\ntext = \"a claim added later elsewhere\"\n"
                     f"paper = \"Chen (2023)\"\na = \"{labels[0]}\"\nb = \"{labels[1]}\"\n"
                     "kind = \"less\"\nmeasure = \"value\"\n")
    from tokenmix.report.document import load_studies

    assert any(c.text == "a claim added later elsewhere" for study in load_studies(studies) for c in study.claims)
    assert section(render(data, tmp_path / "r.md", studies, plots=False), "Yamada et al. (2022)") == before


def test_starting_an_experiment_does_not_change_the_verdicts_or_reasons_of_others(tmp_path):
    """An open claim's reason ("at best p after Holm", or its Holm-adjusted p) counts every other claim with the
    smallest p its planned design can give whether its experiment has not run or is pending: starting another
    sweep leaves every other experiment's section as it was."""
    data = tmp_path / "data"
    data.mkdir()
    write_000(data, relation_steps=[0.010 + 0.001 * r for r in range(10)])

    def section_000() -> str:
        return section(render(data, tmp_path / "r.md", EXPERIMENTS, plots=False), "Yamada et al. (2022)")

    before = section_000()
    assert "| **holds** |" in before  # 10 harness rounds decide within the file's own family of 4
    # 004-extractors-depth now pending, 2 of its 7 seeds of one label in. Its 7-vs-7 designs' floors (1 / 3,432)
    # are below 000's 10 harness rounds' (2^-10): counted at p = 1 while not run but at their floors once pending,
    # they would move 000's "at best" reasons
    name = "004-extractors-depth"
    write_rows(data, name, [_row(name, "SHE-1L", seed, metric="perplexity", value=70.0, best_val=70.0, steps=30)
                            for seed in (0, 1)])
    collect_results.write_csv(data / f"{name}-history.csv", collect_results.HISTORY_COLUMNS,
                              [h for seed in (0, 1) for h in _history("SHE-1L", seed, [9.0, 4.0, 3.9])])
    assert "pending" in section(render(data, tmp_path / "r.md", EXPERIMENTS, plots=False), "Chen (2023)")
    assert section_000() == before


def test_the_other_targets_judge_the_same_seeds_as_the_claim(tmp_path):
    """A time-to-target claim judged only on the runs after its last change (seeds 7-13) is judged on those runs
    at the targets beside too, not on every seed."""
    from tokenmix.report.document import _found, load_studies
    from tokenmix.report.sections import judge_study, other_targets

    data = tmp_path / "data"
    data.mkdir()
    write_000(data, relation_steps=[0.010 + 0.001 * r for r in range(10)])
    study = next(s for s in load_studies(EXPERIMENTS) if s.name == "000-time-to-accuracy")
    found = _found(study, data)
    text = "Relation reaches the target before softmax attention"
    outcomes = judge_study(study, found, {text: frozenset(range(7))})
    assert sorted(next(o for o in outcomes if o.claim.text == text).a.keys) == list(range(7, 14))
    lines = other_targets(study, found, outcomes)
    assert lines and all("relation reached it in 7 of 7, softmax reached it in 0 of 7 seeds." in line for line in lines)
    everyone = other_targets(study, found, judge_study(study, found))
    assert all("relation reached it in 13 of 13" in line for line in everyone)  # all but the pilot's seed 0


def test_000_clear_loss_does_not_hold_and_overlap_is_inconclusive(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_000(data, relation_steps=[0.030 + 0.001 * r for r in range(10)])  # slower than linear's 20-29 ms
    experiments = only(tmp_path, "000-time-to-accuracy")
    part = section(render(data, tmp_path / "r.md", experiments, plots=False), "Yamada et al. (2022)")
    assert "| Relation's time per epoch is below linear attention's |" in part
    assert "| **does not hold: the opposite** |" in _line(part, "| Relation's time per epoch is below linear")
    # interleaved with linear's: above it in even rounds, below in odd ones
    write_000(data, relation_steps=[0.020 + 0.001 * r + (0.0015 if r % 2 else -0.0015) for r in range(10)])
    part = section(render(data, tmp_path / "r.md", experiments, plots=False), "Yamada et al. (2022)")
    line = _line(part, "| Relation's time per epoch is below linear")
    assert "**inconclusive**: n = 10 paired rounds: Holm-adjusted p" in line


def test_004_training_cost_three_seeds_generations(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_004(data)
    (data / "004-generations.txt").write_text("SHE: Once upon a time there was a little princess who sang\n")
    part = section(render(data, tmp_path / "r.md", EXPERIMENTS, plots=False), "Chen (2023)")
    assert "training cost (median of the last 3 windows)" in part and "last window's training loss" in part
    assert "With 30 steps in all, those windows span the whole run" in part  # read from the data
    assert "| SHE | SHE | 3 | 1,000 | 3/3 | 54.6 ± 0 | 54.6 ± 0 | 4.01 ± 0.01 | 3 ± 0 |" in part
    # 3 of the 5 seeds fixed in the file: every claim waits for the rest, its interim p shown, no Holm p
    assert part.count("3 of the 5 seeds fixed before the runs are in; judged when all are") == 6
    assert part.count("| — | **pending (sweep not finished)**: ") == 6 and "| 0.1 / 1 |" in part  # interim, 2-sided
    assert "```text\nSHE: Once upon a time there was a little princess who sang\n```" in part


def test_generate_texts_reads_seed_zero_whatever_seeds_the_folder_was_last_run_with(tmp_path, monkeypatch, capsys):
    """A folder last swept with --seeds 2,3 has seeds = [2, 3] in its config.toml; the texts still come from
    each label's seed-0 weights, and a folder with none of them is an error, not an empty file."""
    import tokenmix.training.build as build_module

    experiment = load_experiment(EXPERIMENTS / "004-extractors-lm.toml", ["seeds=[2,3]"])
    (tmp_path / "config.toml").write_text(to_toml(experiment.to_dict()))
    tokenizer = SimpleNamespace(encode=lambda text: SimpleNamespace(ids=[1, 2]))
    task = SimpleNamespace(tokenizer=tokenizer, info=SimpleNamespace(kind="language_model"))
    monkeypatch.setattr(build_module, "make_task", lambda experiment: task)
    script = _script("generate_texts")
    assert script.main([str(tmp_path), str(tmp_path / "texts.txt")]) == 1
    err = capsys.readouterr().err
    for label in ("softmax-1h", "softmax-32h", "SHE", "HE", "WE", "ME"):
        assert f"{tmp_path / 'runs' / label / 'seed0' / 'best.safetensors'}; {label} skipped" in err
    assert "nothing written" in err and not (tmp_path / "texts.txt").exists()


def test_a_label_whose_runs_are_still_to_come_is_pending_not_unmeasured(tmp_path):
    """A sweep that has not reached a label yet leaves its claims pending (the issue's "a claim whose sweep is
    unfinished stays pending"), not "not measured"; the reason says what is missing so far."""
    data = tmp_path / "data"
    data.mkdir()
    write_004(data)
    rows = [r for r in read_csv(data / "004-extractors-lm.csv") if r["label"] != "ME"]
    write_rows(data, "004-extractors-lm", rows)
    part = section(render(data, tmp_path / "r.md", EXPERIMENTS, plots=False), "Chen (2023)")
    assert "**pending (sweep not finished)**: ME 0, softmax-1h 3 of the 5 seeds fixed before the runs are in" in part
    assert "(no data for ME so far)" in part and "**not measured**: no data for ME" not in part


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
    text = render(data, tmp_path / "r.md", EXPERIMENTS, plots=False)
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
    assert read_csv(out / f"{experiment.name}-history.csv") == [
        {"label": "kerformer", "seed": "0", "step": "5", "epoch": "0.5", "wall_s": "1.234568", "train_loss": "2.0",
         "val_loss": "1.9", "val_metric": "0.3"}]
    chance = read_csv(out / f"{experiment.name}-chance.csv")[0]
    assert 0 < float(chance["test_rate"]) <= 1 and 0 < float(chance["train_rate"]) <= 1


def test_collect_results_needs_a_finished_sweep(tmp_path, capsys):
    assert collect_results.main([str(tmp_path), str(tmp_path / "out")]) == 1
    assert "results.csv" in capsys.readouterr().err


def test_the_locality_claim_is_judged_and_tabled_from_the_rows(tmp_path):
    """001-kerformer-locality: the attention mass recorded per run goes into the experiment's table and decides
    the claim (Kerformer clearly more local than without SE-K on every seed)."""
    data = tmp_path / "data"
    data.mkdir()
    name = "001-kerformer-locality"
    rows = [_row(name, label, seed, locality=base + 0.001 * seed)
            for label, base in (("kerformer", 0.30), ("kerformer-noSEK", 0.10), ("softmax", 0.20))
            for seed in range(7)]
    write_rows(data, name, rows)
    part = section(render(data, tmp_path / "r.md", only(tmp_path, name, "001-kerformer-listops"), plots=False),
                   "Gan et al. (2023)")
    assert "| attention locality (test) |" in part and "| 0.303 ± 0.002 |" in part
    line = _line(part, "| Kerformer's attention is more local with SE-K than without")
    assert "kerformer vs kerformer-noSEK" in line and "**holds**" in line
