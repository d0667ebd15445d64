"""Model-wide weight initialisation, applied to every parameter of every mixer alike.

Chen (2023) §6 initialises "all weights" from N(0, 0.01) and all biases to zero. Applying that rule to a
whole model -- embeddings, every mixer's parameters whatever their module type, the FFNs and the head --
is what makes a comparison between mechanisms start from the same distribution; a mixer keeps its own
default initialisation only when the model sets none.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

__all__ = ["normal_init_", "is_bias", "NORM_LAYERS"]

# Normalisation layers keep the identity transform (gain 1, shift 0) under every initialisation rule.
NORM_LAYERS = (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.RMSNorm) \
    if hasattr(nn, "RMSNorm") else (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d)


def is_bias(name: str) -> bool:
    """A parameter is a bias when its name's last component is ``bias`` (``proj.bias``, ``bias``)."""
    return name.rsplit(".", 1)[-1] == "bias"


@torch.no_grad()
def normal_init_(module: nn.Module, std: float) -> nn.Module:
    """Initialise ``module`` in place: every parameter ~ N(0, ``std``), except biases (zero) and the
    gains/shifts of normalisation layers (one/zero). Buffers (e.g. Performer's random features) are left
    alone. Returns ``module``."""
    if isinstance(std, bool) or not isinstance(std, (int, float)) or not math.isfinite(std) or std <= 0:
        raise ValueError(f"init std must be a positive finite number, got {std!r}")
    norm_params: set[int] = set()
    for layer in module.modules():
        if isinstance(layer, NORM_LAYERS):
            for name, param in layer.named_parameters(recurse=False):
                (nn.init.zeros_ if name == "bias" else nn.init.ones_)(param)
                norm_params.add(id(param))
    for name, param in module.named_parameters():
        if id(param) in norm_params:
            continue
        if is_bias(name):
            nn.init.zeros_(param)
        else:
            nn.init.normal_(param, 0.0, std)
    return module
