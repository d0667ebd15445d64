"""``tokenmix list``: the registered mixers and tasks, and what each can do."""

from __future__ import annotations

import argparse

from ..registry import list_mixers, mixer_info
from .common import print_table

__all__ = ["WIDTH", "add_parser", "run"]

WIDTH = 120  # columns of `tokenmix list` without --wide


def add_parser(sub: argparse._SubParsersAction) -> None:
    ls = sub.add_parser("list", help="the registered mixers and tasks, and what they can do")
    ls.add_argument("--wide", action="store_true", help="print each paper citation whole (default: cut to fit "
                    "120 columns)")


def run(args: argparse.Namespace) -> None:
    """Mixers and tasks; the paper column is cut to fit 120 columns unless ``--wide``."""
    rows = []
    for name in list_mixers():
        info = mixer_info(name)
        modes = "/".join(m for m, ok in (("bidir", info.bidirectional), ("causal", info.causal)) if ok)
        rows.append([name, info.complexity, modes, "yes" if info.padding else "no",
                     "yes" if info.spatial else "no", info.paper])
    headers = ["mixer", "complexity", "modes", "padding", "spatial", "paper"]
    print_table(headers, rows, max_width=None if args.wide else WIDTH)
    from ..tasks import list_tasks, task_info  # tasks import optional data packages lazily

    print()
    headers = ["task", "kind", "metric", "source"]
    rows = [[n + (" (retired)" if task_info(n).retired else ""), task_info(n).kind, task_info(n).metric,
             task_info(n).source] for n in list_tasks()]
    print_table(headers, rows, max_width=None if args.wide else WIDTH)
    retired = [n for n in list_tasks() if task_info(n).retired]
    if retired:
        print(f"\nretired: {', '.join(retired)}; they train, but no claim may be judged on them (why: each task's "
              f"docstring)")
    from ..tasks import task_class

    settings = [f"{n} ({task_class(n).retired_settings})" for n in list_tasks() if task_class(n).retired_settings]
    if settings:
        print(f"retired settings: {'; '.join(settings)}; they train, but no claim may be judged on them")
