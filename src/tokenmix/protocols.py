"""Every per-paper preset in one place: the model protocols (which network a paper trains, and the settings it
fixes), the training presets (optimiser, learning rate, schedule, batch, stopping) and the initialisations,
each setting with the paper and section it comes from.

* :data:`MODEL_PROTOCOLS`: ``task.build_model(mixer, ..., protocol=name)`` (``[model] protocol`` of an
  experiment file; ``tokenmix train --protocol``).
* :data:`TRAIN_PRESETS`: ``TrainConfig.preset(name, **overrides)`` (``[train] preset``; ``tokenmix train
  --train-preset``).
* :data:`PAPER_000_MIXER_OPTIONS`: the mixer options of Yamada et al. (2022) eqs. 1-12 at a separate mixing
  depth ``d`` (``RelationNet(inner_dim=d)``).
* :data:`PAPER_004_INIT_STD`: Chen (2023)'s initialisation, also the ``lm`` task's ``paper`` preset.

A leaf module (it imports nothing from tokenmix), so the tasks, the models and the run layer all read it.
The papers are cited by author and year; docs/papers.md maps them to their sources.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MODEL_PROTOCOLS", "TRAIN_PRESETS", "PAPER_000_MIXER_OPTIONS", "PAPER_004_INIT_STD"]

# Chen (2023) §6: "all weights" drawn from N(0, 0.01), every bias zero (tokenmix.ops.init.normal_init_).
PAPER_004_INIT_STD = 0.01

# Yamada et al. (2022) eqs. 1-12 at a mixing depth d = inner_dim: W_Q, W_K, W_V (eqs. 1-3) and W_G, W_H
# (eqs. 7-8) project m -> d, with no output projection (eqs. 4, 5 and 12 end at V, V and phi(.)), no
# denominator in eq. 5's linear attention, and no biases (eqs. 1-12 have none). A mixer takes those of these
# options it has (RelationNet).
PAPER_000_MIXER_OPTIONS: dict[str, Any] = {"out_proj": False, "normalize": False, "bias": False}

# The model protocols: the task kinds each applies to ("kinds"), the network it builds ("network": None is
# the task's own default model), the one mixer it requires ("mixer"), whether it has a single mixing layer
# ("single_layer": depth must then be 1), the model-class options it fixes unless the experiment sets them
# ("options"), and whether the point-wise "mlp" baseline has a place in it ("baseline").
MODEL_PROTOCOLS: dict[str, dict[str, Any]] = {
    # The library's models: a mean-pooling encoder classifier (per-position logits for masked language modelling), a
    # pre-LN causal LM, a ViT over 4 x 4 patches.
    "default": {"kinds": ("classification", "language_model", "masked_lm", "image"), "network": None,
                "mixer": None, "single_layer": False, "options": {}, "baseline": True},
    "paper-000": {
        "kinds": ("classification",),  # Yamada et al. (2022) §3.2.2-3.2.3: text classification (GLUE, IMDb)
        "network": "RelationNet",  # Yamada et al. (2022) §3.2.1: embedding + PE, one mixer, one MLP, first token
        "mixer": None,  # Yamada et al. (2022) §3.1: Attention, Linear Attention, Relation, and the Baseline
        "single_layer": True,  # Yamada et al. (2022) §3.2.1: a single mixing layer
        "options": {
            "dropout": 0.5,  # Yamada et al. (2022) §3.2.2: dropout rate 0.5
            "init": "glorot",  # Yamada et al. (2022) §3.2.1: Glorot initialisation "for all networks"
        },
        "baseline": True,  # Yamada et al. (2022) §3.2.1: the point-wise Baseline is one of the compared networks
    },
    "paper-003": {
        "kinds": ("classification",),  # Maupomé & Meurs (2021) §3: binary text classification (MR, CR, SUBJ, ...)
        "network": "ContextualizerClassifier",  # Maupomé & Meurs (2021) §3: eq. 1 -> Contextualizer -> head
        "mixer": "contextualizer",  # Maupomé & Meurs (2021) §2: the network is the mechanism's own
        "single_layer": True,  # Maupomé & Meurs (2021) §3: one Contextualizer (its K steps are not layers)
        "options": {
            "context": "random",  # Maupomé & Meurs (2021) §3.1 (Table 3), §3.2: c^(0) ~ U(-1, 1), per document
        },
        "baseline": False,  # the Contextualizer's own network has no place for the point-wise baseline
    },
    "paper-004": {
        "kinds": ("language_model",),  # Chen (2023) §6: language modelling (training cost)
        "network": None,  # Chen (2023) §4: the pre-LN decoder, the task's CausalLM
        "mixer": None,
        "single_layer": False,
        "options": {
            "init_std": PAPER_004_INIT_STD,  # Chen (2023) §6: N(0, 0.01) initialisation
            "dropout": 0.1,  # Chen (2023) Table 1: dropout 0.1
        },
        "baseline": True,
    },
}

# The training presets, as TrainConfig fields on top of its defaults.
TRAIN_PRESETS: dict[str, dict[str, Any]] = {
    # Not a paper's: the dataclass defaults (AdamW, weight decay 0.01, cosine, clipping 1.0, batch 32) with a
    # higher learning rate, for short CPU runs.
    "quick": {"lr": 3e-3},
    "paper-004": {
        "optimizer": "adamw",  # Chen (2023) Table 1: AdamW
        "lr": 1e-3,  # Chen (2023) Table 1: learning rate 0.001
        "betas": (0.9, 0.999),  # Chen (2023) Table 1: betas (0.9, 0.999)
        "weight_decay": 0.01,  # Chen (2023) gives none: PyTorch's AdamW default
        "schedule": "constant",  # Chen (2023) Table 1: one learning rate, no schedule
        "warmup_steps": 0,  # Chen (2023) mentions no warm-up
        "grad_clip": None,  # Chen (2023) mentions no clipping
        "batch_size": 64,  # Chen (2023) Table 1: batch 64
    },
    "paper-000": {
        "optimizer": "adam",  # Yamada et al. (2022) §3.2.2: Adam "with default hyperparameter settings"
        "lr": 1e-3,  # Adam's default (Kingma & Ba), as Yamada et al. (2022) §3.2.2 use it
        "betas": (0.9, 0.999),  # Adam's default
        "eps": 1e-8,  # Adam's default
        "weight_decay": 0.0,  # Adam's default: none
        "schedule": "constant",  # Yamada et al. (2022) §3.2.2: no schedule is mentioned
        "warmup_steps": 0,
        "grad_clip": None,
        "batch_size": 256,  # Yamada et al. (2022) §3.2.2: minibatches of 256
        # Yamada et al. (2022)'s patience 5 belongs to their GLUE runs (§3.2.2); the time benchmark (§3.2.3) states
        # no stopping rule, and patience 5 could end a run before its 10-in-a-row target streak completes.
        "patience": None,
        "target": 0.8,  # Yamada et al. (2022) §3.2.3: time until the validation accuracy reaches 0.8
        "target_k": 10,  # Yamada et al. (2022) §3.2.3: ... "consecutively 10 times"
    },
    "paper-003": {
        "optimizer": "adam",  # Maupomé & Meurs (2021) §3: Adam
        "lr": 1e-3,  # Maupomé & Meurs (2021) give none: Adam's default
        "weight_decay": 0.0,  # Adam's default: none
        "schedule": "constant",  # Maupomé & Meurs (2021) §3: no schedule is mentioned
        "warmup_steps": 0,
        "grad_clip": None,
        "batch_size": 64,  # Maupomé & Meurs (2021) §3: batches of 64 documents
        "epochs": 10,  # Maupomé & Meurs (2021) §3: 10 epochs
    },
}
