"""The notes under an experiment's tables: rows not pooled, the code that produced the rows, ties that are a limit
of the experiment, and the growth of step time with N."""

from __future__ import annotations

import math
import statistics

from ..study.verdict import Outcome
from .measures import ExperimentData
from .tables import ranges, table

__all__ = ["tie_note", "not_pooled_note", "shared_note", "diverging_note", "provenance_note", "growth_table"]


def tie_note(outcomes: list[Outcome]) -> str:
    """When paper claims of the experiment find no difference: say it is a limit of the experiment."""
    from ..study.verdict import NO_DIFFERENCE

    judged = [o for o in outcomes if not o.claim.added and o.adjusted is not None]
    ties = [o for o in judged if o.verdict == NO_DIFFERENCE]
    if not ties:
        return ""
    return (f"**No difference at this scale** ({len(ties)} of {len(judged)} paper claims): the labels compared "
            f"are equivalent within the claims' margins. That is a limit of this experiment (its task, size and "
            f"budget cannot tell these mechanisms apart), not evidence that the paper's difference does not "
            f"exist where the paper measured it.")


def not_pooled_note(found: ExperimentData) -> str:
    """The rows left out of every table and test, grouped by why (empty when none)."""
    if not found.excluded:
        return ""
    groups: dict[str, list[str]] = {}
    for run, reason in found.excluded:
        groups.setdefault(reason, []).append(f"{run.label} {run.seed}")
    parts = [f"{', '.join(runs)}: {reason}" for reason, runs in groups.items()]
    return (f"**{len(found.excluded)} recorded rows are not pooled** (in no mean, table or test; "
            f"a rerun with `--results` trains them again): " + "; ".join(parts) + ".")


def shared_note(found: ExperimentData) -> str:
    """The rows that are runs another experiment records too (same config hash), grouped by label and the other
    experiment's label (empty when none): those seeds are one run each, not new evidence beside the other's."""
    if not found.shared:
        return ""
    groups: dict[tuple[str, str, str], list[int]] = {}
    for (label, seed), other, other_label in found.shared:
        groups.setdefault((label, other, other_label), []).append(seed)
    parts = [f"{label} {seed_span(seeds)} = `{other}` {other_label}" for (label, other, other_label), seeds
             in groups.items()]
    rows = len({key for key, _, _ in found.shared})
    return (f"**{rows} recorded row{'s are runs' if rows > 1 else ' is a run'} that another experiment records "
            f"too** (same config hash: the same run, recorded by both; not new evidence beside the other's "
            f"rows): " + "; ".join(parts) + ".")


def diverging_note(found: ExperimentData) -> str:
    """The rows whose config another experiment records with other results, grouped as :func:`shared_note`
    (empty when none): the same config hash did not give the same run (another code's or other numerics':
    ``--verify`` tells which the current code agrees with)."""
    if not found.diverging:
        return ""
    groups: dict[tuple[str, str, str], list[tuple[int, str]]] = {}
    for (label, seed), other, other_label, difference in found.diverging:
        groups.setdefault((label, other, other_label), []).append((seed, difference))
    parts = [f"{label} {seed_span([s for s, _ in pairs])} vs `{other}` {other_label} ({pairs[0][1]}"
             + (", ..." if len(pairs) > 1 else "") + ")" for (label, other, other_label), pairs in groups.items()]
    rows = len({key for key, *_ in found.diverging})
    return (f"**{rows} recorded row{'s have' if rows > 1 else ' has'} the config of another experiment's run but "
            f"other results** (the same config hash, so not a new config; not the same run either: another code's or "
            f"other numerics', or not deterministic; each record keeps its own): " + "; ".join(parts) + ".")


def seed_span(seeds: list[int]) -> str:
    """"seed 3", "seeds 0-6", "seeds 0-2, 5"."""
    seeds = sorted(set(seeds))
    return f"seed{'s' if len(seeds) > 1 else ''} {ranges(seeds)}"


def provenance_note(found: ExperimentData) -> list[str]:
    """Which code produced the rows (the package's code version, commits, torch, threads, CPU) and what
    ``tokenmix compare --verify`` found for each."""
    if not found.provenance:
        return []
    lines = ["Code that produced the recorded rows (`code`: a hash of the package's sources; rows recorded before "
             "provenance was kept have it inferred from the commit that added them; `--verify K` of tokenmix compare "
             "reruns rows and checks they reproduce exactly):", "",
             "| code | rows | commits | torch | threads | CPU | verified |", "|---|---|---|---|---|---|---|"]
    for g in found.provenance:
        same = sorted({v["rerun_code"] for v in g["reproduced"]})
        verified = []
        if g["reproduced"]:
            n = len(g["reproduced"])
            hosts = sorted({v["cpu"] for v in g["reproduced"] if v.get("cpu")} - g["cpu"]) if g["cpu"] else []
            elsewhere = f"; on {', '.join(hosts)}" if hosts else ""  # another CPU than the rows': host evidence
            verified.append(f"{n} rerun{'s' if n > 1 else ''} reproduced it exactly (code {', '.join(same)}"
                            f"{elsewhere})")
        if g["differs"]:
            v = g["differs"][-1]
            same_code = sum(d["rerun_code"] == g["code"] for d in g["differs"])
            # a difference under the row's own code is not staleness: the rows are kept, but the run is not
            # deterministic across hosts or runs, and a reader has to know that
            under = (f", {same_code} of them under the same code: not deterministic here (the host or the run), "
                     f"the rows are kept") if same_code else ""
            why = {"code or host": "; code or host: rows kept", "host": "; host: rows kept"}.get(v.get("cause", ""), "")
            cleared = (f"; the rows of {', '.join(g['cleared'])} stand (their own reruns reproduced)"
                       if g.get("cleared") else "")
            verified.append(f"**{len(g['differs'])} differ**{under} ({v['label']} seed {v['seed']}: "
                            f"{v['difference']}{why}){cleared}")
        commits = sorted(g["commits"])
        lines.append(f"| {g['code'] or '(none)'} | {g['rows']} | "
                     f"{', '.join(commits[:3]) + (f' +{len(commits) - 3}' if len(commits) > 3 else '') or '-'} | "
                     f"{', '.join(sorted(g['torch'])) or '-'} | {', '.join(sorted(g['threads'])) or '-'} | "
                     f"{', '.join(sorted(g['cpu'])) or '-'} | {'; '.join(verified) or 'not checked'} |")
    return lines


def growth_table(found: ExperimentData) -> list[str]:
    """Complexity as growth, not a mean (:mod:`tokenmix.study.growth`): per label with a scaling harness, the
    local log-log slope of its step time over each doubling, the last one with its per-round range, the fit
    t = c + a·N + b·N² with a 95 % interval on b and the N from which b·N² outweighs a·N, and the peak memory
    at the largest N with its slope over the last doubling (one measurement per length)."""
    from ..study.growth import growth_summary

    rows, longest = [], 0
    for label in dict.fromkeys(r["label"] for r in found.harness or [] if r["kind"] == "scaling"):
        mine = [r for r in found.harness if r["label"] == label and r["kind"] == "scaling"]
        samples: dict[int, list[float]] = {}
        for r in mine:
            if r.get("step_s"):
                samples.setdefault(int(r["length"]), []).append(float(r["step_s"]))
        if len(samples) < 2:
            continue
        g = growth_summary(samples)
        longest = max(longest, g.lengths[-1])
        slopes = ", ".join(f"{s:.2f}" for _, _, s in g.slopes)
        fit = g.fit
        b = "—" if fit is None else f"{fit.b:.3g} [{fit.b_low:.3g}, {fit.b_high:.3g}]"
        cross = "—" if fit is None or fit.crossover is None else f"{fit.crossover:,.0f}"
        rows.append([label, f"{g.lengths[0]:,}-{g.lengths[-1]:,}", slopes,
                     f"{g.last_slope:.2f} [{g.last_low:.2f}, {g.last_high:.2f}]", b, cross,
                     _memory_growth(mine, g.last_pair)])
    if not rows:
        return []
    stops = ("" if longest >= 16_384 else " The harness here stops at the lengths in the table: lengths up to "
             "16,384 tokens need `tokenmix steptime --lengths ...` on a quiet machine.")
    return ["Growth of the step time with N (the local slope of each doubling, not one mean slope; the last "
            "doubling's range over the rounds; least squares t = c + a·N + b·N² on relative errors, b with its "
            "95 % interval; the crossover is the N where b·N² = a·N, shown when b's interval is above 0; the "
            "peak memory of one training step at the largest N, measured in a fresh process once per length, or "
            f"every round and then the median over the rounds, and its slope over the last doubling).{stops}", "",
            *table(["label", "N", "local slopes per doubling", "last doubling", "b (s per N²)",
                    "quadratic from N ≈", "peak MB at largest N (last slope)"], rows), ""]


def _memory_growth(rows: list[dict[str, str]], pair: tuple[int, int]) -> str:
    column = next((c for c in ("peak_mb", "peak_mem_mb") if any(r.get(c) for r in rows)), None)
    if column is None:
        return "—"
    by_length: dict[int, list[float]] = {}
    for r in rows:
        if r.get(column):
            by_length.setdefault(int(r["length"]), []).append(float(r[column]))
    at = {n: statistics.median(values) for n, values in by_length.items()}  # once per length: all the same
    if pair[1] not in at:
        return "—"
    if pair[0] not in at or at[pair[0]] <= 0:
        return f"{at[pair[1]]:,.0f}"
    return f"{at[pair[1]]:,.0f} ({math.log2(at[pair[1]] / at[pair[0]]) / math.log2(pair[1] / pair[0]):.2f})"
