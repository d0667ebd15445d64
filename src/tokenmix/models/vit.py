"""A Vision Transformer (Dosovitskiy et al., 2020) with an interchangeable token mixer.

:class:`ViT` cuts an image into non-overlapping ``patch x patch`` patches (a strided convolution), adds a
learned position embedding over the patch grid, runs ``depth`` pre-LN blocks whose mixer is any
registered mechanism, applies a final LayerNorm, pools, and classifies with a linear head.

As everywhere in :mod:`tokenmix.models`, the mechanism is reached only through the registry; what the
model passes to it is decided from :func:`tokenmix.mixer_info` alone:

* 1-D mixers (``spatial=False``) mix the flattened patch sequence (row-major), with a learned CLS token
  prepended when ``pooling="cls"``.
* spatial mixers (``spatial=True``, the vision family of Ruggeri (2022) section 3: Swin, PVT, Twins,
  ScalableViT) get the patch grid ``hw=(Hp, Wp)`` and have no CLS token (it has no place on the grid),
  so they use ``pooling="mean"``.
* ``mixer`` is a name or a layer pattern (:mod:`tokenmix.models.patterns`): ``["twins_lsa", "twins_gsa"]``
  is Twins' SSSA, ``["scalable_iwsa", "scalable_ssa"]`` ScalableViT's alternation. For a single plain name,
  ``mixer_info(mixer).alternate`` (e.g. Swin's shifted windows, SW-MSA in every second layer) is merged
  into the mixer options of the blocks with odd index (1, 3, ...).
* every mixer gets ``max_len`` = the number of tokens it mixes (patches, plus the CLS token if any), which
  is what the mechanisms flagged ``needs_max_len`` require; ``num_heads`` goes to the mixers with heads.
* ``init_std``: every parameter re-drawn from ``N(0, init_std)``, biases zero, norm gains one, as in the
  other models (:func:`tokenmix.ops.init.normal_init_`); None keeps the defaults below.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..mixers.base import autocast_enabled
from ..ops.init import normal_init_
from ..registry import create_mixer, mixer_info
from ..validate import check_positive_int
from .layers import FeedForward, check_dropout, check_init_std
from .patterns import layer_mixers, pattern_names

__all__ = ["ViT"]

POOLINGS = ("cls", "mean")


def _pair(value: object, what: str, owner: str) -> tuple[int, int]:
    """An int ``n`` -> ``(n, n)``; a pair of positive ints stays as is."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{owner}: {what} must be an int or a pair (H, W), got {value!r}")
        for v in value:
            check_positive_int(v, what, owner)
        return int(value[0]), int(value[1])
    check_positive_int(value, what, owner)
    return int(value), int(value)


class VisionBlock(nn.Module):
    """A pre-LN layer like :class:`tokenmix.models.Block`, that also hands a spatial mixer its grid::

        x = x + dropout(mixer(layernorm1(x), hw=hw))    # hw only for spatial mixers
        x = x + dropout(ffn(layernorm2(x)))

    A mixer with its own residual and norm (``mixer_info(mixer).residual``) replaces the first line whole
    (``x = mixer(x)``), as in :class:`tokenmix.models.Block`.

    ``ffn`` is the :class:`~tokenmix.models.FeedForward` of ViT (GELU, hidden width ``mlp_ratio * dim``).
    ``mixer_kwargs`` go to :func:`tokenmix.create_mixer` unchanged (``causal`` is always False).
    """

    def __init__(self, dim: int, mixer: str, *, hidden: int, dropout: float, mixer_kwargs: dict[str, object]) -> None:
        super().__init__()
        self.mixer_name = mixer
        self.spatial = mixer_info(mixer).spatial
        self.own_residual = mixer_info(mixer).residual
        self.ln1 = nn.Identity() if self.own_residual else nn.LayerNorm(dim)
        self.mixer = create_mixer(mixer, dim, causal=False, **mixer_kwargs)
        self.ln2 = nn.LayerNorm(dim)
        self.ffn = FeedForward(dim, hidden, 0.0, "gelu")
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, hw: tuple[int, int] | None = None) -> Tensor:
        """``x`` (B, N, dim) -> (B, N, dim); ``hw`` is the grid with ``H * W = N`` (spatial mixers only)."""
        h = self.ln1(x)
        h = self.mixer(h, hw=hw) if self.spatial else self.mixer(h)
        x = h if self.own_residual else x + self.drop(h)
        return x + self.drop(self.ffn(self.ln2(x)))


class ViT(nn.Module):
    """Vision Transformer image classifier with an interchangeable token mixer.

    Args:
        image_size: ``H`` or ``(H, W)`` of the input images. A size that is not a multiple of the patch
            is allowed: the image is zero-padded at the bottom and on the right up to the next multiple,
            so the grid is ``(ceil(H / ph), ceil(W / pw))`` and no pixel is dropped.
        patch_size: ``p`` or ``(ph, pw)``; the patch embedding is ``Conv2d(in_chans, dim, p, stride=p)``.
        in_chans: channels ``C`` of the images.
        num_classes: size of the logits.
        mixer: registry name of the token mixer, or a layer pattern (all spatial or all 1-D); it must be able
            to run bidirectionally (a causal-only mechanism raises ``ValueError`` naming it).
        dim: model width.
        depth: number of blocks.
        num_heads: passed to the mixers that have heads (``MixerInfo.heads``), when given.
        mlp_ratio: hidden width of the FFN is ``round(mlp_ratio * dim)``.
        dropout: after the position embedding and on both residual branches.
        pooling: ``"cls"`` (a learned CLS token is prepended and its output classified) or ``"mean"``
            (the mean of the patch tokens). Default: ``"mean"`` for spatial mixers, which cannot take a
            CLS token (``"cls"`` with one is a ``ValueError``), ``"cls"`` otherwise.
        mixer_options: mechanism options for every block. A single mechanism's ``alternate`` options are
            applied on top of them in the blocks with odd index (1, 3, ...).
        init_std: see the module docstring.

    ``forward(images)``: ``images`` (B, in_chans, H, W) floating point with ``(H, W) == image_size``
    -> logits (B, num_classes).
    """

    def __init__(
        self,
        image_size: int | tuple[int, int],
        patch_size: int | tuple[int, int],
        in_chans: int,
        num_classes: int,
        mixer: str | list,
        dim: int,
        depth: int,
        num_heads: int | None = None,
        *,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
        pooling: str | None = None,
        mixer_options: dict[str, object] | None = None,
        init_std: float | None = None,
    ) -> None:
        super().__init__()
        owner = "ViT"
        self.image_size = _pair(image_size, "image_size", owner)
        self.patch_size = _pair(patch_size, "patch_size", owner)
        for value, what in ((in_chans, "in_chans"), (num_classes, "num_classes"), (dim, "dim"), (depth, "depth")):
            check_positive_int(value, what, owner)
        if num_heads is not None:
            check_positive_int(num_heads, "num_heads", owner)
        check_dropout(dropout, owner)
        check_init_std(init_std, owner)
        if isinstance(mlp_ratio, bool) or not isinstance(mlp_ratio, (int, float)) or mlp_ratio <= 0:
            raise ValueError(f"{owner}: mlp_ratio must be a positive number, got {mlp_ratio!r}")
        hidden = max(1, round(mlp_ratio * dim))
        if mixer_options is not None and not isinstance(mixer_options, dict):
            raise ValueError(f"{owner}: mixer_options must be a dict or None, got {type(mixer_options).__name__}")

        names, spatial, pooling = _mixers_and_pooling(mixer, pooling, owner)

        (h, w), (ph, pw) = self.image_size, self.patch_size
        self.grid = (math.ceil(h / ph), math.ceil(w / pw))
        self.pad = (-w % pw, -h % ph)  # (right, bottom) zero padding up to a multiple of the patch
        self.in_chans = in_chans
        self.num_classes = num_classes
        self.mixer_names = names
        self.spatial = spatial
        self.pooling = pooling
        num_patches = self.grid[0] * self.grid[1]
        self.num_tokens = num_patches + (1 if pooling == "cls" else 0)

        self.patch_embed = nn.Conv2d(in_chans, dim, kernel_size=(ph, pw), stride=(ph, pw))
        if pooling == "cls":
            self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.num_tokens, dim))
        self.drop = nn.Dropout(dropout)

        self.blocks = nn.ModuleList()
        for layer in layer_mixers(mixer, depth, mixer_options, owner):
            heads = mixer_info(layer.name).heads(num_heads)
            common = {"max_len": self.num_tokens, **({"num_heads": heads} if heads is not None else {})}
            self.blocks.append(VisionBlock(dim, layer.name, hidden=hidden, dropout=dropout,
                                           mixer_kwargs={**common, **dict(layer.options)}))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

        if init_std is not None:
            normal_init_(self, init_std)
        else:
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
            if pooling == "cls":
                nn.init.trunc_normal_(self.cls_token, std=0.02)

    def extra_repr(self) -> str:
        return (f"image_size={self.image_size}, patch_size={self.patch_size}, grid={self.grid}, "
                f"mixer={'/'.join(self.mixer_names)!r}, pooling={self.pooling!r}")

    def _check_images(self, images: object) -> Tensor:
        owner = "ViT"
        if not isinstance(images, Tensor):
            raise ValueError(f"{owner}: images must be a torch.Tensor, got {type(images).__name__}")
        expected = (self.in_chans, *self.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected or images.shape[0] == 0:
            raise ValueError(f"{owner}: images must have shape (B, C, H, W) = (B, {', '.join(map(str, expected))}) "
                             f"with B >= 1, got {tuple(images.shape)}")
        if not images.is_floating_point():
            raise ValueError(f"{owner}: images must be floating point (e.g. uint8 pixels / 255.0), got {images.dtype}")
        weight = self.patch_embed.weight
        if images.dtype != weight.dtype and not autocast_enabled(images.device.type):
            raise ValueError(f"{owner}: images have dtype {images.dtype} but the model is {weight.dtype}; "
                             f"cast one to the other")
        return images

    def features(self, images: Tensor) -> Tensor:
        """The token outputs after the final LayerNorm: (B, num_tokens, dim), CLS first if any."""
        images = self._check_images(images)
        if any(self.pad):
            images = F.pad(images, (0, self.pad[0], 0, self.pad[1]))
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # (B, Hp*Wp, dim), row-major
        if self.pooling == "cls":
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.drop(x + self.pos_embed)
        hw = self.grid if self.spatial else None
        for block in self.blocks:
            x = block(x, hw)
        return self.norm(x)

    def forward(self, images: Tensor) -> Tensor:
        """``images`` (B, in_chans, H, W) floating point -> logits (B, num_classes)."""
        x = self.features(images)
        pooled = x[:, 0] if self.pooling == "cls" else x.mean(dim=1)
        return self.head(pooled)


def _mixers_and_pooling(mixer: str | list, pooling: str | None, owner: str) -> tuple[list[str], bool, str]:
    """The mechanisms of ``mixer`` (each able to run bidirectionally), whether they are spatial (all or none), and
    the pooling (its default filled in, checked against them)."""
    names = pattern_names(mixer, owner)  # ValueError listing the registered names if unknown
    for name in names:
        if not mixer_info(name).bidirectional:
            raise ValueError(f"{owner}: mixer {name!r} is causal only (it cannot run bidirectionally), "
                             f"so it cannot mix image patches")
    kinds = {mixer_info(name).spatial for name in names}
    if len(kinds) > 1:
        raise ValueError(f"{owner}: the pattern {names} mixes spatial and 1-D mixers; use one kind")
    spatial = kinds.pop()
    if pooling is None:
        pooling = "mean" if spatial else "cls"
    if pooling not in POOLINGS:
        raise ValueError(f"{owner}: pooling must be one of {POOLINGS}, got {pooling!r}")
    if spatial and pooling == "cls":
        raise ValueError(f"{owner}: mixer {mixer!r} is spatial: it mixes the patch grid, which has no place "
                         f"for a CLS token; use pooling='mean'")
    return names, spatial, pooling
