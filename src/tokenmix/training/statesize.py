"""Accuracy against the recurrent state (the picture of Arora et al. 2024, Based, Figure 2: recall against the
state a mechanism keeps while it generates), for a sweep's leaderboard.

Each label's state is measured, not computed from a formula: its model (the label's first run, built as
training builds it) steps through the task's whole sequence length and the bytes its mixers hold are summed
(:meth:`tokenmix.models.CausalLM.state_bytes`); a state that grows between half and the whole length is a cache
(softmax attention's keys and values), the others are fixed. The task's reference levels
(:meth:`tokenmix.tasks.Task.reference_levels`: MQAR's chance and copy-a-value floor) are drawn as lines and read
in the paragraph :func:`reading` writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..tasks import Task
from .build import build_model
from .experiment import Experiment

__all__ = ["StateSize", "state_sizes", "plot_metric_vs_state", "reading"]

StateSize = dict[str, tuple[int, bool]]  # label -> (bytes at the task's length, whether it grows with the length)


def state_sizes(task: Task, experiment: Experiment) -> StateSize:
    """Every label's decoding state at the task's length (its first run's model); labels whose model cannot step
    (not a causal language model) are left out."""
    sizes: StateSize = {}
    seen = set()
    for run in experiment.runs(task.info.kind):
        if run.label in seen:
            continue
        seen.add(run.label)
        model = build_model(task, run)
        if not hasattr(model, "state_bytes") or not model.can_step:
            continue
        half, whole = model.state_bytes_at([max(1, task.max_len // 2), task.max_len])
        sizes[run.label] = (whole, half < whole)
    return sizes


def plot_metric_vs_state(summary: list[dict[str, Any]], sizes: StateSize, levels: dict[str, float], metric: str,
                         length: int, out: Path) -> None:
    """``metric_vs_state.png``: each label's mean test metric (± sd) against its state's bytes (log scale; a
    stateless label at 1 byte), the reference levels as dotted lines."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    placed: dict[int, int] = {}  # labels at one state size, stacked so that they do not overwrite each other
    for s in summary:
        if s["label"] not in sizes:
            continue
        size, grows = sizes[s["label"]]
        ax.errorbar(max(size, 1), s["mean"], yerr=s["sd"], fmt="s" if grows else "o", color="C3" if grows else "C0")
        nth = placed[size] = placed.get(size, -1) + 1
        ax.annotate(s["label"], (max(size, 1), s["mean"]), fontsize="small", xytext=(4, 4 + 11 * nth),
                    textcoords="offset points")
    for i, (name, value) in enumerate(levels.items()):
        ax.axhline(value, linestyle=":", color=f"C{i + 4}", label=name)
    ax.set_xscale("log")
    ax.set(xlabel=f"decoding state after {length} tokens (bytes, log; squares: a cache that grows)",
           ylabel=f"test {metric}", title=f"{metric} vs the state a mechanism keeps")
    if levels:
        ax.legend(fontsize="small", loc="upper left")
    fig.tight_layout()
    fig.savefig(out / "metric_vs_state.png", dpi=100)
    plt.close(fig)


def _named(s: dict[str, Any], sizes: StateSize) -> str:
    return f"{s['label']} ({s['mean']:.3f}, {sizes[s['label']][0]:,} bytes)"


def reading(summary: list[dict[str, Any]], sizes: StateSize, levels: dict[str, float], length: int) -> list[str]:
    """One paragraph that reads the leaderboard against the state sizes and the reference levels (accuracy-like
    metrics: ``summary`` best first)."""
    known = [s for s in summary if s["label"] in sizes]
    caches = [s for s in known if sizes[s["label"]][1]]
    fixed = [s for s in known if not sizes[s["label"]][1] and sizes[s["label"]][0] > 0]
    stateless = [s for s in known if sizes[s["label"]][0] == 0]
    parts = []
    if caches:
        parts.append("Growing with the sequence: " + "; ".join(_named(s, sizes) for s in caches)
                     + f", each holding its key-value cache of {length} tokens.")
    if fixed:
        span = f"from {_named(fixed[0], sizes)} down to {_named(fixed[-1], sizes)}" if len(fixed) > 1 \
            else _named(fixed[0], sizes)
        parts.append(f"With a fixed state: {span}.")
    if stateless:
        parts.append("Mixing nothing: " + "; ".join(f"{s['label']} ({s['mean']:.3f})" for s in stateless) + ".")
    placed: set[str] = set()
    for name, value in sorted(levels.items(), key=lambda item: item[1]):
        near = [s["label"] for s in known if s["mean"] <= 1.5 * value and s["label"] not in placed
                and s not in stateless]
        placed.update(near)
        parts.append(f"{name[0].upper() + name[1:]}: {value:.3f}"
                     + (f"; no better than 1.5 times it: {', '.join(near)}." if near else "."))
    parts.append(_choice(caches, fixed))
    return ["## Reading: recall against state", "", " ".join(parts)]


# a fixed state this close to the best cache reads as matching it (the reading's words, not a claim's test)
MATCHES_CACHE = 0.02


def _choice(caches: list[dict[str, Any]], fixed: list[dict[str, Any]]) -> str:
    """The reading's sentence for a user choosing a mechanism: which fixed states match the best cache, if any,
    and what the gap to the cache means for the others."""
    best = caches[0] if caches else None
    matching = [s["label"] for s in fixed if best is not None and s["mean"] >= best["mean"] - MATCHES_CACHE]
    others = [s for s in fixed if s["label"] not in matching]
    text = "For a choice of mechanism: "
    if matching:
        text += (f"{', '.join(matching)} recall{'s' if len(matching) == 1 else ''} as well as the cache (within "
                 f"{MATCHES_CACHE}) in a state that stays fixed as the sequence grows, where the cache grows with it; ")
    if best is not None and others:
        text += ("the gap between the cache and the other fixed states is what they lost of the context; "
                 if matching else "the gap between the cache and a fixed state is what the fixed state lost of the "
                 "context; ")
    text += ("a mechanism near the copy-a-value line reads the context without finding the key asked. Arora et "
             "al. (2024) find recall rising with the state's size; tokenmix's recall sweep (the report's recall "
             "section) measures it across mechanisms, widths and lengths.")
    return text
