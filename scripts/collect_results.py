"""Copy a finished experiment's small CSVs from its run folder into docs/reproduction/ (never any weights).

    python scripts/collect_results.py runs/<name> docs/reproduction/ [--no-chance]

Writes, for the experiment ``<name>`` of ``runs/<name>/config.toml``:

* ``<name>.csv``: ``runs/<name>/results.csv`` (one row per run) with each run's ``config_hash`` added (see
  :mod:`tokenmix.training.results`: ``tokenmix compare --results docs/reproduction/`` then does not train them again);
* ``<name>-history.csv``: every run's evaluations from ``runs/<name>/runs/<label>/seed<k>/result.json``, with
  the columns label, seed, step, epoch, wall_s, train_loss, val_loss, val_metric, in results.csv's order;
* ``<name>-chance.csv`` (classification and image tasks, unless ``--no-chance``): the train split's majority
  class, its share of the train split and of the test split (the accuracy of a model that learned only the
  class prior), computed by building the experiment's task once. ``scripts/reproduction.py`` compares
  000's Baseline with the test share.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokenmix.training.results import (CHANCE_COLUMNS, HASH_COLUMN, HISTORY_COLUMNS, ROW_COLUMNS, history_records,
                                      read_csv, write_csv)

# The schemas and the writing are tokenmix.training.results's, shared with `tokenmix compare --results DIR`.


def history_rows(run_dir: Path, results: list[dict[str, str]]) -> list[dict[str, object]]:
    """Every evaluation of every run in ``results`` (read from its result.json), rounded to 6 digits."""
    rows: list[dict[str, object]] = []
    for result in results:
        path = run_dir / "runs" / result["label"] / f"seed{result['seed']}" / "result.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: has the run finished?")
        rows += history_records(result["label"], int(result["seed"]), json.loads(path.read_text())["history"])
    return rows


def chance_row(config: Path) -> dict[str, object] | None:
    """The majority-class rates of the experiment's task (None for language modelling)."""
    from tokenmix.training.build import make_task
    from tokenmix.training.experiment import load_experiment
    from tokenmix.training.results import chance_row as task_chance_row

    return task_chance_row(make_task(load_experiment(config)))


def experiment_name(run_dir: Path) -> str:
    import tomllib

    with open(run_dir / "config.toml", "rb") as f:
        return tomllib.load(f)["name"]


def config_hashes(config: Path) -> dict[tuple[str, str], str]:
    """The config_hash (tokenmix.training.results.run_config) of every run of the experiment in ``config``, by (label,
    seed), so that ``tokenmix compare --results`` does not train the collected runs again."""
    from tokenmix.training.experiment import load_experiment
    from tokenmix.training.results import config_hash, run_config
    from tokenmix.tasks import task_info

    experiment = load_experiment(config)
    return {(run.label, str(run.seed)): config_hash(run_config(experiment, run, experiment.threads()))
            for run in experiment.runs(task_info(experiment.task["name"]).kind)}


def collect(run_dir: Path, out: Path, chance: bool = True) -> list[Path]:
    """Write the experiment's CSVs into ``out``; returns their paths."""
    results_path = run_dir / "results.csv"
    if not results_path.exists():
        raise FileNotFoundError(f"{results_path} is missing: results.csv is written when the sweep has finished")
    name = experiment_name(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    columns, results = read_csv(results_path)
    written = [out / f"{name}.csv", out / f"{name}-history.csv"]
    hashes = config_hashes(run_dir / "config.toml")
    rows = [{**r, HASH_COLUMN: hashes.get((r["label"], r["seed"]), "")} for r in results]
    write_csv(written[0], ROW_COLUMNS + [c for c in columns if c not in ROW_COLUMNS], rows)
    write_csv(written[1], HISTORY_COLUMNS, history_rows(run_dir, results))
    row = chance_row(run_dir / "config.toml") if chance else None
    if row is not None:
        written.append(out / f"{name}-chance.csv")
        write_csv(written[-1], CHANCE_COLUMNS, [row])
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Copy an experiment's results.csv and run histories (CSV only).")
    parser.add_argument("run_dir", help="the experiment's output folder, e.g. runs/000-time-to-accuracy")
    parser.add_argument("out", help="where the CSVs go, e.g. docs/reproduction/")
    parser.add_argument("--no-chance", action="store_true",
                        help="skip <name>-chance.csv (which builds the task, loading its data)")
    args = parser.parse_args(argv)
    try:
        written = collect(Path(args.run_dir), Path(args.out), chance=not args.no_chance)
    except FileNotFoundError as error:  # an unfinished sweep, or task data missing for the chance rate
        print(f"collect_results: {error}" + ("" if args.no_chance else " (--no-chance skips the chance rate)"),
              file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
