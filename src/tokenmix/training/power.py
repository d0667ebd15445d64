"""What an experiment's plan can decide, before anything runs: each claim's smallest Holm-adjusted p.

Per claim (:mod:`tokenmix.study.claims`) the design's smallest one-sided p (1 / C(2n, n) for n seeds per
label, 2^-n for n seeds against a constant, 2^-r for the step-time harness's r rounds, paired or against a
constant; r = the file's ``[report] harness_rounds``), then Holm's correction over the file's claims with every
claim at its smallest p: the smallest adjusted p each claim can reach. Above 0.05 no outcome of the runs can
decide that claim. ``tokenmix compare --dry-run`` prints these (and a WARNING line for each above 0.05), and the verdicts of
``tokenmix report`` (:mod:`tokenmix.study.verdict`) use the same floors (:mod:`tokenmix.study.power`) and Holm's correction.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..study.claims import parse_claims
from ..study.power import ALPHA, holm, planned_floor

if TYPE_CHECKING:
    from .experiment import Experiment

__all__ = ["attainable", "attainable_lines"]

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
