"""``tokenmix data``: where each task's data are, fetching what is missing; ``tokenmix data audit TASK``: the
task's shortcuts, cheap baselines fitted on a training seed and scored on a held-out one."""

from __future__ import annotations

import argparse

__all__ = ["add_parser", "run"]

_AUDIT_ONLY = ("examples", "seeds", "option", "json", "csv")


def add_parser(sub: argparse._SubParsersAction) -> None:
    dt = sub.add_parser("data", help="where each task's data are (a path, generated, or missing), fetching what is "
                        "missing (Fashion-MNIST, Austen); `tokenmix data audit TASK`: the task's shortcuts")
    dt.add_argument("tasks", nargs="*", metavar="TASK", help="task names (default: every registered task); "
                    "`audit TASK ...`: fit cheap baselines (pixels, marker geometry, components, n-grams, first "
                    "tokens, ...) on examples of a training seed and print their accuracy on a held-out seed, "
                    "with a 95 %% interval, best first, beside the majority class")
    dt.add_argument("--no-fetch", action="store_true", help="only report where the data are; fetch nothing")
    dt.add_argument("--show", nargs="?", const="pathfinder-examples.png", metavar="PNG",
                    help="with the task pathfinder: draw positive and negative pictures of each difficulty into PNG "
                    "(default pathfinder-examples.png)")
    audit = dt.add_argument_group("audit (`tokenmix data audit TASK ...`)")
    audit.add_argument("--examples", type=int, metavar="N",
                       help="examples per split (training and held-out; default: the task's, about a minute each)")
    audit.add_argument("--seeds", type=int, nargs=2, default=None, metavar=("TRAIN", "HELD_OUT"),
                       help="the generator seed of the training examples and of the held-out ones (default 0 1)")
    audit.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                       help="a task option (repeatable), e.g. length=9 or preset=paper: audit this setting alone "
                       "instead of the task's default settings (Pathfinder: lengths 6, 9, 14; the LRA tasks: quick and "
                       "paper presets)")
    audit.add_argument("--json", metavar="OUT", help="also write the table as JSON")
    audit.add_argument("--csv", metavar="OUT", help="also write the table as CSV (columns task, options, baseline, "
                       "kind, accuracy, low, high, n)")


def _audit(args: argparse.Namespace) -> None:
    from ..tasks.audit import audit, parse_options, print_rows, write_rows

    names = args.tasks[1:]
    if not names:
        raise SystemExit("tokenmix data audit: name the task(s) to audit, e.g. `tokenmix data audit pathfinder`")
    if args.examples is not None and (args.examples < 8 or args.examples % 2):
        raise SystemExit(f"tokenmix data audit: --examples must be an even number >= 8, got {args.examples}")
    try:
        rows = audit(names, parse_options(args.option), args.examples, tuple(args.seeds or (0, 1)),
                     on_rows=print_rows)
    except (ValueError, ModuleNotFoundError, FileNotFoundError) as error:
        raise SystemExit(f"tokenmix data audit: {error}") from None
    for path in (args.json, args.csv):
        if path:
            print(f"wrote {write_rows(rows, path)}")


def run(args: argparse.Namespace) -> None:
    from ..tasks.datacheck import print_data_status

    if args.tasks[:1] == ["audit"]:
        return _audit(args)
    given = [f"--{name}" for name in _AUDIT_ONLY if getattr(args, name) not in (None, [])]
    if given:
        raise SystemExit(f"tokenmix data: {', '.join(given)} belong to `tokenmix data audit TASK`")
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
