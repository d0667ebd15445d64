"""Chen (2023) Table 2's check: each model of a language-model experiment continues the paper's prompt.

    python scripts/generate_texts.py runs/004-extractors-lm docs/reproduction/004-generations.txt

For every label of the experiment in ``runs/<name>/config.toml``, its seed-0 best weights
(``runs/<name>/runs/<label>/seed0/best.safetensors``) continue "Once upon a time there was a little princess
who" with top-p 0.6 and seed 0, as the paper's Table 2 did, for up to 24 new tokens: as many as the context
leaves after the prompt. Writes one ``label: text`` line per label (labels without weights are skipped with a
note on stderr).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

PROMPT = "Once upon a time there was a little princess who"
NEW_TOKENS = 24
TOP_P = 0.6
SEED = 0


def generate(run_dir: Path) -> list[str]:
    """``label: text`` for every label with seed-0 best weights in ``run_dir``."""
    import torch
    from safetensors.torch import load_model

    from tokenmix.training.checkpoint import BEST_FILE
    from tokenmix.training.build import build_model, make_task
    from tokenmix.training.experiment import load_experiment
    from tokenmix.training.sweep import run_dir as run_folder

    # seed 0 of every label, whichever seeds the folder's last sweep was started with (--seeds 2,3 rewrites them)
    experiment = replace(load_experiment(run_dir / "config.toml"), seeds=[0])
    task = make_task(experiment)
    prompt = task.tokenizer.encode(PROMPT).ids
    lines = []
    for run in experiment.runs(task.info.kind):
        weights = run_folder(run_dir, run) / BEST_FILE
        if not weights.exists():
            print(f"generate_texts: no {weights}; {run.label} skipped", file=sys.stderr)
            continue
        model = build_model(task, run)
        load_model(model, str(weights))
        new = max(0, min(NEW_TOKENS, model.max_len - len(prompt)))  # the learned positions end at max_len
        ids = model.generate(torch.tensor([prompt]), new, top_p=TOP_P, seed=SEED)
        text = task.tokenizer.decode(ids[0].tolist())
        lines.append(f"{run.label}: {' '.join(text.split())}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Texts from the paper's prompt, one line per label (seed 0).")
    parser.add_argument("run_dir", help="a language-model experiment's output folder, e.g. runs/004-extractors-lm")
    parser.add_argument("out", help="the text file to write, e.g. docs/reproduction/004-generations.txt")
    args = parser.parse_args(argv)
    lines = generate(Path(args.run_dir))
    if not lines:
        print(f"generate_texts: no label in {args.run_dir} has seed-0 weights; nothing written", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(f"{line}\n" for line in lines))
    print(f"wrote {out} ({len(lines)} labels)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
