"""How much subnormal floats slow a mechanism's training step on a CPU, and how much of it flushing them removes.

x86 CPUs compute with subnormal floats (below 1.18e-38 in float32) in microcode, tens of times slower than with
normal ones, unless the thread flushes them to zero (``torch.set_flush_denormal(True)``: FTZ/DAZ). Performer's
positive random features are ``exp(w^T x - |x|^2 / 2)`` shifted by their max (Choromanski et al. 2021, Lemma 1):
once the inputs grow in training, the exponents of one row span more than 87 and its smallest features, and
their products in the attention, are subnormal. The recall sweep saw it in its wall times: Performer's
128-token runs at rates 0.003 and 0.01 took 4,850 and 5,508 s where those at 0.0003 and 0.001 took 682 and
856 s and every other mechanism 150-850 s.

This times one forward and backward pass of each mixer on inputs drawn at growing scales (a stand-in for the
activations of a trained model), with subnormals kept and flushed, in alternating rounds of one process, and
prints the ratio and the share of Performer's features that are subnormal. Flushing changes results wherever a
subnormal occurs, so tokenmix leaves it to the user; the pinned numerics of ``tokenmix compare`` keep them.

    python benchmarks/denormals.py [--mixers performer,linear,softmax] [--scales 1,4,8,16] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

SWEEP_OPTIONS = {"kerformer": {"se_k": False}}  # as the recall sweep runs it (SE-K's weights grow with N^2)


def _step(mixer, x) -> float:
    start = time.perf_counter()
    y = mixer(x)
    y.square().mean().backward()
    return time.perf_counter() - start


def _subnormal_share(mixer, x) -> float | None:
    """Share of Performer's key features (before its normalisation) that are subnormal, or None for others."""
    import torch

    if not hasattr(mixer, "nb_features"):
        return None
    with torch.no_grad():
        q, k, _ = mixer.qkv_heads(x)
        _, phi_k, _ = mixer._features(q, k, None)
    tiny = torch.finfo(phi_k.dtype).tiny
    return float(((phi_k != 0) & (phi_k.abs() < tiny)).float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mixers", default="performer,linear,softmax,gla,mamba2", help="causal mixers, or 'all'")
    parser.add_argument("--scales", default="1,4,8,16", help="standard deviations of the input")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    import tokenmix

    torch.set_num_threads(args.threads)
    print(f"{args.batch} x {args.length} tokens, width {args.dim}, one head, causal, {args.threads} thread(s); "
          f"median of {args.rounds} alternating rounds, forward + backward")
    print(f"{'mixer':<15} {'scale':>5} {'kept (ms)':>10} {'flushed (ms)':>13} {'ratio':>6} {'subnormal features':>19}")
    names = ([m for m in tokenmix.list_mixers() if tokenmix.mixer_info(m).causal and m != "mlp"]
             if args.mixers == "all" else args.mixers.split(","))
    for name in names:
        torch.manual_seed(0)
        mixer = tokenmix.create_mixer(name, args.dim, num_heads=1, causal=True, max_len=args.length,
                                      **SWEEP_OPTIONS.get(name, {}))
        for scale in (float(s) for s in args.scales.split(",")):
            x = (torch.randn(args.batch, args.length, args.dim, generator=torch.Generator().manual_seed(1))
                 * scale).requires_grad_()
            times: dict[bool, list[float]] = {False: [], True: []}
            for flush in (False, True):  # warm-up
                torch.set_flush_denormal(flush)
                _step(mixer, x)
            for _ in range(args.rounds):
                for flush in (False, True):
                    torch.set_flush_denormal(flush)
                    times[flush].append(_step(mixer, x))
            torch.set_flush_denormal(False)
            kept, flushed = (statistics.median(times[f]) * 1e3 for f in (False, True))
            share = _subnormal_share(mixer, x.detach())
            print(f"{name:<15} {scale:>5g} {kept:>10.1f} {flushed:>13.1f} {kept / flushed:>6.2f} "
                  f"{'-' if share is None else f'{share:.2%}':>19}")


if __name__ == "__main__":
    main()
