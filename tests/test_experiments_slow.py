"""Smoke tests of the paper experiment files (slow): each runs end to end at its quick budget with tiny settings,
one seed and two steps, then goes through scripts/collect_results.py and tokenmix.report (``tokenmix report``)
(and, for the language model, scripts/generate_texts.py). Tasks whose data are not installed are skipped."""

from __future__ import annotations

import importlib.util
import math
import shutil
import sys
from pathlib import Path

import pytest

from tokenmix.report import render
from tokenmix.training.build import make_task
from tokenmix.training.experiment import load_experiment
from tokenmix.training.sweep import compare
from tokenmix.training.tomlfile import to_toml

ROOT = Path(__file__).resolve().parents[1]
TINY = ["train.max_steps=2", "train.eval_every=1", "seeds=[0]", "train.epochs=none"]
FEW = ["task.train_size=64", "task.val_size=16", "task.test_size=16"]
# per file: the --set overrides that shrink its task
SHRINK = {
    "000-time-to-accuracy": ["task.length=64", "task.train_size=60", "task.val_size=12", "task.test_size=12",
                             "task.vocab_size=500", "train.batch_size=8"],
    "001-kerformer-listops": FEW,
    "001-kerformer-fashion": FEW,
    "002-vision-fashion": FEW,
    "003-contextualizer-reviews": ["task.max_len=32"],
    "004-extractors-lm": ["task.train_size=64", "task.val_size=8", "task.test_size=8"],
    "001-kerformer-lra-listops": FEW + ["task.min_length=20", "task.max_length=60"],
}


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SHRINK))
def test_experiment_file_runs(name, tmp_path):
    experiment = load_experiment(ROOT / "experiments" / f"{name}.toml", TINY + SHRINK[name], budget="quick")
    try:
        task = make_task(experiment)
    except (FileNotFoundError, ImportError) as error:
        pytest.skip(f"{experiment.task['name']} data not available: {error}")
    runs = experiment.runs(task.info.kind)
    out = tmp_path / "runs" / name
    rows = compare(experiment, out, isolate=False, progress=False)
    assert [r["label"] for r in rows] == [r.label for r in runs]
    assert all(r["steps"] == 2 and math.isfinite(r["value"]) for r in rows)
    assert (out / "results.csv").exists() and (out / "report.md").exists()

    docs = tmp_path / "docs"
    written = _script("collect_results").collect(out, docs)
    assert all(p.suffix == ".csv" for p in written)
    # the report pools only rows of the file as it stands: it reads the shrunk file beside the others
    experiments = tmp_path / "experiments"
    shutil.copytree(ROOT / "experiments", experiments)
    (experiments / f"{name}.toml").write_text(to_toml(experiment.to_dict()))
    text = render(docs, tmp_path / "reproduction.md", experiments, plots=False)
    assert text.count("| claim | paper |") == 1  # this experiment's claims; the others are not run yet
    assert f"| `{name}` | all | not run yet |" not in text
    if task.info.kind == "language_model":
        lines = _script("generate_texts").generate(out)
        assert [line.split(":", 1)[0] for line in lines] == [r.label for r in runs]
        assert all(line.split(": ", 1)[1].startswith("Once upon a time") for line in lines)
