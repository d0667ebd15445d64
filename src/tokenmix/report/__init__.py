"""The reproduction report (``tokenmix report``): docs/reproduction.md from the committed CSVs and the claims of
the experiment files.

* :mod:`.document`: the whole report (:func:`render`, :func:`write_report`); :mod:`.sections`, :mod:`.extras` and
  :mod:`.ledger`: its sections, the papers' extra tables and each paper's ledger;
* :mod:`.notes`, :mod:`.ceilings`, :mod:`.recall`: the notes under each verdict, the tasks' shortcut ceilings
  (from ``tokenmix data audit``), the recall sweep's table and pictures;
* :mod:`.measures`: the collected CSVs of one experiment and the per-seed / per-round values of each measure;
  :mod:`.tables`: the markdown tables; :mod:`.plateau`: whether a run had stopped improving; :mod:`.prereg`:
  whether each claim was committed before its rows; :mod:`.confound`: rows of different numerics.

The maths (claims, the exact tests, Holm, the verdict rule) is :mod:`tokenmix.study`, which the run layer's
``--dry-run`` uses too; :func:`judge` is re-exported from it. The statistics need scipy (``pip install
'tokenmix-lab[report]'``); parsing claims and planning do not.
"""

from __future__ import annotations

__all__ = ["render", "write_report", "judge"]


def __getattr__(name: str):
    if name in ("render", "write_report"):
        from . import document

        return getattr(document, name)
    if name == "judge":
        from ..study.verdict import judge

        return judge
    raise AttributeError(f"module 'tokenmix.report' has no attribute {name!r}")
