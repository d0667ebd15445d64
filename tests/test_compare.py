"""Experiment files and ``tokenmix compare``: resolution, errors before training, resume, outputs, the CLI."""

from __future__ import annotations

import csv
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import tomllib

import tokenmix.training.sweep as compare_module
from tokenmix.cli import WIDTH, main
from tokenmix.training.experiment import DEFAULT_EXPERIMENT, Experiment, load_experiment, skip_reason
from tokenmix.training.overrides import parse_overrides
from tokenmix.training.tomlfile import to_toml
from tokenmix.training.power import attainable_lines
from tokenmix.training.provenance import PROVENANCE_COLUMNS
from tokenmix.training.results import COLUMNS
from tokenmix.training.sweep import compare, plan

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_FILE = ROOT / "experiments" / "mqar.toml"
TINY = ["task.name='recall'", "model.dim=16", "model.depth=1", "train.max_steps=6", "train.eval_every=3",
        "train.batch_size=16", "seeds=[0, 1]"]


def tiny(*sets: str, path: Path | None = DEFAULT_FILE) -> Experiment:
    return load_experiment(path, [*TINY, *sets])


# -- files ----------------------------------------------------------------------------------------------------
def test_the_default_file_is_the_embedded_default():
    assert load_experiment(DEFAULT_FILE).to_dict() == load_experiment(None).to_dict()
    assert load_experiment(None).mixers[0].label == DEFAULT_EXPERIMENT["mixers"][0]


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.toml")), ids=lambda p: p.name)
def test_every_experiment_file_resolves(path):
    experiment = load_experiment(path)
    assert experiment.runs(_kind(experiment))  # every entry can run the task, every key is known
    again = Experiment.from_dict(tomllib.loads(to_toml(experiment.to_dict())))
    assert again.to_dict() == experiment.to_dict()  # config.toml round-trips


def test_harness_rounds_are_fixed_in_the_experiment_file():
    assert load_experiment(None).report["harness_rounds"] == 10
    assert load_experiment(ROOT / "experiments" / "002-vision-fashion.toml").report["harness_rounds"] == 100
    with pytest.raises(ValueError, match="harness_rounds must be a positive int"):
        load_experiment(None, ["report.harness_rounds=0"])
    assert load_experiment(None, ["report.harness_lengths=[256, 1024]"]).report["harness_lengths"] == [256, 1024]
    with pytest.raises(ValueError, match="harness_only must be true or false"):
        load_experiment(None, ["report.harness_only=1"])
    speed = load_experiment(ROOT / "experiments" / "001-kerformer-speed.toml")
    with pytest.raises(ValueError, match=r"trains nothing \(\[report\] harness_only = true\).*steptime"):
        compare(speed, "unused-out-folder")
    for bad in ("[1024, 256]", "[256]", "[256, 256]", "[0, 256]", "'256,1024'"):
        with pytest.raises(ValueError, match="harness_lengths must be a list of two or more ascending positive"):
            load_experiment(None, [f"report.harness_lengths={bad}"])
    lines = attainable_lines(load_experiment(ROOT / "experiments" / "002-vision-fashion.toml"))
    assert "100 harness rounds" in lines[0]


def test_to_toml_writes_none_as_none_and_refuses_non_finite_values():
    text = to_toml({"a": None, "t": {"b": [1, None], "c": "x"}, "rows": [{"d": 0.5}]})
    assert tomllib.loads(text) == {"a": "none", "t": {"b": [1, "none"], "c": "x"}, "rows": [{"d": 0.5}]}
    with pytest.raises(ValueError, match="non-finite"):
        to_toml({"t": {"lr": float("nan")}})


def _kind(experiment: Experiment) -> str:
    from tokenmix.tasks import task_info

    return task_info(experiment.task["name"]).kind


def test_edited_copies_width_depth_and_a_mixer_twice(tmp_path, capsys):
    text = DEFAULT_FILE.read_text()
    wider = tmp_path / "wider.toml"
    wider.write_text(text.replace("dim = 64", "dim = 96").replace("depth = 2", "depth = 4"))
    twice = tmp_path / "twice.toml"
    twice.write_text(re.sub(r"^mixers = \[[^\]]*\][^\n]*$", "", text, flags=re.MULTILINE) + """
[[mixers]]
label = "softmax-1h"
name = "softmax"
model = { heads = 1 }

[[mixers]]
label = "softmax-4h"
name = "softmax"
model = { heads = 4 }
options = { bias = true }
""")
    task, planned = plan(load_experiment(wider, ["train.max_steps=4", "seeds=[0]"]))
    assert {p.spec.model["dim"] for p in planned} == {96} and {p.spec.model["depth"] for p in planned} == {4}
    default_params = {p.spec.label: p.params for p in plan(load_experiment(DEFAULT_FILE, ["seeds=[0]"]), task)[1]}
    assert all(p.params > default_params[p.spec.label] for p in planned)
    _, planned = plan(load_experiment(twice, ["seeds=[0]"]), task)
    assert [p.spec.label for p in planned] == ["softmax-1h", "softmax-4h", "mlp"]  # the baseline is added
    one, four = planned[0], planned[1]
    assert four.params == one.params + 2 * (4 * 64)  # same weights, plus the q/k/v/out biases in 2 layers
    main(["compare", "--config", str(twice), "--set", "seeds=[0]", "--dry-run"])
    out = capsys.readouterr().out
    assert "softmax-1h" in out and "softmax-4h" in out and "bias=True" in out and "heads=4" in out


def test_a_mixer_option_of_none_reads_as_none_in_a_table_or_inline(tmp_path):
    text = re.sub(r"^mixers = \[[^\]]*\][^\n]*$", "", DEFAULT_FILE.read_text(), flags=re.MULTILINE) + """
[[mixers]]
label = "long-table"
name = "baseconv"
options = { kernel_size = "none" }

[[mixers]]
label = "long-inline"
name = "baseconv:kernel_size=none"
"""
    path = tmp_path / "long.toml"
    path.write_text(text)
    experiment = load_experiment(path, ["seeds=[0]"])
    assert [entry.options for entry in experiment.mixers] == [{"kernel_size": None}] * 2
    _, planned = plan(experiment)
    assert {p.spec.label for p in planned} >= {"long-table", "long-inline"}
    assert planned[0].params == planned[1].params  # both the long filter: max_len taps per channel


@pytest.mark.parametrize(("sets", "message"), [
    (["train.lrr=1"], "unknown key(s) ['lrr'] in [train]"),
    (["mixers=['softmax']", "model.bogus=1"], "no model option(s) ['bogus']"),
    (["train.lr='fast'"], "lr must be a finite float"),
    (["mixers=['extractor_we']"], "mixer 'extractor_we' (entry 'extractor_we') is causal only; this task needs a "
                                  "bidirectional mixer; choose the mixers for this task (--mixers"),
    (["mixers=['pvt']"], "is spatial"),
    (["mixers=['softmax:no_such=1']"], "has no option(s) ['no_such']"),
    (["mixers=['softmax', 'softmax']"], "labels must be unique"),
    (["report.plots=['pie']"], "plots must be a list"),
    (["seeds=[]"], "seeds must be"),
    (["train.preset='paper-999'"], "preset 'paper-999' is unknown"),
    (["task.lenght=3"], "no option(s) ['lenght']"),
])
def test_errors_name_the_key_or_mixer_before_any_training(tmp_path, monkeypatch, sets, message):
    monkeypatch.setattr(compare_module, "run_one", lambda *a, **k: pytest.fail("trained despite the error"))
    with pytest.raises(ValueError) as error:
        compare(load_experiment(DEFAULT_FILE, [*TINY, *sets]), tmp_path / "out", isolate=False)
    assert message in str(error.value)
    assert not (tmp_path / "out").exists()


def test_a_config_file_with_an_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(DEFAULT_FILE.read_text().replace("[report]", "[report]\ncolour = 'blue'"))
    with pytest.raises(SystemExit, match=r"unknown key\(s\) \['colour'\] in \[report\]"):
        main(["compare", "--config", str(bad), "--dry-run"])
    with pytest.raises(ValueError, match="not valid TOML"):
        (tmp_path / "broken.toml").write_text("name = ")
        load_experiment(tmp_path / "broken.toml")


def test_overrides_parse_toml_values():
    assert parse_overrides(["train.lr=1e-3", "seeds=[0,1]", "task.name=listops", "model.init_std=none"]) == [
        (["train", "lr"], 0.001), (["seeds"], [0, 1]), (["task", "name"], "listops"),
        (["model", "init_std"], "none")]
    assert load_experiment(None, ["model.init_std=none"]).model["init_std"] is None
    with pytest.raises(ValueError, match="key=value"):
        parse_overrides(["train.lr"])


def test_skip_reasons_follow_the_registry():
    assert skip_reason("softmax", "classification") is None
    assert "causal only" in skip_reason("extractor_we", "classification")
    assert "spatial" in skip_reason("pvt", "classification")
    assert "causally" in skip_reason("efficient", "language_model")


# -- running -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    experiment = tiny("mixers=['softmax', 'relation']")
    return out, experiment, compare(experiment, out, isolate=False, progress=False)


def test_a_sweep_writes_every_output(tiny_run):
    out, experiment, rows = tiny_run
    for name in ["config.toml", "results.csv", "report.md", "metric_vs_time.png"]:
        assert (out / name).stat().st_size > 0
    with open(out / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == COLUMNS + PROVENANCE_COLUMNS  # each row says what produced it
    assert {(r["label"], r["seed"]) for r in table} == {(m, s) for m in ("softmax", "relation", "mlp")
                                                         for s in ("0", "1")}
    assert all(r["metric"] == "accuracy" and 0.0 <= float(r["value"]) <= 1.0 for r in table)
    assert all(float(r["peak_mem_mb"]) >= 0 and int(r["steps"]) == 6 for r in table)
    report = (out / "report.md").read_text()
    assert "| softmax |" in report and "| mlp |" in report
    for label in ("softmax", "relation", "mlp"):
        for seed in (0, 1):
            run = out / "runs" / label / f"seed{seed}"
            assert (run / "result.json").exists() and (run / "log.csv").exists()
            assert not (run / "checkpoint").exists()  # a finished run keeps its result, not its optimiser state
    again = load_experiment(out / "config.toml")
    assert again.to_dict() == experiment.to_dict()  # config.toml re-runs the same experiment


def test_a_finished_sweep_is_not_trained_again(tiny_run, monkeypatch):
    out, experiment, rows = tiny_run
    monkeypatch.setattr(compare_module, "run_one", lambda *a, **k: pytest.fail("a finished run was retrained"))
    assert compare(experiment, out, isolate=False, progress=False) == rows


def test_a_different_experiment_in_the_same_folder_is_refused(tiny_run):
    out, experiment, _ = tiny_run
    with pytest.raises(ValueError, match="different experiment"):
        compare(tiny("mixers=['softmax']"), out, isolate=False)


def test_more_seeds_extend_a_finished_sweep_and_fewer_report_a_subset(tiny_run, tmp_path, monkeypatch):
    out, experiment, rows = tiny_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    real, trained = compare_module.run_one, []

    def recording(*args, **kwargs):
        trained.append(args[1:3])
        return real(*args, **kwargs)

    monkeypatch.setattr(compare_module, "run_one", recording)
    more = compare(tiny("mixers=['softmax', 'relation']", "seeds=[0, 1, 2]"), copy, isolate=False, progress=False)
    assert sorted(trained) == [("mlp", 2), ("relation", 2), ("softmax", 2)]  # only the new seed's runs
    assert more[:2] == rows[:2] and {r["seed"] for r in more} == {0, 1, 2}
    trained.clear()
    fewer = compare(tiny("mixers=['softmax', 'relation']", "seeds=[1]"), copy, isolate=False, progress=False)
    assert not trained and {r["seed"] for r in fewer} == {1}
    assert (copy / "runs" / "mlp" / "seed2" / "result.json").exists()  # left on disk, not reported
    with pytest.raises(ValueError, match="differs from this one in train"):
        compare(tiny("mixers=['softmax', 'relation']", "train.lr=0.5"), copy, isolate=False)


def test_resume_a_half_finished_sweep(tiny_run, tmp_path, monkeypatch):
    _, experiment, rows = tiny_run
    out = tmp_path / "half"
    real = compare_module.run_one
    calls = []

    def killed_after_three(*args, **kwargs):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(args[1:3])
        return real(*args, **kwargs)

    monkeypatch.setattr(compare_module, "run_one", killed_after_three)
    with pytest.raises(KeyboardInterrupt):
        compare(experiment, out, isolate=False, progress=False)
    assert len(list(out.glob("runs/*/*/result.json"))) == 3
    # a run killed mid-way: it checkpointed at its evaluation at step 3, then died at step 4
    monkeypatch.setattr(compare_module, "run_one", real)
    from tokenmix.training.build import build_model, make_task
    from tokenmix.training.loop import train

    task = make_task(experiment)
    spec = next(r for r in experiment.runs(task.info.kind) if r.label == "mlp" and r.seed == 1)
    run_dir = out / "runs" / "mlp" / "seed1"

    def die(step, total, metric):
        if step == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(task, build_model(task, spec), experiment.train_config(spec, out_dir=str(run_dir), progress=False),
              on_step=die)
    assert (run_dir / "checkpoint").is_dir() and not (run_dir / "result.json").exists()
    trained = []
    monkeypatch.setattr(compare_module, "run_one", lambda *a, **k: (trained.append(a[1:3]), real(*a, **k))[1])
    resumed = compare(experiment, out, isolate=False, progress=False)
    assert len(trained) == 3 and ("mlp", 1) in trained  # only the unfinished runs
    assert [(r["label"], r["seed"], r["value"], r["best_val"]) for r in resumed] == \
        [(r["label"], r["seed"], r["value"], r["best_val"]) for r in rows]  # bitwise the uninterrupted sweep
    log = json.loads((run_dir / "result.json").read_text())["history"]
    assert [h["step"] for h in log] == [3, 6]


def test_jobs_run_in_fresh_processes(tmp_path):
    experiment = tiny("mixers=['relation']", "seeds=[0]", "train.threads=1")
    rows = compare(experiment, tmp_path, jobs=2, progress=False)
    assert [r["label"] for r in rows] == ["relation", "mlp"]
    inline = compare(experiment, tmp_path / "inline", isolate=False, progress=False)
    assert [r["value"] for r in rows] == [r["value"] for r in inline]  # same result in or out of process


def test_without_matplotlib_the_sweep_still_finishes(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ModuleNotFoundError
    rows = compare(tiny("mixers=['relation']", "seeds=[0]"), tmp_path, isolate=False, progress=False)
    assert rows and (tmp_path / "results.csv").exists() and not (tmp_path / "metric_vs_time.png").exists()
    assert "pip install 'tokenmix-lab[plot]'" in (tmp_path / "report.md").read_text()


# -- the CLI ------------------------------------------------------------------------------------------------
def test_cli_train_and_compare(tmp_path, capsys):
    main(["train", "--task", "recall", "--mixer", "linear", "--max-steps", "4", "--dim", "16", "--depth", "1",
          "--batch-size", "16", "--eval-every", "2", "--out", str(tmp_path / "train")])
    assert "best val accuracy" in capsys.readouterr().out
    assert (tmp_path / "train" / "log.jsonl").exists()
    main(["compare", "--task", "recall", "--mixers", "relation", "--seeds", "0", "--max-steps", "2",
          "--dim", "16", "--depth", "1", "--out", str(tmp_path / "cmp")])
    out = capsys.readouterr().out
    assert "| relation |" in out and "| mlp |" in out  # the baseline is always on the leaderboard
    config = tomllib.loads((tmp_path / "cmp" / "config.toml").read_text())
    assert config["train"]["max_steps"] == 2 and config["train"]["eval_every"] == 2


def test_every_cli_option_has_help():
    import argparse

    from tokenmix.cli import build_parser

    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(subparsers.choices) >= {"list", "demo", "train", "compare", "speed", "count"}
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"tokenmix {name} {action.option_strings} has no help"


def test_list_fits_120_columns(capsys):
    main(["list"])
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= WIDTH
    assert "lra_text (retired)" in out and "retired settings: pathfinder (length < 14 dashes)" in out
    main(["list", "--wide"])
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) > WIDTH


def test_a_named_budget_replaces_the_files_settings_and_an_unknown_one_is_refused(tmp_path):
    import textwrap

    from tokenmix.training.experiment import load_experiment

    path = tmp_path / "e.toml"
    path.write_text(textwrap.dedent('''
        name = "b"
        seeds = [0, 1, 2, 3, 4]
        mixers = ["softmax"]
        [task]
        name = "listops"
        [train]
        max_steps = 3000
        eval_every = 500
        [budgets.quick]
        seeds = [0]
        train = { max_steps = 40 }
    '''))
    full = load_experiment(path)
    quick = load_experiment(path, budget="quick")
    assert (full.seeds, full.train["max_steps"], full.train["eval_every"]) == ([0, 1, 2, 3, 4], 3000, 500)
    assert (quick.seeds, quick.train["max_steps"], quick.train["eval_every"]) == ([0], 40, 500)
    assert "budgets" not in quick.to_dict()
    with pytest.raises(ValueError, match="no budget 'long'.*budgets: quick"):
        load_experiment(path, budget="long")


# -- the rough edges a first hour finds (issue 31) ------------------------------------------------------------
@pytest.mark.parametrize(("text", "entries"), [
    ("twins_lsa,twins_gsa", ["twins_lsa", "twins_gsa"]),
    ("swin:window_size=2,shift=True", ["swin:window_size=2,shift=True"]),
    ("swin,swin:shift=True,window_size=2", ["swin", "swin:shift=True,window_size=2"]),
    ("softmax", ["softmax"]),
    ("swin,shift=True", ["swin:shift=True"]),
])
def test_a_mixer_list_splits_at_names_not_at_options(text, entries):
    from tokenmix.models.patterns import split_mixer_list

    assert split_mixer_list(text) == entries


@pytest.mark.parametrize(("text", "message"), [("shift=True,swin", "starts with the option 'shift=True'"),
                                               ("softmax,,linear", "empty entry")])
def test_a_bad_mixer_list_names_the_option(text, message):
    from tokenmix.models.patterns import split_mixer_list

    with pytest.raises(ValueError, match=f"--mixers: .*{message}"):
        split_mixer_list(text, "--mixers")


def test_cli_train_takes_a_pattern_with_options_threads_bf16_device_and_says_where_it_saved(tmp_path, capsys,
                                                                                           monkeypatch):
    import torch

    import tokenmix.training.loop as loop

    seen, real = {}, loop.train

    def recording(task, model, config, **kwargs):
        seen.update(config=config, threads=torch.get_num_threads(), model=model)
        return real(task, model, config, **kwargs)

    monkeypatch.setattr(loop, "train", recording)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: seen.setdefault("set_threads", n))
    out = tmp_path / "train"
    main(["train", "--task", "recall", "--mixer", "softmax:bias=false,inner_dim=8,linear", "--depth", "2",
          "--dim", "16", "--max-steps", "2", "--batch-size", "16", "--eval-every", "2", "--threads", "1", "--bf16",
          "--device", "cpu", "--out", str(out)])
    printed = capsys.readouterr().out
    config = seen["config"]
    assert (config.bf16, config.device, config.tensorboard, seen["set_threads"]) == (True, "cpu", False, 1)
    blocks = seen["model"].blocks
    assert [type(b.mixer).__name__ for b in blocks] == ["SoftmaxAttention", "LinearAttention"]  # the pattern
    assert blocks[0].mixer.inner_dim == 8 and blocks[0].mixer.q_proj.bias is None  # with softmax's own options
    assert f"saved in {out}/: best.safetensors" in printed
    for name in ("best.safetensors", "log.jsonl", "log.csv", "result.json"):
        assert name in printed and (out / name).exists()
    assert json.loads((out / "result.json").read_text())["steps"] == 2
    main(["train", "--task", "recall", "--mixer", "relation", "--dim", "16", "--depth", "1", "--max-steps", "1",
          "--batch-size", "16"])
    assert "nothing saved: pass --out DIR" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--tensorboard needs --out"):
        main(["train", "--task", "recall", "--mixer", "relation", "--tensorboard"])
    with pytest.raises(SystemExit, match="--threads must be a positive int"):
        main(["train", "--task", "recall", "--mixer", "relation", "--threads", "0"])


def test_compare_mixers_take_inline_options(capsys):
    main(["compare", "--task", "recall", "--mixers", "softmax:bias=false,inner_dim=8,linear", "--seeds", "0",
          "--dim", "16", "--depth", "1", "--dry-run"])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("softmax ", "linear ", "mlp "))}
    assert set(rows) == {"softmax", "linear", "mlp"}
    assert "bias=False,inner_dim=8" in rows["softmax"] and "inner_dim" not in rows["linear"]


def test_compare_on_another_task_without_a_config_is_named_after_it_and_says_what_it_added(capsys, monkeypatch):
    import tokenmix.training.status as status

    seen = {}
    monkeypatch.setattr(status, "sweep_status", lambda experiment, out, *a, **k: seen.update(e=experiment, out=out)
                        or "status")
    main(["compare", "--task", "recall", "--mixers", "relation", "--seeds", "0", "--max-steps", "2", "--status"])
    experiment, printed = seen["e"], capsys.readouterr().err
    assert experiment.name == "recall" and seen["out"] == "runs/recall"
    assert experiment.description.startswith("Ad-hoc comparison built from the command-line flags --task recall "
                                              "--mixers relation --seeds 0 --max-steps 2")
    assert "note: the no-context baseline 'mlp' is added to the runs ([report] baseline = true" in printed
    main(["compare", "--status"])  # the default: its own name, description and mixers (mlp among them)
    assert seen["e"].to_dict() == load_experiment(None).to_dict() and seen["out"] == "runs/mqar"
    assert "note:" not in capsys.readouterr().err
    main(["compare", "--config", str(DEFAULT_FILE), "--task", "recall", "--status"])  # a file keeps its name
    assert seen["e"].name == "mqar" and seen["e"].description == load_experiment(None).description


def _leaderboard(tmp_path, experiment: Experiment, seeds: list[int]) -> str:
    from tokenmix.training.leaderboard import write_report

    rows = [{**dict.fromkeys(COLUMNS, 0), "label": label, "mixer": label, "seed": seed, "metric": "accuracy",
             "value": 0.5 + 0.01 * seed, "time_to_target_s": "", "params": 10} for label in ("relation", "mlp")
            for seed in seeds]
    write_report(rows, {}, experiment, tmp_path)
    return (tmp_path / "report.md").read_text()


def test_the_leaderboard_of_one_seed_shows_no_sd_and_one_name_once(tmp_path):
    one = _leaderboard(tmp_path, tiny("name='recall'", "report.plots=[]", "mixers=['relation']"), [0])
    assert one.startswith("# recall\n") and "| 0.5000 (1 seed) |" in one and "± 0.0000" not in one
    two = _leaderboard(tmp_path, tiny("report.plots=[]", "mixers=['relation']"), [0, 1])
    assert two.startswith("# mqar: recall\n") and "| 0.5050 ± 0.0071 |" in two


def test_the_dry_run_estimates_the_time_from_recorded_runs(tmp_path, capsys, monkeypatch):
    import tokenmix.training.estimate as estimate

    monkeypatch.setattr(estimate, "RECORD_DIR", tmp_path / "record")  # not this checkout's docs/reproduction
    experiment = tiny("mixers=['relation']", "report.plots=[]")
    compare(experiment, tmp_path / "out", dry_run=True, jobs=2, results_dir=tmp_path / "docs")
    assert "estimated time: no estimate (no recorded run with a wall time in" in capsys.readouterr().out
    (tmp_path / "docs").mkdir()
    rows = ["label,seed,steps,wall_s", "relation,0,6,3600", "relation,1,6,5400", "mlp,0,12,1800"]
    (tmp_path / "docs" / "mqar.csv").write_text("\n".join(rows) + "\n")
    compare(experiment, tmp_path / "out", dry_run=True, jobs=2, results_dir=tmp_path / "docs")
    # relation 3600 + 5400, mlp's two runs half of its 12-step row each (6 steps planned): 900 + 900; over 2 jobs
    assert (f"estimated time: 1.5 h of training at --jobs 2 (from 3 recorded runs' training wall time in "
            f"{tmp_path / 'docs' / 'mqar.csv'}") in capsys.readouterr().out


def test_a_new_experiment_borrows_the_time_per_step_of_comparable_records(tmp_path):
    """No run of the experiment recorded: per run, the time per step of recorded runs of other experiments with
    the same task, parameter count and threads, times its planned steps; runs without such a record counted."""
    from tokenmix.training.estimate import estimate_line, estimate_time

    experiment = tiny("mixers=['relation', 'softmax']", "report.plots=[]")
    runs = experiment.runs("classification")
    steps = {r.key: 100 for r in runs}
    params = {r.key: (10 if r.label == "relation" else 99) for r in runs}
    (tmp_path / "other.csv").write_text("task,label,seed,params,steps,wall_s,threads\n"
                                        "listops,x,0,10,50,100,1\nlistops,x,1,10,50,300,1\n"
                                        "listops,y,0,10,50,999,2\nreviews,z,0,10,50,999,1\n")
    assert estimate_time(experiment.name, runs, [tmp_path]) is None  # nothing to borrow without the plan
    found = estimate_time(experiment.name, runs, [tmp_path], steps=steps, params=params, task="listops", threads=1)
    relation = [r.key for r in runs if r.label == "relation"]
    assert found.per_run == {key: pytest.approx(100 * 4.0) for key in relation}  # (2 + 6) / 2 s per step
    assert found.recorded == 2 and found.unmatched == len(runs) - len(relation)
    line = estimate_line(found, 2, experiment.name, [tmp_path])
    assert f"no run of {experiment.name} recorded: the time per step of 2 recorded runs of other experiments" in line
    assert f"{len(runs) - len(relation)} runs have no comparable record and are not counted" in line


def test_a_new_experiment_times_the_runs_nothing_comparable_recorded_by_the_harness(tmp_path):
    """Runs that borrow nothing (no record with their parameter count) take their label's harness step time
    (``<name>-steptime.csv``), times the recorded runs' ratio over the harness, instead of being left out."""
    from tokenmix.training.estimate import estimate_line, estimate_time

    experiment = tiny("mixers=['relation', 'softmax']", "report.plots=[]")
    runs = experiment.runs("classification")
    steps = {r.key: 100 for r in runs}
    params = {r.key: (10 if r.label == "relation" else 99) for r in runs}
    (tmp_path / "other.csv").write_text("task,label,seed,params,steps,wall_s,threads\n"
                                        "listops,x,0,10,50,100,1\nlistops,x,1,10,50,300,1\n")
    # the harness timed softmax only; another experiment's runs took 3 times its harness step
    (tmp_path / f"{experiment.name}-steptime.csv").write_text(
        "experiment,label,kind,length,batch,round,step_s,threads,peak_mb,memory\n"
        f"{experiment.name},softmax,experiment,8,4,1,0.5,1,,\n")
    (tmp_path / "timed-steptime.csv").write_text("experiment,label,kind,length,batch,round,step_s,threads,peak_mb,"
                                                 "memory\ntimed,a,experiment,8,4,1,2.0,1,,\n")
    (tmp_path / "timed.csv").write_text("task,label,seed,params,steps,wall_s,threads\nreviews,a,0,7,10,60,1\n")
    found = estimate_time(experiment.name, runs, [tmp_path], steps=steps, params=params, task="listops", threads=1)
    expected = {"relation": 100 * 4.0, "softmax": 3.0 * 0.5 * 100}
    assert found.per_run == {r.key: pytest.approx(expected[r.label]) for r in runs if r.label in expected}
    unmatched = sum(r.label not in expected for r in runs)  # the mlp: neither recorded nor timed
    assert found.unmatched == unmatched and found.timed_runs == sum(r.label == "softmax" for r in runs)
    line = estimate_line(found, 1, experiment.name, [tmp_path])
    assert f"; {found.timed_runs} runs with no comparable record from their label's median training step" in line
    assert "times 3.00" in line and f"; {unmatched} runs have no comparable record and are not counted" in line


def test_a_label_not_yet_recorded_borrows_before_the_mean_of_all_rows(tmp_path):
    """An experiment with rows for some labels: a label with none takes the time per step of comparable runs
    (same task, parameter count, threads) where the plan gives them, else the mean of the recorded rows."""
    from tokenmix.training.estimate import estimate_line, estimate_time

    experiment = tiny("mixers=['relation', 'softmax']", "report.plots=[]")
    runs = experiment.runs("classification")  # relation, softmax and the mlp baseline
    steps = {r.key: 100 for r in runs}
    params = {r.key: {"relation": 10, "softmax": 20}.get(r.label, 99) for r in runs}  # no record has 99
    (tmp_path / f"{experiment.name}.csv").write_text("task,label,seed,params,steps,wall_s,threads\n"
                                                     "listops,relation,0,10,100,1000,1\n")
    (tmp_path / "other.csv").write_text("task,label,seed,params,steps,wall_s,threads\n"
                                        "listops,x,0,20,50,100,1\nlistops,x,1,20,50,300,1\n"
                                        "listops,y,0,20,50,999,2\n")
    plain = estimate_time(experiment.name, runs, [tmp_path], steps=steps)  # no plan to borrow with
    assert set(plain.per_run.values()) == {1000.0} and plain.borrowed_runs == 0
    found = estimate_time(experiment.name, runs, [tmp_path], steps=steps, params=params, task="listops", threads=1)
    expected = {"relation": 1000.0, "softmax": 100 * 4.0, "mlp": 1000.0}  # softmax: (2 + 6) / 2 s per step
    assert found.per_run == {r.key: pytest.approx(expected[r.label]) for r in runs}
    assert found.borrowed_runs == 2 and not found.borrowed
    assert "; 2 runs of labels not yet recorded from the time per step" in estimate_line(
        found, 1, experiment.name, [tmp_path])


def test_every_help_text_ends_whole():
    import argparse

    from tokenmix.cli import build_parser

    dangling = {"a", "an", "and", "as", "by", "for", "in", "is", "of", "or", "the", "to", "with", "whose", "which",
                "that", "one", "are", "be"}
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    texts = [a.help for a in subparsers._choices_actions]
    texts += [a.help for sub in subparsers.choices.values() for a in sub._actions if a.help]
    for text in texts:
        assert text.split()[-1].strip(".,;:").lower() not in dangling, f"cut off: {text!r}"


def test_a_claim_naming_an_unknown_label_is_refused_when_the_file_is_loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(compare_module, "run_one", lambda *a, **k: pytest.fail("trained"))
    path = tmp_path / "typo.toml"
    path.write_text(to_toml({**tiny("mixers=['softmax', 'linear']").to_dict(), "claims": [
        {"text": "softmax beats linear", "paper": "p", "a": "softmax", "b": "linaer", "measure": "value",
         "kind": "greater"}]}))
    message = (rf"experiment: {re.escape(str(path))}: claim 'softmax beats linear': no label 'linaer' in the "
               r"experiment \(did you mean 'linear'\?\); labels: softmax, linear, mlp")
    with pytest.raises(ValueError, match=message):
        load_experiment(path)
    for flag in ("--dry-run", "--status"):
        with pytest.raises(SystemExit, match="tokenmix compare: " + message):
            main(["compare", "--config", str(path), "--out", str(tmp_path / "out"), flag])
    path.write_text(path.read_text().replace('"linaer"', '"linear"'))
    assert load_experiment(path).claims[0]["b"] == "linear"
    # the claims name the labels of the file as written: a --set that leaves a run out is no typo
    assert [e.label for e in load_experiment(path, ["mixers=['softmax']"]).mixers] == ["softmax"]


def test_claims_on_a_retired_task_are_refused_when_the_file_loads(tmp_path):
    """The byte-text and retrieval stand-ins are retired (their shortcut ceilings, 0.91-0.95, are far above what
    LRA's Transformer scores on the tasks they stand for): a file with claims on one is refused, naming the task
    and why; a pilot without claims still loads, and so does a file whose claims are on a task in service."""
    from tokenmix.tasks import task_info

    assert "byte 4-grams" in task_info("lra_text").retired and "byte" in task_info("lra_retrieval").retired
    assert task_info("mqar").retired is None
    pilot = ROOT / "experiments" / "001-kerformer-lra-pilot-text.toml"
    claimed = tmp_path / "claimed.toml"
    claimed.write_text(pilot.read_text() + '\n[[claims]]\ntext = "softmax beats the mlp"\npaper = "none"\n'
                       'a = "softmax"\nb = "mlp"\nmeasure = "value"\nkind = "greater"\n')
    with pytest.raises(ValueError, match="task .lra_text. is retired as a stand-in for LRA Text.*No claim may be"):
        load_experiment(claimed)
    with pytest.raises(ValueError, match="task .lra_retrieval. is retired"):
        load_experiment(claimed, ["task.name='lra_retrieval'"])
    assert load_experiment(claimed, ["task.name='reviews'", "task.preset='quick'"]).task["name"] == "reviews"
    assert load_experiment(pilot).task["name"] == "lra_text"


def test_claims_on_a_retired_setting_are_refused_when_the_file_loads(tmp_path):
    """Pathfinder's paths of fewer than 14 dashes run where their markers predict, and so does a negative's cut
    (the audit's cheap baselines read it: 0.83 at 6 dashes, 0.57 at 9): a file with claims at 6 or 9 dashes (9 is
    the quick preset) is refused naming the setting, its audited ceiling and why; 14 dashes (the paper preset,
    LRA's setting) loads, and so does the pilot without claims at any length."""
    pilot = ROOT / "experiments" / "001-kerformer-lra-pilot-pathfinder.toml"
    claimed = tmp_path / "claimed.toml"
    claimed.write_text(pilot.read_text() + '\n[[claims]]\ntext = "softmax beats the mlp"\npaper = "none"\n'
                       'a = "softmax"\nb = "mlp"\nmeasure = "value"\nkind = "greater"\n')
    with pytest.raises(ValueError, match="this setting of task .pathfinder. is retired: paths of 6 dashes .*0.83 "
                                         ".*No claim"):
        load_experiment(claimed, ["task.length=6"])
    with pytest.raises(ValueError, match="retired: paths of 9 dashes .*0.57 of the time at 9 dashes"):
        load_experiment(claimed)  # the quick preset: 9 dashes
    with pytest.raises(ValueError, match="retired: paths of 12 dashes .*are not audited, and at 9 dashes"):
        load_experiment(claimed, ["task.length=12"])
    assert load_experiment(claimed, ["task.preset='paper'"]).task["preset"] == "paper"  # 14
    assert load_experiment(claimed, ["task.length=14"]).task["length"] == 14
    assert load_experiment(pilot, ["task.length=6"]).task["length"] == 6  # no claims: a pilot still runs
    assert load_experiment(pilot).task["preset"] == "quick"
