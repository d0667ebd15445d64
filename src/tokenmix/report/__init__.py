"""The reproduction report as a library: exact tests and verdicts on the claims of the experiment files.

* :mod:`.measures`: the collected CSVs of one experiment and the per-seed / per-round values of each measure;
* :mod:`.stats`: the exact tests (scipy.stats) and seed counts;
* :mod:`.verdict`: the verdict on each claim of one experiment file;
* :mod:`.plateau`: whether a run's validation metric had stopped improving;
* :mod:`.tables`: the markdown table writer and number formats;
* :mod:`.document`, :mod:`.sections`, :mod:`.extras`: docs/reproduction.md (``tokenmix report``).

The claims themselves are part of an experiment file, so they live with it in the run layer:
:mod:`tokenmix.study.claims` parses the ``[[claims]]`` array and the ``[paper]`` table, and
:mod:`tokenmix.study.power` gives the smallest p each design can reach and Holm's correction (also what
``tokenmix compare --dry-run`` prints). The report sits above the run layer and imports from it, never the
other way round.

The statistics need scipy (``pip install 'tokenmix[report]'``); parsing claims and planning do not.
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
