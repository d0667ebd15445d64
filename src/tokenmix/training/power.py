"""What an experiment's plan can decide, before anything runs: each claim's smallest Holm-adjusted p.

Per claim (:mod:`tokenmix.study.claims`) the design's smallest one-sided p (1 / C(2n, n) for n seeds per
label, 2^-n for n seeds against a constant, 2^-r for the step-time harness's r rounds, paired or against a
constant; r = the file's ``[report] harness_rounds``), then Holm's correction with every claim at its smallest
p: the smallest adjusted p each claim can reach, over the file's claims and over the report's family (every
paper claim of the experiment files at once, the added claims apart), as the report's headline adjusts them.
Above 0.05 no outcome of the runs can decide that claim. ``tokenmix compare --dry-run`` prints these (and a
WARNING line for each above 0.05), and the verdicts of ``tokenmix report`` (:mod:`tokenmix.study.verdict`) use
the same floors (:mod:`tokenmix.study.power`) and Holm's correction."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..study.claims import Claim, parse_claims
from ..study.power import ALPHA, holm, planned_floor

if TYPE_CHECKING:
    from .experiment import Experiment

__all__ = ["attainable", "attainable_in_family", "attainable_lines"]


def _floors(experiment: "Experiment", rounds: int | None = None) -> list[tuple[Claim, float]]:
    rounds = experiment.report["harness_rounds"] if rounds is None else rounds
    return [(c, planned_floor(c, len(experiment.seeds), rounds)) for c in parse_claims(experiment.claims)]


def attainable(experiment: "Experiment", rounds: int | None = None) -> list[tuple[str, float]]:
    """(claim text, the smallest Holm-adjusted p its planned seeds / rounds can reach), per claim of the file;
    ``rounds`` defaults to the file's ``[report] harness_rounds``."""
    floors = _floors(experiment, rounds)
    return [(c.text, p) for (c, _), p in zip(floors, holm([p for _, p in floors]))]


def attainable_in_family(experiment: "Experiment", family: list["Experiment"],
                         rounds: int | None = None) -> list[tuple[str, float, int]]:
    """(claim text, smallest Holm-adjusted p, family size) per claim of ``experiment``, adjusted as the report
    adjusts it: over every paper claim of ``experiment`` and of the ``family`` files at once (the added claims
    over the added ones), each file's claims at the floors of its own seeds and harness rounds (``rounds``
    replaces ``experiment``'s only)."""
    mine = _floors(experiment, rounds)
    others = [f for other in family if other.name != experiment.name for f in _floors(other)]
    got: list[tuple[str, float, int]] = []
    for added in (False, True):
        mine_here = [(c, p) for c, p in mine if c.added == added]
        members = [p for _, p in mine_here] + [p for c, p in others if c.added == added]
        adjusted = holm(members)
        got += [(c.text, adjusted[i], len(members)) for i, (c, _) in enumerate(mine_here)]
    order = {c.text: i for i, (c, _) in enumerate(mine)}
    return sorted(got, key=lambda item: order[item[0]])


def attainable_lines(experiment: "Experiment", rounds: int | None = None,
                     family: list["Experiment"] | None = None) -> list[str]:
    """The dry run's lines: per claim its smallest attainable Holm-adjusted p, a WARNING where it is above
    0.05 (no outcome could decide the claim). With ``family`` (the other experiment files of the report), a
    second column: the same p adjusted over the report's family (:func:`attainable_in_family`), the one the
    report's headline uses, and the WARNING where that one is above 0.05."""
    rounds = experiment.report["harness_rounds"] if rounds is None else rounds
    reachable = attainable(experiment, rounds)
    if not reachable:
        return []
    head = (f"claims: the smallest Holm-adjusted p each can reach ({len(experiment.seeds)} seeds per label, "
            f"{rounds} harness rounds, Holm over {len(reachable)} claims")
    if family is None:
        lines = [head + ")"]
        in_family = [(text, p, 0) for text, p in reachable]
    else:
        in_family = attainable_in_family(experiment, family, rounds)
        sizes = sorted({n for _, _, n in in_family}, reverse=True)
        lines = [head + f"; second column: over the report's family of {' / '.join(map(str, sizes))} claims, "
                 f"the {len(family)} other experiment files' claims included, the paper's and the added ones "
                 "separately, each at its smallest p)"]
    for (text, p), (_, p_family, _) in zip(reachable, in_family):
        lines.append(f"  {p:.3g}  {text}" if family is None else f"  {p:<9.3g}{p_family:<9.3g}{text}")
        worst = max(p, p_family)
        if worst > ALPHA:
            where = "in this file" if p > ALPHA else "in the report's family"
            lines.append(f"  WARNING: {text!r} cannot reach p <= {ALPHA} {where} with this plan: more seeds "
                         f"(or fewer claims) are needed to decide it")
    return lines
