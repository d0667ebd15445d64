"""The functional core's speed goals on a CPU, measured in one process (issue "after the seeds", goal 4):

1. every chunked form, forward + backward at 4 heads x 64, batch 1: its time at each length, the local slope
   ``log(t2 / t1) / log(N2 / N1)`` between consecutive lengths (1.0 is linear), and its time over the GEMM floor
   (the matrix products the chunked form must do, at the GEMM rate measured here); the forms and transformers'
   ``torch_chunk_gated_delta_rule`` (where transformers is installed) timed interleaved, call by call;
2. causal linear attention (the ``linear`` mixer, dim 256, 4 heads) against its own bidirectional pass;
3. a 2,000-token prompt inside ``tokenmix.decoding`` against the plain forward of the same model.

    python benchmarks/functional_core.py --lengths 4096,16384 --threads 2

Run it on a quiet machine (nothing else on the cores). Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

import tokenmix
from tokenmix.ops.delta_rule import chunk_delta_rule, chunk_gated_delta_rule
from tokenmix.ops.gla import chunk_gla, chunk_retention, chunk_simple_gla
from tokenmix.ops.linear_attn import chunk_linear_attn, fused_chunk_based


def gemm_rate(threads: int, n: int = 2048) -> float:
    """FLOP/s of an n^3 float32 matrix product, best of five."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_seconds(lambda: a @ b) for _ in range(5))
    return 2 * n ** 3 / best


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def forms(length: int, heads: int, d: int) -> dict[str, tuple]:
    """name -> (function of the inputs, inputs, chunk size C, key width K, value width V)."""
    g = torch.Generator().manual_seed(0)

    def t(*shape, fn=lambda x: x):
        return fn(torch.randn(*shape, generator=g)).requires_grad_()

    q, k, v = t(1, length, heads, d), t(1, length, heads, d), t(1, length, heads, d)
    qp, kp = t(1, length, heads, d, fn=lambda x: F.elu(x) + 1), t(1, length, heads, d, fn=lambda x: F.elu(x) + 1)
    qn, kn = t(1, length, heads, d, fn=lambda x: F.normalize(x, dim=-1)), t(1, length, heads, d,
                                                                                fn=lambda x: F.normalize(x, dim=-1))
    decay = t(1, length, heads, fn=lambda x: F.logsigmoid(x + 4))
    gk = t(1, length, heads, d, fn=lambda x: F.logsigmoid(x + 4) / 16)
    beta = t(1, length, heads, fn=torch.sigmoid)
    qb, kb = t(1, length, heads, 16), t(1, length, heads, 16)
    table = {
        "linear_attn": (lambda *a: chunk_linear_attn(*a, normalize=True), (qp, kp, v), 64, d, d + 1),
        "based (r = 16)": (fused_chunk_based, (qb, kb, v), 256, 1 + 16 + 256, d + 1),
        "simple_gla": (lambda *a: chunk_simple_gla(*a[:3], g=a[3]), (q, k, v, decay), 64, d, d),
        "retention": (chunk_retention, (q, k, v), 64, d, d),
        "gla": (chunk_gla, (q, k, v, gk), 16, d, d),
        "delta_rule": (chunk_delta_rule, (qn, kn, v, beta), 64, d, d),
        "gated_delta_rule": (chunk_gated_delta_rule, (qn, kn, v, decay, beta), 64, d, d),
    }
    try:
        from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule
        table["transformers gated_delta_rule"] = (torch_chunk_gated_delta_rule, (qn, kn, v, decay, beta), 64, d, d)
    except ImportError:
        pass
    return table


def floor_flops(length: int, heads: int, chunk: int, kdim: int, vdim: int) -> float:
    """The chunked form's matrix products, forward + backward (three times the forward's): per head, the
    in-chunk scores and their product with V (2 N C (K + V)), each chunk's state (2 N K V) and the queries
    against it (2 N K V)."""
    return 3 * heads * 2 * length * (chunk * (kdim + vdim) + 2 * kdim * vdim)


def fwd_bwd(fn, tensors) -> None:
    for x in tensors:
        x.grad = None
    fn(*tensors)[0].sum().backward()


def interleaved(calls: dict[str, callable], repeats: int) -> dict[str, float]:
    """Median seconds of each call, the calls taken in turn (one warm-up each)."""
    for call in calls.values():
        call()
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            times[name].append(_seconds(call))
    return {name: statistics.median(ts) for name, ts in times.items()}


def chunked_forms(lengths: list[int], heads: int, d: int, repeats: int, rate: float) -> None:
    results: dict[str, list[float]] = {}
    floors: dict[str, list[float]] = {}
    for length in lengths:
        table = forms(length, heads, d)
        times = interleaved({name: (lambda f=f, x=x: fwd_bwd(f, x)) for name, (f, x, *_) in table.items()}, repeats)
        for name, (_, _, c, kdim, vdim) in table.items():
            results.setdefault(name, []).append(times[name])
            floors.setdefault(name, []).append(floor_flops(length, heads, c, kdim, vdim) / rate)
    head = " ".join(f"{'N=' + str(n):>10}" for n in lengths)
    print(f"\n1. chunked forms, forward + backward, batch 1, {heads} heads x {d}: ms (time / GEMM floor)")
    print(f"{'form':<30} {head}   local slopes")
    for name, ts in results.items():
        cells = " ".join(f"{t * 1e3:>6.0f} ({t / f:>4.1f}x)" for t, f in zip(ts, floors[name]))
        slopes = [math.log(ts[i + 1] / ts[i]) / math.log(lengths[i + 1] / lengths[i]) for i in range(len(ts) - 1)]
        print(f"{name:<30} {cells}   {' '.join(f'{s:.2f}' for s in slopes)}")
    if "transformers gated_delta_rule" in results:
        ratios = [p / m for p, m in zip(results["transformers gated_delta_rule"], results["gated_delta_rule"])]
        print("gated delta rule, transformers / tokenmix: " + ", ".join(f"{r:.2f}x" for r in ratios))


def causal_against_bidirectional(length: int, repeats: int) -> None:
    torch.manual_seed(0)
    causal = tokenmix.create_mixer("linear", 256, num_heads=4, causal=True)
    both = tokenmix.create_mixer("linear", 256, num_heads=4, causal=False)
    both.load_state_dict(causal.state_dict())
    x = torch.randn(1, length, 256, requires_grad=True)

    def run(mixer):
        return lambda: mixer(x).sum().backward()

    times = interleaved({"causal": run(causal), "bidirectional": run(both)}, repeats)
    c, b = times["causal"], times["bidirectional"]
    print(f"\n2. linear mixer (dim 256, 4 heads), forward + backward at N = {length}: causal {c * 1e3:.0f} ms, "
          f"bidirectional {b * 1e3:.0f} ms, ratio {c / b:.2f}x")


def prefill_against_forward(length: int, repeats: int) -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(256, 4, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    tokenmix.replace_attention(model, "linear", causal=True)
    x = torch.randn(1, length, 256)
    mask = nn.Transformer.generate_square_subsequent_mask(length)

    def plain():
        model(x, mask=mask, is_causal=True)

    def prefill():
        with tokenmix.decoding(model):
            model(x, mask=mask, is_causal=True)

    with torch.no_grad():
        times = interleaved({"plain": plain, "prefill": prefill}, repeats)
    print(f"\n3. a {length}-token prompt, 2 layers of linear attention (dim 256, 4 heads): plain forward "
          f"{times['plain'] * 1e3:.0f} ms, inside tokenmix.decoding {times['prefill'] * 1e3:.0f} ms, ratio "
          f"{times['prefill'] / times['plain']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="4096,16384")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=2000)
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    rate = gemm_rate(args.threads)
    print(f"{args.threads} thread(s); float32 GEMM 2048^3: {rate / 1e9:.1f} GFLOP/s")
    chunked_forms(lengths, args.heads, args.head_dim, args.repeats, rate)
    causal_against_bidirectional(lengths[-1], args.repeats)
    prefill_against_forward(args.prompt, args.repeats)


if __name__ == "__main__":
    main()
