"""Which recorded rows are stale: the rule that reads ``tokenmix compare --verify``'s ledgers
(``<name>-verify.csv``) of a results folder (:class:`~tokenmix.training.results.ResultsDir`).

A rerun under newer code and the same numerics that did not reproduce its row makes the rows of the row's code
stale (:func:`stale_codes`), except those of a label whose own rerun under that newer code reproduced exactly
(:func:`stale_because`). What a rerun shows about one mechanism (:func:`~tokenmix.training.confighash.
mechanism_key`: the config but for seeds and learning rate) holds for it at every seed and rate and in every
record of the folder; the code-wide presumption stays with the record whose ``--verify`` found it. The evidence
is read once per state of the files it comes from (:func:`file_state`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Iterable

from .confighash import HASH_COLUMN, mechanism_key

__all__ = ["stale_because", "stale_codes", "is_code_failure", "file_state"]

# what has been read, by the state of the files it was read from (_signature)
_READ: dict[tuple[Any, ...], Any] = {}


def file_state(path: Path) -> tuple[Any, ...]:
    """What tells one state of a file from another: its size, times and inode, and for the small ledgers and rows
    (not the configs, which only grow) a digest of the content, since two writes can share a timestamp tick."""
    stat = path.stat()
    grows_only = path.name.endswith("-configs.json")
    digest = "" if grows_only else hashlib.blake2b(path.read_bytes(), digest_size=8).hexdigest()
    return str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino, digest


def _forget_old_reads() -> None:
    """Keep :data:`_READ` small in a long sweep, whose every recorded run changes the files' state."""
    if len(_READ) > 64:
        _READ.clear()


def is_code_failure(v: dict[str, str]) -> bool:
    """A ``--verify`` ledger line whose rerun under other code and the same numerics did not reproduce its row (a
    line from before causes were recorded counts as one)."""
    return v["reproduced"] == "false" and v["row_code"] != v["rerun_code"] and v.get("cause", "") in ("", "code")


def stale_text(v: dict[str, str]) -> str:
    """Why rows are stale, from the ``--verify`` ledger line of the rerun that did not reproduce one."""
    return (f"its code {v['row_code'] or '(unknown)'} gives other results than code {v['rerun_code']} (commit "
            f"{v['rerun_commit'] or '?'}): {v['label']} seed {v['seed']} rerun {v['date']} gave {v['difference']}")


def code_failures(ledger: Iterable[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    """code -> the ledger lines of reruns under other code and the same numerics that did not reproduce a row of
    that code (:func:`is_code_failure`), oldest first."""
    out: dict[str, list[dict[str, str]]] = {}
    for v in ledger:
        if is_code_failure(v):
            out.setdefault(v["row_code"], []).append(v)
    return out


def stale_codes(record: Any) -> dict[str, str]:
    """code -> why rows of that code can be stale: a rerun of one of its rows in ``record``'s ledger, under other
    code and the same numerics (cause "code"; a line from before causes were recorded counts as one), did not
    reproduce it. A rerun whose numerics differed too (cause "code or host") cannot blame the code and keeps the
    rows, as ``--verify`` says when it finds it; reruns under the same code that differ show nondeterminism or the
    host, not staleness. Which of the code's rows are stale is :func:`stale_because`'s."""
    ledger = [v for v, _ in _evidence(record, _signature(record))[0]]
    return {code: stale_text(failures[-1]) for code, failures in code_failures(ledger).items()}


def stale_because(record: Any, code: str, label: str | None = None) -> str | None:
    """Why the rows of ``label`` that ``record`` (a :class:`~tokenmix.training.results.ResultsDir`) holds under
    ``code`` are stale, or None when they are not. They are when a rerun of a row of that code under newer code
    did not reproduce it (:func:`stale_codes`), unless, for each such newer code, a rerun of ``label``'s own row
    of ``code`` under it reproduced exactly: a code change that alters one mechanism's computation (a regrouped
    projection) leaves a label it provably does not touch -- every column and evaluation of a whole run bitwise
    equal -- with its rows. ``label=None``: every row of ``code`` (the code-wide rule, for a row whose label is
    not known here).

    What a rerun shows about one mechanism travels: to the label's other seeds and learning rates, and to the
    other records of the folder. A rerun is about ``label`` when the config it reran is, but for its seeds and
    learning rate (:func:`~tokenmix.training.confighash.mechanism_key`), the config of one of the label's rows,
    in whichever record's ledger it is: one that did not reproduce makes the label's rows of that code stale (a
    learning-rate stage's rows at the other rates too), one that reproduced clears it. The code-wide presumption
    stays with the record whose ``--verify`` found it."""
    state = _signature(record)
    ledger, foreign = _evidence(record, state)
    mine = _mechanisms_by_label(record, state).get(label, set()) if label is not None else set()
    about_label = [v for v, mechanism in ledger if v["row_code"] == code
                   and (v["label"] == label or (mechanism and mechanism in mine))] + \
                  [v for v, mechanism in foreign if v["row_code"] == code and mechanism and mechanism in mine]
    own = [v for v in about_label if is_code_failure(v)]
    if own:
        return stale_text(own[-1])
    failures = code_failures(v for v, _ in ledger).get(code, [])
    if not failures:
        return None
    if label is None:
        return stale_text(failures[-1])
    cleared = {v["rerun_code"] for v in about_label if v["reproduced"] == "true"}
    uncleared = [v for v in failures if v["rerun_code"] not in cleared]
    if not uncleared:
        return None
    v = uncleared[-1]
    return f"{stale_text(v)}; no rerun of {label} under code {v['rerun_code']} reproduced its row"


def _signature(record: Any) -> tuple[Any, ...]:
    """What the staleness evidence is read from, as it is now: the folder's ledgers and configs, and
    ``record``'s rows."""
    files = [f for r in (record, *record.records()) for f in (r.verify, r.configs)] + [record.csv]
    return (str(record.directory.resolve()), record.name, tuple(file_state(f) for f in files if f.exists()))


def _mechanism(record: Any, digest: str) -> str:
    """:func:`~tokenmix.training.confighash.mechanism_key` of the config ``record`` holds under ``digest``;
    ``"config <digest>"`` when the config is not known (matched by the hash alone); empty for no digest."""
    if not digest:
        return ""
    config = record.known_configs().get(digest)
    return mechanism_key(config) if isinstance(config, dict) else f"config {digest}"


def _evidence(record: Any, state: tuple[Any, ...]) -> tuple[list[tuple[dict[str, str], str]],
                                                            list[tuple[dict[str, str], str]]]:
    """(``record``'s ``--verify`` ledger, the other records' ledger lines in its folder), each line with the
    mechanism it reran (:func:`_mechanism`), read once per ``state`` of the files (:func:`_signature`)."""
    key = ("evidence", state)
    if key not in _READ:
        _forget_old_reads()
        foreign = [(v, _mechanism(r, v[HASH_COLUMN])) for r in record.records() if r.name != record.name
                   for v in r.verifications()]
        _READ[key] = ([(v, _mechanism(record, v[HASH_COLUMN])) for v in record.verifications()], foreign)
    return _READ[key]


def _mechanisms_by_label(record: Any, state: tuple[Any, ...]) -> dict[str, set[str]]:
    """label -> the mechanism (:func:`_mechanism`) of each of its recorded rows, and each row's config_hash as one
    (what a ledger line of a record without the config is matched by), read once per ``state``."""
    key = ("mechanisms", state)
    if key not in _READ:
        _forget_old_reads()
        out: dict[str, set[str]] = {}
        for (label, _), row in (record.rows() if record.csv.exists() else {}).items():
            digest = row.get(HASH_COLUMN, "")
            out.setdefault(label, set()).update({_mechanism(record, digest), f"config {digest}"})
        _READ[key] = out
    return _READ[key]
