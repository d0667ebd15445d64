"""How fast Pathfinder pictures are generated, per difficulty (the issue's target: 10,000 in under two minutes).

    python benchmarks/pathfinder_generation.py --count 10000 --jobs 2

Generates ``count`` pictures at curve lengths 6, 9 and 14 (``--jobs`` processes, each its own seeded share;
nothing is cached) and prints the wall time and pictures per second of each. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor

from tokenmix.data.pathfinder import PathfinderConfig, generate


def _share(args: tuple[int, int, int]) -> int:
    count, seed, length = args
    images, _ = generate(count, seed, PathfinderConfig(length=length), progress=False)
    return len(images)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    share = 2 * (args.count // (2 * args.jobs))
    print(f"{share * args.jobs} pictures per difficulty, {args.jobs} process(es)")
    for length in (6, 9, 14):
        start = time.perf_counter()
        with ProcessPoolExecutor(args.jobs) as pool:
            made = sum(pool.map(_share, [(share, seed, length) for seed in range(args.jobs)]))
        seconds = time.perf_counter() - start
        print(f"length {length:2d}: {made} pictures in {seconds:6.1f} s ({made / seconds:,.0f} per s)")


if __name__ == "__main__":
    main()
