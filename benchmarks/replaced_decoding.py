"""Decoding from a user's own model after replace_attention: tokens/s and decoding-state memory at long contexts,
each causal mechanism against softmax attention's key/value cache, measured in one run.

    python benchmarks/replaced_decoding.py --contexts 1024,2048,4096,8192 --mixers linear,kerformer,performer
    python benchmarks/replaced_decoding.py --family llama     # a Hugging Face Llama built from a config

``--family torch`` (default):
The model is a PyTorch nn.TransformerEncoder language model (width ``--dim``, ``--depth`` layers, 4 heads) with
its attention replaced causal (``tokenmix.replace_attention``). For each mechanism and context N: the state after
N tokens is built inside ``tokenmix.decoding`` (stepping through a random prompt, untimed), then the time of one
more token per sequence is measured (``tokenmix.timing.measure``: the state is copied before each call, so every
call continues from context N). Prints ms per token, tokens/s, the state's MiB (all layers), and each one's ratio
to softmax's at the same N. ``--family llama``: a ``transformers`` Llama of the same width and depth (4 heads, 2
key/value heads), the prompt run in one forward, then ``--repeats`` tokens one at a time, each timed: the
unreplaced model with its own key/value cache (its sdpa attention, the baseline) against each mechanism decoding
from its state inside ``tokenmix.decoding`` (the cache it gives keeps no keys or values); the softmax cache grows by
one token per call, negligible beside N. Run it on a quiet machine (one thread by default).
"""

from __future__ import annotations

import argparse
import copy

import torch
from torch import nn

import tokenmix
from tokenmix.models.replace import MixerAttention
from tokenmix.timing import measure


class UserLM(nn.Module):
    def __init__(self, vocab: int, dim: int, depth: int, max_len: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, dim_feedforward=4 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        x = self.tokens(ids) + self.positions(torch.arange(start, start + ids.shape[1]))
        return self.head(self.encoder(x))


def _states(model: nn.Module) -> list[MixerAttention]:
    return [m for m in model.modules() if isinstance(m, MixerAttention)]


def one(name: str, context: int, args: argparse.Namespace) -> tuple[float, float]:
    """(seconds per new token, MiB of state) for ``name`` at ``context``."""
    torch.manual_seed(0)
    model = UserLM(args.vocab, args.dim, args.depth, context + 2).eval()
    tokenmix.replace_attention(model, name, causal=True, max_len=context + 2)
    ids = torch.randint(0, args.vocab, (args.batch, context + 1))
    adapters = _states(model)
    with torch.no_grad(), tokenmix.decoding(model):
        for t in range(context):  # the state after `context` tokens (one at a time: no mask needed)
            model(ids[:, t:t + 1], start=t)
        saved = [copy.copy(a.decoding_state) for a in adapters]
        mib = sum(v.numel() * v.element_size() for s in saved for v in s.values()) / 2 ** 20

        def next_token() -> None:
            for adapter, state in zip(adapters, saved):
                adapter.decoding_state = dict(state)
            model(ids[:, context:context + 1], start=context)

        timing = measure(next_token, min_run_time=args.min_run_time, threads=args.threads, warmup=1)
    return timing.median, mib


def one_llama(name: str | None, context: int, args: argparse.Namespace) -> tuple[float, float]:
    """(seconds per new token, MiB of decoding state) for a Llama with ``name`` (None: its own attention and
    key/value cache) after ``context`` tokens."""
    import contextlib

    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=args.vocab, hidden_size=args.dim, num_hidden_layers=args.depth,
                                      num_attention_heads=4, num_key_value_heads=2, intermediate_size=4 * args.dim,
                                      max_position_embeddings=context + args.repeats + 2)
    model = transformers.LlamaForCausalLM(config).eval()
    if name is not None:
        tokenmix.replace_attention(model, name)
    ids = torch.randint(0, args.vocab, (args.batch, context + 1))
    with torch.no_grad(), (tokenmix.decoding(model) if name else contextlib.nullcontext()) as cache:
        cache = cache if name else transformers.DynamicCache()
        model(ids[:, :context], past_key_values=cache)
        token = ids[:, context:context + 1]
        timing = measure(lambda: model(token, past_key_values=cache), repeats=args.repeats, threads=args.threads)
        if name:
            states = [m.tokenmix.decoding_state for m in model.modules() if hasattr(m, "tokenmix")]
            tensors = [v for state in states for v in state.values()]
        else:
            tensors = [t for layer in cache.layers for t in (layer.keys, layer.values)]
        mib = sum(t.numel() * t.element_size() for t in tensors) / 2 ** 20
    return timing.median, mib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default="linear,kerformer,performer,cosformer")
    parser.add_argument("--contexts", default="1024,2048,4096,8192")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--min-run-time", type=float, default=0.5)
    parser.add_argument("--family", choices=["torch", "llama"], default="torch")
    parser.add_argument("--repeats", type=int, default=32, help="--family llama: tokens timed one by one")
    args = parser.parse_args()
    if args.family == "llama":
        measure_one = lambda name, n, a: one_llama(None if name == "softmax" else name, n, a)  # noqa: E731
    else:
        measure_one = one
    contexts = [int(n) for n in args.contexts.split(",")]
    model = "nn.TransformerEncoder LM" if args.family == "torch" else "transformers Llama (baseline: its KV cache)"
    print(f"{model}: width {args.dim}, {args.depth} layers, 4 heads, batch {args.batch}; torch "
          f"{torch.__version__}, {args.threads} thread(s)")
    print(f"{'mixer':12s} {'N':>6s} {'ms/token':>9s} {'tokens/s':>9s} {'state MiB':>10s} {'time/softmax':>13s} "
          f"{'state/softmax':>14s}")
    for n in contexts:
        base_s, base_mib = measure_one("softmax", n, args)
        print(f"{'softmax':12s} {n:6d} {1e3 * base_s:9.3f} {1 / base_s:9.0f} {base_mib:10.3f} {1:13.2f} {1:14.2f}")
        for name in args.mixers.split(","):
            s, mib = measure_one(name, n, args)
            print(f"{name:12s} {n:6d} {1e3 * s:9.3f} {1 / s:9.0f} {mib:10.3f} {s / base_s:13.2f} "
                  f"{mib / base_mib:14.3f}")


if __name__ == "__main__":
    main()
