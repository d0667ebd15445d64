"""Claims and paper texts as data: an experiment file's ``[[claims]]`` array and its ``[paper]`` table.

::

    [paper]
    key = "001"                  # studies of one paper share it
    heading = "Gan et al. (2023): Kerformer (001)"   # once per key, with `claim`
    claim = "Gan et al. (2023) report that ..."      # the paper's claim, with its own numbers
    title = "ListOps"            # this experiment's section title
    data = "ListOps generated with the LRA rules ..."  # what stands in for the paper's data
    scale = "LRA ListOps: 500-2,000 tokens ..."        # the paper's scale

    [[paper.ledger]]             # once per key, with `heading`: one row per table / figure / section with results
    item = "Table 5"             # "Table N", "Figure N" or "§N.M"
    shows = "LRA accuracy of ..."  # what it measures, with the paper's numbers where the text gives them
    claims = ["Kerformer is more accurate than Performer"]  # the claims (of any file of this key) for it here
    not_here = "Text, Retrieval and Pathfinder: ..."      # what of it is not tested here, why, what stands in

    [[claims]]
    text = "Kerformer is more accurate than Performer"    # in words
    paper = "Table 5 (ListOps), Table 6"                  # where the paper says so, with its numbers
    a = "kerformer"                                      # a label
    b = "performer"            # a label, "chance" (the majority-class rate), or a number
    measure = "value"          # see MEASURES
    kind = "greater"           # greater | less | approx
    factor = 1.0               # a > factor * b; "far below" 0.5, "competitive" 0.9 (direction claims)
    margin = 0.05              # approx: a within ±margin * b
    equivalence = 0.02         # direction claims: the labels' equivalence margin r, fixed before the data
    equivalence_reason = "..." # why r (the paper's numbers); required with equivalence
    length = "largest"         # AT_LENGTH measures: the harness's synthetic length (an int, or "largest")
    lengths = [256, 4096]      # time_slope / memory_slope: the lengths fitted (default: all)
    added = true               # a claim added here, not one the paper makes in these words

:func:`parse_claims` and :func:`parse_paper` check every key and value (``ValueError`` naming the claim).
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["Claim", "PaperText", "LedgerItem", "parse_claims", "parse_claim", "parse_paper", "MEASURES",
           "SEED_MEASURES", "HARNESS_MEASURES", "AT_LENGTH", "SLOPES", "MEMORY_MEASURES", "KINDS", "check_labels",
           "parse_ledger", "harness_kind"]

KINDS = ("greater", "less", "approx")
SEED_MEASURES = ("value", "best_val", "peak_mem_mb", "train_cost", "time_to_target_s", "locality")
HARNESS_MEASURES = ("step_time_s", "step_memory_mb", "infer_time_s", "time_per_epoch_s", "time_slope", "memory_slope")
AT_LENGTH = ("step_time_s", "step_memory_mb", "infer_time_s")  # the harness measures read at one synthetic length
MEASURES = SEED_MEASURES + HARNESS_MEASURES
SLOPES = ("time_slope", "memory_slope")
MEMORY_MEASURES = ("step_memory_mb", "memory_slope")  # the harness measures whose samples are peak memory


def harness_kind(measure: str, has_length: bool) -> str:
    """Which harness rows a measure reads: "inference" (one forward pass, ``<name>-inference.csv``), "scaling"
    (a training step at a synthetic length: the slopes, or any measure read at a ``length``) or "experiment"
    (a training step at the experiment's own shapes)."""
    if measure == "infer_time_s":
        return "inference"
    return "scaling" if measure in SLOPES or has_length else "experiment"


_CLAIM_KEYS = {"text", "paper", "a", "b", "measure", "kind", "factor", "margin", "equivalence",
               "equivalence_reason", "length", "lengths", "added", "unlike"}
_PAPER_KEYS = {"key", "heading", "claim", "title", "data", "scale", "ledger"}
_LEDGER_KEYS = {"item", "shows", "claims", "not_here"}
_LEDGER_ITEM = re.compile(r"(Table|Figure) [1-9][0-9]*|§[1-9][0-9]*(\.[1-9][0-9]*)*")


@dataclass(frozen=True)
class Claim:
    """One claim about one measure: ``a > factor * b`` ("greater"), ``a < factor * b`` ("less"), or ``a``
    within ``±margin * b`` of ``b`` ("approx"); ``b`` is a label, ``"chance"`` or a constant."""

    text: str
    paper: str
    a: str
    b: str | float
    measure: str
    kind: str
    factor: float = 1.0
    margin: float = 0.0
    equivalence: float | None = None
    equivalence_reason: str = ""
    length: int | str | None = None
    lengths: tuple[int, int] | None = None
    added: bool = False
    unlike: str = ""  # how the setting here measures something other than the paper did ("" when like for like)

    @property
    def against_constant(self) -> bool:
        return not isinstance(self.b, str) or self.b == "chance"

    @property
    def b_label(self) -> str | None:
        return None if self.against_constant else str(self.b)

    @property
    def harness(self) -> bool:
        return self.measure in HARNESS_MEASURES

    @property
    def harness_kind(self) -> str:
        return harness_kind(self.measure, self.length is not None)


@dataclass(frozen=True)
class PaperText:
    """An experiment's ``[paper]`` table: the paper it reproduces (``key``; ``heading`` and ``claim`` on one
    file per key) and this experiment's title, data and the paper's scale."""

    key: str
    title: str
    data: str
    scale: str
    heading: str | None = None
    claim: str | None = None
    ledger: tuple["LedgerItem", ...] = ()


@dataclass(frozen=True)
class LedgerItem:
    """One table, figure or section of the paper with results: what it ``shows``, the ``claims`` (texts) that
    stand for it here, and what of it is ``not_here`` (why, what stands in; empty when the claims cover it)."""

    item: str
    shows: str
    claims: tuple[str, ...]
    not_here: str


def _fail(where: str, message: str) -> None:
    raise ValueError(f"{where}: {message}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _text(item: dict[str, Any], key: str, where: str, required: bool = True) -> str:
    value = item.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value.strip():
        _fail(where, f"'{key}' must be a non-empty string, got {value!r}")
    return value


def _check_table(item: Any, where: str, known: set[str]) -> None:
    if not isinstance(item, dict):
        _fail(where, f"must be a table, got {type(item).__name__}")
    unknown = sorted(set(item) - known)
    if unknown:
        _fail(where, f"unknown key(s) {unknown}; known: {', '.join(sorted(known))}")


def parse_claim(item: Any, where: str = "claims[0]") -> Claim:
    """One ``[[claims]]`` table as a :class:`Claim` (``ValueError`` naming ``where`` and the key)."""
    _check_table(item, where, _CLAIM_KEYS)
    text = _text(item, "text", where)
    where = f"{where} ({text!r})"
    paper, a = _text(item, "paper", where), _text(item, "a", where)
    b = item.get("b")
    if not (isinstance(b, str) and b.strip()) and not _number(b):
        _fail(where, f"'b' must be a label, \"chance\" or a number, got {b!r}")
    measure = item.get("measure")
    if measure not in MEASURES:
        _fail(where, f"'measure' must be one of {', '.join(MEASURES)}, got {measure!r}")
    kind = item.get("kind")
    if kind not in KINDS:
        _fail(where, f"'kind' must be one of {', '.join(KINDS)}, got {kind!r}")
    factor = item.get("factor", 1.0)
    if not _number(factor) or factor <= 0:
        _fail(where, f"'factor' must be a positive number, got {factor!r}")
    margin = item.get("margin")
    if kind == "approx":
        if not _number(margin) or not 0 < margin < 1:
            _fail(where, f"an approx claim needs 'margin' in (0, 1), got {margin!r}")
        if factor != 1:
            _fail(where, "'factor' is for direction claims; an approx claim has 'margin'")
    elif margin is not None:
        _fail(where, f"'margin' is for approx claims; a {kind!r} claim may have 'equivalence'")
    equivalence = item.get("equivalence")
    if equivalence is not None:
        if kind == "approx":
            _fail(where, "'equivalence' is for direction claims (an approx claim's band is its 'margin')")
        if not _number(equivalence) or not 0 < equivalence < 1:
            _fail(where, f"'equivalence' must be in (0, 1), got {equivalence!r}")
        if not isinstance(item.get("equivalence_reason"), str) or not item["equivalence_reason"].strip():
            _fail(where, "'equivalence' needs 'equivalence_reason' (why this margin, with the paper's numbers)")
    elif "equivalence_reason" in item:
        _fail(where, "'equivalence_reason' without 'equivalence'")
    if measure in SLOPES and not _number(b):
        _fail(where, f"a {measure} claim compares the slope with a number: 'b' must be one, got {b!r}")
    if b == "chance" and measure in HARNESS_MEASURES:
        _fail(where, f"'chance' is a rate of the test split; it cannot be compared with {measure}")
    length = item.get("length")
    if length is not None and (measure not in AT_LENGTH or not (
            length == "largest" or (isinstance(length, int) and not isinstance(length, bool) and length > 0))):
        _fail(where, f"'length' (an int > 0 or \"largest\") is for {', '.join(AT_LENGTH)} claims only, "
                     f"got {length!r}")
    if measure in ("step_memory_mb", "infer_time_s") and length is None:
        _fail(where, f"a {measure} claim reads the harness at one synthetic length: give 'length'")
    lengths = item.get("lengths")
    if lengths is not None and (measure not in SLOPES or not isinstance(lengths, list) or len(lengths) != 2
                                or not all(isinstance(n, int) and n > 0 for n in lengths) or lengths[0] >= lengths[1]):
        _fail(where, f"'lengths' ([smallest, largest] ints) is for slope claims only, got {lengths!r}")
    added = item.get("added", False)
    if not isinstance(added, bool):
        _fail(where, f"'added' must be true or false, got {added!r}")
    unlike = item.get("unlike", "")
    if not isinstance(unlike, str):
        _fail(where, f"'unlike' must be a sentence (what here measures other than the paper did), got {unlike!r}")
    return Claim(text, paper, a, float(b) if _number(b) else b, measure, kind, float(factor),
                 float(margin or 0.0), None if equivalence is None else float(equivalence),
                 item.get("equivalence_reason", ""), length, None if lengths is None else (lengths[0], lengths[1]),
                 added, unlike.strip())


def parse_claims(items: Any) -> list[Claim]:
    """An experiment's ``claims`` array (a list of tables) as :class:`Claim` objects; texts must be unique."""
    if items is None:
        return []
    if not isinstance(items, list):
        raise ValueError(f"claims must be an array of tables ([[claims]]), got {type(items).__name__}")
    claims = [parse_claim(item, f"claims[{i}]") for i, item in enumerate(items)]
    texts = [c.text for c in claims]
    repeated = sorted({t for t in texts if texts.count(t) > 1})
    if repeated:
        raise ValueError(f"claims: each text must be unique; repeated: {repeated}")
    return claims


def check_labels(claims: list[Claim], labels: list[str]) -> None:
    """Every label a claim names is one of ``labels``: the runs of the claim's own experiment file, its
    baseline included (a claim's ``a`` and ``b`` are read from that file's results only; ``b`` may also be
    "chance" or a number, which name no label). Else ``ValueError`` naming the claim and the label, with the
    closest label where one is close (a typo would otherwise be judged "no data" only once the sweep is over)."""
    for claim in claims:
        for label in (claim.a, claim.b_label):
            if label is not None and label not in labels:
                close = difflib.get_close_matches(label, labels, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"claim {claim.text!r}: no label {label!r} in the experiment{hint}; labels: "
                                 f"{', '.join(labels)}")


def parse_paper(table: Any) -> PaperText | None:
    """An experiment's ``[paper]`` table (None when there is none)."""
    if table is None or table == {}:
        return None
    if not isinstance(table, dict):
        raise ValueError(f"[paper] must be a table, got {type(table).__name__}")
    unknown = sorted(set(table) - _PAPER_KEYS)
    if unknown:
        raise ValueError(f"[paper]: unknown key(s) {unknown}; known: {', '.join(sorted(_PAPER_KEYS))}")
    texts = {key: _text(table, key, "[paper]") for key in ("key", "title", "data", "scale")}
    heading, claim = _text(table, "heading", "[paper]", False), _text(table, "claim", "[paper]", False)
    if bool(heading) != bool(claim):
        raise ValueError("[paper]: 'heading' and 'claim' go together (on one experiment file per paper key)")
    ledger = parse_ledger(table.get("ledger"))
    if ledger and not heading:
        raise ValueError("[paper]: 'ledger' goes with 'heading' and 'claim' (on one experiment file per paper key)")
    return PaperText(**texts, heading=heading or None, claim=claim or None, ledger=ledger)


def parse_ledger(items: Any) -> tuple[LedgerItem, ...]:
    """The ``[[paper.ledger]]`` array: one row per item, items unique, each with claims or a ``not_here``."""
    if items is None:
        return ()
    if not isinstance(items, list):
        raise ValueError(f"[paper] ledger must be an array of tables ([[paper.ledger]]), got {type(items).__name__}")
    rows = []
    for i, item in enumerate(items):
        where = f"[paper] ledger[{i}]"
        _check_table(item, where, _LEDGER_KEYS)
        name = _text(item, "item", where)
        if not _LEDGER_ITEM.fullmatch(name):
            _fail(where, f"'item' must be 'Table N', 'Figure N' or '§N.M', got {name!r}")
        claims = item.get("claims", [])
        if not isinstance(claims, list) or not all(isinstance(c, str) and c.strip() for c in claims):
            _fail(where, f"'claims' must be a list of claim texts, got {claims!r}")
        not_here = item.get("not_here", "")
        if not isinstance(not_here, str):
            _fail(where, f"'not_here' must be a string, got {not_here!r}")
        if not claims and not not_here.strip():
            _fail(where, f"{name}: no claims stand for it and 'not_here' does not say why")
        rows.append(LedgerItem(name, _text(item, "shows", where), tuple(claims), not_here.strip()))
    names = [r.item for r in rows]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"[paper] ledger: each item once; repeated: {repeated}")
    return tuple(rows)
