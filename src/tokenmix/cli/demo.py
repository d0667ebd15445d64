"""``tokenmix demo``: every registered mixer, forward and backward, on one random batch."""

from __future__ import annotations

import argparse

import torch

from .common import HelpFormatter, print_table

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="build every mixer and run a forward/backward pass on random data",
                          formatter_class=HelpFormatter)
    demo.add_argument("--dim", type=int, default=64, help="model width")
    demo.add_argument("--heads", type=int, default=4, help="heads of the multi-head mixers")
    demo.add_argument("--length", type=int, default=512, help="sequence length N (spatial mixers: the most "
                      "square grid of N cells)")
    demo.add_argument("--batch", type=int, default=2, help="inputs per pass (the last one half padded)")
    demo.add_argument("--repeats", type=int, default=3, help="timed passes after one warm-up; the median is shown")
    demo.add_argument("--seed", type=int, default=0, help="seed of the random inputs and weights")


def run(args: argparse.Namespace) -> None:
    """Every registered mixer, bidirectional and causal where supported, on the same random batch
    (:mod:`tokenmix.speed.demo`)."""
    from ..speed.demo import DEMO_HEADERS, demo_rows

    print(f"tokenmix demo: batch {args.batch}, length {args.length}, dim {args.dim}, heads {args.heads} "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads)\n")
    print_table(DEMO_HEADERS, demo_rows(dim=args.dim, heads=args.heads, length=args.length, batch=args.batch,
                                         repeats=args.repeats, seed=args.seed))
