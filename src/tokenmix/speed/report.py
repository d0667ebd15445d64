"""The outputs of a ``tokenmix speed`` run: each mixer's time relative to softmax and its crossover length,
the markdown report (``speed.md``), ``speed.csv`` and the plots (log-log, against the length and, with several
value ranges, against the range)."""

from __future__ import annotations

import csv
import math
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ..tabulate import markdown_table
from .measure import IN_PROCESS, MEM_METHODS
from .record import COLUMNS, SpeedRecord, Status
from .settings import REFERENCE, SpeedSettings, settings_line

__all__ = ["CrossoverRow", "crossover_table", "relative_tables", "machine_lines", "mem_method_lines",
           "write_outputs"]

IN_PROCESS_NOTE = ("in-process CPU numbers are approximate: memory freed by earlier cases and kept by the allocator "
                   "is reused without raising the resident size")


# -- relative to softmax ------------------------------------------------------------------------------

@dataclass
class CrossoverRow:
    """One mixer against softmax in one (pass, mode, value range): the time ratio at each length, whether the
    mixer was faster there (None: not compared), and the crossover length (None: never faster)."""

    mixer: str
    pass_name: str
    causal: bool
    value_range: float
    ratios: dict[int, float | None]
    faster: dict[int, bool | None]
    crossover: int | None
    cells: dict[int, str]

    @property
    def first_compared(self) -> int | None:
        return min((n for n, f in self.faster.items() if f is not None), default=None)

    @property
    def crossover_text(self) -> str:
        if self.crossover is None:
            return "none"
        return f"≤ {self.crossover}" if self.crossover == self.first_compared else str(self.crossover)


def _failed_for_size(record: SpeedRecord) -> bool:
    """Out of memory or time, or skipped after that: the length was too much for the mechanism."""
    return record.result.cause.out_of_budget


def _compare(mixer: SpeedRecord | None, reference: SpeedRecord | None) -> tuple[float | None, bool | None, str]:
    """(ratio, faster, cell text) at one length."""
    if mixer is None or reference is None:
        return None, None, "n/a"
    if mixer.ok and reference.ok:
        ratio = mixer.time_ms / reference.time_ms if reference.time_ms else math.inf
        return ratio, ratio < 1, f"{ratio:.3g}"
    reference_word = reference.result.cause.word
    if mixer.ok and _failed_for_size(reference):
        return None, True, f"softmax {reference_word}"
    if _failed_for_size(mixer) and reference.ok:
        return None, False, mixer.status.word
    if mixer.ok:
        return None, None, f"n/a (softmax {reference_word})"
    return None, None, mixer.status.word


def _crossover(faster: dict[int, bool | None]) -> int | None:
    """The smallest length from which the mixer is faster at every compared length (None: never)."""
    crossover = None
    for length in sorted(faster, reverse=True):
        if faster[length] is None:
            continue
        if not faster[length]:
            break
        crossover = length
    return crossover


def crossover_table(records: list[SpeedRecord]) -> list[CrossoverRow]:
    """Every non-reference mixer's time relative to softmax measured in the same run, per (value range, pass,
    mode), with its crossover length: the smallest measured length N at which the mixer is faster than softmax
    and stays faster at every longer length where the two were compared. A mixer that ran where softmax ran out
    of memory or time (or was skipped after that) counts as faster there; one that ran out where softmax ran,
    as slower; lengths where neither comparison applies are left out."""
    by_key = {(r.mixer, r.pass_name, r.causal, r.value_range, r.length): r for r in records}
    groups = dict.fromkeys((r.mixer, r.pass_name, r.causal, r.value_range) for r in records
                           if r.mixer != REFERENCE and r.status is not Status.UNSUPPORTED)
    lengths = sorted({r.length for r in records})
    rows = []
    for mixer, pass_name, causal, value_range in groups:
        ratios, faster, cells = {}, {}, {}
        for n in lengths:
            ratios[n], faster[n], cells[n] = _compare(by_key.get((mixer, pass_name, causal, value_range, n)),
                                                      by_key.get((REFERENCE, pass_name, causal, value_range, n)))
        rows.append(CrossoverRow(mixer, pass_name, causal, value_range, ratios, faster, _crossover(faster), cells))
    return rows


# -- the report -------------------------------------------------------------------------------------------

CROSSOVER_NOTE = ("ratio = mixer time / softmax time at the same length, pass, mode and value range (< 1: the "
                  "mixer is faster). Crossover: the smallest measured length from which the mixer is faster than "
                  "softmax at that and every longer measured length where both were compared; \"≤ N\" when that "
                  "is the shortest compared length (it may already be faster below it), \"none\" when it is not "
                  "faster at the longest one. A mixer that ran where softmax ran out of memory or time counts as "
                  "faster there, one that ran out where softmax ran as slower.")


def _mode(causal: bool) -> str:
    return "causal" if causal else "bidir"


def _groups(records: list[SpeedRecord]) -> list[tuple[str, bool, float]]:
    return list(dict.fromkeys((r.pass_name, r.causal, r.value_range) for r in records))


def _group_title(pass_name: str, causal: bool, value_range: float) -> str:
    return f"{pass_name}, {_mode(causal)}, inputs in [-{value_range:g}, {value_range:g}]"


def relative_tables(records: list[SpeedRecord]) -> list[str]:
    """Markdown lines: per (pass, mode, value range), each mixer's time relative to softmax, and its crossover."""
    rows = crossover_table(records)
    lengths = sorted({r.length for r in records})
    lines = []
    for pass_name, causal, value_range in _groups(records):
        group = [r for r in rows if (r.pass_name, r.causal, r.value_range) == (pass_name, causal, value_range)]
        if not group:
            continue
        lines += [f"### time / softmax time: {_group_title(pass_name, causal, value_range)}", ""]
        table = markdown_table(["mixer", *(f"N={n}" for n in lengths), "crossover"],
                               [[r.mixer, *(r.cells[n] for n in lengths), r.crossover_text] for r in group])
        lines += table.split("\n")
        lines.append("")
    return lines


def _value_table(records: list[SpeedRecord], attribute: str, title: str) -> list[str]:
    lengths = sorted({r.length for r in records})
    lines = []
    for pass_name, causal, value_range in _groups(records):
        group = [r for r in records if (r.pass_name, r.causal, r.value_range) == (pass_name, causal, value_range)]
        cells: dict[str, dict[int, str]] = {}
        for r in group:
            value = getattr(r, attribute)
            cells.setdefault(r.mixer, {})[r.length] = (f"{value:.{3 if attribute == 'time_ms' else 1}f}" if r.ok
                                                       else str(r.status))
        lines += [f"### {title}: {_group_title(pass_name, causal, value_range)}", ""]
        table = markdown_table(["mixer", *(f"N={n}" for n in lengths)],
                               [[m, *(c.get(n, "") for n in lengths)] for m, c in cells.items()])
        lines += table.split("\n")
        lines.append("")
    return lines


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read(), re.MULTILINE)
        if match:
            return match.group(1).strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_lines(settings: SpeedSettings) -> list[str]:
    device = torch.cuda.get_device_name(0) if settings.device == "cuda" else _cpu_name()
    return [f"- platform: {platform.platform()}, Python {platform.python_version()}",
            f"- CPU: {_cpu_name()}, {os.cpu_count()} logical CPUs; torch {torch.__version__}, "
            f"{settings.num_threads} intra-op thread(s)",
            f"- device: {settings.device} ({device})"]


def mem_method_lines(records: list[SpeedRecord]) -> list[str]:
    used = sorted({r.mem_method for r in records if r.mem_method})
    lines = []
    for method in used:
        base = method.removesuffix(IN_PROCESS)
        lines.append(f"- `{method}`: {MEM_METHODS.get(base, base)}" + (f"; {IN_PROCESS_NOTE}" if
                                                                         method.endswith(IN_PROCESS) else ""))
    return lines or ["- (no case measured memory)"]


def _report(records: list[SpeedRecord], settings: SpeedSettings) -> str:
    spatial = sorted({f"{r.mixer} ({r.length} as {r.grid})" for r in records if r.grid})
    lines = ["# tokenmix speed", "", f"Settings: {settings_line(settings)}.", "",
             f"Mixers: {', '.join(dict.fromkeys(r.mixer for r in records))} (softmax is the reference).",
             "Pass `fwd`: forward under `torch.no_grad()`; `fwdbwd`: forward and the backward of `y.sum()` into "
             "the input and the parameters. Time: median of the timed passes (ms; speed.csv also has the fastest "
             "and the slowest: a wide spread means a busy machine). Peak memory: of the first, cold pass, over the "
             "memory held before it (MB).", ""]
    if spatial:
        lines += ["Spatial mixers see the length as the most square grid H x W: " + ", ".join(spatial) + ".", ""]
    lines += ["## Machine", "", *machine_lines(settings), "", "## Memory method", "", *mem_method_lines(records), "",
              "## Time relative to softmax", "", CROSSOVER_NOTE, "", *relative_tables(records),
              "## Time (ms)", "", *_value_table(records, "time_ms", "time (ms)"),
              "## Peak memory (MB)", "", *_value_table(records, "peak_mem_mb", "peak memory (MB)")]
    failures = [r for r in records if not r.ok]
    if failures:
        lines += ["## Cases without a measurement", ""]
        lines += [f"- {r.mixer} {_mode(r.causal)} N={r.length} {r.pass_name} r={r.value_range:g}: "
                  f"{r.result.status_text}" for r in failures]
    return "\n".join(lines) + "\n"


def write_outputs(records: list[SpeedRecord], settings: SpeedSettings, out_dir: str | Path) -> list[Path]:
    """``speed.csv``, ``speed.md`` and the plots (skipped, with a note, when matplotlib is missing); returns
    the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "speed.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(r.as_row() for r in records)
    (out / "speed.md").write_text(_report(records, settings))
    written = [out / "speed.csv", out / "speed.md"]
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plots (pip install matplotlib)", flush=True)
        return written
    matplotlib.use("Agg")
    written += _plot_vs_length(records, out)
    if len(settings.value_ranges) > 1:
        written += _plot_vs_value_range(records, out)
    return written


# -- the plots ------------------------------------------------------------------------------------------

def _subplots(count: int):  # -> (matplotlib Figure, list of Axes)
    import matplotlib.pyplot as plt

    cols = min(count, 2)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.5 * rows), squeeze=False)
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _styles(mixers: list[str]) -> dict[str, dict[str, object]]:
    """A distinct colour per mixer (dark tab20 hues first, then the light ones), dashed past 20 mixers."""
    import matplotlib.pyplot as plt

    order = [*range(0, 20, 2), *range(1, 20, 2)]
    return {m: {"color": plt.cm.tab20(order[i % 20]), "linestyle": "-" if i < 20 else "--",
                "linewidth": 2.5 if m == REFERENCE else 1.2} for i, m in enumerate(mixers)}


def _log_axes(ax, xs: list[float], xlabel: str, ylabel: str, title: str) -> None:
    from matplotlib.ticker import NullLocator

    ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=ylabel, title=title)
    ax.set_xticks(xs, labels=[f"{x:g}" for x in xs])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.grid(True, which="both", alpha=0.3)
    if ax.lines:
        ax.legend(fontsize="small")


def _plot_vs_length(records: list[SpeedRecord], out: Path) -> list[Path]:
    groups = _groups(records)
    mixers = list(dict.fromkeys(r.mixer for r in records))
    styles = _styles(mixers)
    lengths = sorted({r.length for r in records})
    paths = []
    for attribute, label, name in (("time_ms", "time (ms)", "time_vs_length.png"),
                                   ("peak_mem_mb", "peak memory (MB)", "memory_vs_length.png")):
        fig, axes = _subplots(len(groups))
        for ax, (pass_name, causal, value_range) in zip(axes, groups):
            for mixer in mixers:
                points = sorted((r.length, getattr(r, attribute)) for r in records
                                if r.ok and r.mixer == mixer and (r.pass_name, r.causal, r.value_range)
                                == (pass_name, causal, value_range) and getattr(r, attribute) > 0)
                if points:
                    ax.plot(*zip(*points), marker="o", label=mixer, **styles[mixer])
            _log_axes(ax, lengths, "sequence length N", label, _group_title(pass_name, causal, value_range))
        paths.append(_save(fig, out / name))
    return paths


def _plot_vs_value_range(records: list[SpeedRecord], out: Path) -> list[Path]:
    """Time and memory against the value range at the longest length (seed 001 Tables 2-3)."""
    length = max(r.length for r in records)
    at_length = [r for r in records if r.length == length]
    groups = list(dict.fromkeys((r.pass_name, r.causal) for r in at_length))
    styles = _styles(list(dict.fromkeys(r.mixer for r in records)))
    mixers = list(dict.fromkeys(r.mixer for r in at_length))
    ranges = sorted({r.value_range for r in at_length})
    paths = []
    for attribute, label, name in (("time_ms", "time (ms)", "time_vs_value_range.png"),
                                   ("peak_mem_mb", "peak memory (MB)", "memory_vs_value_range.png")):
        fig, axes = _subplots(len(groups))
        for ax, (pass_name, causal) in zip(axes, groups):
            for mixer in mixers:
                points = sorted((r.value_range, getattr(r, attribute)) for r in at_length
                                if r.ok and r.mixer == mixer and (r.pass_name, r.causal) == (pass_name, causal)
                                and getattr(r, attribute) > 0)
                if points:
                    ax.plot(*zip(*points), marker="o", label=mixer, **styles[mixer])
            _log_axes(ax, ranges, "value range r (inputs in [-r, r])", label,
                      f"{pass_name}, {_mode(causal)}, N={length}")
        paths.append(_save(fig, out / name))
    return paths

