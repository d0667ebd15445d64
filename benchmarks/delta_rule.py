"""The gated delta rule on a CPU: tokenmix's chunked form (``tokenmix.ops.delta_rule.chunk_gated_delta_rule``)
against transformers' pure-PyTorch fallback (``torch_chunk_gated_delta_rule`` of its Qwen3-Next model, what runs
when flash-linear-attention's kernels cannot), forward + backward, the two taken in turn call by call in one run
(``tokenmix.speed.functions.interleaved``, as ``tokenmix speed --functions`` times every chunked form), with the
ratio at each length. The outputs are checked equal first (float32, 1e-4): this script is the peer's equality
check and timing; ``benchmarks/functional_core.py`` covers every form and the other goals.

    python benchmarks/delta_rule.py --lengths 1024,4096,16384 --heads 4 --head-dim 64 --threads 2

Run it on a quiet machine (nothing else on the cores).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from tokenmix.ops.delta_rule import chunk_gated_delta_rule
from tokenmix.speed.functions import fwd_bwd, interleaved


def inputs(length: int, heads: int, head_dim: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    q, k = (F.normalize(torch.randn(1, length, heads, head_dim, generator=g), dim=-1) for _ in range(2))
    v = torch.randn(1, length, heads, head_dim, generator=g)
    decay = F.logsigmoid(torch.randn(1, length, heads, generator=g) + 4)  # log decays near 0, as trained models hold
    beta = torch.rand(1, length, heads, generator=g)
    return [x.requires_grad_() for x in (q, k, v, decay, beta)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="1024,4096,16384")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule

    ours = chunk_gated_delta_rule
    print(f"gated delta rule, forward + backward, batch 1, {args.heads} heads x {args.head_dim}, "
          f"{args.threads} thread(s), medians in ms")
    print(f"{'N':>7} {'tokenmix':>10} {'transformers':>13} {'ratio':>7}")
    for length in (int(n) for n in args.lengths.split(",")):
        tensors = inputs(length, args.heads, args.head_dim)
        with torch.no_grad():
            torch.testing.assert_close(ours(*tensors)[0], torch_chunk_gated_delta_rule(*tensors)[0], rtol=1e-4,
                                       atol=1e-4)
        torch.set_num_threads(args.threads)
        times = interleaved({"tokenmix": lambda: fwd_bwd(ours, tensors),
                             "transformers": lambda: fwd_bwd(torch_chunk_gated_delta_rule, tensors)}, args.repeats)
        mine, peer = times["tokenmix"], times["transformers"]
        print(f"{length:>7} {mine * 1e3:>10.1f} {peer * 1e3:>13.1f} {peer / mine:>6.2f}x")


if __name__ == "__main__":
    main()
