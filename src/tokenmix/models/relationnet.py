"""The single-layer benchmark network of Yamada et al. (2022) §3.2.1."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..protocols import PAPER_000_MIXER_OPTIONS
from ..registry import create_mixer, mixer_info
from ..validate import check_positive_int
from .layers import Positions, check_dropout, check_ids, check_mask, mask_for_blocks, mixer_kwargs

__all__ = ["RelationNet", "paper_000_mixer_options"]


def paper_000_mixer_options(mixer: str, inner_dim: int | None) -> dict[str, object]:
    """Yamada et al.'s (2022) mixer settings for a mixing depth ``d = inner_dim`` (see :class:`RelationNet`),
    for the options ``mixer`` has; empty when ``inner_dim`` is None."""
    if inner_dim is None:
        return {}
    # eqs. 1-12 have no biases (W_Q, W_K, W_V, W_G, W_H, W only): every mixer follows them, so Relation does
    # not carry 192 bias parameters that attention and linear attention lack (tokenmix.protocols)
    options = mixer_info(mixer).options
    if "inner_dim" not in options:  # the Baseline's point-wise layers are not eqs. 1-12: they keep their biases
        return {}
    wanted = {"inner_dim": inner_dim, **PAPER_000_MIXER_OPTIONS}
    return {k: v for k, v in wanted.items() if k in options}


class RelationNet(nn.Module):
    """The single-layer benchmark network of Yamada et al. (2022) section 3.2.1::

        h = embedding(ids) + PE          # token embedding + sinusoidal positional encoding
        h = mixer(h, mask)               # Attention (eq. 4), Linear Attention (eqs. 5-6), Relation (eqs. 7-12)
        h = relu(h W + b)                # a single point-wise MLP layer
        logits = dropout(h[:, 0]) W_o + b_o   # the first token's vector -> linear head

    ``init="glorot"``: every ``nn.Linear`` / ``nn.Embedding`` weight (the mixer's included) is Glorot-uniform
    and every such bias zero ("for all networks", Yamada et al. (2022) section 3.2.1); other parameters a mixer owns
    keep its
    own initialisation. ``init="default"`` keeps PyTorch's / the mixer's. ``dropout`` defaults to Yamada et al.'s
    (2022) 0.5.

    ``dim`` is the embedding width ``m`` (Yamada et al. (2022) uses 100, GloVe-initialised; GloVe cannot be fetched
    offline,
    so the embeddings here are Glorot-random). ``inner_dim`` is Yamada et al.'s (2022) separate mixing depth ``d`` (64,
    128 or
    256): every mixer with an ``inner_dim`` option projects ``m -> d`` (``W_Q, W_K, W_V in R^{m x d}``,
    eqs. 1-3; ``W_G, W_H``, eqs. 7-8), and, because eqs. 4, 5 and 12 have no output projection and eq. 5 no
    denominator, gets ``out_proj=False``, ``normalize=False`` and ``bias=False`` (eqs. 1-12 have no biases) where it
    has those options; the point-wise
    layer then reads ``d``-wide vectors (the mixer's ``out_dim``). ``inner_dim=None`` keeps the mixers'
    own defaults (width ``dim``, output projections on).

    Yamada et al.'s (2022) Baseline is ``RelationNet(..., mixer="mlp")``: the ``"mlp"`` mixer is a point-wise two-layer
    MLP of ``4 dim^2`` parameters at ``bias=False`` (the budget of attention's Q, K, V, output
    projections), so mixer + point-wise layer are the Baseline's three point-wise layers and it sees no
    context. ``hidden`` (default: the mixer's output width) is the width of the point-wise layer.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        mixer: str,
        dim: int,
        *,
        max_len: int = 512,
        hidden: int | None = None,
        dropout: float = 0.5,
        mixer_options: dict[str, object] | None = None,
        num_heads: int | None = None,
        init: str = "glorot",
        inner_dim: int | None = None,
    ) -> None:
        super().__init__()
        owner = "RelationNet"
        for value, what in ((vocab_size, "vocab_size"), (num_classes, "num_classes"), (dim, "dim"),
                            (max_len, "max_len")):
            check_positive_int(value, what, owner)
        if inner_dim is not None:
            check_positive_int(inner_dim, "inner_dim", owner)
        check_dropout(dropout, owner)
        if init not in ("glorot", "default"):
            raise ValueError(f"{owner}: init must be 'glorot' or 'default', got {init!r}")
        if mixer_options is not None and not isinstance(mixer_options, dict):
            raise ValueError(f"{owner}: mixer_options must be a dict or None, got {type(mixer_options).__name__}")
        self.vocab_size = vocab_size
        self.num_classes = num_classes
        self.mixer_name = mixer
        self.max_len = max_len
        self.embedding = nn.Embedding(vocab_size, dim)
        self.positions = Positions("sinusoidal", max_len, dim, owner)
        kwargs = mixer_kwargs(mixer, num_heads, max_len, owner)
        options = {**paper_000_mixer_options(mixer, inner_dim), **(mixer_options or {})}
        self.mixer = create_mixer(mixer, dim, causal=False, **kwargs, **options)
        width = getattr(self.mixer, "out_dim", dim)
        hidden = width if hidden is None else hidden
        check_positive_int(hidden, "hidden", owner)
        self.pointwise = nn.Linear(width, hidden)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, num_classes)
        if init == "glorot":
            self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Glorot-uniform weights and zero biases for every Linear / Embedding (Yamada et al. (2022) section 3.2.1)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.xavier_uniform_(module.weight)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """``ids`` (B, N) integer, ``mask`` (B, N) bool or None -> logits (B, num_classes).

        The first token's vector is zero when the first token is padding (see the module docstring).
        """
        owner = "RelationNet"
        ids = check_ids(ids, self.vocab_size, self.max_len, owner)
        if mask is not None:
            mask = check_mask(mask, ids, owner)
        h = self.positions(self.embedding(ids))
        h = self.mixer(h, mask_for_blocks(mask, [self.mixer_name], owner))
        first = F.relu(self.pointwise(h[:, 0]))  # the point-wise layer, needed only at the first token
        if mask is not None:
            first = first * mask[:, :1].to(first.dtype)
        return self.head(self.drop(first))
