"""The whole of each paper: one row per table, figure or section with results (the ``[[paper.ledger]]`` of the
experiment file that carries the paper's heading), with the claims that stand for it here and their verdicts,
or why it cannot run here and what stands in; and, per paper, how much of it was tested.

An item is *tested* when a claim stands for it with a verdict and nothing of it is left out, *partly* when
claims stand for part of it (or for all of it, none judged yet), *not here* when no claim does.
"""

from __future__ import annotations

from ..study.claims import LedgerItem, PaperText
from ..study.verdict import MISSING, PENDING, Outcome
from .tables import table

__all__ = ["check_ledger", "ledger_section", "coverage", "TESTED", "PARTLY", "NOT_HERE"]

TESTED, PARTLY, NOT_HERE = "tested", "partly", "not here"


def check_ledger(paper: PaperText, claim_texts: set[str]) -> None:
    """Every claim a ledger row names is a claim of the paper's experiment files (``ValueError`` naming it). The
    report does not call it: with only some of the files in ``--experiments``, a row names its other claims as
    not in these files."""
    for row in paper.ledger:
        unknown = [c for c in row.claims if c not in claim_texts]
        if unknown:
            raise ValueError(f"paper {paper.key} ledger, {row.item}: no claim with the text {unknown[0]!r} in its "
                             f"experiment files")


def _judged(outcome: Outcome | None) -> bool:
    return outcome is not None and outcome.verdict not in (MISSING, PENDING)


def status(row: LedgerItem, outcomes: dict[str, Outcome]) -> str:
    """:data:`TESTED`, :data:`PARTLY` or :data:`NOT_HERE` (see the module docstring)."""
    if not row.claims:
        return NOT_HERE
    if row.not_here or not any(_judged(outcomes.get(text)) for text in row.claims):
        return PARTLY
    return TESTED


def coverage(paper: PaperText, outcomes: dict[str, Outcome]) -> dict[str, int]:
    """How many of the paper's ledger rows are tested, partly tested and not here."""
    counts = dict.fromkeys((TESTED, PARTLY, NOT_HERE), 0)
    for row in paper.ledger:
        counts[status(row, outcomes)] += 1
    return counts


def _verdicts(row: LedgerItem, outcomes: dict[str, Outcome], known: set[str] | None) -> str:
    parts = []
    for text in row.claims:
        outcome = outcomes.get(text)
        if outcome is not None:
            verdict = outcome.verdict_text
        else:
            verdict = "not run yet" if known is None or text in known else "not in these experiment files"
        parts.append(f"{text}: **{verdict}**")
    return "<br>".join(parts) or "—"


def ledger_section(paper: PaperText, outcomes: dict[str, Outcome], level: str = "###",
                   known: set[str] | None = None) -> list[str]:
    """The paper item by item (empty when the paper has no ledger). ``outcomes``: claim text -> its outcome;
    ``known``: the claim texts of the experiment files at hand (a claim without an outcome is not run yet when
    known, else not in these files)."""
    if not paper.ledger:
        return []
    counts = coverage(paper, outcomes)
    rows = [[row.item, row.shows, _verdicts(row, outcomes, known), row.not_here or "—", status(row, outcomes)]
            for row in paper.ledger]
    return [f"{level} The paper, item by item", "",
            f"Every table, figure or section with results ({len(paper.ledger)} items): {counts[TESTED]} tested here, "
            f"{counts[PARTLY]} partly, {counts[NOT_HERE]} not here.", "",
            *table(["item", "what it shows", "judged here (verdict)", "not here: why, and what stands in",
                    "status"], rows), ""]
