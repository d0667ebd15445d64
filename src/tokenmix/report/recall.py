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
from typing import Any

from tokenmix.training.recallsweep import CELLS, CONV_FILE, SHORTCONV_FILES, SHORTCONV_SIZE, WINDOW_FILE

from .tables import table

__all__ = ["LENGTHS", "recall_section", "recall_values"]

LENGTHS = tuple(CELLS)
STATE_LENGTH = 64  # the length whose file sweeps the widths
COMMAND = "tokenmix compare --config experiments/002-zoology-mqar-{n}.toml --results docs/reproduction --jobs 2"
_LABEL = re.compile(r"^(?P<mechanism>.+)-d(?P<width>[0-9]+)$")
_WINDOWED = re.compile(r"-w[0-9]+$")  # the window file's labels: window_linear-w<window>-d<width>
_LONG_FILTER = "baseconv-long"  # the long-convolution file's own labels: baseconv-long-d<width>
_LONG = re.compile(rf"^{_LONG_FILTER}$")
_SHORT_CONV = re.compile(rf"-conv{SHORTCONV_SIZE}$")  # the short-convolution file's labels: <layer>-conv4-d<width>
# the files added beside the sweep at STATE_LENGTH tokens, each with the labels it adds (the rest are reused rows)
_ADDED = ((WINDOW_FILE, _WINDOWED), (CONV_FILE, _LONG), (SHORTCONV_FILES[STATE_LENGTH], _SHORT_CONV))
# those added beside the sweep at another length (the length axis only)
_ADDED_ELSEWHERE = tuple((n, f, _SHORT_CONV) for n, f in SHORTCONV_FILES.items() if n != STATE_LENGTH)


def recall_values(data: Path) -> dict[tuple[int, str, int], list[float]]:
    """(length, mechanism, width) -> the test accuracies of its seeds, from ``002-zoology-mqar-<N>.csv`` and the
    labels the files added beside it (window, long and short convolution) add (their other labels are the 64-token
    file's runs, not counted twice). Rows ``--verify`` found stale are left out, as from every table of the report
    (:meth:`~tokenmix.training.results.ResultsDir.stale_because`)."""
    from tokenmix.training.results import ResultsDir

    values: dict[tuple[int, str, int], list[float]] = {}
    files = [(n, f"002-zoology-mqar-{n}", None) for n in LENGTHS] + [(STATE_LENGTH, f, own) for f, own in _ADDED]
    for n, name, only in files + list(_ADDED_ELSEWHERE):
        record = ResultsDir(data, name)
        for row in (record.rows() if record.csv.exists() else {}).values():
            found = _LABEL.match(row.get("label", ""))
            if record.stale_because(row.get("code", ""), row["label"]) is not None:
                continue
            if found and row.get("value") and (only is None or only.search(found["mechanism"])):
                key = (n, found["mechanism"], int(found["width"]))
                values.setdefault(key, []).append(float(row["value"]))
    return values


def _curve(mechanism: str) -> str:
    """The state picture's curve a mechanism's label belongs to: one per mechanism, its windows on one curve."""
    return _WINDOWED.sub("", mechanism)


def _sweep_files(experiments: Path | None) -> dict[str, Any]:
    """The sweep's experiment files found in ``experiments`` (every length's and those added beside them), by
    name, each parsed once."""
    from tokenmix.training.experiment import load_experiment

    names = [f"002-zoology-mqar-{n}" for n in LENGTHS] + [f for f, _ in _ADDED]
    paths = [] if experiments is None else [experiments / f"{name}.toml" for name in names]
    return {path.stem: load_experiment(path) for path in paths if path.exists()}


def _states(files: dict[str, Any]) -> dict[str, int]:
    """Each label of the STATE_LENGTH-token file and the files added beside it: its decoding state in bytes after
    the file's sequence length."""
    from tokenmix.training.build import plan_task
    from tokenmix.training.statesize import state_sizes

    sizes: dict[str, int] = {}
    for name in (f"002-zoology-mqar-{STATE_LENGTH}", *(f for f, _ in _ADDED)):
        if name in files:
            experiment = files[name]
            sizes.update({label: size for label, (size, _) in state_sizes(plan_task(experiment), experiment).items()})
    return sizes


def _reach_notes(files: dict[str, Any], values: dict[tuple[int, str, int], list[float]]) -> list[str]:
    """Why a mechanism whose receptive field is a few tokens sits at chance: BaseConv's filter of k taps lets an
    L-layer model see L (k - 1) tokens back, and the share of queries whose value lies that close is counted as for
    the window file (:func:`tokenmix.training.recallsweep.window_reach`)."""
    import tokenmix
    from tokenmix.training.recallsweep import window_reach

    notes = []
    for n in LENGTHS:
        experiment = files.get(f"002-zoology-mqar-{n}")
        if experiment is None:
            continue
        for entry in experiment.mixers:
            found = _LABEL.match(entry.label)
            if entry.pattern != ("baseconv",) or not found:
                continue
            width = int(found["width"])
            runs = values.get((n, found["mechanism"], width))
            if not runs:
                continue
            taps = tokenmix.create_mixer("baseconv", 8, causal=True, **entry.options).kernel_size
            depth = int({**experiment.model, **entry.model}["depth"])
            back = depth * (taps - 1)
            mean = statistics.mean(runs)
            share = 100 * window_reach(back + 1, n)
            long_runs = values.get((n, _LONG_FILTER, width))
            measured = f": {statistics.mean(long_runs):.3f} at the same width (`{CONV_FILE}`)" if long_runs else ""
            notes.append(f"**Reach, {entry.label} at {n} tokens.** Its filter has {taps} taps (Based's short "
                         f"convolution), so a {depth}-layer model sees {back} tokens back; the value asked for lies "
                         f"that close in {share:.1f} % of the queries. Its {mean:.3f} measures that reach, not what "
                         f"a gated long convolution (Zoology's BaseConv with a filter as long as the sequence, "
                         f"`kernel_size=None`) recalls{measured}.")
    return notes


_MARKERS = "osD^vP<X>hp"


def _style(i: int) -> tuple[int, str]:
    """The i-th curve's tab20 colour index and marker. tab20 repeats after 20 curves, so curve i + 20 takes a
    marker 3 places on (25 mod 11): a triangle where curve i had a circle, not the look-alike hexagon; no two of
    the first 220 curves share both."""
    return i % 20, _MARKERS[(i + 5 * (i // 20)) % len(_MARKERS)]


def _floors(data: Path, files: dict[str, Any]) -> tuple[dict[str, str] | None, float]:
    """The audited shortcut ceiling at the state file's setting (copying one pair's value) and chance."""
    from tokenmix.training.recallsweep import VOCAB

    from .ceilings import ceiling_for

    chance = 2 / VOCAB  # the values are one half of the vocabulary
    experiment = files.get(f"002-zoology-mqar-{STATE_LENGTH}")
    return (None if experiment is None else ceiling_for(data, experiment.task)), chance


def _references(ax, ceiling: dict[str, str] | None, chance: float) -> None:
    if ceiling is not None:
        ax.axhspan(float(ceiling["low"]), float(ceiling["high"]), color="0.85", zorder=0,
                   label=f"shortcut ceiling {float(ceiling['accuracy']):.3f}")
    ax.axhline(chance, color="0.5", linestyle=":", zorder=0, label=f"chance {chance:.4f}")


def _draw(ax, curves: dict[str, list[tuple[float, list[float], bool]]], styles: dict[str, tuple]) -> None:
    """One curve of means per mechanism, each seed a faint dot behind it (the means hide seeds that stall). A mean
    of fewer seeds than its file plans (a stage still training) is a hollow marker, reached by a dashed line."""
    for m, points in curves.items():
        colour, marker = styles[m]
        points = sorted(points, key=lambda point: point[0])
        means = [(x, statistics.mean(v), done) for x, v, done in points]
        width = 2.5 if m == "softmax" else 1.2
        for (x0, y0, done0), (x1, y1, done1) in zip(means, means[1:]):
            ax.plot([x0, x1], [y0, y1], color=colour, linewidth=width, linestyle="-" if done0 and done1 else "--")
        for filled in (True, False):
            xs = [(x, y) for x, y, done in means if done == filled]
            if xs:
                ax.plot(*zip(*xs), linestyle="none", marker=marker, color=colour,
                        markerfacecolor=colour if filled else "none")
        ax.plot([], [], marker=marker, color=colour, linewidth=width, label=m)
        seeds = [(x, y) for x, v, _ in points for y in v]
        ax.scatter(*zip(*seeds), s=16, marker=marker, color=colour, alpha=0.35, linewidths=0)


def _complete(planned: dict[int, int], n: int, seeds: list[float]) -> bool:
    """Whether a mean at ``n`` tokens holds every seed its file plans."""
    return len(seeds) >= planned.get(n, 0)


def _planned(files: dict[str, Any]) -> dict[int, int]:
    """Each length's planned seeds per label (its file's seeds list; the files added beside it share it)."""
    return {n: len(files[f"002-zoology-mqar-{n}"].seeds) for n in LENGTHS if f"002-zoology-mqar-{n}" in files}


def _plots(values: dict[tuple[int, str, int], list[float]], states: dict[str, int], image: Path,
           ceiling: dict[str, str] | None, chance: float, planned: dict[int, int]) -> list[str]:
    try:
        import matplotlib
    except ModuleNotFoundError:
        return ["Plots skipped: matplotlib is not installed (`pip install 'tokenmix-lab[plot]'`)."]
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    image.mkdir(parents=True, exist_ok=True)
    mechanisms = sorted({m for _, m, _ in values})
    curves = sorted(set(mechanisms) | {_curve(m) for m in mechanisms})
    styles = {m: (plt.cm.tab20(colour), marker) for m, (colour, marker) in zip(curves, map(_style, range(len(curves))))}
    by_length = {m: [(n, values[n, m, 64], _complete(planned, n, values[n, m, 64])) for n in LENGTHS
                     if (n, m, 64) in values] for m in mechanisms}
    by_state = {c: [(states[f"{m}-d{w}"], v, _complete(planned, n, v)) for (n, m, w), v in values.items()
                    if n == STATE_LENGTH and _curve(m) == c and states.get(f"{m}-d{w}", 0) > 0] for c in curves}
    pairs = _same_pairs() or "; pairs " + ", ".join(str(c.pairs) for c in CELLS.values())
    pictures = (
        ("005-accuracy-vs-length.png", by_length, "linear",
         dict(xlabel=f"sequence length (tokens{pairs})", title="MQAR at width 64 (Zoology, Figure 2)")),
        ("005-accuracy-vs-state.png", by_state, "log",
         dict(xlabel=f"decoding state after {STATE_LENGTH} tokens (bytes, log; softmax: its key-value cache)",
              title=f"MQAR at {STATE_LENGTH} tokens against the state (Based, Figure 2)")),
    )
    for name, curves, scale, labels in pictures:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        _references(ax, ceiling, chance)
        _draw(ax, {m: c for m, c in curves.items() if c}, styles)
        if scale == "log":
            ax.set_xscale("log")
        else:
            ax.set_xticks(LENGTHS)
            ax.set_xlim(min(LENGTHS) * 0.8, max(LENGTHS) * 1.1)
        ax.set(ylabel="test accuracy (line: mean; dots: seeds)", **labels)
        ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5))
        fig.tight_layout()
        fig.savefig(image / name, dpi=100)
        plt.close(fig)
    return []


def _same_pairs() -> str:
    pairs = {cell.pairs for cell in CELLS.values()}
    return f"; every length holds {pairs.pop()} pairs" if len(pairs) == 1 else ""


def _caption(ceiling: dict[str, str] | None, chance: float, planned: dict[int, int],
             values: dict[tuple[int, str, int], list[float]]) -> str:
    floor = ("" if ceiling is None else
             f"the grey band is the task's shortcut ceiling at {STATE_LENGTH} tokens, {float(ceiling['accuracy']):.3f} "
             f"[{float(ceiling['low']):.3f}, {float(ceiling['high']):.3f}] ({ceiling['baseline']}"
             f"{_same_pairs()}), which a model reaches without finding the key asked; ")
    partial = sorted({n for (n, _, _), v in values.items() if not _complete(planned, n, v)})
    hollow = ("" if not partial else
              f" A hollow marker, reached by a dashed line, is a mean of fewer seeds than planned (at "
              f"{', '.join(f'{n} tokens: {planned[n]}' for n in partial)}): that stage is still training, and "
              f"the point can move.")
    return (f"Each line joins a mechanism's means over seeds, each faint dot is one seed (a mean between the floor "
            f"and 1 can be seeds that solved the task beside seeds that stalled); {floor}the dotted line is chance, "
            f"{chance:.4f}. A mechanism that keeps no state (the mlp) has no place on the state axis.{hollow}")


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
    files = _sweep_files(experiments)
    for note in _reach_notes(files, values):
        lines += [note, ""]
    if not plots:
        return lines
    ceiling, chance = _floors(data, files)
    planned = _planned(files)
    notes = _plots(values, _states(files), data / "img", ceiling, chance, planned)
    if notes:
        return lines + notes
    where = Path(os.path.relpath(data / "img", (out or data / "report.md").parent))
    return lines + [f"![accuracy against length]({where / '005-accuracy-vs-length.png'})", "",
                    f"![accuracy against state]({where / '005-accuracy-vs-state.png'})", "",
                    _caption(ceiling, chance, planned, values), ""]
