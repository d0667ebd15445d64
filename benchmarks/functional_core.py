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

import torch
from torch import nn

import tokenmix
from tokenmix.speed.functions import chunked_forms, gemm_rate, interleaved


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
    print("\n1. " + "\n".join(chunked_forms(lengths, args.heads, args.head_dim, args.repeats, rate)))
    causal_against_bidirectional(lengths[-1], args.repeats)
    prefill_against_forward(args.prompt, args.repeats)


if __name__ == "__main__":
    main()
