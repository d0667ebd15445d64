"""``tokenmix speed``: time and peak memory of mixers against sequence length (:mod:`tokenmix.speed`)."""

from __future__ import annotations

import argparse

from ..registry import list_mixers

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser("speed", help="time and peak memory of mixers against sequence length and input value "
                        "range (Gan et al. (2023) §4), relative to softmax; writes speed.csv, speed.md and plots")
    sp.add_argument("--mixers", default="all",
                    help="comma-separated names, or 'all' (default); softmax is always added as the reference")
    sp.add_argument("--lengths", default="256,1024,4096,16384",
                    help="comma-separated sequence lengths (default 256,1024,4096,16384)")
    sp.add_argument("--dim", type=int, default=64, help="model width (head dim = dim / heads; default 64)")
    sp.add_argument("--heads", type=int, help="heads of the multi-head mixers (default 1; 4 with --functions)")
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
    sp.add_argument("--functions", action="store_true",
                    help="time the functional core's chunked forms (tokenmix.ops: linear attention, Based, GLA, "
                    "retention, the delta rules) against transformers' gated delta rule instead, forward + backward, "
                    "interleaved in one process, each against the GEMM floor (uses --lengths, --heads (default 4), "
                    "--dim as the head width (default 64), --repeats, --threads); prints a table")


def _comma_list(text: str, kind: type, option: str) -> list:
    try:
        return [kind(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise SystemExit(f"tokenmix speed: {option}: expected comma-separated {kind.__name__}s, got {text!r}") from None


def run(args: argparse.Namespace) -> None:
    if args.functions:
        return _functions(args)
    from ..speed import SpeedSettings, relative_tables, run_speed, write_outputs

    names = list_mixers() if args.mixers == "all" else [n.strip() for n in args.mixers.split(",") if n.strip()]
    try:
        settings = SpeedSettings(
            mixers=names,
            lengths=_comma_list(args.lengths, int, "--lengths"), dim=args.dim, heads=args.heads or 1, batch=args.batch,
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


def _functions(args: argparse.Namespace) -> None:
    """``--functions``: the chunked forms against the peers (:mod:`tokenmix.speed.functions`)."""
    import torch

    from ..speed.functions import chunked_forms, gemm_rate

    lengths = _comma_list(args.lengths, int, "--lengths")
    heads = args.heads or 4
    threads = args.threads or torch.get_num_threads()
    rate = gemm_rate(threads)
    print(f"{threads} thread(s); float32 GEMM 2048^3: {rate / 1e9:.1f} GFLOP/s")
    print("\n".join(chunked_forms(lengths, heads, args.dim, args.repeats, rate)))
