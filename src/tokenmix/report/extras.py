"""Sections of the report beside the claims: 004's generated texts, 003's best K and default context, the
``tokenmix speed`` tables of 001 and 002 (single measurements, reported, not tested), and 005's recall pictures
(:mod:`.recall`)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Callable

from .measures import ExperimentData, read_csv
from .recall import recall_section
from .tables import mean_sd_text, num, table

__all__ = ["STUDY_EXTRAS", "PAPER_EXTRAS", "generations", "best_choices", "speed_table", "speed_section",
           "vision_speed_section"]

SPEED_COMMAND = ("tokenmix speed --mixers kerformer,performer,linear,efficient,cosformer "
                 "--lengths 1024,2048,4096,10000 --value-range 2,4,10 --threads 1 --out runs/001-speed")
VISION_SPEED_COMMAND = ("tokenmix speed --mixers swin,pvt,twins_lsa,twins_gsa,scalable_ssa,scalable_iwsa "
                        "--lengths 196,784,3136 --dim 32 --heads 2 --batch 32 --pass fwdbwd --repeats 10 "
                        "--threads 1 --out runs/002-speed")
GENERATE_COMMAND = ("python scripts/generate_texts.py runs/004-extractors-lm "
                    "docs/reproduction/004-generations.txt")


def generations(data: Path, found: ExperimentData, level: str) -> list[str]:
    """Chen (2023) Table 2's check: the texts each model generates from the paper's prompt, verbatim (shown
    whether or not the results CSV is there)."""
    path = data / "004-generations.txt"
    lines = [f"{level}# Generated texts (Table 2)", ""]
    if not path.exists():
        return lines + [f"Not generated yet: `{GENERATE_COMMAND}`."]
    return lines + ["From each label's seed-0 best weights, the paper's prompt, top-p 0.6, seed 0, as many new "
                    "tokens as the 32-token context leaves (`scripts/generate_texts.py`):", "", "```text",
                    path.read_text().rstrip("\n"), "```"]


def best_choices(data: Path, found: ExperimentData, level: str) -> list[str]:
    """003: the best K and the best default context here (highest mean test accuracy), beside the paper's."""
    if found.runs is None:
        return []

    def accuracy(label: str) -> list[float]:
        return [float(r.row["value"]) for r in found.runs_of(label)]

    def best(labels: list[str]) -> str:
        present = [label for label in labels if accuracy(label)]
        if not present:
            return "not measured"
        top = max(present, key=lambda label: statistics.mean(accuracy(label)))
        return f"`{top}` ({mean_sd_text(accuracy(top))})"

    ks = [label for label in found.labels() if label.startswith("K") and label.endswith("-random-recurrent")]
    contexts = [f"K3-{c}-recurrent" for c in ("ones", "learned", "random")]
    return [f"{level}# Which K, which default context (highest mean, not a test)", "",
            f"- Best number of steps here: {best(ks)}; the paper's: K = 10 (72.8 %), within 0.5 points of K = 5 "
            "and K = 20 (Table 2).",
            f"- Best default context at K = 3 here: {best(contexts)}; the paper's at K = 5: random (72.4 %), at "
            "K = 1: learned (73.5 %) (Table 3)."]


def _speed_rows(group: list[dict[str, str]], lengths: list[int]) -> list[list[str]]:
    cells = {(r["mixer"], int(r["length"])): r for r in group}
    rows = []
    for mixer in dict.fromkeys(r["mixer"] for r in group):
        row = [mixer]
        for length in lengths:
            r = cells.get((mixer, length))
            if r is None:
                row.append("—")
            elif r["status"] == "ok":
                row.append(f"{num(float(r['time_ms']))} ms, {num(float(r['peak_mem_mb']))} MiB")
            else:
                row.append(r["status"].split(":")[0])
        rows.append(row)
    fastest = ["**fastest**"]
    for length in lengths:
        ok = [r for r in group if int(r["length"]) == length and r["status"] == "ok"]
        fastest.append(min(ok, key=lambda r: float(r["time_ms"]))["mixer"] if ok else "—")
    return rows + [fastest]


def speed_table(data: Path, name: str, heading: str, command: str, intro: str) -> list[str]:
    """``<data>/<name>.csv`` (``tokenmix speed``'s ``speed.csv``) as one table per pass, mode and value
    range: each mixer's median time and peak memory per length, and the fastest mixer per length."""
    lines = [heading, ""]
    path = data / f"{name}.csv"
    if not path.exists():
        return lines + [f"Not run yet: `{command}`, then copy `runs/{name}/speed.csv` to "
                        f"`docs/reproduction/{name}.csv`."]
    lines += [f"{intro} `{command}`. One median per case (`tokenmix speed`'s `speed.csv`): time of the pass and "
              "its peak memory. These are single measurements, not seeds, so they are reported, not tested.", ""]
    groups: dict[tuple[str, str, str], list[dict[str, str]]] = {}
    for row in read_csv(path, ({"length": int}, {"time_ms": float, "peak_mem_mb": float})):
        groups.setdefault((row["pass"], row["causal"], row["value_range"]), []).append(row)
    for (pass_name, causal, value_range), group in groups.items():
        lengths = sorted({int(r["length"]) for r in group})
        mode = "causal" if causal.lower() == "true" else "bidirectional"
        lines += [f"Pass `{pass_name}`, {mode}, inputs in [−{value_range}, {value_range}], dim "
                  f"{group[0]['dim']}, {group[0]['heads']} head(s), batch {group[0].get('batch', '1')}, device "
                  f"{group[0]['device']}:", ""]
        lines += table(["mixer", *map(str, lengths)], _speed_rows(group, lengths)) + [""]
    return lines


def speed_section(data: Path) -> list[str]:
    """Gan et al. (2023) Tables 1-3's counterpart: ``tokenmix speed`` medians per mixer and length."""
    return speed_table(data, "001-speed", "### Time and memory against length (Tables 1-3)", SPEED_COMMAND,
                       "Head dimension 64 as the paper's simulations, one thread, while one single-threaded "
                       "training sweep ran on the other core (nothing else):")


def vision_speed_section(data: Path) -> list[str]:
    """Ruggeri (2022): the vision mixers timed against softmax on the experiment's grid and larger ones."""
    return speed_table(data, "002-speed", "### Time and memory against the grid size", VISION_SPEED_COMMAND,
                       "The mixers alone (no model around them), timed one after the other with one thread while "
                       "one single-threaded sweep ran on the other core, at the experiment's width (32, 2 heads, "
                       "batch 32) on square grids of 14², 28² and 56² tokens:")


StudyExtra = Callable[[Path, ExperimentData, str], list[str]]
STUDY_EXTRAS: dict[str, StudyExtra] = {"004-extractors-lm": generations, "003-contextualizer-reviews": best_choices}
PaperExtra = Callable[..., list[str]]  # (data, *, experiments, out, plots) -> lines
PAPER_EXTRAS: dict[str, PaperExtra] = {"001": lambda data, **_: speed_section(data),
                                       "002": lambda data, **_: vision_speed_section(data),
                                       "005": recall_section}
