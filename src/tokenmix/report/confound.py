"""Whether a claim's compared rows were computed with the same numerics (:mod:`tokenmix.training.numerics`).

A claim compares labels; its difference is the mechanisms' only if every row it reads ran the same arithmetic.
Rows pinned to one level (``numerics`` = the pinned name) are comparable whatever host ran them. Otherwise a row
is keyed by its numerics and host (:func:`~tokenmix.training.numerics.same_numerics_key`), and two keys mean the
claim is **confounded**. Rows recorded before numerics and hosts were carry only a processor model name, which
two hosts can share ("AMD EPYC" with and without AVX-512): such rows are taken as of one host unless the
experiment's verify ledger shows a rerun that differed for a reason other than code alone (the same code, or a
cause it could not tell from the host) — then the host is shown to move this experiment's rows, and unrecorded
hosts cannot be assumed equal.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from tokenmix.training.numerics import same_numerics_key

__all__ = ["host_sensitive", "confounding"]

_UNRECORDED = "(host not recorded)"


def host_sensitive(ledger: Iterable[Mapping[str, str]]) -> str | None:
    """The first rerun of a verify ledger that differed other than by code alone (a line saying which), or
    None. A ledger line written before causes were recorded differed by code alone only as far as anyone could
    tell: with the row's host unrecorded, its cause is "code or host"."""
    for v in ledger:
        if v.get("reproduced") != "false":
            continue
        cause = v.get("cause") or ("neither" if v.get("row_code") == v.get("rerun_code") else "code or host")
        if cause != "code":
            return (f"{v.get('label')} seed {v.get('seed')} rerun {v.get('date', '')} differed ({cause}): "
                    f"{v.get('difference', '')}")
    return None


def confounding(rows: Iterable[Mapping[str, str]], ledger_evidence: str | None) -> str | None:
    """Why the compared ``rows`` are confounded by their numerics (one line), or None when they share one."""
    keys: dict[str, list[str]] = {}
    for row in rows:
        keys.setdefault(same_numerics_key(row), []).append(f"{row.get('label')} seed {row.get('seed')}")
    if len(keys) > 1:
        parts = "; ".join(f"{key}: {len(names)} rows" for key, names in sorted(keys.items()))
        return f"the compared rows ran with different numerics ({parts})"
    (key,) = keys or {"": []}
    if key.endswith(_UNRECORDED) and ledger_evidence is not None:
        return (f"unpinned rows whose hosts were not recorded, in an experiment where the host is shown to change "
                f"rows ({ledger_evidence})")
    return None
