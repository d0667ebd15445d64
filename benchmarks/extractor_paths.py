"""The Extractors' FFT path vs their direct path: forward+backward time and agreement, in one run.

    python benchmarks/extractor_paths.py --length 4096 --dim 128 --max-len 4096

For each Extractor (same weights, same input): the median time of forward+backward for ``path="direct"``
and ``path="fft"``, the speed-up, and the relative error of the FFT output and input gradient with
respect to the direct ones (max |difference| / max |direct|).
"""

from __future__ import annotations

import argparse

import torch

import tokenmix
from tokenmix.timing import measure

EXTRACTORS = ["extractor_me", "extractor_we", "extractor_he", "extractor_she"]


def fwd_bwd(mixer: torch.nn.Module, x: torch.Tensor, repeats: int) -> tuple[float, torch.Tensor, torch.Tensor]:
    """The median seconds of ``repeats`` forward+backward passes (no warm-up), the last output and gradient."""
    last = []

    def step() -> None:
        x.grad = None
        y = mixer(x)
        y.square().sum().backward()
        last[:] = [y.detach()]

    seconds = measure(step, repeats=repeats, threads=None).median
    return seconds, last[0], x.grad.clone()


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--max-len", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mixers", default=",".join(EXTRACTORS))
    args = parser.parse_args()
    print(f"N={args.length}, dim={args.dim}, max_len={args.max_len}, batch={args.batch}, float32, "
          f"median of {args.repeats}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'mixer':14s} {'direct s':>9s} {'fft s':>8s} {'speed-up':>9s} {'rel err y':>10s} {'rel err dx':>11s}")
    for name in args.mixers.split(","):
        torch.manual_seed(0)
        mixer = tokenmix.create_mixer(name, args.dim, causal=True, max_len=args.max_len)
        x = torch.randn(args.batch, args.length, args.dim, requires_grad=True)
        results = {}
        for path in ("direct", "fft"):
            mixer.path = path
            results[path] = fwd_bwd(mixer, x, args.repeats)
        (t_direct, y_direct, g_direct), (t_fft, y_fft, g_fft) = results["direct"], results["fft"]
        print(f"{name:14s} {t_direct:9.3f} {t_fft:8.3f} {t_direct / t_fft:8.1f}x "
              f"{relative_error(y_fft, y_direct):10.1e} {relative_error(g_fft, g_direct):11.1e}")


if __name__ == "__main__":
    main()
