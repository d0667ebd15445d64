"""The verdict on each claim of one experiment file (the rules are :data:`RULES`, printed in the report)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable

from . import stats
from .claims import Claim
from .effects import Effect, shift_constant, shift_independent, shift_paired
from .numbers import percent, pvalue
from .power import ALPHA, holm, smallest_p_independent, smallest_p_sign, smallest_p_wilcoxon
from .values import Values

__all__ = ["HOLDS", "SMALL", "OPPOSITE", "NO_DIFFERENCE", "OPEN", "PENDING", "CONFOUNDED", "MISSING", "VERDICTS",
           "FAILS", "room",
           "EQUIVALENT", "LEGACY_OPEN", "Outcome", "judge", "measure", "decide", "claim_pvalues", "p_greater",
           "design", "smallest_p", "effect", "RULES"]

HOLDS, SMALL, OPPOSITE = "holds", "holds, below the margin", "does not hold: the opposite"
NO_DIFFERENCE, OPEN, MISSING = "no difference at this scale", "inconclusive", "not measured"
PENDING = "pending (sweep not finished)"  # measured, but fewer seeds than the design fixed before the runs
# the compared rows were computed with different numerics (kernel levels, hosts): their difference may be the
# arithmetic's, so the claim decides nothing until they are rerun under one (tokenmix.training.numerics)
CONFOUNDED = "confounded (rows of different numerics)"
VERDICTS = (HOLDS, SMALL, OPPOSITE, NO_DIFFERENCE, OPEN, PENDING, CONFOUNDED, MISSING)
# the rule before issue 32 (kept to show each claim's "before -> now"): per-file Holm on the smallest p
FAILS = "does not hold"
EQUIVALENT = "does not hold (equivalent)"  # shown with its margin: "does not hold (equivalent within ±2 %)"
LEGACY_OPEN = "inconclusive at this scale"
Sample = Values | float  # one label's values, or a constant (a chance rate, a slope)


def design(a: Values, b: Sample) -> str:
    """"independent" (seeds against seeds), "paired" (harness rounds against rounds) or "sign" (against a
    constant)."""
    if not isinstance(b, Values):
        return "sign"
    if a.unit != b.unit:
        raise ValueError(f"cannot compare per-{a.unit} values with per-{b.unit} values")
    return "paired" if a.unit == "round" else "independent"


def _pairs(x: Values, y: Values) -> list[tuple[float, float]]:
    ys = dict(zip(y.keys, y.values))
    return [(v, ys[k]) for k, v in zip(x.keys, x.values) if k in ys]


def p_greater(x: Sample, y: Sample) -> float:
    """One-sided exact p for "x is larger than y" (see :mod:`tokenmix.report.stats`)."""
    if isinstance(x, Values) and isinstance(y, Values):
        if design(x, y) == "paired":
            return stats.wilcoxon_greater([u - v for u, v in _pairs(x, y)])
        return stats.mann_whitney_greater(list(x.values), list(y.values))
    if isinstance(x, Values):
        return stats.sign_test_greater(sum(v > y for v in x.values), len(x))
    if isinstance(y, Values):
        return stats.sign_test_greater(sum(v < x for v in y.values), len(y))
    raise ValueError("p_greater needs at least one sample")


def _scaled(sample: Sample, factor: float) -> Sample:
    return sample.scaled(factor) if isinstance(sample, Values) else sample * factor


def _tost(a: Values, b: Sample, r: float) -> tuple[float, float]:
    """(p that a is inside b's ±r band: the larger of the two one-sided tests, p that it is outside: the
    smaller of the two the other way)."""
    low, high = _scaled(b, 1 - r), _scaled(b, 1 + r)
    return (max(p_greater(a, low), p_greater(high, a)), min(p_greater(low, a), p_greater(a, high)))


def claim_pvalues(claim: Claim, a: Values, b: Sample) -> tuple[float, float, float | None]:
    """(p for the claim, p against it, p that a and b are equivalent within the claim's ``equivalence``)."""
    if claim.kind == "approx":
        p_for, p_against = _tost(a, b, claim.margin)
        return p_for, p_against, None
    reference = _scaled(b, claim.factor)
    above, below = p_greater(a, reference), p_greater(reference, a)
    p_for, p_against = (above, below) if claim.kind == "greater" else (below, above)
    p_equiv = _tost(a, b, claim.equivalence)[0] if claim.equivalence else None
    return p_for, p_against, p_equiv


def smallest_p(a: Values, b: Sample) -> float:
    """The smallest one-sided p the design can give at these sizes."""
    kind = design(a, b)
    if kind == "independent":
        return smallest_p_independent(len(a), len(b))
    if kind == "paired":
        return smallest_p_wilcoxon(len(_pairs(a, b)))
    return smallest_p_sign(len(a))


@dataclass
class Outcome:
    """A claim with its data, its effect, its p-values and its verdict."""

    claim: Claim
    a: Values | None
    b: Sample | None
    p_for: float | None = None
    p_against: float | None = None
    p_equiv: float | None = None
    adjusted: float | None = None  # Holm-adjusted p of the difference test (the approx claims: of "outside")
    adjusted_equiv: float | None = None  # Holm-adjusted p of the equivalence test (claims with a margin)
    verdict: str = MISSING
    reason: str = ""
    effect: Effect | None = None  # the shift of a against f·b relative to f·b's mean (a fraction)
    family: int = 0  # the number of claims Holm adjusted over
    family_key: str = ""  # the claims registered together (fixed in one commit of one file): Holm's family
    caveats: list[str] = field(default_factory=list)  # what the summary says beside the verdict
    planned: float = 1.0  # the smallest p the planned design could give (for a claim not measured yet)
    file_verdict: str = ""  # the verdict with Holm over the claim's experiment file alone
    legacy: str = ""  # the verdict by the rule before issue 32 (per-file Holm on the smallest p)
    registration: str = ""  # whether the claim's test was fixed before its data (from git history), one line
    left_out: frozenset = frozenset()  # the seeds (harness claims: rounds) it is not judged on (training.power)

    @property
    def margin(self) -> float | None:
        return self.claim.margin if self.claim.kind == "approx" else self.claim.equivalence

    @property
    def p_difference(self) -> float | None:
        """Two-sided p that a differs from f·b (approx claims: that a lies outside the ±r band)."""
        if self.p_for is None:
            return None
        if self.claim.kind == "approx":
            return min(1.0, 2 * self.p_against)
        return min(1.0, 2 * min(self.p_for, self.p_against))

    @property
    def p_equivalent(self) -> float | None:
        """The TOST p that a is within ±margin of b (approx claims: their p for)."""
        return self.p_for if self.claim.kind == "approx" else self.p_equiv

    @property
    def verdict_text(self) -> str:
        return self.verdict

    @property
    def legacy_text(self) -> str:
        if self.legacy == EQUIVALENT:
            return f"does not hold (equivalent within ±{100 * self.claim.equivalence:g} %)"
        return self.legacy


Samples = Callable[[Claim], tuple[Values | None, Sample | None, str]]


def effect(claim: Claim, a: Values, b: Sample, level: float = 0.95) -> Effect | None:
    """The Hodges-Lehmann shift of ``a`` against f·``b`` relative to f·b's mean, with its exact interval
    (:mod:`tokenmix.study.effects`); None where the reference is not finite."""
    factor = 1.0 if claim.kind == "approx" else claim.factor
    if isinstance(b, Values):
        reference = factor * statistics.mean(b.values) if all(math.isfinite(v) for v in b.values) else math.inf
        if design(a, b) == "paired":
            shift = shift_paired([u - factor * v for u, v in _pairs(a, b)], level)
        else:
            shift = shift_independent(list(a.values), [factor * v for v in b.values], level)
    else:
        reference = factor * b
        shift = shift_constant(list(a.values), reference, level)
    if not math.isfinite(reference):
        return None
    return shift.relative(reference)


def measure(claims: list[Claim], samples: Samples, unfinished: Callable[[Claim], str] | None = None
            ) -> list[Outcome]:
    """Every claim's data, p-values and effect, no verdict yet. ``samples(claim)`` gives (a, b, why-missing);
    ``unfinished(claim)``: why the claim's runs are fewer than its design fixed before them ("" when complete):
    such a claim is :data:`PENDING`, its interim p-values shown but deciding nothing; so is a claim with no data
    yet for a label whose runs are still to come (its sweep has not reached them), rather than not measured."""
    outcomes = []
    for claim in claims:
        a, b, missing = samples(claim)
        outcome = Outcome(claim, a, b, reason=missing)
        waiting = unfinished(claim) if unfinished else ""
        if not missing:
            outcome.p_for, outcome.p_against, outcome.p_equiv = claim_pvalues(claim, a, b)
            outcome.effect = effect(claim, a, b)
        if waiting:
            outcome.verdict = PENDING
            outcome.reason = (f"{waiting} ({missing} so far)" if missing
                              else f"{waiting} (the p-values shown are interim and decide nothing)")
        outcomes.append(outcome)
    return outcomes


def _counts(o: Outcome) -> bool:
    return o.p_for is not None and o.verdict not in (PENDING, CONFOUNDED)


def room(o: Outcome) -> float | None:
    """How far a decided verdict is from flipping: the threshold over the Holm-adjusted p of the test that
    decided it (10 means the p could grow tenfold, e.g. by a family ten times larger, before the verdict
    changes); None for an undecided claim."""
    approx = o.claim.kind == "approx"
    deciding = {HOLDS: [o.adjusted_equiv] if approx else [o.adjusted], OPPOSITE: [o.adjusted],
                SMALL: [o.adjusted, o.adjusted_equiv], NO_DIFFERENCE: [o.adjusted_equiv]}.get(o.verdict)
    if deciding and all(p is not None for p in deciding):
        worst = max(deciding)
        return ALPHA / worst if worst > 0 else math.inf
    return None


def decide(outcomes: list[Outcome], planned_floor: Callable[[Claim], float] | None = None) -> list[Outcome]:
    """The verdicts of ``outcomes``, one Holm family (the rule is :data:`RULES`): Holm over the difference tests
    of every claim, and separately over the equivalence tests of the claims with a margin; a claim not measured
    or pending counts with p = 1 (``planned_floor(claim)``: the smallest p its planned design could give, for
    the attainable-p reasons of the others)."""
    family = len(outcomes)
    for o in outcomes:
        if planned_floor is not None:
            o.planned = planned_floor(o.claim)
    floors = [smallest_p(o.a, o.b) if _counts(o) else o.planned for o in outcomes]
    differences = holm([o.p_difference if _counts(o) else 1.0 for o in outcomes])
    equivalents = holm([o.p_equivalent if _counts(o) and o.p_equivalent is not None else 1.0 for o in outcomes])
    best = holm([min(1.0, 2 * f) for f in floors])
    for o, adj_d, adj_e, floor, attainable in zip(outcomes, differences, equivalents, floors, best):
        o.family = family
        if not _counts(o):
            o.adjusted = o.adjusted_equiv = None
            continue
        o.adjusted = adj_d
        o.adjusted_equiv = adj_e if o.p_equivalent is not None else None
        _decide(o, family, floor, attainable)
    return outcomes


def judge(claims: list[Claim], samples: Samples, planned_floor: Callable[[Claim], float] | None = None,
          unfinished: Callable[[Claim], str] | None = None) -> list[Outcome]:
    """:func:`measure` then :func:`decide` with the claims of one experiment file as the family; each outcome
    also gets its :attr:`~Outcome.file_verdict` and its :attr:`~Outcome.legacy` verdict."""
    outcomes = decide(measure(claims, samples, unfinished), planned_floor)
    _legacy(outcomes, planned_floor)
    for o in outcomes:
        o.file_verdict = o.verdict
    return outcomes


def _decide(o: Outcome, family: int, floor: float, attainable: float) -> None:
    """The rule: which tests are significant after Holm, never which p is smaller."""
    o.reason = ""
    different = o.adjusted <= ALPHA
    equivalent = o.adjusted_equiv is not None and o.adjusted_equiv <= ALPHA
    margin = f"±{100 * o.margin:g} %" if o.margin else ""
    if o.claim.kind == "approx":
        if equivalent:
            o.verdict = HOLDS
        elif different:
            side = "below" if o.effect is not None and o.effect.estimate < 0 else "above"
            o.verdict, o.reason = OPPOSITE, f"outside the {margin} band, {side} it"
        else:
            _open(o, family, floor, attainable)
        return
    claimed = (o.p_for < o.p_against)  # the side the two-sided test found, when significant
    if different and claimed:
        o.verdict = SMALL if equivalent else HOLDS
        if equivalent:
            o.reason = f"significant, but within the {margin} the claim calls negligible"
    elif different:
        o.verdict = OPPOSITE
        if equivalent:
            o.reason = f"the opposite, though within {margin}"
    elif equivalent:
        o.verdict, o.reason = NO_DIFFERENCE, f"equivalent within {margin}; no difference either way"
    else:
        _open(o, family, floor, attainable)


def _open(o: Outcome, family: int, floor: float, attainable: float) -> None:
    o.verdict = OPEN
    kind = design(o.a, o.b)
    unit = "rounds" if o.a.unit == "round" else "seeds"
    if kind == "independent":
        sizes = f"n = {len(o.a)} vs {len(o.b)} seeds"
    elif kind == "paired":
        sizes = f"n = {len(_pairs(o.a, o.b))} paired rounds"
    else:
        sizes = f"n = {len(o.a)} {unit} against the constant"
    two_sided = min(1.0, 2 * floor)
    if attainable > ALPHA:
        why = (f"{sizes}: the smallest attainable two-sided p is {pvalue(two_sided)}, at best {pvalue(attainable)} "
               f"after Holm over {family} claims > {ALPHA}")
    else:
        why = f"{sizes}: Holm-adjusted p = {pvalue(o.adjusted)} > {ALPHA}"
        if o.adjusted_equiv is not None:
            why += f" (equivalence {pvalue(o.adjusted_equiv)})"
    o.reason = why + "; " + what_would_decide(o, family)


def _legacy(outcomes: list[Outcome], planned_floor: Callable[[Claim], float] | None) -> None:
    """The rule before issue 32, for the "before -> now" column: Holm over the file on each claim's smallest
    of p for / against / equivalent, and the verdict of whichever is smallest."""
    decisive = [min(p for p in (o.p_for, o.p_against, o.p_equiv) if p is not None) if _counts(o) else 1.0
                for o in outcomes]
    for o, adjusted in zip(outcomes, holm(decisive)):
        if not _counts(o):
            o.legacy = o.verdict
            continue
        smallest = min(p for p in (o.p_for, o.p_against, o.p_equiv) if p is not None)
        if adjusted > ALPHA:
            o.legacy = LEGACY_OPEN
        else:
            o.legacy = HOLDS if o.p_for == smallest else FAILS if o.p_against == smallest else EQUIVALENT


def _spread(o: Outcome) -> tuple[list[float], float, float, float] | None:
    """(the values compared with the reference, the reference's mean, sd, and the mean of a) or None with
    infinite values."""
    a, b = o.a, o.b
    if isinstance(b, Values) and design(a, b) == "paired":
        pairs = _pairs(a, b)
        diffs = [u - o.claim.factor * v for u, v in pairs]
        ref = statistics.mean(v for _, v in pairs)
        values = list(a.values) + list(b.values)
        if not all(math.isfinite(v) for v in values):
            return None
        return diffs, ref, statistics.stdev(diffs) if len(diffs) > 1 else 0.0, statistics.mean(u for u, _ in pairs)
    values = list(a.values) + (list(b.values) if isinstance(b, Values) else [b])
    if not all(math.isfinite(v) for v in values):
        return None
    ref = statistics.mean(b.values) if isinstance(b, Values) else b
    var = [statistics.variance(s) for s in (a.values, getattr(b, "values", ())) if len(s) > 1]
    sd = math.sqrt(statistics.mean(var)) if var else 0.0
    return list(a.values), ref, sd, statistics.mean(a.values)


def _above(x: float, y: float) -> float:
    """1 if x > y, 1/2 if tied (two infinite values included), 0 otherwise."""
    return 1.0 if x > y else 0.5 if x == y else 0.0


def claimed_share(o: Outcome) -> tuple[float, int, str] | None:
    """(the share of comparisons on the claim's side, how many, what they are) for a direction claim: the pairs
    (a seed, a seed of f·b) with two samples, the pairwise means of the paired rounds' differences a − f·b (the
    signed-rank test's Walsh averages), or the seeds against f·c; ties count ½. None when a paired difference
    is not finite."""
    a, b, claim = o.a, o.b, o.claim
    kind = design(a, b)
    if kind == "independent":
        marks = [_above(u, claim.factor * v) for u in a.values for v in b.values]
        what = "pairs of seeds"
    elif kind == "paired":
        diffs = [u - claim.factor * v for u, v in _pairs(a, b)]
        if not all(math.isfinite(d) for d in diffs):
            return None
        marks = [_above(diffs[i] + diffs[j], 0.0) for i in range(len(diffs)) for j in range(i, len(diffs))]
        what = "pairwise means of the rounds' differences"
    else:
        marks = [_above(u, claim.factor * b) for u in a.values]
        what = "seeds against the constant"
    if not marks:
        return None
    share = sum(marks) / len(marks)
    return (share if claim.kind == "greater" else 1.0 - share), len(marks), what


def what_would_decide(o: Outcome, family: int) -> str:
    """About how many seeds (rounds) per label would decide the claim: for its direction, by the count its exact
    rank test needs at the observed share of comparisons on the claimed side (:func:`stats.rank_count`); for
    a margin, by the normal approximation."""
    spread = _spread(o)
    unit = "rounds" if o.a.unit == "round" else "seeds"
    design_kind = design(o.a, o.b)
    per = " per label" if design_kind == "independent" else ""
    claim = o.claim
    rank_method, normal_method = "Noether's approximation for the exact rank test", "normal approximation"
    means, side, options = "", "", []
    if spread is not None:
        _, ref, sd, mean_a = spread
        scale = abs(ref) if ref else 1.0
        means = f"means differ {percent(abs(mean_a - ref) / scale)}, sd {percent(sd / scale)}"
        diff = mean_a - claim.factor * ref if claim.kind != "approx" else mean_a - ref
        if claim.kind == "approx":
            inside = claim.margin * scale - abs(diff)
            n = stats.normal_count(abs(inside), sd, design_kind, family)
            if n is not None:
                options.append((n, "show it" if inside > 0 else "show it does not hold", normal_method))
        elif claim.equivalence:
            n_eq = stats.normal_count(claim.equivalence * scale - abs(mean_a - ref), sd, design_kind, family)
            if n_eq is not None:
                options.append((n_eq, f"show the two equivalent within ±{100 * claim.equivalence:g} %",
                                normal_method))
    share = claimed_share(o) if claim.kind != "approx" else None
    if share is not None:
        fraction, count, what = share
        side = f"{percent(fraction)} of the {count:,} {what} on the claimed side"
        n = stats.rank_count(max(fraction, 1.0 - fraction), design_kind, family)
        if n is not None:
            options.append((n, "show it" if fraction > 0.5 else "show it does not hold", rank_method))
    if not side and not means:
        return ("some runs never reached the target, so no seed count can be estimated; a target the runs "
                "reach, or longer runs, would decide it")
    said = f"{side} ({means})" if side and means else side or means
    if not options:
        return f"{said}: the claim's comparisons split evenly, so no number of {unit} would separate them"
    n, goal, method = min(options)
    count = f"about {n:,}" if n <= 10_000 else "more than 10,000"
    return f"{said}: {count} {unit}{per} would {goal} at p ≤ {ALPHA} ({method}, 80 % power)"


RULES = f"""\
Every claim compares one measure between two labels *a* and *b* of one experiment, or one label with a
constant. Per-seed measures (test accuracy or perplexity, training cost, memory, time to target) are
independent samples, one value per seed; the step-time harness's measures are paired by its rounds (both
labels timed in the same round, one after the other; a memory claim reads only peak memory measured in a fresh
process every round, never one measurement copied into every round). The tests are scipy's exact ones:

* **Independent seeds.** The one-sided exact Mann–Whitney U test (`scipy.stats.mannwhitneyu`, `method="exact"`):
  U counts the pairs (i, j) with a_i > b_j; p is the share of all C(n + m, n) splits of the pooled values
  into groups of n and m whose U is at least the observed one. Where the values have ties, the exact
  distribution of untied ranks does not apply, so the same U (ties count ½) goes through
  `scipy.stats.permutation_test` with every split enumerated. A target never reached counts as infinitely late
  (the test uses ranks only).
* **Paired rounds.** The one-sided exact Wilcoxon signed-rank test of the per-round differences
  (`scipy.stats.wilcoxon`, `method="exact"`; zero differences dropped; tied magnitudes by
  `permutation_test` over all 2ⁿ sign flips).
* **Against a constant** (a chance rate, a slope): the exact sign test, p = P(Binomial(n, ½) ≥ the number of
  values above it) (`scipy.stats.binomtest`).
* **Direction claims**, "a < f·b" or "a > f·b": *p for* is the one-sided p in the claimed direction, *p
  against* the one in the opposite one; the **difference test** is two-sided, p = 2 × the smaller of the two
  (its side says which way a differs). f = 1 for "below"/"above"; "far below" is f = ½ (at least twice as
  fast); "competitive with" is a > 0.9·b.
* **"≈" claims**, a within ±r of b: equivalence by two one-sided tests (TOST), *p for* = the larger of
  p(a > (1 − r)·b) and p(a < (1 + r)·b); their difference test asks whether a lies outside the band: p = 2 × the
  smaller of p(a < (1 − r)·b) and p(a > (1 + r)·b).
* **Margins.** A direction claim may carry a margin r (its experiment file says when it was fixed, and the
  claim's row says whether that was before its first data): the **equivalence test** is the TOST p that a is
  within ±r of b, the size of difference the claim calls negligible. Time claims have none.
* **Effect.** Each claim shows the Hodges-Lehmann shift of a against f·b relative to f·b's mean, with the 95 %
  interval that inverts the claim's own exact test (independent seeds: the Mann-Whitney interval over the
  n·m differences; paired rounds: the signed-rank interval over the Walsh averages; against a constant: the
  sign test's order statistics), beside the margin it was judged against.
* **Families fixed when registered.** Holm's step-down correction, separately for the difference tests and for
  the equivalence tests, runs within each claim's **family**: the claims of its experiment file (paper claims and
  *(added)* claims apart) whose tests were last fixed in the same commit, i.e. registered together before their
  rows. A claim not measured, pending or confounded counts in its family with p = 1. Adding or changing claims
  later, in this file or in another, forms a new family and changes no earlier verdict (until 2026-12-05 one
  family held every paper claim of the report, so two claims added anywhere could flip verdicts everywhere). The
  verdict with Holm over the claim's experiment file alone is shown beside it, and every decided verdict says
  its room to flip: the threshold over the adjusted p that decided it.
* **Numerics.** A claim whose compared rows ran with different numerics (another kernel level or another host's,
  unpinned; or unpinned rows of unrecorded hosts in an experiment whose reruns show the host moves its rows) is
  **{CONFOUNDED}** and decides nothing until its rows are rerun under pinned numerics.
* **Verdict**, by a rule fixed here (never by which p is smaller). With D = the difference test significant
  after Holm (≤ {ALPHA}) and E = the equivalence test significant after Holm: **{HOLDS}**: D, on the claimed
  side, not E. **{SMALL}**: D on the claimed side and E: real but negligible by the claim's own margin.
  **{OPPOSITE}**: D on the other side (for a "≈" claim: outside the band). **{NO_DIFFERENCE}**: E without D:
  the labels are equivalent within the margin; counted apart from "does not hold", and worded as a limit of
  the experiment when every label of the experiment ties. A "≈" claim **{HOLDS}** with E. Otherwise
  **{OPEN}**, with why and what would decide it. The previous rule (per-file Holm on the smallest of the three
  p-values) is shown as "before".
* **Attainable p.** The smallest p is 1/C(n + m, n) for n vs m seeds: 0.05 with 3 vs 3, 1/252 ≈ 0.004 with 5
  vs 5; 2⁻ⁿ for the sign test and the signed-rank test (0.001 with 10 rounds). Holm multiplies it: with every
  claim at its smallest p, Holm's adjusted p is the smallest a claim can reach. With 3 seeds and more than one
  claim no claim can reach a verdict by test; the tables say so rather than read one off the means.
* **What would decide it.** For an inconclusive claim: about how many seeds per label (rounds) a one-sided test
  at {ALPHA}/(number of claims) would need to decide it with 80 % power. A direction is decided by the exact
  rank test itself, so its count comes from the share s of comparisons on the claimed side (pairs of seeds;
  pairwise means of the paired differences; seeds against a constant; ties ½), by Noether (1987):
  n = (z + z_0.8)² / (k (s − ½)²), k = 6 per label of two samples, 3 for paired rounds, 4 against a
  constant. It reads no mean or sd: where runs fall in two clusters (some learnt, some stalled), a count from
  means and sds asked for fewer seeds than were already in. A margin (≈ claims, equivalence) uses the normal
  approximation (n = 2 (z + z_0.8)² sd² / distance² per label; 1 × for paired or one-sample designs). Never
  fewer than the count whose smallest attainable p × the number of claims is ≤ {ALPHA}. An estimate for
  planning, not a promise.
* **Pre-registration, checked.** Each claim's row says whether git history shows its test (kind, labels, margin,
  factor, target) and its seeds (or harness rounds) fixed in the experiment file before the first result row it
  judges. Where they changed after rows existed, the claim is **judged only on the runs made after the last
  change** (the seeds, or rounds, already in are left out and named), and is not counted as pre-registered;
  with no run after the change it is pending while seeds of its design are still to run, else not measured.
  Time-to-target claims leave out the seeds whose runs chose the target (`[report] target_chosen_on`).
* **Fixed designs are judged whole.** While a label of a claim has fewer finished runs than that, none
  included, the claim is **{PENDING}**: its interim p-values, if any, are shown but decide nothing, and it counts
  in Holm's family as not measured. Looking at a growing sample and stopping when p first dips below {ALPHA}
  would make that threshold mean less than it says.
* A claim with no data and no runs still to come (its measure not recorded, no chance file, every run made
  before its test changed) is **{MISSING}**; an experiment without a results CSV gets no verdicts.
"""
