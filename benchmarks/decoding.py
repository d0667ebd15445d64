"""Step decoding vs prefix recomputation in CausalLM.generate, measured in one run.

    python benchmarks/decoding.py --mixers recurrent --new-tokens 512

``--mixers recurrent`` (the default) takes every registered mixer with an incremental ``step``
(``mixer_info(name).recurrent``); performance target 4 of issue 7 is a speed-up of at least 5x with
identical tokens.

For each mixer: a 2-layer CausalLM, the same prompt and seed, ``generate`` once with ``use_step=True``
(the mixers' incremental state) and once with ``use_step=False`` (the whole prefix recomputed for each
new token); prints both wall times, the speed-up, and whether the tokens are identical.
"""

from __future__ import annotations

import argparse

import torch

import tokenmix
from tokenmix.models import CausalLM
from tokenmix.timing import measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default="recurrent", help="comma-separated names, or 'recurrent'")
    parser.add_argument("--new-tokens", type=int, default=512)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    max_len = args.prompt + args.new_tokens
    print(f"CausalLM depth {args.depth}, dim {args.dim}, vocab {args.vocab}, batch {args.batch}, prompt "
          f"{args.prompt}, {args.new_tokens} new tokens; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'mixer':14s} {'step s':>8s} {'recompute s':>12s} {'speed-up':>9s}  same tokens")
    names = args.mixers.split(",")
    if args.mixers == "recurrent":
        names = [n for n in tokenmix.list_mixers() if not n.startswith("_") and tokenmix.mixer_info(n).recurrent]
    for name in names:
        torch.manual_seed(0)
        model = CausalLM(args.vocab, name, args.dim, args.depth, max_len, init_std=0.02)
        prompt = torch.randint(0, args.vocab, (args.batch, args.prompt))
        times, outputs = {}, {}
        for use_step in (True, False):
            def generate(use_step: bool = use_step) -> None:
                outputs[use_step] = model.generate(prompt, args.new_tokens, seed=0, use_step=use_step)

            times[use_step] = measure(generate, repeats=1, threads=None).median  # one call: its wall time
        same = torch.equal(outputs[True], outputs[False])
        print(f"{name:14s} {times[True]:8.2f} {times[False]:12.2f} {times[False] / times[True]:8.1f}x  {same}",
              flush=True)


if __name__ == "__main__":
    main()
