"""``tokenmix count``: parameters and operation counts per mixer (:mod:`tokenmix.counting`)."""

from __future__ import annotations

import argparse

from ..models.patterns import LayerMixer, parse_layer_mixer, split_mixer_list
from ..registry import list_mixers, mixer_info

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    cn = sub.add_parser("count", help="trainable parameters and multiplications/additions/divisions/exponentiations "
                        "per mixer, for training over l tokens and one inference step at t (Chen (2023) Tables 3-7), "
                        "cross-checked with torch's FlopCounterMode; --mode paper-000 for Yamada et al. (2022) "
                        "§4.2's counts")
    cn.add_argument("--mixers", help="comma-separated names with their options as in compare "
                    "(baseconv:kernel_size=none), or 'all' (default)")
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


def _entries(mixers: str) -> list[LayerMixer]:
    """The mechanisms to count: every registered one, or the list's entries with their inline options."""
    if mixers == "all":
        return [LayerMixer(name) for name in list_mixers()]
    return [parse_layer_mixer(entry, "tokenmix count --mixers") for entry in split_mixer_list(mixers, "--mixers")]


def run(args: argparse.Namespace) -> None:
    from ..counting import count_paper_000, count_table, format_counts, format_paper_000, write_counts_csv

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
        causal = {"auto": None, "causal": True, "bidir": False}[args.mode]
        skipped = []
        try:
            entries = _entries(mixers)
            if causal is not None:
                mode = "causal" if causal else "bidirectional"
                can = [e for e in entries if getattr(mixer_info(e.name), mode)]
                skipped = [e.label for e in entries if e not in can]
                entries = can
            results = count_table(entries, dim=args.dim, max_len=max_len, heads=heads, length=args.length,
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
