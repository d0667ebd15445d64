"""The recall sweep's experiment files (Arora et al. 2023, "Zoology", Figure 2; Arora et al. 2024, "Based",
Figure 2): ``experiments/002-zoology-mqar-<N>.toml``, one per sequence length, written from the plan below with
their claims, before any row (``python scripts/zoology_files.py``; rewriting gives the same files).

Each file: a learning-rate stage on seed 0 (every label at every rate of :data:`LRS`, chosen on validation), then
:data:`SEEDS` at the chosen rate. :data:`CELLS` says, per length, the pairs, the steps, which mechanisms and at
which widths; :func:`budget_note` says what was scaled from the papers to fit 24 hours on 2 CPU cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .tomlfile import to_toml

__all__ = ["MECHANISMS", "Cell", "CELLS", "LRS", "SEEDS", "BATCH", "VOCAB", "WINDOWS", "WINDOW_FILE", "CONV_FILE",
           "CONV_WIDTHS", "REACH", "SHORTCONV_FILE", "SHORTCONV_FILES", "SHORTCONV_SIZE", "SHORTCONV_MECHANISMS",
           "claims", "experiment",
           "file_text", "window_claims", "window_experiment", "window_file_text", "conv_claims", "conv_experiment",
           "conv_file_text", "shortconv_claims", "shortconv_experiment", "shortconv_file_text", "write_files"]

# every causal mechanism of tokenmix (the seeds', BaseConv, and those that came after), with the options the sweep
# gives them
MECHANISMS: dict[str, tuple[str, dict[str, Any]]] = {
    "softmax": ("softmax", {}), "linear": ("linear", {}), "performer": ("performer", {}),
    "cosformer": ("cosformer", {}), "kerformer-noSEK": ("kerformer", {"se_k": False}), "relation": ("relation", {}),
    "average": ("average", {}), "sparse_fixed": ("sparse_fixed", {}), "sparse_strided": ("sparse_strided", {}),
    "extractor_she": ("extractor_she", {}), "extractor_he": ("extractor_he", {}), "extractor_we": ("extractor_we", {}),
    "extractor_me": ("extractor_me", {}), "baseconv": ("baseconv", {}),
    # the mechanisms that came after the seeds (tokenmix.mixers.delta, .gla, .ssd, .based)
    "deltanet": ("deltanet", {}), "gated_deltanet": ("gated_deltanet", {}), "retention": ("retention", {}),
    "gla": ("gla", {}), "mamba2": ("mamba2", {}), "based": ("based", {}),
    "mlp": ("mlp", {}),
}
LRS = [3e-4, 1e-3, 3e-3, 1e-2]  # Zoology sweeps 4 log-spaced rates per cell
SEEDS = list(range(8))  # 8 v 8: a Mann-Whitney p reaches 1/12,870 and a sign test 1/256: room in a Holm family of 14
BATCH = 64  # sequences a step at every length: with 16-32 softmax attention stays at the copy floor (the pilot)
VOCAB = 256  # keys from one half, values from the other: chance 1/128


@dataclass(frozen=True)
class Cell:
    """One sequence length: its pairs and steps, and the widths each mechanism is trained at."""

    length: int
    pairs: int
    steps: int
    widths: dict[str, tuple[int, ...]]  # label -> widths

    @property
    def train_size(self) -> int:
        """Enough training sequences that none is seen twice (steps x batch)."""
        return self.steps * BATCH


_EVERY = {label: (64,) for label in MECHANISMS}
CELLS = {
    # the state axis (Based's Figure 2) at the main job's setting: the kernel family's d x d state per head grows
    # with the width (softmax and linear attention to 256, the others to 128); the mlp's floor is chance at any width
    64: Cell(64, 8, 800, {**_EVERY, "softmax": (64, 128, 256), "linear": (64, 128, 256),
                           "performer": (64, 128), "cosformer": (64, 128), "kerformer-noSEK": (64, 128)}),
    # the length axis (Zoology's Figure 2): every mechanism at width 64
    128: Cell(128, 8, 1000, dict(_EVERY)),
}

ZOOLOGY = ("Arora et al. (2023), Figure 2: attention solves MQAR at every length (64-512) and width (64-512); the "
           "gated convolutions and kernel linear attention fall as the sequence grows at a fixed width and recover "
           "with width")
BASED = ("Arora et al. (2024), Figure 2: recall rises with the recurrent state's size for each family, and attention "
         "sits on the frontier (the best recall for its state)")
DELTANET = ("Yang, Wang, Zhang, Shen, Kim (2024), 'Parallelizing Linear Transformers with the Delta Rule over "
            "Sequence Length', §5.1: on MQAR DeltaNet recalls where linear attention does not, the delta rule "
            "overwriting the value a key held instead of adding to it")
SLIDING = ("Arora et al. (2024), §4 (Based): linear attention is paired with a small sliding window of exact "
           "attention, which does the precise local lookups that linear attention's approximate global mixing blurs; "
           "Zhang et al. (2024b), LoLCATs §3.2: a sliding window beside linear attention recovers what linear "
           "attention alone loses")
BASED_MAP = ("Arora et al. (2024), §4.1: among feature maps for linear attention the second-order Taylor map "
             "recalls best on MQAR (Based's choice)")
STANDING = ("added here: where each causal mechanism of the seeds stands against attention on recall, which none "
            "of their papers measured")


def _claim(text: str, paper: str, a: str, b: str | float, added: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"text": text, "paper": paper, "a": a, "b": b, "measure": "value", "kind": "greater"}
    if added:
        out["added"] = True
    return out


def claims(length: int) -> list[dict[str, Any]]:
    """The claims of the file at ``length`` (one Holm family)."""
    if length == 64:
        return [
            _claim("Attention solves MQAR at width 64 and 64 tokens (test accuracy above 0.9)", ZOOLOGY, "softmax-d64",
                   0.9),
            _claim("Attention beats linear attention (elu+1) at width 64 and 64 tokens", ZOOLOGY, "softmax-d64",
                   "linear-d64"),
            _claim("DeltaNet recalls more than linear attention at width 64 and 64 tokens", DELTANET, "deltanet-d64",
                   "linear-d64"),
            _claim("Based's Taylor feature map recalls more than linear attention's elu + 1 at width 64 and 64 tokens",
                   BASED_MAP, "based-d64", "linear-d64"),
            _claim("Linear attention recalls more with a larger state: width 256 above width 64", BASED, "linear-d256",
                   "linear-d64"),
            *(_claim(f"{name} recalls more with a larger state: width 128 above width 64", BASED, f"{label}-d128",
                     f"{label}-d64")
              for label, name in (("performer", "Performer"), ("cosformer", "cosFormer"),
                                  ("kerformer-noSEK", "Kerformer without SE-K"))),
            _claim("Attention at width 64 (a 64 KiB cache at 64 tokens) beats linear attention at width 256 (a state "
                   "of 514 KiB): attention is on the frontier", BASED, "softmax-d64", "linear-d256"),
        ]
    return [
        _claim("Attention solves MQAR at width 64 and the longest length here, 128 tokens (test accuracy above 0.9)",
               ZOOLOGY, "softmax-d64", 0.9),
        *(_claim(f"Attention recalls more than {label} at width 64 and 128 tokens",
                 ZOOLOGY if label in ("linear", "baseconv") else STANDING, "softmax-d64", f"{label}-d64",
                 added=label not in ("linear", "baseconv"))
          for label in MECHANISMS if label not in ("softmax", "mlp")),
    ]


PAPER_CLAIM = (
    "Arora et al. (2023), \"Zoology\", find that the efficient language models of the day (gated convolutions, "
    "kernel linear attention, state-space models) lose to attention mostly on associative recall, and define "
    "multi-query associative recall (MQAR) to measure it: in their Figure 2 attention solves MQAR at every "
    "sequence length (64-512) and model width (64-512), while the others fall as the sequence grows at a fixed "
    "width and need a larger width to recover. Arora et al. (2024), \"Based\", show a tradeoff between recall "
    "and the recurrent state a model keeps while generating (their Figure 2): accuracy rises with the state's size "
    "within each family, and attention, whose state is its key-value cache, is on the frontier.")


def budget_note() -> str:
    """What was scaled from the papers to fit the budget (24 hours at ``--jobs 2`` on 2 CPU cores)."""
    return (f"Zoology: vocabulary 8,192, 100,000 training sequences, 32-64 epochs, widths 64-512, lengths 64-512 "
            f"(pairs 4-64); Based's figure: 2 layers with a short convolution beside each mechanism. Here: plain "
            f"mechanisms (BaseConv swept as one mechanism), vocabulary {VOCAB}, {BATCH} sequences a step, each "
            f"training sequence seen once, lengths 64 and 128 with 8 pairs, widths 128-256 for the kernel family and "
            f"softmax at 64 tokens only, {len(LRS)} rates, {len(SEEDS)} seeds. Not run: 256 and 512 tokens, where "
            f"softmax attention did not learn MQAR within 2,000 steps here (the pilot: 16 pairs at 256 tokens "
            f"stayed at 1/16 with 20,000 or 100,000 training sequences; 8 pairs at 256 tokens sat at the 1/8 copy "
            f"floor after 1,250 steps), "
            f"so no claim there could be about the mechanisms rather than the budget")


def _widths_text(cell: Cell) -> str:
    return "/".join(str(w) for w in sorted({w for ws in cell.widths.values() for w in ws}))


def _paper(cell: Cell) -> dict[str, Any]:
    table: dict[str, Any] = {
        "key": "005",
        "title": f"Recall at {cell.length} tokens ({cell.pairs} pairs)",
        "data": (f"MQAR generated as Zoology's generator does (keys and values from the two halves of a "
                 f"{VOCAB}-token vocabulary, power-law query gaps, random fillers), {cell.length} tokens, "
                 f"{cell.pairs} pairs; {cell.train_size:,} training sequences (each seen once), 500 validation and "
                 f"1,000 test; widths {_widths_text(cell)}"),
        "scale": budget_note(),
    }
    if cell.length == 64:
        table.update(heading="Arora et al. (2023, 2024): Zoology and Based, recall (005)", claim=PAPER_CLAIM)
        table["ledger"] = [{
            "item": "Figure 2",
            "shows": ("Zoology Figure 2: MQAR accuracy against sequence length (64-512) per model width, attention "
                      "near 1.0 throughout; Based Figure 2: MQAR accuracy against recurrent state size, one curve "
                      "per family"),
            "claims": [c["text"] for n in CELLS for c in claims(n)],
            "not_here": ("lengths 256 and 512, widths 512, Hyena, H3 and RWKV (not in tokenmix); Based's "
                         "sliding-window layers and the short convolution Based puts beside each mechanism (the "
                         "one inside DeltaNet's, Gated DeltaNet's and Mamba-2's layers: §6)"),
        }, {
            "item": "§4",
            "shows": ("Based pairs linear attention with a small sliding window of exact attention for the precise "
                      "local lookups (as LoLCATs, Zhang et al. 2024b, §3.2, pairs them to linearize a model); "
                      f"tokenmix's window_linear, in {WINDOW_FILE}"),
            "claims": [c["text"] for c in window_claims()],
            "not_here": "Based's full architecture (window of 64, Taylor features and short convolutions together)",
        }, {
            "item": "§5",
            "shows": ("Zoology's BaseConv gates a convolution whose filter may span the sequence (a long convolution); "
                      f"tokenmix's baseconv with kernel_size=None, in {CONV_FILE}"),
            "claims": [c["text"] for c in conv_claims()],
            "not_here": "implicit filters (generated by a small network), Hyena and H3",
        }, {
            "item": "§6",
            "shows": ("the layers of DeltaNet, Gated DeltaNet and Mamba-2 as their papers build them, with a short "
                      f"causal convolution ({SHORTCONV_SIZE} taps) on their projected inputs; tokenmix's "
                      f"conv_size={SHORTCONV_SIZE}, in {' and '.join(SHORTCONV_FILES.values())}"),
            "claims": [c["text"] for n in SHORTCONV_FILES for c in shortconv_claims(n)],
            "not_here": "a short convolution beside the other mechanisms",
        }]
    return table


def experiment(length: int) -> dict[str, Any]:
    """The experiment file at ``length`` as a dict (what :func:`file_text` writes)."""
    cell = CELLS[length]
    mixers = []
    for width in sorted({w for ws in cell.widths.values() for w in ws}):
        for label, (name, options) in MECHANISMS.items():
            if width in cell.widths.get(label, ()):
                entry: dict[str, Any] = {"label": f"{label}-d{width}", "name": name}
                if options:
                    entry["options"] = dict(options)
                entry["model"] = {"dim": width}
                mixers.append(entry)
    return {
        "name": f"002-zoology-mqar-{length}",
        "description": (f"MQAR at {length} tokens, {cell.pairs} pairs: {len(cell.widths)} causal mechanisms, "
                        f"widths {_widths_text(cell)}, rates chosen on validation, {len(SEEDS)} seeds."),
        "seeds": list(SEEDS),
        "task": {"name": "mqar", "preset": "quick", "seq_len": length, "num_pairs": cell.pairs,
                 "vocab_size": VOCAB, "train_size": cell.train_size, "val_size": 500, "test_size": 1000},
        "model": {"dim": 64, "depth": 2, "heads": 1},
        "train": {"preset": "quick", "max_steps": cell.steps, "batch_size": BATCH, "eval_every": 250,
                  "patience": None, "threads": 1, "lr_grid": list(LRS), "lr_seeds": [0]},
        "report": {"plots": ["metric_vs_state", "metric_vs_time"], "baseline": False},
        "mixers": mixers,
        "paper": _paper(cell),
        "claims": claims(length),
    }


def file_text(length: int) -> str:
    """The TOML text of the file at ``length``, a header saying how it was made above the tables."""
    cell = CELLS[length]
    header = [
        f"# The recall sweep at {length} tokens, written by tokenmix.training.recallsweep (scripts/zoology_files.py);",
        "# its claims were fixed before any row. Zoology's MQAR, 2 layers, one head; a learning-rate stage on seed 0",
        f"# ({', '.join(map(str, LRS))}, chosen on validation), then {len(SEEDS)} seeds at the chosen rate. "
        f"{cell.steps} steps of {BATCH} sequences.",
    ]
    return "\n".join(header) + "\n" + to_toml(experiment(length))


# LoLCATs' sliding window + linear attention (Zhang et al. 2024b) came after the files above were registered and run
# at their fixed code, so it has its own file at 64 tokens, with linear attention beside it (the 64-token file's
# runs: the same configurations, recorded once and reused). Windows of 8 and 32 tokens: the first holds the value
# asked for few queries, the second for most (:func:`window_reach`).
WINDOWS = (8, 32)
WINDOW_FILE = "002-zoology-mqar-64-window"
WINDOW_LENGTH = 64


def window_reach(window: int, length: int = WINDOW_LENGTH, count: int = 4000) -> float:
    """The share of queries, in ``count`` MQAR sequences of the sweep's task (generator seed 0), whose pair's value
    stands among the last ``window`` tokens up to the query: what the window alone can look up."""
    import torch

    from ..tasks.batches import IGNORE_INDEX
    from ..tasks.mqar import PRESETS, mqar_sequences

    pairs = CELLS[length].pairs
    ids, targets = mqar_sequences(count, length, pairs, VOCAB, PRESETS["quick"]["gap_power"],
                                  torch.Generator().manual_seed(0))
    rows, where = (targets != IGNORE_INDEX).nonzero(as_tuple=True)
    keys = ids[:, 0:2 * pairs:2]  # (count, pairs): key j at position 2 j, its value at 2 j + 1
    j = (keys[rows] == ids[rows, where][:, None]).float().argmax(dim=1)
    return ((where - (2 * j + 1)) < window).float().mean().item()


def _window_label(window: int) -> str:
    return f"window_linear-w{window}-d64"


def window_claims() -> list[dict[str, Any]]:
    """The claims of :data:`WINDOW_FILE` (one Holm family, fixed before its rows)."""
    small, large = (_window_label(w) for w in WINDOWS)
    return [
        _claim(f"Sliding window + linear attention recalls more with a larger window: {WINDOWS[1]} tokens above "
               f"{WINDOWS[0]}, at width 64 and 64 tokens", BASED, large, small),
        _claim(f"A {WINDOWS[1]}-token window beside linear attention recalls more than linear attention alone at width "
               f"64 and 64 tokens", SLIDING, large, "linear-d64"),
    ]


def window_experiment() -> dict[str, Any]:
    """:data:`WINDOW_FILE` as a dict: the 64-token file's task, model and training, three labels."""
    base = experiment(WINDOW_LENGTH)
    mixers = [{"label": "linear-d64", "name": "linear", "model": {"dim": 64}}]
    mixers += [{"label": _window_label(w), "name": "window_linear", "options": {"window": w}, "model": {"dim": 64}}
               for w in WINDOWS]
    paper = {
        "key": "005",
        "title": f"Recall at {WINDOW_LENGTH} tokens: a sliding window beside linear attention",
        "data": (f"{_as_file()}; width 64; "
                 f"LoLCATs' sliding window + linear attention (elu + 1) with windows of {WINDOWS[0]} and {WINDOWS[1]} "
                 f"tokens (the window holds the value asked for {window_reach(WINDOWS[0]):.0%} and "
                 f"{window_reach(WINDOWS[1]):.0%} of the queries) and linear attention alone"),
        "scale": (f"as `002-zoology-mqar-{WINDOW_LENGTH}` (its training, rates and seeds); added after that file ran, "
                  f"since the mechanism came later; its linear-attention runs are that file's (the same "
                  f"configurations: recorded once, reused, and checked to reproduce under this file's code by "
                  f"`--verify`). Not run: 128 tokens (the length axis is the other mechanisms'); Based's "
                  f"window of 64 with a short convolution"),
    }
    return _added_file(base, WINDOW_FILE, (f"sliding window + linear attention (windows {WINDOWS[0]} and "
                                           f"{WINDOWS[1]}) beside linear attention, width 64"),
                       mixers, paper, window_claims())


def _as_file(length: int = 64) -> str:
    cell = CELLS[length]
    return (f"as `002-zoology-mqar-{length}`: MQAR, {length} tokens, {cell.pairs} pairs, {cell.train_size:,} training "
            f"sequences (each seen once), 500 validation and 1,000 test")


def _added_file(base: dict[str, Any], name: str, what: str, mixers: list[dict[str, Any]], paper: dict[str, Any],
                claims: list[dict[str, Any]], length: int = 64) -> dict[str, Any]:
    """A file added beside the file at ``length`` tokens (its task, model and training, as ``base``)."""
    cell = CELLS[length]
    return {**base, "name": name,
            "description": (f"MQAR at {cell.length} tokens, {cell.pairs} pairs: {what}, rates chosen on validation, "
                            f"{len(SEEDS)} seeds."),
            "report": {"plots": ["metric_vs_state", "metric_vs_time"], "baseline": False},
            "mixers": mixers, "paper": paper, "claims": claims}


def _added_text(kind: str, experiment: dict[str, Any], length: int = 64) -> str:
    """The TOML text of an added file, a header saying how it was made above the tables."""
    cell = CELLS[length]
    header = [
        f"# The recall sweep's {kind} file, written by tokenmix.training.recallsweep",
        f"# (scripts/zoology_files.py); its claims were fixed before any row. As the {length}-token file: a "
        "learning-rate",
        f"# stage on seed 0 ({', '.join(map(str, LRS))}, chosen on validation), then {len(SEEDS)} seeds at the",
        f"# chosen rate. {cell.steps} steps of {BATCH} sequences.",
    ]
    return "\n".join(header) + "\n" + to_toml(experiment)


def window_file_text() -> str:
    """The TOML text of :data:`WINDOW_FILE`."""
    return _added_text("sliding-window", window_experiment())


# BaseConv as the sweep runs it has Based's short filter (3 taps), which in 2 layers sees 4 tokens back; Zoology's
# BaseConv also takes a long filter, one tap per position (``kernel_size=None``), added to tokenmix after the files
# above were registered and run. Its own file at 64 tokens, with the 64-token file's softmax attention and short
# BaseConv beside it (the same configurations: recorded once and reused), at widths 64 and 128 (Zoology: the
# gated convolutions recover recall with width).
CONV_FILE = "002-zoology-mqar-64-conv"
CONV_LENGTH = 64
CONV_WIDTHS = (64, 128)
CONV = ("Arora et al. (2023), §5 and Figure 2: BaseConv gates a convolution whose filter may span the whole sequence "
        "(a long convolution), and the gated convolutions recover recall with width")
REACH = ("added here: the short filter sees 4 tokens back in 2 layers (the value asked for lies that close for 1.7 % "
         "of the queries), the long filter every earlier token")


def _conv_label(width: int) -> str:
    return f"baseconv-long-d{width}"


def conv_claims() -> list[dict[str, Any]]:
    """The claims of :data:`CONV_FILE` (one Holm family, fixed before its rows)."""
    small, large = (_conv_label(w) for w in CONV_WIDTHS)
    return [
        _claim("BaseConv with a long filter (one tap per position) recalls more than with its short 3-tap filter at "
               "width 64 and 64 tokens", REACH, small, "baseconv-d64", added=True),
        _claim("Attention recalls more than BaseConv with a long filter at width 64 and 64 tokens", ZOOLOGY,
               "softmax-d64", small),
        _claim(f"BaseConv with a long filter recalls more with a larger width: {CONV_WIDTHS[1]} above "
               f"{CONV_WIDTHS[0]}, at 64 tokens", CONV, large, small),
    ]


def conv_experiment() -> dict[str, Any]:
    """:data:`CONV_FILE` as a dict: the 64-token file's task, model and training; four labels."""
    base = experiment(CONV_LENGTH)
    mixers: list[dict[str, Any]] = [{"label": "softmax-d64", "name": "softmax", "model": {"dim": 64}},
                                    {"label": "baseconv-d64", "name": "baseconv", "model": {"dim": 64}}]
    mixers += [{"label": _conv_label(w), "name": "baseconv", "options": {"kernel_size": None}, "model": {"dim": w}}
               for w in CONV_WIDTHS]
    paper = {
        "key": "005",
        "title": f"Recall at {CONV_LENGTH} tokens: BaseConv with a long filter",
        "data": (f"{_as_file()}; BaseConv with a long filter ({CONV_LENGTH} taps, one per position) at widths "
                 f"{' and '.join(map(str, CONV_WIDTHS))}, beside that file's softmax attention and BaseConv with "
                 f"its short filter (3 taps) at width 64"),
        "scale": (f"as `002-zoology-mqar-{CONV_LENGTH}` (its training, rates and seeds); added after that file ran, "
                  f"since the long filter came later; its softmax and short-filter runs are that file's (the same "
                  f"configurations: recorded once and reused). Zoology's filters are implicit (generated by a "
                  f"small network) as well as explicit; here explicit. Not run: 128 tokens (the length axis is the "
                  f"other mechanisms')"),
    }
    return _added_file(base, CONV_FILE, (f"BaseConv with a long filter (widths "
                                         f"{' and '.join(map(str, CONV_WIDTHS))}) beside softmax attention and "
                                         f"BaseConv's short filter"), mixers, paper, conv_claims())


def conv_file_text() -> str:
    """The TOML text of :data:`CONV_FILE`."""
    return _added_text("long-convolution", conv_experiment())


# DeltaNet, Gated DeltaNet and Mamba-2 were swept bare, without the short convolution their papers put on the
# projected inputs (a one-layer shift that lets a key carry the token before it); tokenmix's ``conv_size`` came after
# the files above ran. Their own file per length, beside that length's file's runs of the same layers bare, of
# linear attention and of softmax attention (the same configurations: recorded once and reused). The 128-token one
# was registered after the 64-token one had shown DeltaNet's filter at work, to ask whether it holds with length.
SHORTCONV_FILES = {64: "002-zoology-mqar-64-shortconv", 128: "002-zoology-mqar-128-shortconv"}
SHORTCONV_FILE = SHORTCONV_FILES[64]
SHORTCONV_LENGTH = 64
SHORTCONV_SIZE = 4  # the taps of all three papers' layers (fla's conv_size, Mamba-2's d_conv)
SHORTCONV_MECHANISMS = {"deltanet": "DeltaNet", "gated_deltanet": "Gated DeltaNet", "mamba2": "Mamba-2"}
LAYERS = ("Yang et al. (2024) §4 and Yang, Kautz, Hatamizadeh (2025) §3.3 put a short causal convolution on q, k "
          "and v, Dao, Gu (2024) §7 on Mamba-2's x, B and C: a token's key then carries the token before it; added "
          "here: none of the three reports MQAR without it")


def _shortconv_label(label: str) -> str:
    return f"{label}-conv{SHORTCONV_SIZE}-d64"


def shortconv_claims(length: int = SHORTCONV_LENGTH) -> list[dict[str, Any]]:
    """The claims of the short-convolution file at ``length`` tokens (one Holm family, fixed before its rows)."""
    return [
        *(_claim(f"{name} with its short convolution recalls more than without it at width 64 and {length} tokens",
                 LAYERS, _shortconv_label(label), f"{label}-d64", added=True)
          for label, name in SHORTCONV_MECHANISMS.items()),
        _claim("DeltaNet as its paper builds it (with the short convolution) recalls more than linear attention at "
               f"width 64 and {length} tokens", DELTANET, _shortconv_label("deltanet"), "linear-d64"),
        _claim(f"Attention recalls more than DeltaNet with its short convolution at width 64 and {length} tokens",
               ZOOLOGY, "softmax-d64", _shortconv_label("deltanet")),
    ]


def shortconv_experiment(length: int = SHORTCONV_LENGTH) -> dict[str, Any]:
    """The short-convolution file at ``length`` tokens as a dict: that length's file's task, model and training;
    the three layers with their short convolution beside that file's runs of them bare, of linear and of softmax
    attention."""
    base = experiment(length)
    mixers: list[dict[str, Any]] = [{"label": f"{label}-d64", "name": label, "model": {"dim": 64}}
                                    for label in ("softmax", "linear", *SHORTCONV_MECHANISMS)]
    mixers += [{"label": _shortconv_label(label), "name": label, "options": {"conv_size": SHORTCONV_SIZE},
                "model": {"dim": 64}} for label in SHORTCONV_MECHANISMS]
    names = ", ".join(SHORTCONV_MECHANISMS.values())
    later = ("added after that file ran, since the option came later" if length == SHORTCONV_LENGTH else
             f"registered while that file ran, after the {SHORTCONV_LENGTH}-token file "
             f"(`{SHORTCONV_FILES[SHORTCONV_LENGTH]}`) had shown DeltaNet's filter at work, to ask whether it holds "
             f"as the sequence grows")
    paper = {
        "key": "005",
        "title": f"Recall at {length} tokens: {names} with their short convolution",
        "data": (f"{_as_file(length)}; width 64; {names} with a short causal convolution of {SHORTCONV_SIZE} taps on "
                 f"their projected inputs (as their papers build the layers), beside that file's runs of the same "
                 f"layers without it, of linear attention and of softmax attention"),
        "scale": (f"as `002-zoology-mqar-{length}` (its training, rates and seeds); {later}; its other runs are that "
                  f"file's (the same configurations: recorded once and reused)"
                  + (". Not run: 128 tokens" if length == SHORTCONV_LENGTH else "")),
    }
    return _added_file(base, SHORTCONV_FILES[length], f"{names} with their short convolution (width 64) beside the "
                                                      f"same layers without it, linear and softmax attention", mixers,
                       paper, shortconv_claims(length), length)


def shortconv_file_text(length: int = SHORTCONV_LENGTH) -> str:
    """The TOML text of the short-convolution file at ``length`` tokens."""
    return _added_text("short-convolution", shortconv_experiment(length), length)


def write_files(folder: Path) -> list[Path]:
    """Write every file of :data:`CELLS`, :data:`WINDOW_FILE`, :data:`CONV_FILE` and :data:`SHORTCONV_FILE` into
    ``folder``; the paths written."""
    paths = []
    for length in CELLS:
        path = Path(folder) / f"002-zoology-mqar-{length}.toml"
        path.write_text(file_text(length))
        paths.append(path)
    for name, text in ((WINDOW_FILE, window_file_text()), (CONV_FILE, conv_file_text()),
                       *((SHORTCONV_FILES[n], shortconv_file_text(n)) for n in SHORTCONV_FILES)):
        path = Path(folder) / f"{name}.toml"
        path.write_text(text)
        paths.append(path)
    return paths
