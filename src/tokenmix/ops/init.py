"""Model-wide weight initialisation, applied to every parameter of every mixer alike, by role.

Chen (2023) §6 initialises "all weights" from N(0, 0.01) and all biases to zero. Applying that rule to a
whole model -- embeddings, every mixer's parameters whatever their module type, the FFNs and the head --
is what makes a comparison between mechanisms start from the same distribution; a mixer keeps its own
default initialisation only when the model sets none.

Which rule a parameter gets is its *role*, not its name: a module may declare the roles of its own
parameters with a ``parameter_roles()`` method (e.g. the Contextualizer's biases ``b_U``, ``b_V``, ``b_W``,
whose names do not end in ``bias``, and its learned default context, which keeps the value its paper starts
from). Undeclared parameters fall back to the name: a last component ``bias`` is a bias, anything else a
weight; normalisation layers keep the identity transform.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

__all__ = ["normal_init_", "init_roles", "is_bias", "NORM_LAYERS", "ROLES"]

# Normalisation layers keep the identity transform (gain 1, shift 0) under every initialisation rule.
NORM_LAYERS = (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.RMSNorm) \
    if hasattr(nn, "RMSNorm") else (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d)

# role -> what normal_init_ does with it
ROLES = {
    "weight": "N(0, std)",
    "bias": "zero",
    "norm_gain": "one",
    "norm_shift": "zero",
    "keep": "the module's own initialisation (its paper's starting value)",
}


def is_bias(name: str) -> bool:
    """A parameter is a bias by name when its name's last component is ``bias`` (``proj.bias``, ``bias``)."""
    return name.rsplit(".", 1)[-1] == "bias"


def _local_roles(module: nn.Module) -> dict[str, str]:
    declared = module.parameter_roles() if hasattr(module, "parameter_roles") else {}
    roles = {}
    for name, _ in module.named_parameters(recurse=False):
        if name in declared:
            role = declared[name]
        elif isinstance(module, NORM_LAYERS):
            role = "norm_shift" if name == "bias" else "norm_gain"
        else:
            role = "bias" if is_bias(name) else "weight"
        if role not in ROLES:
            raise ValueError(f"{type(module).__name__}.parameter_roles(): unknown role {role!r} for {name!r}; "
                             f"roles: {sorted(ROLES)}")
        roles[name] = role
    return roles


def init_roles(module: nn.Module) -> dict[str, str]:
    """Every parameter of ``module`` (full dotted name) -> its role (a key of :data:`ROLES`)."""
    roles = {}
    for prefix, sub in module.named_modules():
        for name, role in _local_roles(sub).items():
            roles[f"{prefix}.{name}" if prefix else name] = role
    return roles


@torch.no_grad()
def normal_init_(module: nn.Module, std: float) -> nn.Module:
    """Initialise ``module`` in place by role: weights ~ N(0, ``std``), biases zero, normalisation gains one
    and shifts zero, ``keep`` parameters untouched. Buffers (e.g. Performer's random features) are left
    alone. Returns ``module``."""
    if isinstance(std, bool) or not isinstance(std, (int, float)) or not math.isfinite(std) or std <= 0:
        raise ValueError(f"init std must be a positive finite number, got {std!r}")
    params = dict(module.named_parameters())
    for name, role in init_roles(module).items():
        param = params.get(name)
        if param is None:  # a shared parameter, reached first under another name
            continue
        if role == "weight":
            nn.init.normal_(param, 0.0, std)
        elif role in ("bias", "norm_shift"):
            nn.init.zeros_(param)
        elif role == "norm_gain":
            nn.init.ones_(param)
    return module
