"""The ``tokenmix`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from .registry import list_mixers, mixer_info
from .tabulate import text_table


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Help text that shows each option's default (from the parser, so it is declared once), unless the
    default is None or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False or "default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def build_parser() -> argparse.ArgumentParser:
    """The ``tokenmix`` argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="tokenmix", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("list", help="the registered mixers and tasks, and what they can do")
    ls.add_argument("--wide", action="store_true", help="print each paper citation whole (default: cut to fit "
                    "120 columns)")
    demo = sub.add_parser("demo", help="build every mixer and run a forward/backward pass on random data",
                          formatter_class=_Formatter)
    demo.add_argument("--dim", type=int, default=64, help="model width")
    demo.add_argument("--heads", type=int, default=4, help="heads of the multi-head mixers")
    demo.add_argument("--length", type=int, default=512, help="sequence length N (spatial mixers: the most "
                      "square grid of N cells)")
    demo.add_argument("--batch", type=int, default=2, help="inputs per pass (the last one half padded)")
    demo.add_argument("--repeats", type=int, default=3, help="timed passes after one warm-up; the median is shown")
    demo.add_argument("--seed", type=int, default=0, help="seed of the random inputs and weights")
    _add_train_parser(sub)
    _add_compare_parser(sub)
    _add_speed_parser(sub)
    _add_count_parser(sub)
    _add_steptime_parser(sub)
    _add_report_parser(sub)
    dt = sub.add_parser("data", help="where each task's data are (a path, generated, or missing), fetching what is "
                        "missing (Fashion-MNIST, Austen)")
    dt.add_argument("tasks", nargs="*", metavar="TASK", help="task names (default: every registered task)")
    dt.add_argument("--no-fetch", action="store_true", help="only report where the data are; fetch nothing")
    return parser


def _add_train_parser(sub: argparse._SubParsersAction) -> None:
    from .protocols import MODEL_PROTOCOLS, TRAIN_PRESETS
    from .training.experiment import DEFAULT_EXPERIMENT  # the defaults are the default experiment's, declared there

    model = DEFAULT_EXPERIMENT["model"]
    tr = sub.add_parser("train", help="train one mixer on one task", formatter_class=_Formatter)
    tr.add_argument("--task", required=True, help="task name (tokenmix list shows them)")
    tr.add_argument("--mixer", required=True, help="mixer name, or a layer pattern 'a,b' (e.g. twins_lsa,twins_gsa), "
                    "each entry with inline options (e.g. swin,swin:shift=True,window_size=2: a comma before "
                    "option=value continues the entry)")
    tr.add_argument("--seed", type=int, default=0, help="seed of the weights, dropout and batch order")
    length = tr.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int, help="training length in epochs")
    length.add_argument("--max-steps", type=int, help="training length in optimiser steps")
    tr.add_argument("--out", help="folder for the checkpoint, logs and best weights")
    tr.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    tr.add_argument("--preset", default="quick", help="the task's data preset (quick or paper)")
    tr.add_argument("--protocol", default=model["protocol"], choices=list(MODEL_PROTOCOLS),
                    help="model protocol (paper-*: a paper's own network)")
    tr.add_argument("--train-preset", default=DEFAULT_EXPERIMENT["train"]["preset"], choices=list(TRAIN_PRESETS),
                    help="training preset (paper-*: a paper's optimiser, lr, schedule, batch)")
    tr.add_argument("--dim", type=int, default=model["dim"], help="model width")
    tr.add_argument("--depth", type=int, default=model["depth"], help="layers")
    tr.add_argument("--heads", type=int, default=model["heads"], help="heads of the mixers that have heads")
    tr.add_argument("--batch-size", type=int, help="batch size (default: the training preset's)")
    tr.add_argument("--lr", type=float, help="learning rate (default: the training preset's)")
    tr.add_argument("--eval-every", type=int, help="steps between evaluations (default: once per epoch)")
    tr.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's default)")
    tr.add_argument("--bf16", action="store_true", help="train and evaluate under bfloat16 autocast")
    tr.add_argument("--tensorboard", action="store_true", help="also write tensorboard scalars to "
                    "<out>/tensorboard (needs --out and the tensorboard package)")
    tr.add_argument("--device", default="cpu", help="where the model trains, e.g. cpu, cuda or cuda:1")


def _add_compare_parser(sub: argparse._SubParsersAction) -> None:
    cp = sub.add_parser("compare", formatter_class=_Formatter,
                        help="run an experiment: train mixers side by side and write a leaderboard (no "
                        "--config: the embedded default, experiments/listops.toml)")
    cp.add_argument("--config", help="experiment file (TOML, see experiments/); default: the embedded default")
    cp.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a setting of the file, dotted key and TOML value, e.g. train.lr=1e-3 or "
                    "seeds=[0,1,2] (repeatable)")
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
    cp.add_argument("--commit", action="store_true", help="with --results: git commit those files (only them) "
                    "in DIR's repository after each run")
    cp.add_argument("--verify", type=int, metavar="K", help="with --results: rerun K recorded rows per label "
                    "(the code versions of its rows in turn, smallest seed first) into --out (default "
                    "runs/<name>-verify) and say which reproduce exactly; rows of code that does not are stale "
                    "(left out of the report, trained again by compare --results); ledger DIR/<name>-verify.csv")
    cp.add_argument("--status", action="store_true", help="print the runs done, partial and remaining per label "
                    "(in --out and --results) and the estimated time left, and train nothing")
    cp.add_argument("--executor", choices=["local", "submitit"], default="local", help="where the runs train: "
                    "local processes (--jobs at once), or cluster jobs through submitit, one per run (needs "
                    "pip install 'tokenmix[cluster]'; see --cluster)")
    cp.add_argument("--cluster", dest="cluster_options", action="append", default=[], metavar="KEY=VALUE",
                    help="with --executor submitit: a submitit parameter (repeatable), e.g. cluster=slurm|local|debug, "
                    "slurm_partition=gpu, timeout_min=60 (default 60; a timed-out or preempted run is requeued and "
                    "resumes), slurm_array_parallelism=8 (runs at once, default 16), cpus_per_task=2 (default: "
                    "train.threads, else 1), gpus_per_node=1, mem_gb=8")


def _add_count_parser(sub: argparse._SubParsersAction) -> None:
    cn = sub.add_parser("count", help="trainable parameters and multiplications/additions/divisions/exponentiations "
                        "per mixer, for training over l tokens and one inference step at t (Chen (2023) Tables 3-7), "
                        "cross-checked with torch's FlopCounterMode; --mode paper-000 for Yamada et al. (2022) "
                        "§4.2's counts")
    cn.add_argument("--mixers", help="comma-separated names, or 'all' (default)")
    cn.add_argument("--dim", type=int, default=128, help="model width d (default 128, as Chen (2023) Table 7); with "
                    "--mode paper-000 the embedding width m")
    cn.add_argument("--max-len", type=int, help="max_len the mixers are built with: the Extractors' "
                    "taps l (default 128, as Chen (2023) Table 7)")
    cn.add_argument("--heads", type=int, help="heads of the multi-head mixers (default 1)")
    cn.add_argument("--length", type=int, help="sequence length l counted (default: max-len; 128 with "
                    "--mode paper-000)")
    cn.add_argument("--step-t", type=int, help="length t of the counted inference step (default: the length)")
    cn.add_argument("--mode", default="auto", choices=["auto", "causal", "bidir", "paper-000"],
                    help="auto (default): causal where the mixer can be (Chen (2023)'s language-model setting); "
                    "paper-000: softmax, linear and relation as Yamada et al. (2022) §3.1 build them (one head "
                    "of depth --inner-dim over --dim-wide tokens, no output projection, no biases, linear "
                    "without its denominator), bidirectional, beside the paper's §4.2 multiplication counts")
    cn.add_argument("--inner-dim", type=int, help="--mode paper-000 only: the depth d (default: --dim)")
    cn.add_argument("--no-flops", action="store_true", help="skip the FlopCounterMode cross-check")
    cn.add_argument("--csv", help="also write the table to this CSV file")


def _add_speed_parser(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser("speed", help="time and peak memory of mixers against sequence length and input value "
                        "range (Gan et al. (2023) §4), relative to softmax; writes speed.csv, speed.md and plots")
    sp.add_argument("--mixers", default="all",
                    help="comma-separated names, or 'all' (default); softmax is always added as the reference")
    sp.add_argument("--lengths", default="256,1024,4096,16384",
                    help="comma-separated sequence lengths (default 256,1024,4096,16384)")
    sp.add_argument("--dim", type=int, default=64, help="model width (head dim = dim / heads; default 64)")
    sp.add_argument("--heads", type=int, default=1, help="heads of the multi-head mixers (default 1)")
    sp.add_argument("--batch", type=int, default=1, help="inputs per pass (default 1)")
    sp.add_argument("--causal", action="store_true",
                    help="run every mixer causally (default: bidirectional, causal-only mixers causally)")
    sp.add_argument("--pass", dest="passes", default="both", choices=["fwd", "fwdbwd", "both"],
                    help="fwd: forward under no_grad; fwdbwd: forward + backward; both (default)")
    sp.add_argument("--value-range", default="2",
                    help="r of the inputs, uniform in [-r, r]; comma-separated for a sweep (default 2)")
    sp.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the mixers run (default cpu)")
    sp.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="dtype of the mixers and inputs (default float32)")
    sp.add_argument("--repeats", type=int, default=5, help="timed passes, median reported (default 5)")
    sp.add_argument("--warmup", type=int, default=1, help="untimed passes after the cold memory pass (default 1)")
    sp.add_argument("--case-timeout", type=float, default=120.0,
                    help="seconds per case, isolated start-up included (default 120); past it: 'timeout'")
    sp.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                    help="each case in a fresh subprocess (default: on for cpu, off for cuda)")
    sp.add_argument("--mem-limit-mb", type=float,
                    help="isolated CPU cases: address space a case may add after torch is imported (RLIMIT_AS)")
    sp.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's default)")
    sp.add_argument("--seed", type=int, default=0, help="seed of the weights and inputs (default 0)")
    sp.add_argument("--window", type=int, help="max_len (taps) of sliding-window mixers such as the Extractors "
                    "(default: each case's length)")
    sp.add_argument("--out", default="runs/speed", help="output folder (default runs/speed)")


def _print_table(headers: list[str], rows: list[list[str]], max_width: int | None = None) -> None:
    print(text_table(headers, rows, max_width=max_width))


def cmd_list(args: argparse.Namespace) -> None:
    """Mixers and tasks; the paper column is cut to fit 120 columns unless ``--wide``."""
    rows = []
    for name in list_mixers():
        info = mixer_info(name)
        modes = "/".join(m for m, ok in (("bidir", info.bidirectional), ("causal", info.causal)) if ok)
        rows.append([name, info.complexity, modes, "yes" if info.padding else "no",
                     "yes" if info.spatial else "no", info.paper])
    headers = ["mixer", "complexity", "modes", "padding", "spatial", "paper"]
    _print_table(headers, rows, max_width=None if args.wide else WIDTH)
    from .tasks import list_tasks, task_info  # tasks import optional data packages lazily

    print()
    headers = ["task", "kind", "metric", "source"]
    rows = [[n, task_info(n).kind, task_info(n).metric, task_info(n).source] for n in list_tasks()]
    _print_table(headers, rows, max_width=None if args.wide else WIDTH)


WIDTH = 120  # columns of `tokenmix list` without --wide


def cmd_demo(args: argparse.Namespace) -> None:
    """Every registered mixer, bidirectional and causal where supported, on the same random batch
    (:mod:`tokenmix.speed.demo`)."""
    from .speed.demo import DEMO_HEADERS, demo_rows

    print(f"tokenmix demo: batch {args.batch}, length {args.length}, dim {args.dim}, heads {args.heads} "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads)\n")
    _print_table(DEMO_HEADERS, demo_rows(dim=args.dim, heads=args.heads, length=args.length, batch=args.batch,
                                         repeats=args.repeats, seed=args.seed))


def cmd_train(args: argparse.Namespace) -> None:
    import json
    from dataclasses import asdict
    from pathlib import Path

    from .models.patterns import split_mixer_list
    from .tasks import create_task
    from .training.config import TrainConfig
    from .training.loop import train
    from .training.sweep import RESULT_FILE

    given = {k: v for k, v in (("batch_size", args.batch_size), ("lr", args.lr)) if v is not None}
    try:
        if args.threads is not None and args.threads < 1:
            raise ValueError(f"--threads must be a positive int, got {args.threads}")
        if args.tensorboard and args.out is None:
            raise ValueError("--tensorboard needs --out (the scalars go to <out>/tensorboard)")
        entries = split_mixer_list(args.mixer, "--mixer")
        mixer = entries[0] if len(entries) == 1 else entries
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        task = create_task(args.task, preset=args.preset, seed=0)
        torch.manual_seed(args.seed)
        model = task.build_model(mixer, dim=args.dim, depth=args.depth, num_heads=args.heads, protocol=args.protocol)
        config = TrainConfig.preset(args.train_preset, max_steps=args.max_steps, epochs=args.epochs,
                                    eval_every=args.eval_every, seed=args.seed, out_dir=args.out,
                                    resume=args.resume, bf16=args.bf16, tensorboard=args.tensorboard,
                                    device=args.device, **given)
        result = train(task, model, config)
    except (ValueError, ImportError) as error:  # bad settings, or tensorboard not installed
        raise SystemExit(f"tokenmix train: {error}") from None
    print(f"{args.task} / {args.mixer} / seed {args.seed}: best val {result.metric_name} {result.best_metric:.4f} "
          f"at epoch {result.best_epoch:.2f}; test {result.test_metric}; {result.time_per_epoch_s:.2f} s/epoch; "
          f"{result.tokens_per_s:.0f} tokens/s")
    if args.out is None:
        print("nothing saved: pass --out DIR to keep the best weights, the logs and the result")
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / RESULT_FILE).write_text(json.dumps(asdict(result)))
    saved = [(f, what) for f, what in (("best.safetensors", "the best-validation weights"),
                                       ("log.jsonl", "one record per evaluation"), ("log.csv", "the same as CSV"),
                                       (RESULT_FILE, "this result and its history"),
                                       ("checkpoint", "the last checkpoint, for --resume"),
                                       ("tensorboard", "tensorboard scalars")) if (out / f).exists()]
    print(f"saved in {out}/: " + "; ".join(f"{f} ({what})" for f, what in saved))


_QUICK_FLAGS = ("task", "preset", "mixers", "seeds", "dim", "depth", "heads", "max_steps", "batch_size", "lr",
                "eval_every")


def compare_overrides(args: argparse.Namespace) -> list[str]:
    """The ``--set`` overrides the quick flags of ``tokenmix compare`` stand for, then the explicit ones. Without
    ``--config`` the quick flags make an ad-hoc experiment of the embedded default: its description says so, and
    a ``--task`` other than the default's names it (and so its default ``--out``, runs/<task>)."""
    from .training.experiment import DEFAULT_EXPERIMENT

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


def _sibling_experiments(config: str | None) -> list:
    """The other experiment files beside ``config`` with a ``[paper]`` table and claims (those the report
    adjusts together); none for the embedded default. A sibling that does not load is left out with a note."""
    from .training.experiment import load_experiment

    if not config:
        return []
    here = Path(config).resolve()
    siblings = []
    for path in sorted(here.parent.glob("*.toml")):
        if path.resolve() == here:
            continue
        try:
            other = load_experiment(path)
        except (ValueError, OSError) as error:
            print(f"note: {path} left out of the claims' family: {error}", file=sys.stderr)
            continue
        if other.claims and other.paper:
            siblings.append(other)
    return siblings


def cmd_compare(args: argparse.Namespace) -> None:
    from .models.patterns import split_mixer_list
    from .training.executor import RunsFailed, parse_cluster_options
    from .training.experiment import load_experiment, skip_reason
    from .training.files import DiskFull, FolderNotWritable
    from .training.locks import LockHeld
    from .training.sweep import compare
    from .tasks import task_info

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
        if args.status:
            from .training.status import sweep_status

            print(sweep_status(experiment, out, args.results, jobs=args.jobs))
            return
        if args.verify is not None:
            from .training.verify import verify

            if not args.results:
                raise ValueError("--verify K needs --results DIR (the recorded rows it reruns)")
            verify(experiment, args.results, args.verify, args.out or f"runs/{experiment.name}-verify",
                   jobs=args.jobs, commit=args.commit, dry_run=args.dry_run)
            return
        options = parse_cluster_options(args.cluster_options) if args.cluster_options else None
        family = _sibling_experiments(args.config) if args.dry_run and experiment.claims else None
        rows = compare(experiment, out, jobs=args.jobs, dry_run=args.dry_run, results_dir=args.results,
                       commit=args.commit, executor=args.executor, cluster_options=options, family=family)
    except (ValueError, FileNotFoundError) as error:  # bad settings, or a task's data not found
        raise SystemExit(f"tokenmix compare: {error}") from None
    except (LockHeld, DiskFull, FolderNotWritable, RunsFailed) as error:  # another sweep, the disk, the cluster
        raise SystemExit(f"tokenmix compare: {error}") from None
    if rows:
        print(f"\nwrote {out}/config.toml, results.csv, report.md and the plots\n")
        with open(f"{out}/report.md") as report:
            print(report.read())


def _comma_list(text: str, kind: type, option: str) -> list:
    try:
        return [kind(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise SystemExit(f"tokenmix speed: {option}: expected comma-separated {kind.__name__}s, got {text!r}") from None


def cmd_speed(args: argparse.Namespace) -> None:
    from .speed import SpeedSettings, relative_tables, run_speed, write_outputs

    names = list_mixers() if args.mixers == "all" else [n.strip() for n in args.mixers.split(",") if n.strip()]
    try:
        settings = SpeedSettings(
            mixers=names,
            lengths=_comma_list(args.lengths, int, "--lengths"), dim=args.dim, heads=args.heads, batch=args.batch,
            causal=args.causal, passes=["fwd", "fwdbwd"] if args.passes == "both" else [args.passes],
            value_ranges=_comma_list(args.value_range, float, "--value-range"), device=args.device,
            dtype=args.dtype, repeats=args.repeats, warmup=args.warmup, case_timeout=args.case_timeout,
            isolate=args.isolate, mem_limit_mb=args.mem_limit_mb, threads=args.threads, seed=args.seed,
            window=args.window)
    except ValueError as error:
        raise SystemExit(f"tokenmix speed: {error}") from None
    records = run_speed(settings)
    paths = write_outputs(records, settings, args.out)
    print(f"\nwrote {', '.join(str(p) for p in paths)}\n")
    print("\n".join(relative_tables(records)))


def cmd_count(args: argparse.Namespace) -> None:
    from .counting import count_paper_000, count_table, format_counts, format_paper_000, write_counts_csv

    if args.mode == "paper-000":
        given = [flag for flag, value in (("--mixers", args.mixers), ("--max-len", args.max_len),
                                          ("--heads", args.heads), ("--step-t", args.step_t)) if value is not None]
        if given:
            raise SystemExit(f"tokenmix count: {', '.join(given)} do(es) not apply to --mode paper-000 (softmax, "
                             "linear and relation, one head, bidirectional, no max_len)")
        inner_dim = args.dim if args.inner_dim is None else args.inner_dim
        length = 128 if args.length is None else args.length
        try:
            results = count_paper_000(dim=args.dim, inner_dim=inner_dim, length=length,
                                      measure_flops=not args.no_flops)
        except ValueError as error:
            raise SystemExit(f"tokenmix count: {error}") from None
        print(f"tokenmix count --mode paper-000: Yamada et al. (2022) §3.1, one head, m={args.dim}, d={inner_dim}, "
              f"N={length}, bidirectional, no output projection, no biases, linear without its denominator "
              "(eq. 5); one sequence, forward pass\n")
        print(format_counts(results))
        print("\n" + format_paper_000(results, inner_dim))
    else:
        if args.inner_dim is not None:
            raise SystemExit("tokenmix count: --inner-dim is for --mode paper-000")
        mixers = args.mixers or "all"
        max_len = 128 if args.max_len is None else args.max_len
        heads = 1 if args.heads is None else args.heads
        names = list_mixers() if mixers == "all" else [n.strip() for n in mixers.split(",") if n.strip()]
        causal = {"auto": None, "causal": True, "bidir": False}[args.mode]
        skipped = []
        try:
            if causal is not None:
                can = [n for n in names if (mixer_info(n).causal if causal else mixer_info(n).bidirectional)]
                skipped = [n for n in names if n not in can]
                names = can
            results = count_table(names, dim=args.dim, max_len=max_len, heads=heads, length=args.length,
                                  step_t=args.step_t, causal=causal, measure_flops=not args.no_flops)
        except ValueError as error:
            raise SystemExit(f"tokenmix count: {error}") from None
        print(f"tokenmix count: d={args.dim}, max_len={max_len}, heads={heads} (multi-head mixers), "
              f"l={args.length or max_len}; one sequence, forward pass; step = one new token at t\n")
        print(format_counts(results))
        if skipped:
            print(f"\nskipped (no {args.mode} mode): {', '.join(skipped)}")
    if args.csv:
        write_counts_csv(results, args.csv)
        print(f"\nwrote {args.csv}")


def _add_steptime_parser(sub: argparse._SubParsersAction) -> None:
    st = sub.add_parser("steptime", formatter_class=_Formatter,
                        help="controlled timing of one training step per mixer entry of an experiment (interleaved "
                        "rounds, one process, fixed threads); --lengths: against sequence length, with log-log slopes")
    st.add_argument("--config", help="experiment file (TOML, see experiments/); default: the embedded default")
    st.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a setting of the file, dotted key and TOML value (repeatable)")
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
    st.add_argument("--no-memory", action="store_true", help="with --lengths: skip the peak memory of each (label, "
                    "N), measured in a fresh process each")
    st.add_argument("--rotate", action="store_true", help="start each round one label later (A B C, B C A, ...)")
    st.add_argument("--max-seconds", type=float, help="time cap: start no round that would likely end past it")
    st.add_argument("--out", help="CSV file (default: docs/reproduction/<name>-steptime.csv, with --lengths "
                    "<name>-scaling.csv)")


def _steptime_lengths(args: argparse.Namespace, experiment) -> list[int] | None:
    """The lengths of a scaling run: ``--lengths``, or with ``--scaling`` the file's ``[report] harness_lengths``;
    None: time the experiment's own batch."""
    if args.lengths and args.scaling:
        raise ValueError("--lengths and --scaling: give one (--scaling takes the file's [report] harness_lengths)")
    if args.scaling:
        if not experiment.report.get("harness_lengths"):
            raise ValueError(f"--scaling: {experiment.name} sets no [report] harness_lengths; give --lengths")
        return list(experiment.report["harness_lengths"])
    return [int(n) for n in args.lengths.split(",") if n.strip()] if args.lengths else None


def cmd_steptime(args: argparse.Namespace) -> None:
    """Time training steps (see :mod:`tokenmix.steptime`), write the CSV and print the summary tables."""
    import os

    from .steptime import default_path, scaling_table, step_table, time_scaling, time_training_steps, write_csv
    from .training.experiment import load_experiment, make_task

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
        lengths = _steptime_lengths(args, experiment)
        if lengths:
            rows = time_scaling(experiment, lengths, batch=args.batch, memory=not args.no_memory, task=task, **common)
        else:
            rows = time_training_steps(experiment, task=task, **common)
    except (ValueError, FileNotFoundError) as error:
        raise SystemExit(f"tokenmix steptime: {error}") from None
    path = write_csv(rows, args.out or default_path(experiment, "scaling" if lengths else "experiment"))
    print(f"\nwrote {path}: {len(rows)} rows, {max(int(r['round']) for r in rows)} rounds, {args.threads} thread(s)\n")
    _print_table(*(scaling_table(rows) if lengths else step_table(rows, len(task.splits["train"]))))


def _add_report_parser(sub: argparse._SubParsersAction) -> None:
    rp = sub.add_parser("report", formatter_class=_Formatter,
                        help="write the reproduction report: every experiment file with a [paper] table, its "
                        "measured tables and a verdict on each of its [[claims]] from the collected CSVs")
    rp.add_argument("--data", default="docs/reproduction", help="folder of the collected CSVs")
    rp.add_argument("--out", default="docs/reproduction.md", help="the document to write")
    rp.add_argument("--experiments", default="experiments", help="folder of the experiment files")
    rp.add_argument("--no-plots", action="store_true", help="do not draw the metric-vs-time plots")


def cmd_report(args: argparse.Namespace) -> None:
    from .report.document import write_report

    try:
        write_report(args.data, args.out, args.experiments, plots=not args.no_plots)
    except (ValueError, ModuleNotFoundError) as error:
        raise SystemExit(f"tokenmix report: {error}") from None


def cmd_data(args: argparse.Namespace) -> None:
    from .tasks.datacheck import print_data_status

    try:
        missing = print_data_status(args.tasks, fetch=not args.no_fetch)
    except ValueError as error:  # an unknown task name
        raise SystemExit(f"tokenmix data: {error}") from None
    if missing:
        raise SystemExit(f"tokenmix data: the data of {missing} task(s) are missing")


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    commands = {"list": cmd_list, "demo": cmd_demo, "train": cmd_train, "compare": cmd_compare, "speed": cmd_speed,
                "count": cmd_count, "steptime": cmd_steptime, "report": cmd_report, "data": cmd_data}
    commands[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
