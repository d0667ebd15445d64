"""What each conversion of ``004-convert-recipes`` buys at decoding time: per label, the milliseconds per generated
token and the decoding state's bytes at several context lengths, in the experiment's own model (2 layers, d = 128,
4 heads, FFN 512), measured in one process with the labels taken in turn call by call.

    python benchmarks/convert_decoding.py --contexts 32,512,2048 --threads 1 \
        --csv docs/benchmarks/convert_decoding.csv

Speed does not depend on trained weights, so each label's model is built from the experiment file (mechanism and
options) with fresh weights and positions up to the longest context. A token's time is the median over
``--tokens`` single steps taken after a prompt of ``context - 1`` tokens (prefilled), batch 1, under
``torch.inference_mode``. Run it on a quiet machine (nothing else on the cores).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from pathlib import Path

import torch

from tokenmix.models import CausalLM
from tokenmix.training.experiment import load_experiment
from tokenmix.training.numerics import host_fingerprint
from tokenmix.training.provenance import code_version

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "004-convert-recipes.toml"
VOCAB = 4096  # the task's tokenizer size does not change the mixers' cost; the head's matmul is the same for all


def build(entry, model: dict, max_len: int) -> CausalLM:
    torch.manual_seed(0)
    return CausalLM(VOCAB, entry.mixer, model["dim"], model["depth"], max_len, num_heads=model["heads"],
                    ffn_dim=model["ffn_dim"], mixer_options=entry.options, init_std=0.02).eval()


def decoder(lm: CausalLM, context: int, tokens: int):
    """A callable that prefills ``context - 1`` tokens, then returns the seconds of each of ``tokens`` steps."""
    prompt = torch.randint(0, VOCAB, (1, context - 1), generator=torch.Generator().manual_seed(1))

    def run() -> list[float]:
        with torch.inference_mode():
            states = [block.mixer.init_state(1) for block in lm.blocks]
            for t in range(context - 1):
                _, states = lm._step(prompt[:, t], t, states)
            token, seconds = prompt[:, -1], []
            for i in range(tokens):
                start = time.perf_counter()
                logits, states = lm._step(token, context - 1 + i, states)
                seconds.append(time.perf_counter() - start)
                token = logits.argmax(-1)
        return seconds
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", default="32,512,2048")
    parser.add_argument("--tokens", type=int, default=64, help="steps timed after each prompt")
    parser.add_argument("--rounds", type=int, default=3, help="times each label is taken in turn")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    experiment = load_experiment(EXPERIMENT)
    contexts = [int(c) for c in args.contexts.split(",")]
    models = {e.label: build(e, experiment.model, max(contexts) + args.tokens) for e in experiment.mixers}
    rows = []
    print(f"004-convert-recipes' models at decoding: ms per token (median of {args.tokens} steps x {args.rounds} "
          f"rounds), state bytes; {args.threads} thread(s); {host_fingerprint()}")
    for context in contexts:
        times = {label: [] for label in models}
        for _ in range(args.rounds):
            for label, lm in models.items():
                times[label] += decoder(lm, context, args.tokens)()
        for label, lm in models.items():
            ms = statistics.median(times[label]) * 1e3
            size = lm.state_bytes(context)
            rows.append({"label": label, "mixer": "/".join(lm.mixer_names), "context": context,
                         "ms_per_token": f"{ms:.4f}", "state_bytes": size, "threads": args.threads,
                         "code": code_version(), "host": host_fingerprint()})
            print(f"  context {context:>5}  {label:18s} {ms:8.3f} ms/token  {size:>10,} bytes")
    if args.csv:
        with args.csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
