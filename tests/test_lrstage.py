"""The learning-rate stage (``[train] lr_grid``): every entry at every rate first, each entry's rate chosen on
validation (never on test), then the seeds at the chosen rate, reusing the stage's runs; per-entry ``train``; and
the leaderboard's state sizes and reading."""

from __future__ import annotations

import copy

import pytest

from tokenmix.models import CausalLM
from tokenmix.training import sweep
from tokenmix.training.experiment import Experiment
from tokenmix.training.lrstage import choose_rates, lr_stage, stage_label, with_rates
from tokenmix.training.statesize import reading

BASE = {
    "name": "lrtest", "seeds": [0, 1],
    "task": {"name": "mqar", "seq_len": 32, "num_pairs": 4, "vocab_size": 64, "train_size": 64, "val_size": 16,
             "test_size": 16},
    "model": {"dim": 16, "depth": 1},
    "train": {"max_steps": 2, "eval_every": 1, "batch_size": 16, "lr_grid": [1e-3, 1e-2], "patience": None},
    "report": {"plots": ["metric_vs_state"]},
    "mixers": ["softmax", {"label": "lin", "name": "linear", "train": {"weight_decay": 0.0}}],
}


def experiment(**changes) -> Experiment:
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        data[key] = value
    return Experiment.from_dict(data)


def test_the_stage_trains_every_entry_and_the_baseline_at_every_rate_on_lr_seeds():
    stage = lr_stage(experiment(), "language_model")
    assert stage.name == "lrtest-lr" and stage.seeds == [0] and not stage.claims
    runs = stage.runs("language_model")
    assert [(r.label, r.train["lr"]) for r in runs] == [
        ("softmax.lr0.001", 1e-3), ("softmax.lr0.01", 1e-2), ("lin.lr0.001", 1e-3), ("lin.lr0.01", 1e-2),
        ("mlp.lr0.001", 1e-3), ("mlp.lr0.01", 1e-2)]
    assert all(r.train["weight_decay"] == 0.0 for r in runs if r.label.startswith("lin"))
    assert all("lr_grid" not in r.train for r in runs)


def test_rates_are_chosen_on_validation_never_on_test():
    e = experiment(train={**BASE["train"], "lr_seeds": [0, 1]})
    rows = []
    for label in ("softmax", "lin", "mlp"):
        for lr, best_val, value in ((1e-3, 0.5, 0.9), (1e-2, 0.6, 0.1)):  # test disagrees with validation
            rows += [{"label": stage_label(label, lr), "seed": s, "best_val": best_val + 0.01 * s, "value": value}
                     for s in (0, 1)]
    assert choose_rates(e, "language_model", rows, higher_is_better=True) == dict.fromkeys(("softmax", "lin", "mlp"),
                                                                                         1e-2)
    assert choose_rates(e, "language_model", rows, higher_is_better=False)["lin"] == 1e-3
    with pytest.raises(ValueError, match="1 of 2 runs of 'lin.lr0.01'"):
        choose_rates(e, "language_model", [r for r in rows if not (r["label"] == "lin.lr0.01" and r["seed"] == 1)],
                     True)


def test_chosen_rates_become_the_entries_and_the_grid_is_refused_beside_an_lr():
    final = with_rates(experiment(), "language_model", {"softmax": 1e-2, "lin": 1e-3, "mlp": 1e-3})
    assert {r.label: r.train["lr"] for r in final.runs("language_model")} == {"softmax": 1e-2, "lin": 1e-3,
                                                                              "mlp": 1e-3}
    assert "lr_grid" not in final.train
    with pytest.raises(ValueError, match="both lr and lr_grid"):
        experiment(train={**BASE["train"], "lr": 1e-3})
    with pytest.raises(ValueError, match="entry 'lin' sets train.lr"):
        experiment(mixers=[{"label": "lin", "name": "linear", "train": {"lr": 1e-3}}])
    with pytest.raises(ValueError, match=r"no_such.*in mixers\[0\].train"):
        experiment(mixers=[{"label": "lin", "name": "linear", "train": {"no_such": 1}}])
    with pytest.raises(ValueError, match="lr_grid must be a list of at least two"):
        experiment(train={**BASE["train"], "lr_grid": [1e-3]})


def test_two_stages_end_to_end_reuse_the_stage_runs_at_the_chosen_rate(tmp_path, monkeypatch):
    trained = []
    real = sweep.run_one

    def spy(data, label, seed, *args, **kwargs):
        trained.append((data["name"], label, seed))
        return real(data, label, seed, *args, **kwargs)

    monkeypatch.setattr(sweep, "run_one", spy)
    rows = sweep.compare(experiment(), tmp_path / "out", isolate=False, progress=False, results_dir=tmp_path / "rec")
    stage_runs = [t for t in trained if t[0] == "lrtest-lr"]
    assert len(stage_runs) == 6
    # the final stage trains seed 1 of each entry only: seed 0 at the chosen rate is the stage's run, reused
    assert sorted((label, seed) for name, label, seed in trained if name == "lrtest") == [
        ("lin", 1), ("mlp", 1), ("softmax", 1)]
    assert {r["label"] for r in rows} == {"softmax", "lin", "mlp"} and len(rows) == 6
    choice = (tmp_path / "out" / "lr-choice.csv").read_text().splitlines()
    assert choice[0] == "label,lr,mean_best_val,seeds,chosen" and len(choice) == 7
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Reading: recall against state" in report and "(grows)" in report
    # the report reads the recorded rows at the rates their recorded stage chose: every one pooled (rows at a
    # chosen rate were once all set aside as "config changed" against the preset's rate)
    from tokenmix.report.document import not_pooled
    from tokenmix.report.sections import Study

    excluded, _ = not_pooled(Study(experiment(), "x.toml", None, []), tmp_path / "rec")
    assert excluded == {}
    # and --verify reruns them at those rates: every entry's row is current, none skipped as "config changed"
    from tokenmix.training.verify import verify_plan

    chosen, skipped = verify_plan(experiment(), tmp_path / "rec", 1)
    assert skipped == [] and sorted(r["label"] for r in chosen) == ["lin", "mlp", "softmax"]
    # and --status, from a fresh clone (no out folder), counts them done at those rates, none stale
    from tokenmix.training.status import sweep_status

    status = sweep_status(experiment(), tmp_path / "fresh", tmp_path / "rec")
    assert "learning-rate stage: complete" in status and "6/6 done" in status and "stale" not in status
    # a rerun of lin's row under newer code that did not reproduce it: lin's stage rows of that code (every
    # rate) choose nothing, so the stage is not complete until they train again
    from tokenmix.tasks import task_info
    from tokenmix.training.lrstage import has_lr_stage, recorded_rates
    from tokenmix.training.results import VERIFY_COLUMNS, ResultsDir, write_csv

    kind = task_info("mqar").kind
    assert not has_lr_stage(recorded_rates(experiment(), kind, tmp_path / "rec", True))  # complete so far
    record = ResultsDir(tmp_path / "rec", "lrtest")
    lin0 = record.rows()[("lin", 0)]
    write_csv(record.verify, VERIFY_COLUMNS, [
        {"label": "lin", "seed": 0, "config_hash": lin0["config_hash"], "row_code": lin0["code"], "rerun_code": "new",
         "rerun_commit": "c", "rerun_clean": "true", "torch": "t", "threads": "1", "cpu": "x", "reproduced": "false",
         "difference": "value 1 -> 2", "date": "d", "cause": "code", "row_numerics": "", "row_host": "",
         "numerics": "", "host": ""}])
    stage = ResultsDir(tmp_path / "rec", "lrtest-lr")
    assert [label for (label, _), r in stage.rows().items() if stage.stale_because(r["code"], label)] == [
        "lin.lr0.001", "lin.lr0.01"]
    assert has_lr_stage(recorded_rates(experiment(), kind, tmp_path / "rec", True))
    assert "learning-rate stage: complete" not in sweep_status(experiment(), tmp_path / "fresh", tmp_path / "rec")


def test_the_status_tells_the_learning_rate_stage_before_the_seeds(tmp_path):
    from tokenmix.training.status import sweep_status

    status = sweep_status(experiment(), tmp_path / "out", tmp_path / "rec")
    assert "experiment 'lrtest-lr'" in status and "softmax.lr0.01" in status and "0/6 done" in status
    assert "then the seeds at the rates the stage chooses on validation" in status and ": 6 runs" in status
    assert "stale" not in status


def test_the_dry_run_plans_both_stages(tmp_path, capsys):
    sweep.compare(experiment(), tmp_path / "out", dry_run=True)
    printed = capsys.readouterr().out
    assert "experiment 'lrtest-lr'" in printed and "experiment 'lrtest'" in printed
    assert "chooses on validation" in printed and not (tmp_path / "out").exists()


def test_state_bytes_grow_for_a_cache_and_stay_for_a_state():
    softmax, linear = CausalLM(64, "softmax", 16, 2, 32, num_heads=2), CausalLM(64, "linear", 16, 2, 32, num_heads=2)
    # softmax: keys and values of every token, 2 layers x 2 x (tokens x 16 floats)
    assert softmax.state_bytes(32) == 2 * 2 * 32 * 16 * 4 and softmax.state_bytes(16) == 2 * 2 * 16 * 16 * 4
    assert linear.state_bytes(32) == linear.state_bytes(3) > 0
    assert CausalLM(64, "mlp", 16, 2, 32).state_bytes() == 0
    with pytest.raises(ValueError, match="length must be an int in"):
        softmax.state_bytes(33)
    # one pass of steps reads every length, in the order asked, as separate calls would
    assert softmax.state_bytes_at([32, 1, 16]) == [softmax.state_bytes(n) for n in (32, 1, 16)]
    with pytest.raises(ValueError, match="length must be an int in"):
        linear.state_bytes_at([4, 0])


def test_the_reading_places_each_label_at_the_lowest_level_it_does_not_beat():
    summary = [{"label": "softmax", "mean": 0.99}, {"label": "lin", "mean": 0.15}, {"label": "rel", "mean": 0.01},
               {"label": "mlp", "mean": 0.008}]
    sizes = {"softmax": (65536, True), "lin": (16912, False), "rel": (520, False), "mlp": (0, False)}
    text = " ".join(reading(summary, sizes, {"chance (1/V)": 1 / 128, "copy (1/P)": 1 / 8}, 64))
    assert "softmax (0.990, 65,536 bytes)" in text and "from lin (0.150, 16,912 bytes) down to rel" in text
    assert "Chance (1/V): 0.008; no better than 1.5 times it: rel." in text
    assert "Copy (1/P): 0.125; no better than 1.5 times it: lin." in text
    assert "recalls as well as the cache" not in text and "the gap between the cache and a fixed state" in text
    summary.insert(1, {"label": "delta", "mean": 0.975})
    sizes["delta"] = (37376, False)
    text = " ".join(reading(summary, sizes, {}, 64))
    assert "delta recalls as well as the cache (within 0.02)" in text
    assert "the gap between the cache and the other fixed states" in text
    summary[1]["mean"] = 0.965  # 0.025 below the cache: not matching
    assert "as well as the cache" not in " ".join(reading(summary, sizes, {}, 64))


def test_before_any_row_the_dry_run_estimates_from_the_step_time_harness(tmp_path, capsys, monkeypatch):
    import tokenmix.training.estimate as estimate

    monkeypatch.setattr(estimate, "RECORD_DIR", tmp_path / "record")
    docs = tmp_path / "docs"
    docs.mkdir()
    rows = ["experiment,label,kind,length,batch,round,step_s,threads,peak_mb,memory",
            *(f"lrtest,{label},experiment,32,16,{r},{step},1,," for label, step in (("softmax", 1.0), ("lin", 2.0),
                                                                                  ("mlp", 0.5)) for r in (0, 1))]
    (docs / "lrtest-steptime.csv").write_text("\n".join(rows) + "\n")
    sweep.compare(experiment(), tmp_path / "out", dry_run=True, jobs=1, results_dir=docs)
    printed = capsys.readouterr().out
    # the stage: 3 labels x 2 rates x 1 seed x 2 steps; then 3 labels x 2 seeds x 2 steps (seconds per step 1, 2, 0.5)
    assert printed.count("not recorded yet") == 2 and "nothing recorded to scale by" in printed
    assert "estimated time: 0 min of training at --jobs 1" in printed
    stage = estimate.steptime_estimate("lrtest-lr", lr_stage(experiment(), "language_model").runs("language_model"),
                                       [docs], {r.key: 2 for r in lr_stage(experiment(), "language_model")
                                                .runs("language_model")})
    assert stage.steptime and stage.seconds == 2 * 2 * (1.0 + 2.0 + 0.5)
    # a recorded run whose step took twice the harness's scales every estimate by 2
    (docs / "lrtest-lr.csv").write_text("label,seed,steps,wall_s\nsoftmax.lr0.001,0,2,4.0\n")
    scaled = estimate.steptime_estimate("lrtest", experiment().runs("language_model"), [docs],
                                        {r.key: 2 for r in experiment().runs("language_model")})
    assert scaled.factor == 2.0 and scaled.calibrated == 1 and scaled.seconds == 2 * 2 * 2 * (1.0 + 2.0 + 0.5)
    assert "times 2.00: the recorded runs' time per step" in estimate.estimate_line(scaled, 1, "lrtest", [docs])


def test_the_recall_section_tabulates_the_sweep_and_draws_both_pictures(tmp_path):
    from pathlib import Path

    from tokenmix.report.recall import recall_section

    data = tmp_path / "docs"
    data.mkdir()
    assert "Not run yet" in recall_section(data)[2]
    for n, rows in ((64, "softmax-d64,0,0.99\nsoftmax-d64,1,0.97\nlinear-d64,0,0.6\nlinear-d256,0,0.5\n"),
                    (128, "softmax-d64,0,0.9\nlinear-d64,0,0.2\n")):
        (data / f"002-zoology-mqar-{n}.csv").write_text("label,seed,value\n" + rows)
    # the window file's own linear-attention baseline is not the 64-token file's label
    (data / "002-zoology-mqar-64-window.csv").write_text("label,seed,value\nwindow_linear-w32-d64,0,0.7\n"
                                                          "linear-d64,0,0.13\n")
    experiments = Path(__file__).resolve().parents[1] / "experiments"
    lines = recall_section(data, experiments=experiments, out=tmp_path / "reproduction.md")
    text = "\n".join(lines)
    assert "| softmax-d64 | 0.980 (2) | 0.900 (1) |" in text and "| linear-d256 | 0.500 (1) |  |" in text
    assert "| window_linear-w32-d64 | 0.700 (1) |  |" in text and "| linear-d64 | 0.600 (1) | 0.200 (1) |" in text
    assert (data / "img" / "005-accuracy-vs-length.png").stat().st_size > 0
    assert (data / "img" / "005-accuracy-vs-state.png").stat().st_size > 0
    assert "(docs/img/005-accuracy-vs-state.png)" in text
    assert "the dotted line is chance, 0.0078" in text and "shortcut ceiling" not in text  # no audit here
    # 8 seeds planned at each length, one or two recorded: every mean is drawn as one that can still move
    assert "a mean of fewer seeds than planned (at 64 tokens: 8, 128 tokens: 8)" in text


def test_a_mean_of_fewer_seeds_than_planned_is_hollow_and_reached_by_a_dashed_line():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tokenmix.report.recall import _draw

    fig, ax = plt.subplots()
    _draw(ax, {"deltanet": [(64, [0.2, 0.3], True), (128, [0.99], False), (256, [0.5], False)],
               "softmax": [(64, [1.0], True), (128, [0.9], True)]}, {"deltanet": ("C0", "o"), "softmax": ("C1", "s")})
    segments = {(tuple(int(x) for x in line.get_xdata()), line.get_linestyle()) for line in ax.lines
                if line.get_linestyle() != "None" and len(line.get_xdata())}
    assert segments == {((64, 128), "--"), ((128, 256), "--"), ((64, 128), "-")}
    markers = {(tuple(int(x) for x in line.get_xdata()), line.get_markerfacecolor() == "none") for line in ax.lines
               if line.get_linestyle() == "None"}
    assert markers == {((64,), False), ((128, 256), True), ((64, 128), False)}
    plt.close(fig)


def test_the_recall_values_leave_out_the_rows_verify_found_stale(tmp_path):
    from tokenmix.report.recall import recall_values
    from tokenmix.training.results import VERIFY_COLUMNS, write_csv

    data = tmp_path / "docs"
    data.mkdir()
    (data / "002-zoology-mqar-64.csv").write_text("label,seed,value,code\nsoftmax-d64,0,0.99,old\n"
                                                  "mamba2-d64,0,0.11,old\nmamba2-d64,1,0.13,new\n")
    assert recall_values(data)[(64, "mamba2", 64)] == [0.11, 0.13]
    write_csv(data / "002-zoology-mqar-64-verify.csv", VERIFY_COLUMNS, [
        {"label": "mamba2-d64", "seed": 0, "config_hash": "h", "row_code": "old", "rerun_code": "new",
         "rerun_commit": "c", "rerun_clean": "true", "torch": "t", "threads": "1", "cpu": "x", "reproduced": "false",
         "difference": "value 0.11 -> 0.007", "date": "d", "cause": "code", "row_numerics": "", "row_host": "",
         "numerics": "", "host": ""},
        {"label": "softmax-d64", "seed": 0, "config_hash": "s", "row_code": "old", "rerun_code": "new",
         "rerun_commit": "c", "rerun_clean": "true", "torch": "t", "threads": "1", "cpu": "x", "reproduced": "true",
         "difference": "", "date": "d", "cause": "", "row_numerics": "", "row_host": "", "numerics": "",
         "host": ""}])
    values = recall_values(data)
    assert values[(64, "mamba2", 64)] == [0.13] and values[(64, "softmax", 64)] == [0.99]


def test_the_recall_pictures_carry_the_audited_shortcut_ceiling(tmp_path):
    from pathlib import Path

    from tokenmix.report.recall import recall_section

    data = tmp_path / "docs"
    data.mkdir()
    (data / "002-zoology-mqar-64.csv").write_text("label,seed,value\nsoftmax-d64,0,0.99\nlinear-d64,0,0.14\n")
    (data / "task-audit.csv").write_text(
        "task,options,baseline,kind,accuracy,low,high,n\n"
        "mqar,preset=quick,copy one pair's value,shortcut,0.1250,0.1179,0.1324,8000\n"
        "mqar,preset=quick seq_len=128 num_pairs=16,copy one pair's value,shortcut,0.0599,0.0563,0.0637,16000\n")
    experiments = Path(__file__).resolve().parents[1] / "experiments"
    text = "\n".join(recall_section(data, experiments=experiments, out=tmp_path / "reproduction.md"))
    # the 64-token file runs preset quick with 8 pairs: its ceiling, not the 16-pair setting's
    assert "shortcut ceiling at 64 tokens, 0.125 [0.118, 0.132] (copy one pair's value; every length holds 8" in text
    assert "fewer seeds than planned (at 64 tokens: 8)" in text
    (data / "002-zoology-mqar-64.csv").write_text("label,seed,value\n" + "".join(
        f"softmax-d64,{seed},0.99\nlinear-d64,{seed},0.14\n" for seed in range(8)))
    text = "\n".join(recall_section(data, experiments=experiments, out=tmp_path / "reproduction.md"))
    assert "fewer seeds than planned" not in text  # every label's 8 seeds in


def test_the_recall_section_says_when_a_short_filter_cannot_reach_the_pairs(tmp_path):
    from pathlib import Path

    from tokenmix.report.recall import recall_section
    from tokenmix.training.recallsweep import window_reach

    data = tmp_path / "docs"
    data.mkdir()
    (data / "002-zoology-mqar-64.csv").write_text("label,seed,value\nbaseconv-d64,0,0.007\nsoftmax-d64,0,0.99\n")
    experiments = Path(__file__).resolve().parents[1] / "experiments"
    text = "\n".join(recall_section(data, experiments=experiments, plots=False))
    # 2 layers of a 3-tap filter see 4 tokens back, where few queries' values lie
    assert "**Reach, baseconv-d64 at 64 tokens.** Its filter has 3 taps" in text
    assert f"sees 4 tokens back; the value asked for lies that close in {100 * window_reach(5, 64):.1f} %" in text
    assert window_reach(5, 64) < 0.05 and "Its 0.007 measures that reach" in text
    assert "at 128 tokens" not in text  # no baseconv row there yet
    assert "recalls." in text  # no long-filter row: nothing measured to quote
    (data / "002-zoology-mqar-64-conv.csv").write_text("label,seed,value\nbaseconv-long-d64,0,0.13\n"
                                                        "baseconv-long-d64,1,0.12\nbaseconv-d64,0,0.5\n")
    text = "\n".join(recall_section(data, experiments=experiments, plots=False))
    assert "recalls: 0.125 at the same width (`002-zoology-mqar-64-conv`)." in text
    assert "Its 0.007 measures" in text  # the long file's copy of the short filter's rows is not counted twice


def test_the_recall_curves_that_share_a_colour_get_markers_that_do_not_look_alike():
    from tokenmix.report.recall import _style

    styles = [_style(i) for i in range(220)]
    assert len(set(styles)) == 220
    round_ones = set("ohp8")  # circle, hexagon, pentagon, octagon: alike at a plot's marker size
    for i in range(200):
        (colour, a), (same, b) = styles[i], styles[i + 20]
        assert colour == same and a != b and not {a, b} <= round_ones and {a, b} != {"s", "D"}
