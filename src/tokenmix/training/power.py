"""What an experiment's plan can decide, before anything runs: each claim's smallest Holm-adjusted p.

Per claim (:mod:`tokenmix.study.claims`) the design's smallest one-sided p (1 / C(2n, n) for n seeds per
label, 2^-n for n seeds against a constant, 2^-r for the step-time harness's r rounds, paired or against a
constant; r = the file's ``[report] harness_rounds``), then Holm's correction with every claim at its smallest
p: the smallest adjusted p each claim can reach over the file's claims (the report's family of a claim is the
claims of its file registered with it: never another file's).
Above 0.05 no outcome of the runs can decide that claim. ``tokenmix compare --dry-run`` prints these (and a
WARNING line for each above 0.05), and the verdicts of ``tokenmix report`` (:mod:`tokenmix.study.verdict`) use
the same floors (:mod:`tokenmix.study.power`) and Holm's correction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..study.claims import Claim, parse_claims
from ..study.power import ALPHA, holm, planned_floor

if TYPE_CHECKING:
    from .experiment import Experiment

__all__ = ["attainable", "attainable_lines", "judged_on", "left_out_seeds"]


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


def attainable_lines(experiment: "Experiment", rounds: int | None = None,
                     left_out: dict[str, frozenset] | None = None) -> list[str]:
    """The dry run's lines: per claim its smallest attainable Holm-adjusted p over the claims of this file (the
    family the report adjusts it in once they are registered together), a WARNING where it is above 0.05 (no
    outcome could decide the claim) and a NOTE where it is above a tenth of it (a decided verdict would sit
    within ten times of the threshold, with no room to flip). ``left_out``: per claim, the seeds
    (rounds) it is not judged on (:func:`judged_on`); each such claim's line says how many remain."""
    rounds = experiment.report["harness_rounds"] if rounds is None else rounds
    reachable = attainable(experiment, rounds, left_out)
    if not reachable:
        return []
    lines = [f"claims: the smallest Holm-adjusted p each can reach ({len(experiment.seeds)} seeds per label, "
             f"{rounds} harness rounds, Holm over the {len(reachable)} claims of this file)"]
    claims = {c.text: c for c in parse_claims(experiment.claims)}
    for text, p in reachable:
        lines.append(f"  {p:.3g}  {text}")
        claim = claims[text]
        seeds, kept_rounds = judged_on(experiment, claim, left_out, rounds)
        if claim.harness and kept_rounds < rounds:
            lines.append(f"    judged on {kept_rounds} of the {rounds} rounds (the rest were in before its test last "
                         "changed)")
        elif not claim.harness and seeds < len(experiment.seeds):
            lines.append(f"    judged on {seeds} of the {len(experiment.seeds)} seeds (without the pilot's that "
                         "chose the target, and those in before its test or the seeds list last changed)")
        if p > ALPHA:
            lines.append(f"  WARNING: {text!r} cannot reach p <= {ALPHA} with this plan: more seeds (or fewer "
                         f"claims) are needed to decide it")
        elif p > ALPHA / 10:
            lines.append(f"  NOTE: {text!r} can reach p {p:.3g} at best, above {ALPHA / 10:g}: a decided verdict "
                         f"would sit within ten times of the threshold; plan more seeds for room")
    return lines
