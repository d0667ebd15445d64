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

from typing import TYPE_CHECKING

from ..study.claims import Claim, parse_claims
from ..study.power import ALPHA, holm, planned_floor

if TYPE_CHECKING:
    from .experiment import Experiment

__all__ = ["attainable", "attainable_in_family", "attainable_lines", "judged_on", "left_out_seeds"]


def left_out_seeds(experiment: "Experiment", claim: Claim, looked: dict[str, frozenset] | None = None) -> set[int]:
    """The seeds (harness claims: rounds) ``claim`` is not judged on: those whose runs chose a time-to-target
    claim's target (``[report] target_chosen_on``), and ``looked[claim text]`` (those already in when its test or
    the seeds list last changed: git history, :func:`tokenmix.report.prereg.looked_in_git`)."""
    chosen = set(experiment.report.get("target_chosen_on", [])) if claim.measure == "time_to_target_s" else set()
    return chosen | set((looked or {}).get(claim.text, ()))


def judged_on(experiment: "Experiment", claim: Claim, left_out: dict[str, frozenset] | None = None,
              rounds: int | None = None) -> tuple[int, int]:
    """(seeds, harness rounds) ``claim`` is judged on, as the report counts them: the file's seeds (``rounds``,
    default the file's ``[report] harness_rounds``) without :func:`left_out_seeds`; at least one of each."""
    rounds = experiment.report["harness_rounds"] if rounds is None else rounds
    looked = set((left_out or {}).get(claim.text, ()))
    seeds = len([s for s in experiment.seeds if s not in left_out_seeds(experiment, claim, left_out)])
    return max(seeds, 1), max(rounds - len(looked), 1)


def design_floor(experiment: "Experiment", claim: Claim, left_out: dict[str, frozenset] | None = None,
                 rounds: int | None = None) -> float:
    """The smallest one-sided p ``claim`` can get from the seeds (rounds) it is judged on (:func:`judged_on`),
    whether its runs are in or not."""
    return planned_floor(claim, *judged_on(experiment, claim, left_out, rounds))


def _floors(experiment: "Experiment", rounds: int | None = None,
            left_out: dict[str, frozenset] | None = None) -> list[tuple[Claim, float]]:
    return [(c, design_floor(experiment, c, left_out, rounds)) for c in parse_claims(experiment.claims)]


def attainable(experiment: "Experiment", rounds: int | None = None,
               left_out: dict[str, frozenset] | None = None) -> list[tuple[str, float]]:
    """(claim text, the smallest Holm-adjusted p its planned seeds / rounds can reach), per claim of the file;
    ``rounds`` defaults to the file's ``[report] harness_rounds``; ``left_out``: see :func:`judged_on`."""
    floors = _floors(experiment, rounds, left_out)
    return [(c.text, p) for (c, _), p in zip(floors, holm([p for _, p in floors]))]


def attainable_in_family(experiment: "Experiment", family: list["Experiment"], rounds: int | None = None,
                         left_out: dict[str, frozenset] | None = None) -> list[tuple[str, float, int]]:
    """(claim text, smallest Holm-adjusted p, family size) per claim of ``experiment``, adjusted as the report
    adjusts it: over every paper claim of ``experiment`` and of the ``family`` files at once (the added claims
    over the added ones), each file's claims at the floors of its own seeds and harness rounds (``rounds``
    replaces ``experiment``'s only; ``left_out`` too: :func:`judged_on`)."""
    mine = _floors(experiment, rounds, left_out)
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
                     family: list["Experiment"] | None = None,
                     left_out: dict[str, frozenset] | None = None) -> list[str]:
    """The dry run's lines: per claim its smallest attainable Holm-adjusted p, a WARNING where it is above
    0.05 (no outcome could decide the claim). With ``family`` (the other experiment files of the report), a
    second column: the same p adjusted over the report's family (:func:`attainable_in_family`), the one the
    report's headline uses, and the WARNING where that one is above 0.05. ``left_out``: per claim, the seeds
    (rounds) it is not judged on (:func:`judged_on`); each such claim's line says how many remain."""
    rounds = experiment.report["harness_rounds"] if rounds is None else rounds
    reachable = attainable(experiment, rounds, left_out)
    if not reachable:
        return []
    head = (f"claims: the smallest Holm-adjusted p each can reach ({len(experiment.seeds)} seeds per label, "
            f"{rounds} harness rounds, Holm over {len(reachable)} claims")
    if family is None:
        lines = [head + ")"]
        in_family = [(text, p, 0) for text, p in reachable]
    else:
        in_family = attainable_in_family(experiment, family, rounds, left_out)
        sizes = sorted({n for _, _, n in in_family}, reverse=True)
        lines = [head + f"; second column: over the report's family of {' / '.join(map(str, sizes))} claims, "
                 f"the {len(family)} other experiment files' claims included, the paper's and the added ones "
                 "separately, each at its smallest p)"]
    claims = {c.text: c for c in parse_claims(experiment.claims)}
    for (text, p), (_, p_family, _) in zip(reachable, in_family):
        lines.append(f"  {p:.3g}  {text}" if family is None else f"  {p:<9.3g}{p_family:<9.3g}{text}")
        claim = claims[text]
        seeds, kept_rounds = judged_on(experiment, claim, left_out, rounds)
        if claim.harness and kept_rounds < rounds:
            lines.append(f"    judged on {kept_rounds} of the {rounds} rounds (the rest were in before its test last "
                         "changed)")
        elif not claim.harness and seeds < len(experiment.seeds):
            lines.append(f"    judged on {seeds} of the {len(experiment.seeds)} seeds (without the pilot's that "
                         "chose the target, and those in before its test or the seeds list last changed)")
        worst = max(p, p_family)
        if worst > ALPHA:
            where = "in this file" if p > ALPHA else "in the report's family"
            lines.append(f"  WARNING: {text!r} cannot reach p <= {ALPHA} {where} with this plan: more seeds "
                         f"(or fewer claims) are needed to decide it")
    return lines
