"""The ``tokenmix`` command line."""

from __future__ import annotations

import argparse
import sys
import time

import torch

from .ops.spatial import square_grid
from .registry import create_mixer, list_mixers, mixer_info


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tokenmix", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the registered mixers and tasks, and what they can do")
    demo = sub.add_parser("demo", help="build every mixer and run a forward/backward pass on random data")
    demo.add_argument("--dim", type=int, default=64)
    demo.add_argument("--heads", type=int, default=4)
    demo.add_argument("--length", type=int, default=512)
    demo.add_argument("--batch", type=int, default=2)
    demo.add_argument("--repeats", type=int, default=3)
    demo.add_argument("--seed", type=int, default=0)
    tr = sub.add_parser("train", help="train one mixer on one task")
    tr.add_argument("--task", required=True)
    tr.add_argument("--mixer", required=True)
    tr.add_argument("--seed", type=int, default=0)
    length = tr.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int)
    length.add_argument("--max-steps", type=int)
    tr.add_argument("--out")
    tr.add_argument("--resume", action="store_true")
    tr.add_argument("--preset", default="quick", choices=["quick", "paper"])
    tr.add_argument("--dim", type=int, default=32)
    tr.add_argument("--depth", type=int, default=2)
    tr.add_argument("--heads", type=int, default=2)
    tr.add_argument("--batch-size", type=int, default=32)
    tr.add_argument("--lr", type=float, default=3e-3)
    tr.add_argument("--eval-every", type=int)
    cp = sub.add_parser("compare", help="train mixers side by side and write a leaderboard "
                        "(no arguments: the embedded default, a few minutes on 2 CPU cores)")
    cp.add_argument("--task")
    cp.add_argument("--mixers", help="comma-separated names, or 'all'")
    cp.add_argument("--seeds", help="comma-separated seeds, e.g. 0,1,2")
    cp.add_argument("--out", default="runs/compare")
    cp.add_argument("--preset", choices=["quick", "paper"])
    cp.add_argument("--max-steps", type=int)
    _add_speed_parser(sub)
    _add_count_parser(sub)
    return parser.parse_args(argv)


def _add_count_parser(sub: argparse._SubParsersAction) -> None:
    cn = sub.add_parser("count", help="trainable parameters and multiplications/additions/divisions/exponentiations "
                        "per mixer, for training over l tokens and one inference step at t (004 Tables 3-7), "
                        "cross-checked with torch's FlopCounterMode")
    cn.add_argument("--mixers", default="all", help="comma-separated names, or 'all' (default)")
    cn.add_argument("--dim", type=int, default=128, help="model width d (default 128, as 004 Table 7)")
    cn.add_argument("--max-len", type=int, default=128, help="max_len the mixers are built with: the Extractors' "
                    "taps l (default 128, as 004 Table 7)")
    cn.add_argument("--heads", type=int, default=1, help="heads of the multi-head mixers (default 1)")
    cn.add_argument("--length", type=int, help="sequence length l counted (default: max-len)")
    cn.add_argument("--step-t", type=int, help="length t of the counted inference step (default: the length)")
    cn.add_argument("--mode", default="auto", choices=["auto", "causal", "bidir"],
                    help="auto (default): causal where the mixer can be (004's language-model setting)")
    cn.add_argument("--no-flops", action="store_true", help="skip the FlopCounterMode cross-check")
    cn.add_argument("--csv", help="also write the table to this CSV file")


def _add_speed_parser(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser("speed", help="time and peak memory of mixers against sequence length and input value "
                        "range (seed 001 §4), relative to softmax; writes speed.csv, speed.md and plots")
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
    sp.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    sp.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    sp.add_argument("--repeats", type=int, default=5, help="timed passes, median reported (default 5)")
    sp.add_argument("--warmup", type=int, default=1, help="untimed passes after the cold memory pass (default 1)")
    sp.add_argument("--case-timeout", type=float, default=120.0,
                    help="seconds per case, isolated start-up included (default 120); past it: 'timeout'")
    sp.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                    help="each case in a fresh subprocess (default: on for cpu, off for cuda)")
    sp.add_argument("--mem-limit-mb", type=float,
                    help="isolated CPU cases: address space a case may add after torch is imported (RLIMIT_AS)")
    sp.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's default)")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--window", type=int, help="max_len (taps) of sliding-window mixers such as the Extractors "
                    "(default: each case's length)")
    sp.add_argument("--out", default="runs/speed", help="output folder (default runs/speed)")


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


def cmd_list() -> None:
    rows = []
    for name in list_mixers():
        info = mixer_info(name)
        modes = "/".join(m for m, ok in (("bidir", info.bidirectional), ("causal", info.causal)) if ok)
        rows.append([name, info.complexity, modes, "yes" if info.padding else "no",
                     "yes" if info.spatial else "no", info.paper])
    _print_table(["mixer", "complexity", "modes", "padding", "spatial", "paper"], rows)
    from .tasks import list_tasks, task_info  # tasks import optional data packages lazily

    print()
    _print_table(["task", "kind", "metric", "source"],
                 [[n, task_info(n).kind, task_info(n).metric, task_info(n).source] for n in list_tasks()])


def _time_fwd_bwd(mixer: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor, repeats: int) -> tuple[float, bool]:
    spatial = mixer.info.spatial
    times, finite = [], True
    for _ in range(repeats + 1):  # the first run warms up
        x.grad = None
        start = time.perf_counter()
        y = mixer(x, hw=square_grid(x.shape[1])) if spatial else mixer(x, mask)
        y.square().mean().backward()
        times.append(time.perf_counter() - start)
        finite = finite and bool(torch.isfinite(y).all()) and bool(torch.isfinite(x.grad).all())
    times = sorted(times[1:])
    return 1000 * times[len(times) // 2], finite


def cmd_demo(args: argparse.Namespace) -> None:
    """Every registered mixer, bidirectional and causal where supported, on the same random batch (spatial
    mixers see it as the most square grid of ``length`` cells, without the padding)."""
    torch.manual_seed(args.seed)
    n = args.length
    x = torch.randn(args.batch, n, args.dim, requires_grad=True)
    mask = torch.ones(args.batch, n, dtype=torch.bool)
    mask[-1, n // 2:] = False  # one half-padded row, to exercise the padding paths
    print(f"tokenmix demo: batch {args.batch}, length {n}, dim {args.dim}, heads {args.heads} "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads)\n")
    rows = []
    for name in list_mixers():
        info = mixer_info(name)
        for causal in (False, True):
            if not (info.causal if causal else info.bidirectional):
                continue
            heads = args.heads if info.multihead else 1
            mixer = create_mixer(name, args.dim, num_heads=heads, causal=causal, max_len=n)
            params = sum(p.numel() for p in mixer.parameters())
            ms, finite = _time_fwd_bwd(mixer, x, mask, args.repeats)
            rows.append([name, "causal" if causal else "bidir", info.complexity, f"{params:,}", f"{ms:.1f}",
                         "ok" if finite else "NOT FINITE"])
    _print_table(["mixer", "mode", "complexity", "params", "fwd+bwd ms", "status"], rows)


def cmd_train(args: argparse.Namespace) -> None:
    from .registry import mixer_info as info_of
    from .tasks import create_task
    from .train import TrainConfig, train

    task = create_task(args.task, preset=args.preset, seed=0)
    torch.manual_seed(args.seed)
    heads = args.heads if info_of(args.mixer).multihead else None
    model = task.build_model(args.mixer, dim=args.dim, depth=args.depth, num_heads=heads)
    config = TrainConfig(max_steps=args.max_steps, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                         eval_every=args.eval_every, seed=args.seed, out_dir=args.out, resume=args.resume)
    result = train(task, model, config)
    print(f"{args.task} / {args.mixer} / seed {args.seed}: best val {result.metric_name} {result.best_metric:.4f} "
          f"at epoch {result.best_epoch:.2f}; test {result.test_metric}; {result.time_per_epoch_s:.2f} s/epoch; "
          f"{result.tokens_per_s:.0f} tokens/s")


def cmd_compare(args: argparse.Namespace) -> None:
    from dataclasses import replace

    from .compare import DEFAULT, PRESETS, compare

    settings = DEFAULT
    if args.task:
        settings = replace(settings, task=args.task)
    if args.preset:
        settings = replace(settings, preset=args.preset, **PRESETS[args.preset])
    if args.mixers:
        names = list_mixers() if args.mixers == "all" else args.mixers.split(",")
        settings = replace(settings, mixers=[n for n in names if not n.startswith("_")])
    if args.seeds:
        settings = replace(settings, seeds=[int(s) for s in args.seeds.split(",")])
    if args.max_steps:
        settings = replace(settings, max_steps=args.max_steps, eval_every=min(settings.eval_every, args.max_steps))
    compare(settings, args.out)
    print(f"\nwrote {args.out}/results.csv, report.md, metric_vs_time.png, metric_vs_epoch_time.png\n")
    with open(f"{args.out}/report.md") as report:
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
            mixers=[n for n in names if not (args.mixers == "all" and n.startswith("_"))],
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
    from .counting import count_table, format_counts, write_counts_csv

    names = list_mixers() if args.mixers == "all" else [n.strip() for n in args.mixers.split(",") if n.strip()]
    if args.mixers == "all":
        names = [n for n in names if not n.startswith("_")]
    causal = {"auto": None, "causal": True, "bidir": False}[args.mode]
    skipped = []
    try:
        if causal is not None:
            can = [n for n in names if (mixer_info(n).causal if causal else mixer_info(n).bidirectional)]
            skipped = [n for n in names if n not in can]
            names = can
        results = count_table(names, dim=args.dim, max_len=args.max_len, heads=args.heads, length=args.length,
                              step_t=args.step_t, causal=causal, measure_flops=not args.no_flops)
    except ValueError as error:
        raise SystemExit(f"tokenmix count: {error}") from None
    print(f"tokenmix count: d={args.dim}, max_len={args.max_len}, heads={args.heads} (multi-head mixers), "
          f"l={args.length or args.max_len}; one sequence, forward pass; step = one new token at t\n")
    print(format_counts(results))
    if skipped:
        print(f"\nskipped (no {args.mode} mode): {', '.join(skipped)}")
    if args.csv:
        write_counts_csv(results, args.csv)
        print(f"\nwrote {args.csv}")


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    commands = {"list": lambda a: cmd_list(), "demo": cmd_demo, "train": cmd_train, "compare": cmd_compare,
                "speed": cmd_speed, "count": cmd_count}
    commands[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
