"""Each mixer's time relative to its own projections alone (performance target 5 of issue 7).

    python benchmarks/projection_overhead.py --length 4096 --dim 64 --batch 1

"Projections" are the mixer's own ``nn.Linear`` layers (for the attention family W_Q, W_K, W_V and W_out;
for the Extractors W_adj, W_out and the HE's W_in_ext; for Average Attention its FFN and gates), each run
forward+backward alone on an input of the shape it really receives inside the mixer (recorded with a
forward hook): the GEMMs any implementation of the mechanism must do. The ratio mixer / projections is
what the token mixing costs on top; the target is at most 2x. Mixers with no ``nn.Linear`` (the ME, the
Contextualizer) have no such floor and are reported as n/a.

The mixers reported are those whose operation count (``tokenmix count``) grows linearly in N: the count
at 2N over the count at N is below 2.2 (the Extractors with a fixed window of ``--window`` taps).
Times are medians of ``--repeats`` after one warm-up, in one process, mixer and projections interleaved.
"""

from __future__ import annotations

import argparse
import platform
from typing import Callable

import torch
import torch.nn as nn

import tokenmix
from tokenmix.counting import count_ops
from tokenmix.ops.spatial import square_grid
from tokenmix.timing import measure


def build(name: str, dim: int, heads: int, length: int, window: int, causal: bool) -> nn.Module:
    info = tokenmix.mixer_info(name)
    supported = info.causal if causal else info.bidirectional
    causal = causal if supported else not causal  # causal-only (bidirectional-only) mixers run as they can
    max_len = window if info.sliding_window else (2 * length if info.needs_max_len else None)
    return tokenmix.create_mixer(name, dim, num_heads=heads if info.multihead else 1, causal=causal,
                                 max_len=max_len)


def grows_linearly(name: str, dim: int, length: int, window: int) -> bool:
    """The operation count at 2N is below 2.2x the count at N."""
    info = tokenmix.mixer_info(name)
    mixer = build(name, dim, 1, 2 * length, window, causal=not info.bidirectional)

    def count(n: int) -> int:
        return count_ops(mixer, n, hw=square_grid(n) if info.spatial else None).total

    return count(2 * length) < 2.2 * count(length)


def fwd_bwd_time(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, repeats: int) -> float:
    """The median seconds of ``repeats`` forward+backward passes of ``fn`` on ``x`` after one warm-up."""
    def step() -> None:
        x.grad = None
        fn(x).square().mean().backward()

    return measure(step, repeats=repeats, warmup=1, threads=None).median


def projection_inputs(mixer: nn.Module, run, x: torch.Tensor) -> list[tuple[nn.Linear, torch.Size]]:
    """Each ``nn.Linear`` of the mixer with the shape of the input it receives in one forward pass."""
    seen: list[tuple[nn.Linear, torch.Size]] = []
    hooks = [m.register_forward_hook(lambda m, args, out: seen.append((m, args[0].shape)))
             for m in mixer.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        run(x)
    for hook in hooks:
        hook.remove()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default="all")
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--window", type=int, default=128, help="taps of the Extractors (their max_len)")
    parser.add_argument("--causal", action="store_true", help="causal mode where the mixer has one")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    names = tokenmix.list_mixers() if args.mixers == "all" else args.mixers.split(",")
    names = [n for n in names if not n.startswith("_") and grows_linearly(n, args.dim, args.length, args.window)]
    print(f"N={args.length}, dim={args.dim}, heads={args.heads}, batch={args.batch}, float32, forward+backward, "
          f"median of {args.repeats}; {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    print(f"{'mixer':16s} {'mode':7s} {'mixer ms':>9s} {'proj ms':>8s} {'ratio':>6s}  projections")
    for name in names:
        torch.manual_seed(0)
        mixer = build(name, args.dim, args.heads, args.length, args.window, args.causal)
        x = torch.rand(args.batch, args.length, args.dim).mul(4).sub(2).requires_grad_()
        hw = square_grid(args.length)
        run = (lambda t: mixer(t, hw=hw)) if mixer.info.spatial else mixer
        t_mixer = fwd_bwd_time(run, x, args.repeats)
        layers = projection_inputs(mixer, run, x)
        t_proj = 0.0
        for layer, shape in layers:
            t_proj += fwd_bwd_time(layer, torch.rand(shape).requires_grad_(), args.repeats)
        ratio = f"{t_mixer / t_proj:6.2f}" if layers else "   n/a"
        shapes = ", ".join(f"{tuple(shape)}@{m.in_features}->{m.out_features}" for m, shape in layers) or "none"
        mode = "causal" if mixer.causal else "bidir"
        print(f"{name:16s} {mode:7s} {1000 * t_mixer:9.2f} {1000 * t_proj:8.2f} {ratio}  {shapes}", flush=True)


if __name__ == "__main__":
    main()
