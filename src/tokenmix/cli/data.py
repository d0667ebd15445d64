"""``tokenmix data``: where each task's data are, fetching what is missing."""

from __future__ import annotations

import argparse

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    dt = sub.add_parser("data", help="where each task's data are (a path, generated, or missing), fetching what is "
                        "missing (Fashion-MNIST, Austen)")
    dt.add_argument("tasks", nargs="*", metavar="TASK", help="task names (default: every registered task)")
    dt.add_argument("--no-fetch", action="store_true", help="only report where the data are; fetch nothing")


def run(args: argparse.Namespace) -> None:
    from ..tasks.datacheck import print_data_status

    try:
        missing = print_data_status(args.tasks, fetch=not args.no_fetch)
    except ValueError as error:  # an unknown task name
        raise SystemExit(f"tokenmix data: {error}") from None
    if missing:
        raise SystemExit(f"tokenmix data: the data of {missing} task(s) are missing")
