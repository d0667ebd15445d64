"""What an experiment's plan can decide, before anything runs: each claim's smallest Holm-adjusted p.

Per claim (:mod:`tokenmix.training.claims`) the design's smallest one-sided p (1 / C(2n, n) for n seeds per
label, 2^-n for n seeds against a constant, 2^-r for the step-time harness's r rounds, paired or against a
constant; r = the file's ``[report] harness_rounds``), then Holm's correction over the file's claims with every
claim at its smallest p: the smallest adjusted p each claim can reach. Above 0.05 no outcome of the runs can
decide that claim. ``tokenmix compare --dry-run`` prints these (and a WARNING line for each above 0.05), and the verdicts of
``tokenmix report`` (:mod:`tokenmix.report.verdict`) use the same floors and Holm's correction.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .claims import Claim, parse_claims

if TYPE_CHECKING:
    from .experiment import Experiment

__all__ = ["ALPHA", "holm", "smallest_p_independent", "smallest_p_sign", "smallest_p_wilcoxon",
           "attainable", "planned_floor", "attainable_lines"]

ALPHA = 0.05


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (reject where adjusted <= alpha), in the input order."""
    m = len(pvalues)
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=pvalues.__getitem__)):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def smallest_p_independent(n: int, m: int) -> float:
    """The smallest one-sided exact Mann-Whitney p with n vs m seeds: 1 / C(n + m, n)."""
    return 1 / math.comb(n + m, n)


def smallest_p_sign(n: int) -> float:
    """The smallest one-sided sign-test p with n values: 2^-n."""
    return 0.5 ** n


def smallest_p_wilcoxon(n: int) -> float:
    """The smallest one-sided exact signed-rank p with n pairs: 2^-n."""
    return 0.5 ** n


def planned_floor(claim: Claim, seeds: int, rounds: int) -> float:
    """The smallest one-sided p ``claim`` can get with ``seeds`` seeds per label and ``rounds`` harness rounds."""
    if claim.harness:
        return smallest_p_wilcoxon(rounds) if not claim.against_constant else smallest_p_sign(rounds)
    if claim.against_constant:
        return smallest_p_sign(seeds)
    return smallest_p_independent(seeds, seeds)


def attainable(experiment: "Experiment", rounds: int | None = None) -> list[tuple[str, float]]:
    """(claim text, the smallest Holm-adjusted p its planned seeds / rounds can reach), per claim of the file;
    ``rounds`` defaults to the file's ``[report] harness_rounds``."""
    rounds = experiment.report["harness_rounds"] if rounds is None else rounds
    claims = parse_claims(experiment.claims)
    floors = [planned_floor(c, len(experiment.seeds), rounds) for c in claims]
    return [(c.text, p) for c, p in zip(claims, holm(floors))]


def attainable_lines(experiment: "Experiment", rounds: int | None = None) -> list[str]:
    """The dry run's lines: per claim its smallest attainable Holm-adjusted p, a WARNING where it is above
    0.05 (no outcome could decide the claim)."""
    rounds = experiment.report["harness_rounds"] if rounds is None else rounds
    reachable = attainable(experiment, rounds)
    if not reachable:
        return []
    lines = [f"claims: the smallest Holm-adjusted p each can reach ({len(experiment.seeds)} seeds per label, "
             f"{rounds} harness rounds, Holm over {len(reachable)} claims)"]
    for text, p in reachable:
        lines.append(f"  {p:.3g}  {text}")
        if p > ALPHA:
            lines.append(f"  WARNING: {text!r} cannot reach p <= {ALPHA} with this plan: more seeds "
                         f"(or fewer claims) are needed to decide it")
    return lines
