"""A sweep's leaderboard (``tokenmix compare``): ``results.csv``, ``report.md`` (mean ± sd over seeds per label)
and the plots of the validation metric against training time (:func:`plot_histories`, also drawn by
``tokenmix report``)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from ..tabulate import markdown_table
from ..tasks import Task, task_info
from .experiment import Experiment
from .provenance import PROVENANCE_COLUMNS
from .results import COLUMNS, write_csv
from .statesize import plot_metric_vs_state, reading, state_sizes

__all__ = ["write_report", "plot_histories"]


def _summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per label: mean and sd of the value, runs, time per epoch, params, time to target, peak memory."""
    by_label: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_label.setdefault(row["label"], []).append(row)
    summary = []
    for label, runs in by_label.items():
        values = [float(r["value"]) for r in runs]
        reached = [float(r["time_to_target_s"]) for r in runs if r["time_to_target_s"] != ""]
        summary.append({
            "label": label, "mixer": runs[0]["mixer"], "mean": statistics.mean(values),
            "sd": statistics.stdev(values) if len(values) > 1 else 0.0, "runs": len(runs),
            "epoch_s": statistics.mean(float(r["time_per_epoch_s"]) for r in runs),
            "params": int(runs[0]["params"]), "reached": len(reached),
            "to_target": statistics.mean(reached) if reached else None,
            "peak_mb": statistics.mean(float(r["peak_mem_mb"]) for r in runs)})
    return summary


def write_report(rows: list[dict[str, Any]], histories: dict, experiment: Experiment, out: Path,
                 task: Task | None = None) -> list[str]:
    """``results.csv``, ``report.md`` and the plots the experiment asks for; returns the notes it printed. With
    the plot ``metric_vs_state`` and the experiment's ``task``: each label's decoding state beside its row, the
    plot against it and a paragraph reading it (:mod:`.statesize`)."""
    write_csv(out / "results.csv", COLUMNS + PROVENANCE_COLUMNS, rows)  # atomic: a reader sees old or new whole
    metric = rows[0]["metric"] if rows else "metric"
    higher = task_info(experiment.task["name"]).higher_is_better
    summary = sorted(_summary(rows), key=lambda s: s["mean"], reverse=higher)
    runs = experiment.runs(task_info(experiment.task["name"]).kind)
    train = experiment.train_config(runs[0])
    lrs = {run.label: experiment.train_config(run).lr for run in runs}
    per_label_lr = len(set(lrs.values())) > 1
    budget = f"{train.max_steps} steps" if train.max_steps is not None else f"{train.epochs} epochs"
    model = ", ".join(f"{k} {v}" for k, v in experiment.model.items() if v is not None)
    target = experiment.report.get("target")
    task_name = experiment.task["name"]
    lines = [f"# {experiment.name}" + (f": {task_name}" if task_name != experiment.name else ""), ""]
    if experiment.description:
        lines += [experiment.description, ""]
    lines += [f"Model: {model}. Training: preset {experiment.train.get('preset', 'quick')}, {budget} of batch "
              f"{train.batch_size}, {train.optimizer} "
              f"{'at each label’s lr (column lr)' if per_label_lr else f'lr {train.lr}'}, {train.schedule} schedule; "
              "seeds "
              f"{', '.join(map(str, experiment.seeds))}. Value: test {metric} of the best-validation weights, "
              f"mean ± sd over seeds ({'higher' if higher else 'lower'} is better). Peak memory: the training "
              f"loop's peak above the memory of its process before it (each run in a fresh process).", ""]
    plots = experiment.report.get("plots", [])
    sizes = state_sizes(task, experiment) if task is not None and "metric_vs_state" in plots else {}
    header = ["rank", "label", "mixer", f"test {metric}", "runs", "s / epoch", "params", "peak MiB"]
    header += [f"state at {task.max_len} tokens (bytes)"] if sizes else []
    header += ["lr"] if per_label_lr else []
    header += [f"time to {target} (s, runs reaching it)"] if target is not None else []
    table = []
    for rank, s in enumerate(summary, 1):
        cell = []
        if target is not None:
            cell = [f"{s['to_target']:.1f} ({s['reached']}/{s['runs']})" if s["to_target"] is not None
                    else f"not reached (0/{s['runs']})"]
        spread = f"± {s['sd']:.4f}" if s["runs"] > 1 else "(1 seed)"  # no sd from one sample
        table.append([str(rank), s["label"], s["mixer"], f"{s['mean']:.4f} {spread}", str(s["runs"]),
                      f"{s['epoch_s']:.2f}", f"{s['params']:,}", f"{s['peak_mb']:.1f}", *cell])
        if sizes:
            size, grows = sizes.get(s["label"], (None, False))
            table[-1].append("-" if size is None else f"{size:,}" + (" (grows)" if grows else ""))
        if per_label_lr:
            table[-1].append(f"{lrs[s['label']]:g}")
    lines += markdown_table(header, table).split("\n")
    notes = plot_histories(histories, summary, metric, out, [p for p in plots if p != "metric_vs_state"])
    if sizes and higher:
        levels = task.reference_levels()
        lines += [""] + reading(summary, sizes, levels, task.max_len)
        if not notes and "metric_vs_state" in plots:
            plot_metric_vs_state(summary, sizes, levels, metric, task.max_len, out)
    if notes:
        lines += [""] + notes
    (out / "report.md").write_text("\n".join(lines) + "\n")
    for note in notes:
        print(note, flush=True)
    return notes


def plot_histories(histories: dict, summary: list[dict[str, Any]], metric: str, out: Path,
                   plots: list[str]) -> list[str]:
    """Draw ``plots`` into ``out``: ``metric_vs_time.png`` (each run's validation metric against its training wall
    time; ``histories`` maps (label, seed) to records with ``wall_s`` and ``val_metric``) and
    ``metric_vs_epoch_time.png`` (each ``summary`` row's mean metric against its time per epoch). Returns notes
    (a plot skipped because matplotlib is missing), empty when drawn."""
    if not plots:
        return []
    try:
        import matplotlib
    except ModuleNotFoundError:
        return [f"Plots skipped ({', '.join(plots)}): matplotlib is not installed; pip install 'tokenmix-lab[plot]' "
                f"and run the same command again to draw them."]
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if "metric_vs_time" in plots:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        labels = sorted({label for label, _ in histories})
        colors = {m: plt.cm.tab20(i % 20) for i, m in enumerate(labels)}  # one colour per label, a style per seed
        styles = ["-", "--", ":", "-."]
        seeds = sorted({seed for _, seed in histories})
        for (label, seed), history in sorted(histories.items()):
            ax.plot([h["wall_s"] for h in history], [h["val_metric"] for h in history], marker=".",
                    color=colors[label], linestyle=styles[seeds.index(seed) % len(styles)],
                    label=label if seed == seeds[0] else None)
        ax.set(xlabel="training wall time (s)", ylabel=f"validation {metric}",
               title="metric vs wall time (line style: seed)")
        ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5))
        fig.tight_layout()
        fig.savefig(out / "metric_vs_time.png", dpi=100)
        plt.close(fig)
    if "metric_vs_epoch_time" in plots:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for s in summary:
            ax.errorbar(s["epoch_s"], s["mean"], yerr=s["sd"], fmt="o")
            ax.annotate(s["label"], (s["epoch_s"], s["mean"]), fontsize="small", xytext=(4, 4),
                        textcoords="offset points")
        ax.set(xlabel="time per epoch (s)", ylabel=f"test {metric}", title=f"{metric} vs time per epoch")
        fig.tight_layout()
        fig.savefig(out / "metric_vs_epoch_time.png", dpi=100)
        plt.close(fig)
    return []
