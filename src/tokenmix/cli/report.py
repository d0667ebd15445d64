"""``tokenmix report``: the reproduction report (:mod:`tokenmix.report`)."""

from __future__ import annotations

import argparse

from .common import HelpFormatter

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    rp = sub.add_parser("report", formatter_class=HelpFormatter,
                        help="write the reproduction report: every experiment file with a [paper] table, its "
                        "measured tables and a verdict on each of its [[claims]] from the collected CSVs")
    rp.add_argument("--data", default="docs/reproduction", help="folder of the collected CSVs")
    rp.add_argument("--out", default="docs/reproduction.md", help="the document to write")
    rp.add_argument("--experiments", default="experiments", help="folder of the experiment files")
    rp.add_argument("--no-plots", action="store_true", help="do not draw the metric-vs-time plots")


def run(args: argparse.Namespace) -> None:
    from ..report.document import write_report

    try:
        write_report(args.data, args.out, args.experiments, plots=not args.no_plots)
    except (ValueError, ModuleNotFoundError) as error:
        raise SystemExit(f"tokenmix report: {error}") from None
