"""``tokenmix data``: where each task's data are, fetching what is missing."""

from __future__ import annotations

import argparse

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    dt = sub.add_parser("data", help="where each task's data are (a path, generated, or missing), fetching what is "
                        "missing (Fashion-MNIST, Austen)")
    dt.add_argument("tasks", nargs="*", metavar="TASK", help="task names (default: every registered task)")
    dt.add_argument("--no-fetch", action="store_true", help="only report where the data are; fetch nothing")
    dt.add_argument("--show", nargs="?", const="pathfinder-examples.png", metavar="PNG",
                    help="with the task pathfinder: draw positive and negative pictures of each difficulty into PNG "
                    "(default pathfinder-examples.png)")


def run(args: argparse.Namespace) -> None:
    from ..tasks.datacheck import print_data_status

    if args.show is not None:
        if args.tasks != ["pathfinder"]:
            raise SystemExit(f"tokenmix data: --show draws the pictures of the task pathfinder only; got tasks "
                             f"{args.tasks or 'none'}")
        from ..data.pathfinder import save_examples

        try:
            print(f"wrote {save_examples(args.show)}")
        except ModuleNotFoundError as error:
            raise SystemExit(f"tokenmix data: {error}") from None
        return

    try:
        missing = print_data_status(args.tasks, fetch=not args.no_fetch)
    except ValueError as error:  # an unknown task name
        raise SystemExit(f"tokenmix data: {error}") from None
    if missing:
        raise SystemExit(f"tokenmix data: the data of {missing} task(s) are missing")
