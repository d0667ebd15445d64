"""Peak memory of causal vs non-causal kernel attention (performance target 2 of issue 7).

    python benchmarks/causal_memory.py --mixers linear,performer,cosformer --length 16384 --dim 256

A causal linear-complexity mixer must not build an O(N d^2) tensor of prefix states: its peak memory should
stay within 1.5x of the same mixer run non-causally. Each case runs through ``tokenmix.speed`` (a fresh
subprocess per case on the CPU, peak RSS over the pass above the baseline just before it; CUDA:
``max_memory_allocated``), forward and forward+backward, one head, batch 1.
"""

from __future__ import annotations

import argparse

from tokenmix.speed import SpeedSettings, machine_lines, run_speed

TARGET = 1.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default="linear,performer,cosformer")
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    mixers = args.mixers.split(",")
    records = {}
    for causal in (False, True):
        settings = SpeedSettings(mixers=mixers, lengths=[args.length], dim=args.dim, causal=causal,
                                 passes=["fwd", "fwdbwd"], device=args.device, repeats=args.repeats, warmup=0,
                                 case_timeout=600.0)
        for r in run_speed(settings):
            records[(r.mixer, r.pass_name, r.causal)] = r
    print()
    print("\n".join(machine_lines(settings)))
    print(f"\nN={args.length}, dim={args.dim}, one head, batch 1, float32; memory: "
          f"{next(iter(records.values())).mem_method}\n")
    print("| mixer | pass | non-causal MB | causal MB | causal / non-causal | target ≤ 1.5× |")
    print("|---|---|---|---|---|---|")
    for name in mixers:
        for pass_name in ("fwd", "fwdbwd"):
            bidir, causal = records[(name, pass_name, False)], records[(name, pass_name, True)]
            if not (bidir.ok and causal.ok):
                print(f"| {name} | {pass_name} | {bidir.result.status_text} | {causal.result.status_text} | - | - |")
                continue
            ratio = causal.peak_mem_mb / bidir.peak_mem_mb
            print(f"| {name} | {pass_name} | {bidir.peak_mem_mb:,.1f} | {causal.peak_mem_mb:,.1f} | {ratio:.2f} | "
                  f"{'met' if ratio <= TARGET else 'MISSED'} |")


if __name__ == "__main__":
    main()
