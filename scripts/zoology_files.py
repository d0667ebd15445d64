"""Write experiments/002-zoology-mqar-<N>.toml, the recall sweep (Arora et al. 2023, Zoology, Figure 2; Arora et
al. 2024, Based, Figure 2), one file per sequence length: every causal mechanism at each width the file plans,
a learning-rate stage on seed 0 (chosen on validation), then five seeds at the chosen rate. The claims of each
file are written here, before any row; rerunning the script rewrites the files identically.

    python scripts/zoology_files.py
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# every causal mechanism of the seeds (and BaseConv), with the options the sweep gives them
MECHANISMS = [
    ("softmax", "softmax", {}), ("linear", "linear", {}), ("performer", "performer", {}),
    ("cosformer", "cosformer", {}), ("kerformer-noSEK", "kerformer", {"se_k": False}), ("relation", "relation", {}),
    ("average", "average", {}), ("sparse_fixed", "sparse_fixed", {}), ("sparse_strided", "sparse_strided", {}),
    ("extractor_she", "extractor_she", {}), ("extractor_he", "extractor_he", {}), ("extractor_we", "extractor_we", {}),
    ("extractor_me", "extractor_me", {}), ("baseconv", "baseconv", {}), ("mlp", "mlp", {}),
]
# The widths 128 and 256 (at 256 tokens) are planned for the mechanisms whose recurrent state grows with the width
# as a d x d matrix per head (the kernel family), softmax attention (its cache) and the mlp floor; the others at
# width 64 only. The budget decides it: the first runs took 2.2 times the harness's step time (pinned numerics, two
# runs at a time), and every mechanism at every width would take about 40 h; the SHE Extractor alone at width 256
# steps in 2.5 s, 74 times softmax attention at width 64 (docs/reproduction/002-zoology-mqar-256-steptime.csv).
WIDE = {"softmax", "linear", "performer", "cosformer", "kerformer-noSEK", "mlp"}
TOKENS_PER_STEP = 2048  # batch x length, the same at every length (Zoology halves the batch as the length doubles)
STEPS = 1500
LRS = [3e-4, 1e-3, 3e-3, 1e-2]
SEEDS = [0, 1, 2, 3, 4]  # 5 v 5 seeds: an exact test's smallest p is 1/252, room for each file's Holm family

# length -> (pairs, widths); Zoology's (length, pairs): (64, 4), (128, 8), (256, 16), (512, 64)
CELLS = {64: (4, [64]), 128: (8, [64]), 256: (16, [64, 128, 256]), 512: (64, [64])}

ZOOLOGY = ("Arora et al. (2023), Figure 2: attention solves MQAR at every length (64-512) and width (64-512); the "
           "gated convolutions and kernel linear attention fall as the sequence grows at a fixed width and recover "
           "with width")
BASED = ("Arora et al. (2024), Figure 2: recall rises with the recurrent state's size for each family, and attention "
         "sits on the frontier (the best recall for its state)")


def claim(text: str, paper: str, a: str, b: str | float, kind: str = "greater", added: bool = False) -> dict:
    out = {"text": text, "paper": paper, "a": a, "b": b, "measure": "value", "kind": kind}
    if added:
        out["added"] = True
    return out


def claims(n: int) -> list[dict]:
    if n in (64, 128):
        return [claim(f"Attention solves MQAR at width 64 and length {n} (test accuracy above 0.9)", ZOOLOGY,
                      "softmax-d64", 0.9)]
    if n == 256:
        return [
            claim("Linear attention (elu+1) recalls more with a larger state: width 256 above width 64 at length 256",
                  BASED, "linear-d256", "linear-d64"),
            claim("Performer recalls more with a larger state: width 256 above width 64 at length 256", BASED,
                  "performer-d256", "performer-d64"),
            claim("Attention at width 64 (a 128 KiB cache per layer at 256 tokens) beats linear attention at width 256 "
                  "(a 256 KiB state per layer) at length 256", BASED, "softmax-d64", "linear-d256"),
        ]
    return [
        claim("Attention solves MQAR at width 64 up to the longest length, 512 (test accuracy above 0.9)", ZOOLOGY,
              "softmax-d64", 0.9),
        claim("Kernel linear attention falls behind attention at width 64 and length 512", ZOOLOGY, "softmax-d64",
              "linear-d64"),
    ]


PAPER_CLAIM = (
    "Arora et al. (2023), \"Zoology\", find that the efficient language models of the day (gated convolutions, "
    "kernel linear attention, state-space models) lose to attention mostly on associative recall, and define "
    "multi-query associative recall (MQAR) to measure it: in their Figure 2 attention solves MQAR at every "
    "sequence length (64-512) and model width (64-512), while the others fall as the sequence grows at a fixed "
    "width and need a larger width to recover. Arora et al. (2024), \"Based\", show a tradeoff between recall "
    "and the recurrent state a model keeps while generating (their Figure 2): accuracy rises with the state's size "
    "within each family, and attention, whose state is its key-value cache, is on the frontier.")


def paper(n: int) -> dict:
    pairs, widths = CELLS[n]
    table = {
        "key": "005",
        "title": f"Recall at {n} tokens ({pairs} pairs)",
        "data": (f"MQAR generated as Zoology's generator does (keys and values from the two halves of a "
                 f"1,024-token vocabulary, power-law query gaps, random fillers), {n} tokens, {pairs} pairs; "
                 f"20,000 training, 500 validation and 1,000 test sequences; widths {', '.join(map(str, widths))}"),
        "scale": ("Zoology: vocabulary 8,192, 100,000 training sequences, 32-64 epochs, widths 64-512; Based's "
                  "figure: 2 layers with a short convolution beside each mechanism. Here: plain mechanisms (no "
                  f"convolution), {STEPS} steps of {TOKENS_PER_STEP} tokens, 4 rates, 5 seeds, on 2 CPU cores; widths above 64 "
                  f"for the kernel family, softmax and the mlp only"),
    }
    if n == 256:
        table.update(heading="Arora et al. (2023, 2024): Zoology and Based, recall (005)", claim=PAPER_CLAIM)
        table["ledger"] = [{
            "item": "Figure 2",
            "shows": ("Zoology Figure 2: MQAR accuracy against sequence length (64-512) per model width, attention "
                      "near 1.0 throughout; Based Figure 2: MQAR accuracy against recurrent state size, one curve "
                      "per family"),
            "claims": [c["text"] for m in CELLS for c in claims(m)],
            "not_here": ("widths 512, Hyena, H3, RWKV, Mamba and Based itself (not in tokenmix yet: the gated and "
                         "delta-rule mechanisms come with their own issue); the convolution Based puts beside "
                         "each mechanism (BaseConv is a mixer here, swept as one mechanism)"),
        }]
    return table


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return repr(value)


def text(n: int) -> str:
    pairs, widths = CELLS[n]
    batch = TOKENS_PER_STEP // n
    lines = [
        f"# The recall sweep at length {n} (scripts/zoology_files.py writes it; the claims below were fixed before "
        f"any row).",
        f"# Zoology's MQAR at {n} tokens and {pairs} pairs, every causal mechanism at width(s) "
        f"{', '.join(map(str, widths))} (widths above 64: the kernel family, softmax and the mlp), 2 layers, one head.",
        "# Scaled to fit 2 CPU cores (the ledger says it): vocabulary 1,024 (Zoology: 8,192), 20,000 training sequences "
        "(100,000),",
        f"# {STEPS} steps of {TOKENS_PER_STEP} tokens ({batch} sequences; Zoology: 32-64 epochs of 64-512 sequences), "
        f"4 learning rates on seed 0",
        "# (Zoology: 4, log-spaced) chosen on validation, then 5 seeds at the chosen rate.",
        f'name = "002-zoology-mqar-{n}"',
        f'description = "MQAR at {n} tokens, {pairs} pairs: every causal mechanism, widths {"/".join(map(str, widths))}, '
        f'rates chosen on validation, 5 seeds."',
        f"seeds = {toml_value(SEEDS)}",
        "",
        "[task]",
        'name = "mqar"',
        'preset = "quick"',
        f"seq_len = {n}",
        f"num_pairs = {pairs}",
        "vocab_size = 1024",
        "train_size = 20000",
        "val_size = 500",
        "test_size = 1000",
        "",
        "[model]",
        "dim = 64",
        "depth = 2",
        "heads = 1",
        "",
        "[train]",
        'preset = "quick"',
        f"max_steps = {STEPS}",
        f"batch_size = {batch}",
        "eval_every = 250",
        'patience = "none"',
        "threads = 1",
        f"lr_grid = {toml_value(LRS)}",
        "lr_seeds = [0]",
        "",
        "[report]",
        'plots = ["metric_vs_state", "metric_vs_time"]',
        "baseline = false        # the mlp is an entry at every width",
        "",
    ]
    for width in widths:
        for label, name, options in MECHANISMS:
            if label not in WIDE and width != 64:
                continue
            lines += ["[[mixers]]", f'label = "{label}-d{width}"', f'name = "{name}"']
            if options:
                lines.append(f"options = {toml_value(options)}")
            lines += [f"model = {{ dim = {width} }}", ""]
    table = paper(n)
    lines.append("[paper]")
    lines += [f"{k} = {toml_value(v)}" for k, v in table.items() if k != "ledger"]
    lines.append("")
    for item in table.get("ledger", []):
        lines.append("[[paper.ledger]]")
        lines += [f"{k} = {toml_value(v)}" for k, v in item.items()]
        lines.append("")
    for c in claims(n):
        lines.append("[[claims]]")
        lines += [f"{k} = {toml_value(v)}" for k, v in c.items()]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    for n in CELLS:
        path = ROOT / "experiments" / f"002-zoology-mqar-{n}.toml"
        path.write_text(text(n))
        print(path)


if __name__ == "__main__":
    main()
