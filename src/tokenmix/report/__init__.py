"""The reproduction report as a library: claims as data in the experiment files, exact tests, verdicts.

* :mod:`.claims`: the ``[[claims]]`` array and the ``[paper]`` table of an experiment file, parsed and checked;
* :mod:`.measures`: the collected CSVs of one experiment and the per-seed / per-round values of each measure;
* :mod:`.stats`: the exact tests (scipy.stats), Holm, the smallest attainable p, seed counts;
* :mod:`.verdict`: the verdict on each claim of one experiment file;
* :mod:`.plateau`: whether a run's validation metric had stopped improving;
* :mod:`.power`: the smallest Holm-adjusted p an experiment's plan can reach (``tokenmix compare --dry-run``);
* :mod:`.tables`: the markdown table writer and number formats;
* :mod:`.document`, :mod:`.sections`, :mod:`.extras`: docs/reproduction.md (``tokenmix report``).

The statistics need scipy (``pip install 'tokenmix[report]'``); parsing claims and planning do not.
"""

from __future__ import annotations

from .claims import Claim, PaperText, parse_claims, parse_paper

__all__ = ["Claim", "PaperText", "parse_claims", "parse_paper", "render", "write_report", "attainable", "judge"]


def __getattr__(name: str):
    if name in ("render", "write_report"):
        from . import document

        return getattr(document, name)
    if name == "attainable":
        from .power import attainable

        return attainable
    if name == "judge":
        from .verdict import judge

        return judge
    raise AttributeError(f"module 'tokenmix.report' has no attribute {name!r}")
