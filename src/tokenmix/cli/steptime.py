"""``tokenmix steptime``: the controlled step-time harness of an experiment (:mod:`tokenmix.steptime`)."""

from __future__ import annotations

import argparse
import sys

from .common import HelpFormatter, add_experiment_arguments, print_table

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    st = sub.add_parser("steptime", formatter_class=HelpFormatter,
                        help="controlled timing of one training step per mixer entry of an experiment (interleaved "
                        "rounds, one process, fixed threads); --lengths: against sequence length, with log-log slopes")
    add_experiment_arguments(st)
    st.add_argument("--rounds", type=int, help="rounds; each times every label once (default: the file's [report] "
                    "harness_rounds, 10 unless it sets them)")
    st.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    st.add_argument("--min-run-time", type=float, default=0.2, help="seconds each measurement runs for at least")
    st.add_argument("--labels", help="comma-separated labels (default: every entry, the baseline included)")
    st.add_argument("--lengths", help="comma-separated lengths N: time synthetic inputs of N tokens (image tasks: N "
                    "patches, squares only) instead of the experiment's batch")
    st.add_argument("--scaling", action="store_true", help="as --lengths, at the file's [report] harness_lengths "
                    "(the lengths its scaling claims read)")
    st.add_argument("--batch", type=int, default=1, help="with --lengths: inputs per step")
    st.add_argument("--no-memory", action="store_true", help="with --lengths or --scaling: skip the peak memory "
                    "of each (label, N), measured in a fresh process each")
    st.add_argument("--memory-rounds", action="store_true", help="with --lengths or --scaling: measure the peak "
                    "memory in a fresh process every round, not once per (label, N) (the default when the file's "
                    "[report] harness_memory is \"round\"; claims on memory need it)")
    st.add_argument("--inference", action="store_true", help="with --lengths or --scaling: time one inference pass "
                    "(eval mode, no gradients) instead of a training step; no memory (default --out: "
                    "<name>-inference.csv)")
    st.add_argument("--rotate", action="store_true", help="start each round one label later (A B C, B C A, ...)")
    st.add_argument("--max-seconds", type=float, help="time cap: start no round that would likely end past it")
    st.add_argument("--out", help="CSV file (default: docs/reproduction/<name>-steptime.csv, with --lengths "
                    "<name>-scaling.csv)")


def scaling_lengths(args: argparse.Namespace, experiment) -> list[int] | None:
    """The lengths of a scaling run: ``--lengths``, or with ``--scaling`` the file's ``[report] harness_lengths``;
    None: time the experiment's own batch."""
    if args.lengths and args.scaling:
        raise ValueError("--lengths and --scaling: give one (--scaling takes the file's [report] harness_lengths)")
    if args.scaling:
        if not experiment.report.get("harness_lengths"):
            raise ValueError(f"--scaling: {experiment.name} sets no [report] harness_lengths; give --lengths")
        return list(experiment.report["harness_lengths"])
    return [int(n) for n in args.lengths.split(",") if n.strip()] if args.lengths else None


def run(args: argparse.Namespace) -> None:
    """Time training steps (see :mod:`tokenmix.steptime`), write the CSV and print the summary tables."""
    import os

    from ..steptime import default_path, scaling_table, step_table, time_scaling, time_training_steps, write_csv
    from ..training.build import make_task
    from ..training.experiment import load_experiment

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > args.threads + 0.5:
        print(f"warning: 1-minute load average {load:.2f} > threads + 0.5 = {args.threads + 0.5}: other processes "
              "share the cores: timings are unreliable", file=sys.stderr, flush=True)
    labels = [label.strip() for label in args.labels.split(",") if label.strip()] if args.labels else None
    common = dict(threads=args.threads, min_run_time=args.min_run_time, labels=labels, budget=args.max_seconds,
                  rotate=args.rotate)
    try:
        experiment = load_experiment(args.config, args.overrides)
        common["rounds"] = args.rounds or experiment.report["harness_rounds"]
        task = make_task(experiment)
        lengths = scaling_lengths(args, experiment)
        kind = "inference" if args.inference else "scaling" if lengths else "experiment"
        out = args.out or default_path(experiment, kind)
        if not args.out and not out.parent.is_dir():
            raise ValueError(f"no folder {str(out.parent)!r} here (the repository's record, the default): pass "
                             f"--out FILE.csv")
        if lengths:
            rounds_of_memory = (args.memory_rounds or experiment.report.get("harness_memory") == "round") \
                and not args.inference
            if args.inference and args.memory_rounds:
                raise ValueError("--inference records no memory: drop --memory-rounds")
            if rounds_of_memory and args.no_memory:
                raise ValueError("--no-memory with memory measured every round (--memory-rounds or the file's "
                                 "[report] harness_memory = \"round\"): drop one")
            rows = time_scaling(experiment, lengths, batch=args.batch, memory=not (args.no_memory or args.inference),
                                memory_rounds=rounds_of_memory, inference=args.inference, task=task, **common)
        elif args.inference or args.memory_rounds or args.no_memory:
            used = next(f for f, on in (("--inference", args.inference), ("--memory-rounds", args.memory_rounds),
                                         ("--no-memory", args.no_memory)) if on)
            raise ValueError(f"{used} goes with synthetic lengths: give --lengths or --scaling")
        else:
            rows = time_training_steps(experiment, task=task, **common)
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(f"tokenmix steptime: {error}") from None
    path = write_csv(rows, out)
    print(f"\nwrote {path}: {len(rows)} rows, {max(int(r['round']) for r in rows)} rounds, {args.threads} thread(s)\n")
    print_table(*(scaling_table(rows) if lengths else step_table(rows, len(task.splits["train"]))))
