"""The smallest p each design can give, and Holm's correction: what a plan can decide before anything runs.

Per claim (:mod:`tokenmix.study.claims`) the design's smallest one-sided p (1 / C(n + m, n) for n vs m seeds,
2^-n for n seeds against a constant, 2^-r for r paired harness rounds or r rounds against a constant), and
Holm's step-down correction. ``tokenmix compare --dry-run`` (:mod:`tokenmix.training.power`) and the verdicts
of ``tokenmix report`` (:mod:`tokenmix.study.verdict`) use the same floors.
"""

from __future__ import annotations

import math

from .claims import Claim

__all__ = ["ALPHA", "holm", "smallest_p_independent", "smallest_p_sign", "smallest_p_wilcoxon", "planned_floor"]

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
