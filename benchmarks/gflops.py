"""How far each linear-complexity mixer is from this machine's GEMM rate: achieved GFLOP/s of its forward pass.

    python benchmarks/gflops.py [--length 16384] [--dim 256] [--heads 4] [--threads 2] [--repeats 3]

For every mixer whose operation count grows linearly in N (the test of ``projection_overhead.py``), the
forward pass at batch 1 is timed under ``no_grad`` (median of ``--repeats`` after a warm-up) in the same
process as a reference fp32 GEMM of a comparable size, at the same thread count. The mixer's floating-point
operations are its ``tokenmix count`` (multiplications + additions + divisions + exponentials of
``count_ops(N)``), so ``GFLOP/s = count / time``; the last column is that rate over the GEMM rate: 1 would
mean the mechanism runs at the speed of one large matrix product, which no mechanism made of smaller
products, reductions and elementwise maps can reach; what it shows is where the time goes.
"""

from __future__ import annotations

import argparse
import os
import platform

import torch
from projection_overhead import build, grows_linearly  # same folder: run as python benchmarks/gflops.py

import tokenmix
from tokenmix.counting import count_ops
from tokenmix.ops.spatial import square_grid
from tokenmix.timing import measure


def gemm_gflops(size: int, repeats: int) -> float:
    """fp32 GEMM rate of (size x size) @ (size x size), in GFLOP/s (2 size^3 operations)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    return 2 * size**3 / measure(lambda: a @ b, repeats=repeats, warmup=1, threads=None).median / 1e9


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=16384, help="sequence length N")
    parser.add_argument("--dim", type=int, default=256, help="model width")
    parser.add_argument("--heads", type=int, default=4, help="heads of the multi-head mixers")
    parser.add_argument("--window", type=int, default=128, help="taps of the sliding-window mixers (Extractors)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes (median)")
    parser.add_argument("--gemm-size", type=int, default=2048, help="side of the reference GEMM")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    gemm = gemm_gflops(args.gemm_size, args.repeats)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{args.threads} threads, float32; N = {args.length}, dim {args.dim}, {args.heads} heads, forward "
          f"under no_grad, median of {args.repeats}; fp32 GEMM {args.gemm_size}^3: {gemm:.1f} GFLOP/s\n")
    print("| mixer | GFLOP (tokenmix count) | time ms | GFLOP/s | / GEMM rate |")
    print("|---|---|---|---|---|")
    for name in tokenmix.list_mixers():
        if not grows_linearly(name, args.dim, args.length, args.window):
            continue
        info = tokenmix.mixer_info(name)
        mixer = build(name, args.dim, args.heads, args.length, args.window, causal=not info.bidirectional)
        n = square_grid(args.length) if info.spatial else None
        length = n[0] * n[1] if n else args.length
        count = count_ops(mixer, length, hw=n)
        flops = count.mults + count.adds + count.divs + count.exps
        x = torch.randn(1, length, args.dim)
        with torch.no_grad():
            seconds = measure(lambda: mixer(x, hw=n) if n else mixer(x), repeats=args.repeats, warmup=1,
                              threads=None).median
        rate = flops / seconds / 1e9
        print(f"| {name} | {flops / 1e9:.2f} | {1e3 * seconds:,.0f} | {rate:.1f} | {rate / gemm:.2f} |", flush=True)


if __name__ == "__main__":
    main()
