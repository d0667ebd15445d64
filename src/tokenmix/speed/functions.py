"""``tokenmix speed --functions``: the chunked forms of the functional core (:mod:`tokenmix.ops`) against the
peers that run where they do, forward + backward, timed in one process and interleaved call by call (each call of
every form in turn, the median per form): transformers' pure-PyTorch gated delta rule (``torch_chunk_gated_delta_rule``
of its Qwen3-Next model) where transformers is installed. Each time is given against the GEMM floor (the chunked
form's matrix products at the float32 GEMM rate measured in the same process), and the local slope between
consecutive lengths (1.0 is linear). Asserts nothing; run it on quiet cores."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..ops.delta_rule import chunk_delta_rule, chunk_gated_delta_rule
from ..ops.gla import chunk_gla, chunk_retention, chunk_simple_gla
from ..ops.linear_attn import chunk_linear_attn, fused_chunk_based

__all__ = ["gemm_rate", "forms", "floor_flops", "interleaved", "chunked_forms"]


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


def interleaved(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of each call, the calls taken in turn (one warm-up each)."""
    for call in calls.values():
        call()
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            times[name].append(_seconds(call))
    return {name: statistics.median(ts) for name, ts in times.items()}


def chunked_forms(lengths: list[int], heads: int, d: int, repeats: int, rate: float) -> list[str]:
    """The table: each form's milliseconds (time / GEMM floor) per length and its local slopes; the gated delta
    rule's ratio to transformers' where it ran."""
    results: dict[str, list[float]] = {}
    floors: dict[str, list[float]] = {}
    for length in lengths:
        table = forms(length, heads, d)
        times = interleaved({name: (lambda f=f, x=x: fwd_bwd(f, x)) for name, (f, x, *_) in table.items()}, repeats)
        for name, (_, _, c, kdim, vdim) in table.items():
            results.setdefault(name, []).append(times[name])
            floors.setdefault(name, []).append(floor_flops(length, heads, c, kdim, vdim) / rate)
    head = " ".join(f"{'N=' + str(n):>14}" for n in lengths)
    lines = [f"chunked forms, forward + backward, batch 1, {heads} heads x {d}: ms (time / GEMM floor)",
             f"{'form':<30} {head}   local slopes"]
    for name, ts in results.items():
        cells = " ".join(f"{t * 1e3:>6.0f} ({t / f:>4.1f}x)" for t, f in zip(ts, floors[name]))
        slopes = [math.log(ts[i + 1] / ts[i]) / math.log(lengths[i + 1] / lengths[i]) for i in range(len(ts) - 1)]
        lines.append(f"{name:<30} {cells}   {' '.join(f'{s:.2f}' for s in slopes)}")
    if "transformers gated_delta_rule" in results:
        ratios = [p / m for p, m in zip(results["transformers gated_delta_rule"], results["gated_delta_rule"])]
        lines.append("gated delta rule, transformers / tokenmix: " + ", ".join(f"{r:.2f}x" for r in ratios))
    return lines


