"""The recall sweep's two pictures and its table (paper key 005): MQAR accuracy against sequence length at width 64
(Arora et al. (2023), Zoology, Figure 2) and against the decoding state at 64 tokens, one curve per mechanism over
its widths (Arora et al. (2024), Based, Figure 2). Read from the committed rows of
``002-zoology-mqar-<N>.csv`` (the runs at the rates chosen on validation); each label's state is measured by
building its model from the experiment file (:func:`tokenmix.training.statesize.state_sizes`)."""

from __future__ import annotations

import os
import re
import statistics
from pathlib import Path

from tokenmix.training.recallsweep import CELLS

from .tables import table

__all__ = ["LENGTHS", "recall_section", "recall_values"]

LENGTHS = tuple(CELLS)
STATE_LENGTH = 64  # the length whose file sweeps the widths
COMMAND = "tokenmix compare --config experiments/002-zoology-mqar-{n}.toml --results docs/reproduction --jobs 2"
_LABEL = re.compile(r"^(?P<mechanism>.+)-d(?P<width>[0-9]+)$")


def recall_values(data: Path) -> dict[tuple[int, str, int], list[float]]:
    """(length, mechanism, width) -> the test accuracies of its seeds, from ``002-zoology-mqar-<N>.csv``."""
    from tokenmix.training.results import read_csv

    values: dict[tuple[int, str, int], list[float]] = {}
    for n in LENGTHS:
        for row in read_csv(data / f"002-zoology-mqar-{n}.csv")[1]:
            found = _LABEL.match(row.get("label", ""))
            if found and row.get("value"):
                key = (n, found["mechanism"], int(found["width"]))
                values.setdefault(key, []).append(float(row["value"]))
    return values


def _states(experiments: Path) -> dict[str, int]:
    """Each label of the STATE_LENGTH-token file: its decoding state in bytes after 256 tokens."""
    from tokenmix.training.build import plan_task
    from tokenmix.training.experiment import load_experiment
    from tokenmix.training.statesize import state_sizes

    path = experiments / f"002-zoology-mqar-{STATE_LENGTH}.toml"
    if not path.exists():
        return {}
    experiment = load_experiment(path)
    return {label: size for label, (size, _) in state_sizes(plan_task(experiment), experiment).items()}


def _plots(values: dict[tuple[int, str, int], list[float]], states: dict[str, int], image: Path) -> list[str]:
    try:
        import matplotlib
    except ModuleNotFoundError:
        return ["Plots skipped: matplotlib is not installed (`pip install 'tokenmix-lab[plot]'`)."]
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    image.mkdir(parents=True, exist_ok=True)
    mechanisms = sorted({m for _, m, _ in values})
    colours = {m: plt.cm.tab20(i % 20) for i, m in enumerate(mechanisms)}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for m in mechanisms:
        points = [(n, statistics.mean(values[n, m, 64])) for n in LENGTHS if (n, m, 64) in values]
        if points:
            ax.plot(*zip(*points), marker="o", color=colours[m], label=m)
    ax.set_xscale("log", base=2)
    pairs = ", ".join(str(c.pairs) for c in CELLS.values())
    ax.set(xlabel=f"sequence length (tokens; pairs {pairs})", ylabel="test accuracy (mean over seeds)",
           title="MQAR at width 64 (Zoology, Figure 2)")
    ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(image / "005-accuracy-vs-length.png", dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for m in mechanisms:
        points = sorted((states[f"{m}-d{w}"], statistics.mean(v)) for (n, mm, w), v in values.items()
                        if n == STATE_LENGTH and mm == m and states.get(f"{m}-d{w}", 0) > 0)
        if points:
            ax.plot(*zip(*points), marker="s" if m == "softmax" else "o", color=colours[m], label=m)
    ax.set_xscale("log")
    ax.set(xlabel=f"decoding state after {STATE_LENGTH} tokens (bytes, log; softmax: its key-value cache)",
           ylabel="test accuracy (mean over seeds)", title=f"MQAR at {STATE_LENGTH} tokens against the state (Based, "
                                                           f"Figure 2)")
    ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(image / "005-accuracy-vs-state.png", dpi=100)
    plt.close(fig)
    return []


def recall_section(data: Path, *, experiments: Path | None = None, out: Path | None = None,
                   plots: bool = True) -> list[str]:
    """The section: the table of every (mechanism, width) at every length and, unless ``plots`` is False, the two
    pictures (drawn into ``data/img`` and linked relative to the report ``out``) or why they could not be drawn."""
    values = recall_values(data)
    lines = ["### Recall against length and state (the sweep's pictures)", ""]
    if not values:
        return lines + ["Not run yet: " + "; ".join(f"`{COMMAND.format(n=n)}`" for n in LENGTHS) + "."]
    keys = sorted({(m, w) for _, m, w in values})
    body = []
    for m, w in keys:
        cells = []
        for n in LENGTHS:
            v = values.get((n, m, w))
            cells.append("" if not v else f"{statistics.mean(v):.3f} ({len(v)})")
        body.append([f"{m}-d{w}", *cells])
    lines += ["Test accuracy, mean over the seeds recorded (their number in brackets), at the learning rate chosen "
              "on validation:", ""]
    lines += table(["label", *(f"N = {n}" for n in LENGTHS)], body) + [""]
    if not plots:
        return lines
    notes = _plots(values, _states(experiments) if experiments is not None else {}, data / "img")
    if notes:
        return lines + notes
    where = Path(os.path.relpath(data / "img", (out or data / "report.md").parent))
    return lines + [f"![accuracy against length]({where / '005-accuracy-vs-length.png'})", "",
                    f"![accuracy against state]({where / '005-accuracy-vs-state.png'})", ""]
