"""``tokenmix compare``: train mixers side by side on one task and write an honest leaderboard.

Every mixer x seed is trained by :func:`tokenmix.train.train` on the same task (same data, same batches in
the same order for a given seed). Outputs in ``out_dir``:

* ``results.csv``: one row per mixer x seed (task, mixer, seed, params, metric, value (the test metric of
  the best-validation weights), best validation value, best epoch, time per epoch, time to target,
  tokens per second, peak memory), plus one row per skipped mixer with the reason;
* ``report.md``: the leaderboard, mean ± sd over seeds, sorted, with the skipped mixers listed;
* ``metric_vs_time.png`` (validation metric against training wall time, per mixer) and
  ``metric_vs_epoch_time.png`` (final metric against time per epoch).
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch

from .registry import list_mixers, mixer_info
from .tasks import Task, create_task
from .train import TrainConfig, TrainResult, train

__all__ = ["CompareSettings", "DEFAULT", "PRESETS", "skip_reason", "compare", "write_report"]

BASELINE = "mlp"  # the pointwise, no-context mechanism of 000 §3.2.1
COLUMNS = ["task", "mixer", "seed", "params", "metric", "value", "best_val", "best_epoch", "time_per_epoch_s",
           "time_to_target_s", "tokens_per_s", "peak_mem_mb", "skipped"]


@dataclass
class CompareSettings:
    """What one comparison trains: the task, its preset, and the model and training sizes."""

    task: str
    mixers: list[str]
    seeds: list[int]
    preset: str = "quick"
    dim: int = 32
    depth: int = 2
    heads: int = 2
    max_steps: int = 1500
    batch_size: int = 32
    lr: float = 3e-3
    eval_every: int = 250
    target: float | None = None
    target_k: int = 1


# The main job: generated data only (nothing to download), a few minutes on 2 CPU cores, a task where
# context matters, so the pointwise "mlp" baseline should trail the mechanisms that mix tokens.
DEFAULT = CompareSettings(task="listops", mixers=["mlp", "softmax", "linear", "relation", "average", "cosformer"],
                          seeds=[0, 1])

PRESETS = {"quick": {}, "paper": {"dim": 128, "depth": 4, "heads": 4, "max_steps": 20000, "eval_every": 1000}}


def skip_reason(mixer: str, task: Task) -> str | None:
    """Why ``mixer`` cannot run ``task`` (None when it can)."""
    info = mixer_info(mixer)
    kind = task.info.kind
    if kind == "language_model" and not info.causal:
        return "cannot run causally, which language modelling needs"
    if kind != "language_model" and not info.bidirectional:
        return "causal only; this task needs a bidirectional mixer"
    if info.spatial and kind != "image":
        return "spatial (needs a 2-D grid); this task is a 1-D sequence"
    return None


def _row(settings: CompareSettings, mixer: str, seed: int, result: TrainResult | None, reason: str | None) -> dict:
    row = dict.fromkeys(COLUMNS, "")
    row.update(task=settings.task, mixer=mixer, seed=seed, skipped=reason or "")
    if result is None:
        return row
    value = result.test_metric if result.test_metric is not None else result.best_metric
    row.update(params=result.params, metric=result.metric_name, value=round(value, 6),
               best_val=round(result.best_metric, 6), best_epoch=round(result.best_epoch, 3),
               time_per_epoch_s=round(result.time_per_epoch_s, 4),
               time_to_target_s="" if result.time_to_target_s is None else round(result.time_to_target_s, 3),
               tokens_per_s=round(result.tokens_per_s, 1), peak_mem_mb=round(result.peak_mem_mb, 1))
    return row


def compare(settings: CompareSettings, out_dir: str | Path, *, progress: bool | None = None) -> list[dict]:
    """Train every mixer x seed of ``settings``, plus the "mlp" baseline when it is not among them (the
    leaderboard always shows what no context achieves); write the outputs into ``out_dir``; return the rows."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    mixers = [*settings.mixers, *([BASELINE] if BASELINE not in settings.mixers else [])]
    unknown = sorted(set(mixers) - set(list_mixers(include_hidden=True)))
    if unknown:
        raise ValueError(f"unknown mixer(s) {unknown}; available: {', '.join(list_mixers())}")
    task = create_task(settings.task, preset=settings.preset, seed=0)
    rows, histories = [], {}
    for mixer in mixers:
        reason = skip_reason(mixer, task)
        if reason is not None:
            print(f"skip {mixer}: {reason}", flush=True)
            rows.append(_row(settings, mixer, "", None, reason))
            continue
        for seed in settings.seeds:
            torch.manual_seed(seed)
            heads = settings.heads if mixer_info(mixer).multihead else None
            model = task.build_model(mixer, dim=settings.dim, depth=settings.depth, num_heads=heads)
            config = TrainConfig(max_steps=settings.max_steps, batch_size=settings.batch_size, lr=settings.lr,
                                 eval_every=settings.eval_every, patience=None, target=settings.target,
                                 target_k=settings.target_k, seed=seed, out_dir=str(out / "runs" / f"{mixer}-{seed}"),
                                 progress=progress)
            result = train(task, model, config)
            rows.append(_row(settings, mixer, seed, result, None))
            histories[(mixer, seed)] = result.history
            print(f"{mixer} seed {seed}: {result.metric_name} {rows[-1]['value']} "
                  f"({result.time_per_epoch_s:.2f} s/epoch)", flush=True)
    write_report(rows, histories, settings, out)
    return rows


def _summary(rows: list[dict]) -> list[tuple[str, float, float, int, float, int]]:
    """(mixer, mean, sd, runs, mean time per epoch, params) per trained mixer."""
    by_mixer: dict[str, list[dict]] = {}
    for row in rows:
        if not row["skipped"]:
            by_mixer.setdefault(row["mixer"], []).append(row)
    summary = []
    for mixer, runs in by_mixer.items():
        values = [float(r["value"]) for r in runs]
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        epoch_time = statistics.mean(float(r["time_per_epoch_s"]) for r in runs)
        summary.append((mixer, statistics.mean(values), sd, len(values), epoch_time, int(runs[0]["params"])))
    return summary


def write_report(rows: list[dict], histories: dict, settings: CompareSettings, out: Path) -> None:
    """results.csv, report.md and the two plots."""
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    metric = next((r["metric"] for r in rows if r["metric"]), "metric")
    higher_is_better = metric != "perplexity"
    summary = sorted(_summary(rows), key=lambda s: s[1], reverse=higher_is_better)
    lines = [f"# tokenmix compare: {settings.task} ({settings.preset})", "",
             f"dim {settings.dim}, depth {settings.depth}, {settings.max_steps} steps of batch {settings.batch_size}, "
             f"lr {settings.lr}, seeds {', '.join(map(str, settings.seeds))}. Value: test {metric} of the "
             f"best-validation weights, mean ± sd over seeds ({'higher' if higher_is_better else 'lower'} is better).",
             "", f"| rank | mixer | test {metric} | runs | s / epoch | params |", "|---|---|---|---|---|---|"]
    for rank, (mixer, mean, sd, runs, epoch_time, params) in enumerate(summary, 1):
        lines.append(f"| {rank} | {mixer} | {mean:.4f} ± {sd:.4f} | {runs} | {epoch_time:.2f} | {params:,} |")
    skipped = [r for r in rows if r["skipped"]]
    if skipped:
        lines += ["", "Skipped:", ""] + [f"- {r['mixer']}: {r['skipped']}" for r in skipped]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    _plot(histories, summary, metric, out)


def _plot(histories: dict, summary: list, metric: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    mixers = sorted({mixer for mixer, _ in histories})
    colors = {m: plt.cm.tab20(i % 20) for i, m in enumerate(mixers)}  # one colour per mixer, a style per seed
    styles = ["-", "--", ":", "-."]
    seeds = sorted({seed for _, seed in histories})
    for (mixer, seed), history in sorted(histories.items()):
        ax.plot([h.wall_s for h in history], [h.val_metric for h in history], marker=".", color=colors[mixer],
                linestyle=styles[seeds.index(seed) % len(styles)], label=mixer if seed == seeds[0] else None)
    ax.set(xlabel="training wall time (s)", ylabel=f"validation {metric}",
           title="metric vs wall time (line style: seed)")
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(out / "metric_vs_time.png", dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mixer, mean, sd, _runs, epoch_time, _params in summary:
        ax.errorbar(epoch_time, mean, yerr=sd, fmt="o")
        ax.annotate(mixer, (epoch_time, mean), fontsize="small", xytext=(4, 4), textcoords="offset points")
    ax.set(xlabel="time per epoch (s)", ylabel=f"test {metric}", title=f"{metric} vs time per epoch")
    fig.tight_layout()
    fig.savefig(out / "metric_vs_epoch_time.png", dpi=100)
    plt.close(fig)
