"""``tokenmix compare``: run an experiment (train its mixers side by side, record, verify, report its status)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..registry import list_mixers
from .common import HelpFormatter, add_experiment_arguments

__all__ = ["add_parser", "run", "compare_overrides", "judged_without"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    cp = sub.add_parser("compare", formatter_class=HelpFormatter,
                        help="run an experiment: train mixers side by side and write a leaderboard (no "
                        "--config: the embedded default, experiments/listops.toml)")
    add_experiment_arguments(cp)
    cp.add_argument("--budget", help="a named budget of the file, e.g. quick (the short smoke-run budget of "
                    "[budgets.quick]); default: the file's own budget, the one the verdicts come from")
    cp.add_argument("--task", help="task name (sets task.name)")
    cp.add_argument("--preset", help="the task's data preset (sets task.preset)")
    cp.add_argument("--mixers", help="comma-separated mixers, each a name with inline options or not (e.g. "
                    "softmax,swin:window_size=2,shift=True: a comma before option=value continues the mixer), or "
                    "'all' that can run the task (sets mixers)")
    cp.add_argument("--seeds", help="comma-separated seeds, e.g. 0,1,2 (sets seeds)")
    cp.add_argument("--dim", type=int, help="model width (sets model.dim)")
    cp.add_argument("--depth", type=int, help="layers (sets model.depth)")
    cp.add_argument("--heads", type=int, help="heads of the mixers that have heads (sets model.heads)")
    cp.add_argument("--max-steps", type=int, help="optimiser steps per run (sets train.max_steps)")
    cp.add_argument("--batch-size", type=int, help="batch size (sets train.batch_size)")
    cp.add_argument("--lr", type=float, help="learning rate (sets train.lr)")
    cp.add_argument("--eval-every", type=int, help="steps between evaluations (sets train.eval_every)")
    cp.add_argument("--out", help="output folder (default: runs/<experiment name>); a finished run in it is not "
                    "trained again, an interrupted one resumes")
    cp.add_argument("--jobs", type=int, default=1, help="runs trained at once, each in its own process with its "
                    "share of the cores (on 2 cores: --jobs 2 with one thread each)")
    cp.add_argument("--dry-run", action="store_true", help="print the resolved runs (label x seed, parameters, "
                    "steps) and train nothing")
    cp.add_argument("--results", metavar="DIR", help="also record each run as it finishes in DIR/<name>.csv, "
                    "-history.csv, -configs.json (and -chance.csv), e.g. docs/reproduction; a run recorded there "
                    "with the same config_hash is not trained again; one whose config changed is trained again "
                    "and its row replaced")
    cp.add_argument("--no-reuse", dest="reuse", action="store_false", help="with --results: train every run not "
                    "recorded for this experiment, even one that another experiment recorded in DIR with the same "
                    "config_hash (by default that run's row is recorded under this experiment's label instead)")
    cp.add_argument("--no-pin", dest="pin", action="store_false", help="train with this host's own floating-point "
                    "kernels (AVX-512 where it has them) instead of the pinned ones: faster on such hosts, but its "
                    "rows are then comparable only with rows of this host (the report calls claims mixing them "
                    "confounded)")
    cp.add_argument("--repin", action="store_true", help="with --results: train again every recorded row not "
                    "computed with pinned numerics (rows from before numerics were pinned, or trained in-process) "
                    "and replace it")
    cp.add_argument("--commit", action="store_true", help="with --results: git commit those files (only them) "
                    "in DIR's repository after each run")
    cp.add_argument("--verify", type=int, metavar="K", help="with --results: rerun K recorded rows per label "
                    "(the code versions of its rows in turn, smallest seed first) into --out (default "
                    "runs/<name>-verify) and say which reproduce exactly; rows of code that does not are stale, "
                    "but for labels whose own rerun reproduced (left out of the report, trained again by compare "
                    "--results); ledger DIR/<name>-verify.csv")
    cp.add_argument("--verify-per", choices=["label", "code"], default="label", help="with --verify K: K rows per "
                    "label (default), or K rows of each code version that no rerun has checked yet (labels in turn, "
                    "smallest seed first): the fewest reruns that reach every unchecked code")
    cp.add_argument("--status", action="store_true", help="print the runs done, partial and remaining per label "
                    "(in --out and --results) and the estimated time left, and train nothing")
    cp.add_argument("--executor", choices=["local", "submitit"], default="local", help="where the runs train: "
                    "local processes (--jobs at once), or cluster jobs through submitit, one per run (needs "
                    "pip install 'tokenmix-lab[cluster]'; see --cluster)")
    cp.add_argument("--cluster", dest="cluster_options", action="append", default=[], metavar="KEY=VALUE",
                    help="with --executor submitit: a submitit parameter (repeatable), e.g. cluster=slurm|local|debug, "
                    "slurm_partition=gpu, timeout_min=60 (default 60; a timed-out or preempted run is requeued and "
                    "resumes), slurm_array_parallelism=8 (runs at once, default 16), cpus_per_task=2 (default: "
                    "train.threads, else 1), gpus_per_node=1, mem_gb=8")


_QUICK_FLAGS = ("task", "preset", "mixers", "seeds", "dim", "depth", "heads", "max_steps", "batch_size", "lr",
                "eval_every")


def compare_overrides(args: argparse.Namespace) -> list[str]:
    """The ``--set`` overrides the quick flags of ``tokenmix compare`` stand for, then the explicit ones. Without
    ``--config`` the quick flags make an ad-hoc experiment of the embedded default: its description says so, and
    a ``--task`` other than the default's names it (and so its default ``--out``, runs/<task>)."""
    from ..training.experiment import DEFAULT_EXPERIMENT

    sets = []
    given = [(flag, getattr(args, flag)) for flag in _QUICK_FLAGS if getattr(args, flag) is not None]
    if args.config is None and given:
        flags = " ".join(f"--{flag.replace('_', '-')} {value}" for flag, value in given)
        sets.append("description=" + json.dumps(f"Ad-hoc comparison built from the command-line flags {flags} "
                                                f"on top of the embedded default experiment."))
        if args.task is not None and args.task != DEFAULT_EXPERIMENT["task"]["name"]:
            sets.append(f"name={json.dumps(args.task)}")
    for flag, key in (("task", "task.name"), ("preset", "task.preset"), ("dim", "model.dim"),
                      ("depth", "model.depth"), ("heads", "model.heads"), ("max_steps", "train.max_steps"),
                      ("batch_size", "train.batch_size"), ("lr", "train.lr"), ("eval_every", "train.eval_every")):
        value = getattr(args, flag)
        if value is not None:
            sets.append(f"{key}={value!r}" if isinstance(value, str) else f"{key}={value}")
    if args.seeds:
        sets.append(f"seeds=[{args.seeds}]")
    return sets + list(args.overrides)


def judged_without(config: str | None, name: str, results: str | None) -> dict[str, frozenset]:
    """Per claim of the experiment file ``config``, the seeds (harness rounds) its verdict will leave out: those
    already recorded in ``results`` (default docs/reproduction) when its test or the seeds list last changed,
    from git history (:func:`tokenmix.report.prereg.registrations`); empty outside a git checkout or without
    recorded rows."""
    from ..report.prereg import looked_in_git, registrations_in_git

    csv = Path(results or "docs/reproduction") / f"{name}.csv"
    if not config or not csv.exists():
        return {}
    return looked_in_git(registrations_in_git(config, csv))


def run(args: argparse.Namespace) -> None:
    from ..models.patterns import split_mixer_list
    from ..training.executor import RunsFailed, parse_cluster_options
    from ..training.experiment import load_experiment, skip_reason
    from ..training.files import DiskFull, FolderNotWritable
    from ..training.locks import LockHeld
    from ..training.sweep import compare
    from ..tasks import task_info

    try:
        sets = compare_overrides(args)
        experiment = load_experiment(args.config, sets, budget=args.budget)
        extra = []
        if args.max_steps is not None and (experiment.train.get("eval_every") or 0) > args.max_steps:
            extra.append(f"train.eval_every={args.max_steps}")  # a shorter run still gets evaluated
        if args.mixers:
            if args.mixers == "all":
                kind = task_info(experiment.task["name"]).kind
                names = [n for n in list_mixers() if skip_reason(n, kind) is None]
            else:
                names = split_mixer_list(args.mixers, "--mixers")
            extra.append("mixers=[" + ",".join(json.dumps(n) for n in names) + "]")
        if extra:
            experiment = load_experiment(args.config, sets + extra, budget=args.budget)
        added = experiment.entries_with_baseline(task_info(experiment.task["name"]).kind)[len(experiment.mixers):]
        for entry in added:
            print(f"note: the no-context baseline {entry.label!r} is added to the runs ([report] baseline = true; "
                  "--set report.baseline=false leaves it out)", file=sys.stderr, flush=True)
        out = args.out or f"runs/{experiment.name}" + (f"-{args.budget}" if args.budget else "")
        if args.commit and not args.results:
            raise ValueError("--commit needs --results DIR")
        if args.repin and not args.results:
            raise ValueError("--repin needs --results DIR (the recorded rows it trains again)")
        if args.status:
            from ..training.status import sweep_status

            print(sweep_status(experiment, out, args.results, jobs=args.jobs))
            return
        if args.verify is not None:
            from ..training.verify import verify

            if not args.results:
                raise ValueError("--verify K needs --results DIR (the recorded rows it reruns)")
            verify(experiment, args.results, args.verify, args.out or f"runs/{experiment.name}-verify",
                   jobs=args.jobs, commit=args.commit, dry_run=args.dry_run, per=args.verify_per)
            return
        options = parse_cluster_options(args.cluster_options) if args.cluster_options else None
        judging = args.dry_run and experiment.claims
        left_out = judged_without(args.config, experiment.name, args.results) if judging else None
        rows = compare(experiment, out, jobs=args.jobs, dry_run=args.dry_run, results_dir=args.results,
                       commit=args.commit, executor=args.executor, cluster_options=options,
                       left_out=left_out, reuse=args.reuse, repin=args.repin, pin=args.pin)
    except (ValueError, FileNotFoundError) as error:  # bad settings, or a task's data not found
        raise SystemExit(f"tokenmix compare: {error}") from None
    except (LockHeld, DiskFull, FolderNotWritable, RunsFailed) as error:  # another sweep, the disk, the cluster
        raise SystemExit(f"tokenmix compare: {error}") from None
    if rows:
        print(f"\nwrote {out}/config.toml, results.csv, report.md and the plots\n")
        with open(f"{out}/report.md") as report:
            print(report.read())
