"""Grid helpers shared by the vision mixers ("swin", "twins_lsa", "scalable_iwsa", "pvt", "twins_gsa",
"scalable_ssa"): window partition/merge with internal padding, shifted-window and padded-cell masks,
relative-position indices, strided-conv grid reduction, and plain attention.

Tokens arrive as ``(B, N, C)`` with ``N = H * W`` cells in row-major order.

Window attention (:func:`window_attention`)
    The grid is cut into ``mh x mw`` windows, where the window is clipped to the grid,
    ``(mh, mw) = (min(M1, H), min(M2, W))``. When ``H`` (``W``) is not a multiple of ``mh`` (``mw``) the
    grid is padded at the bottom (right) to the next multiple; padded cells are never attended to as keys
    (a per-window key mask), and their own outputs are cropped, so they cannot influence a real cell. A
    shifted partition (Swin's SW-MSA) pads first, then rolls the padded grid by ``(-sh, -sw)`` with
    ``sh = floor(M1 / 2)`` (only in a dimension where the grid is larger than the window: with the window
    clipped to the whole dimension there is nothing to shift, as in Swin) and keeps the three regions
    (``[0, P-m)``, ``[P-m, P-s)``, ``[P-s, P)`` of the rolled coordinate, per dimension) of a window apart
    with Swin's region mask, then rolls back and crops. It runs batched per-window SDPA;
    :func:`window_attention_reference` runs dense attention over the N real cells with an explicit N x N
    boolean mask (same window and same region) and, for Swin, the relative position bias gathered per
    pair from each cell's position inside its window. The shifted case is done by mapping every real cell
    to its rolled coordinate, which is the same as roll -> dense masked attention -> roll back.

Grid reduction (:func:`reduce_grid`)
    A ``Conv2d`` with kernel = stride = ``r`` over the grid padded with zeros at the bottom/right to
    ``(ceil(H/r) r, ceil(W/r) r)`` (ceil mode: no real cell is dropped, unlike a floor-mode strided conv
    on the raw grid). The padding is less than ``r`` in each dimension, so every reduced cell holds at
    least one real cell, and the zeros contribute exactly nothing to the kernel sum: a reduced cell is the
    conv over the real cells of its (clipped) ``r x r`` block, plus the conv bias.
    :func:`reduce_grid_reference` builds Ruggeri (2022) §3.2's ``Reshape(x, r)`` (each block's ``r^2``
    cells concatenated, zeros outside the grid) explicitly and multiplies by the conv weight.

Each fast function has a plain ``*_reference`` beside it (:func:`attend_reference`,
:func:`window_attention_reference`, :func:`reduce_grid_reference`) computing the same thing the obvious
way; the mixers' ``forward_reference`` uses those, and the tests hold each pair to each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "WindowGrid",
    "window_grid",
    "window_partition",
    "window_merge",
    "window_key_mask",
    "window_labels",
    "dense_window_mask",
    "relative_position_index",
    "relative_position_bias",
    "window_attention",
    "window_attention_reference",
    "WindowAttention",
    "attend",
    "attend_reference",
    "Attend",
    "grid_blocks",
    "reduce_grid",
    "reduce_grid_reference",
    "GridReducer",
    "to_pair",
    "square_grid",
]


def square_grid(n: int) -> tuple[int, int]:
    """The most square grid ``(H, W)`` with ``H * W = n`` and ``H <= W`` (``1 x n`` for a prime ``n``): how
    the CLI, ``tokenmix speed``/``count`` and the benchmarks lay a sequence of ``n`` tokens out for a vision
    mixer."""
    h = math.isqrt(n)
    while n % h:
        h -= 1
    return h, n // h


def to_pair(value: int | tuple[int, int]) -> tuple[int, int]:
    """``7 -> (7, 7)``; a pair is returned as a tuple."""
    if isinstance(value, (tuple, list)):
        return int(value[0]), int(value[1])
    return int(value), int(value)


# -- window geometry ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class WindowGrid:
    """Geometry of a (possibly shifted) window partition of an ``H x W`` grid.

    Attributes:
        hw: the real grid ``(H, W)``.
        window: the clipped window ``(mh, mw)``.
        shift: the cyclic shift ``(sh, sw)`` (0 where there is none).
        padded: the padded grid ``(Hp, Wp)``, multiples of ``window``.
    """

    hw: tuple[int, int]
    window: tuple[int, int]
    shift: tuple[int, int]
    padded: tuple[int, int]

    @property
    def num_windows(self) -> int:
        return (self.padded[0] // self.window[0]) * (self.padded[1] // self.window[1])

    @property
    def window_cells(self) -> int:
        return self.window[0] * self.window[1]


def window_grid(hw: tuple[int, int], window_size: int | tuple[int, int], shifted: bool = False) -> WindowGrid:
    """Clip the window to the grid, choose the shift (``floor(M/2)`` where the grid exceeds the window),
    and pad the grid to a multiple of the window."""
    (h, w), (m1, m2) = hw, to_pair(window_size)
    mh, mw = min(m1, h), min(m2, w)
    sh = m1 // 2 if shifted and h > m1 else 0
    sw = m2 // 2 if shifted and w > m2 else 0
    return WindowGrid((h, w), (mh, mw), (sh, sw), (math.ceil(h / mh) * mh, math.ceil(w / mw) * mw))


def window_partition(x: Tensor, g: WindowGrid) -> Tensor:
    """(B, H*W, C) -> (B, num_windows, mh*mw, C): zero-pad bottom/right, roll by ``-shift``, cut."""
    b, _, c = x.shape
    (h, w), (hp, wp), (mh, mw), (sh, sw) = g.hw, g.padded, g.window, g.shift
    x = x.reshape(b, h, w, c)
    if (hp, wp) != (h, w):
        x = F.pad(x, (0, 0, 0, wp - w, 0, hp - h))
    if sh or sw:
        x = torch.roll(x, shifts=(-sh, -sw), dims=(1, 2))
    x = x.reshape(b, hp // mh, mh, wp // mw, mw, c).transpose(2, 3)
    return x.reshape(b, g.num_windows, mh * mw, c)


def window_merge(x: Tensor, g: WindowGrid) -> Tensor:
    """Inverse of :func:`window_partition`: (B, num_windows, mh*mw, C) -> (B, H*W, C) (roll back, crop)."""
    b, _, _, c = x.shape
    (h, w), (hp, wp), (mh, mw), (sh, sw) = g.hw, g.padded, g.window, g.shift
    x = x.reshape(b, hp // mh, wp // mw, mh, mw, c).transpose(2, 3).reshape(b, hp, wp, c)
    if sh or sw:
        x = torch.roll(x, shifts=(sh, sw), dims=(1, 2))
    return x[:, :h, :w].reshape(b, h * w, c)


def _regions(size: int, window: int, shift: int, device: torch.device | None) -> Tensor:
    """Swin's region label of each rolled coordinate of one padded dimension: slices (0, -m), (-m, -s),
    (-s, None) get labels 0, 1, 2 (all 0 without a shift)."""
    pos = torch.arange(size, device=device)
    if not shift:
        return torch.zeros_like(pos)
    return (pos >= size - window).long() + (pos >= size - shift).long()


def window_key_mask(g: WindowGrid, device: torch.device | None = None) -> Tensor | None:
    """(num_windows, T, T) bool of allowed (query, key) pairs per window (``T = mh*mw``), or None when all
    pairs are allowed (no padding, no shift). A key is allowed if it is a real cell in the query's region;
    the diagonal is always allowed so that a padded query (cropped later) never has an empty row."""
    (h, w), (hp, wp), (mh, mw), (sh, sw) = g.hw, g.padded, g.window, g.shift
    if (hp, wp) == (h, w) and not (sh or sw):
        return None
    rows, cols = torch.arange(hp, device=device), torch.arange(wp, device=device)
    # label every cell of the rolled padded grid: real?, region
    real = (((rows + sh) % hp) < h)[:, None] & (((cols + sw) % wp) < w)[None, :]
    region = _regions(hp, mh, sh, device)[:, None] * 3 + _regions(wp, mw, sw, device)[None, :]

    def cut(t: Tensor) -> Tensor:
        return t.reshape(hp // mh, mh, wp // mw, mw).transpose(1, 2).reshape(-1, mh * mw)

    real, region = cut(real), cut(region)
    allowed = (region[:, :, None] == region[:, None, :]) & real[:, None, :]
    return allowed | torch.eye(mh * mw, dtype=torch.bool, device=device)


def window_labels(g: WindowGrid, device: torch.device | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """For every real cell (row-major): its window id, region id, and row/column inside its window, each
    (N,), computed from the cell's rolled coordinate ``((r - sh) mod Hp, (c - sw) mod Wp)``."""
    (h, w), (hp, wp), (mh, mw), (sh, sw) = g.hw, g.padded, g.window, g.shift
    r = torch.arange(h, device=device)[:, None].expand(h, w).reshape(-1)
    c = torch.arange(w, device=device)[None, :].expand(h, w).reshape(-1)
    rr, cc = (r - sh) % hp, (c - sw) % wp
    window_id = (rr // mh) * (wp // mw) + cc // mw
    region = _regions(hp, mh, sh, device)[rr] * 3 + _regions(wp, mw, sw, device)[cc]
    return window_id, region, rr % mh, cc % mw


def dense_window_mask(g: WindowGrid, device: torch.device | None = None) -> Tensor:
    """(N, N) bool over the real cells: True where query and key share a window and a region."""
    window_id, region, _, _ = window_labels(g, device)
    return (window_id[:, None] == window_id[None, :]) & (region[:, None] == region[None, :])


def relative_position_index(pos_r: Tensor, pos_c: Tensor, table_window: int) -> Tensor:
    """Swin's relative position index (Liu et al. 2021 §3.2): for cells at in-window positions
    ``(pos_r, pos_c)`` (each (T,)), ``(dr + M - 1) * (2M - 1) + (dc + M - 1)`` with ``dr = r_i - r_j``,
    ``dc = c_i - c_j``; an index into the ``(2M - 1)^2`` bias table. (T, T) long."""
    m = table_window
    dr = pos_r[:, None] - pos_r[None, :] + (m - 1)
    dc = pos_c[:, None] - pos_c[None, :] + (m - 1)
    return dr * (2 * m - 1) + dc


def relative_position_bias(table: Tensor, pos_r: Tensor, pos_c: Tensor, table_window: int) -> Tensor:
    """The bias B of Swin eq. 4 gathered from ``table`` ((2M-1)^2, heads): (heads, T, T)."""
    t = pos_r.shape[0]
    index = relative_position_index(pos_r, pos_c, table_window)
    return table[index.reshape(-1)].reshape(t, t, -1).permute(2, 0, 1)


def _split(t: Tensor, num_heads: int) -> Tensor:
    """(..., T, H*D) -> (..., H, T, D)."""
    return t.reshape(*t.shape[:-1], num_heads, -1).transpose(-3, -2)


def _merge(t: Tensor) -> Tensor:
    """(..., H, T, D) -> (..., T, H*D)."""
    t = t.transpose(-3, -2)
    return t.reshape(*t.shape[:-2], -1)


def attend(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None) -> Tensor:
    """Softmax attention with scale ``1/sqrt(q.shape[-1])`` by SDPA; ``attn_mask`` bool (True = allowed) or
    additive float."""
    # SDPA's fused CPU kernels need q, k and v of one width (else it builds the whole score matrix), and
    # ScalableViT's SSA scales the q/k width by r_c: zero columns pad the narrower side (they add nothing to
    # q.k, and padded value columns are cut off), with the scale of the true q width.
    width, value_width = q.shape[-1], v.shape[-1]
    if width < value_width:
        q, k = F.pad(q, (0, value_width - width)), F.pad(k, (0, value_width - width))
    elif value_width < width:
        v = F.pad(v, (0, width - value_width))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=1 / math.sqrt(width))
    return out[..., :value_width]


def attend_reference(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None) -> Tensor:
    """:func:`attend` through the explicit score matrix."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    return scores.softmax(dim=-1) @ v


# What attend and attend_reference are: (q, k, v, attn_mask=None) -> out.
Attend = Callable[..., Tensor]


def _masked_bias(bias: Tensor, allowed: Tensor | None) -> Tensor:
    """An additive score mask: the (float) bias, -inf where ``allowed`` (broadcastable) is False."""
    return bias if allowed is None else bias.masked_fill(~allowed, float("-inf"))


def window_attention(q: Tensor, k: Tensor, v: Tensor, g: WindowGrid, num_heads: int, *,
                     bias_table: Tensor | None = None, table_window: int | None = None) -> Tensor:
    """Multi-head self-attention inside the windows of ``g``: q, k, v (B, N, C) projected, not yet split
    into heads -> (B, N, C) heads merged. ``bias_table`` ((2M-1)^2, heads) adds Swin's relative position
    bias (``table_window`` = M). See the module docstring for padding and shift."""
    qw, kw, vw = (_split(window_partition(t, g), num_heads) for t in (q, k, v))  # (B, nW, h, T, D)
    allowed = window_key_mask(g, q.device)  # (nW, T, T) or None
    attn_mask: Tensor | None = None if allowed is None else allowed[:, None]  # (nW, 1, T, T)
    if bias_table is not None:
        pos = torch.arange(g.window_cells, device=q.device)
        bias = relative_position_bias(bias_table, pos // g.window[1], pos % g.window[1], table_window)
        attn_mask = _masked_bias(bias.to(q.dtype), attn_mask)  # (h, T, T) or (nW, h, T, T)
    return window_merge(_merge(attend(qw, kw, vw, attn_mask)), g)


def window_attention_reference(q: Tensor, k: Tensor, v: Tensor, g: WindowGrid, num_heads: int, *,
                               bias_table: Tensor | None = None, table_window: int | None = None) -> Tensor:
    """:func:`window_attention` as dense attention over all N real cells with the (N, N) window/region mask
    (:func:`dense_window_mask`), the bias gathered per pair from each cell's position inside its window."""
    qh, kh, vh = (_split(t, num_heads) for t in (q, k, v))  # (B, h, N, D)
    attn_mask = dense_window_mask(g, q.device)
    if bias_table is not None:
        _, _, pos_r, pos_c = window_labels(g, q.device)
        bias = relative_position_bias(bias_table, pos_r, pos_c, table_window)
        attn_mask = _masked_bias(bias.to(q.dtype), attn_mask)
    return _merge(attend_reference(qh, kh, vh, attn_mask))


# What window_attention and window_attention_reference are: (q, k, v, grid, num_heads, *, bias_table,
# table_window) -> out.
WindowAttention = Callable[..., Tensor]


# -- grid reduction -----------------------------------------------------------------------------------
def grid_blocks(x: Tensor, hw: tuple[int, int], r: int) -> tuple[Tensor, tuple[int, int]]:
    """Ruggeri (2022) §3.2's ``Reshape(x, r)``: (B, H*W, C) -> (B, ceil(H/r)*ceil(W/r), r*r, C), the cells
    of each ``r x r`` block in row-major order, zeros where a block sticks out of the grid; and the reduced
    grid."""
    b, n, c = x.shape
    (h, w) = hw
    hr, wr = math.ceil(h / r), math.ceil(w / r)
    rows = torch.arange(hr, device=x.device)[:, None, None, None] * r + torch.arange(r, device=x.device)[:, None]
    cols = torch.arange(wr, device=x.device)[None, :, None, None] * r + torch.arange(r, device=x.device)[None, :]
    rows, cols = torch.broadcast_tensors(rows, cols)  # (hr, wr, r, r)
    inside = (rows < h) & (cols < w)
    index = torch.where(inside, rows * w + cols, torch.full_like(rows, n)).reshape(-1)  # n -> the zero row
    xz = torch.cat([x, x.new_zeros(b, 1, c)], dim=1)
    return xz[:, index].reshape(b, hr * wr, r * r, c), (hr, wr)


def _reduction_stride(conv: nn.Conv2d) -> int:
    """``r`` of a kernel = stride = r ``Conv2d`` with no padding and no dilation (else ValueError)."""
    r = conv.kernel_size[0]
    if conv.kernel_size != (r, r) or conv.stride != (r, r) or conv.padding != (0, 0) or conv.dilation != (1, 1):
        raise ValueError("reduce_grid needs a Conv2d with kernel = stride = r, no padding, no dilation")
    return r


def reduce_grid(x: Tensor, hw: tuple[int, int], conv: nn.Conv2d) -> tuple[Tensor, tuple[int, int]]:
    """A kernel = stride = r ``Conv2d`` (groups 1 or depth-wise) over the grid in ceil mode (zero padding
    at the bottom/right; see the module docstring): (B, H*W, C) -> (B, H'*W', C_out) and ``(H', W')``."""
    r = _reduction_stride(conv)
    b, n, c = x.shape
    h, w = hw
    hr, wr = math.ceil(h / r), math.ceil(w / r)
    g = x.transpose(1, 2).reshape(b, c, h, w)
    if (hr * r, wr * r) != (h, w):
        g = F.pad(g, (0, wr * r - w, 0, hr * r - h))
    return conv(g).flatten(2).transpose(1, 2), (hr, wr)


def reduce_grid_reference(x: Tensor, hw: tuple[int, int], conv: nn.Conv2d) -> tuple[Tensor, tuple[int, int]]:
    """:func:`reduce_grid` from the explicit blocks of :func:`grid_blocks` times the conv weight."""
    blocks, reduced_hw = grid_blocks(x, hw, _reduction_stride(conv))  # (B, N', r*r, C)
    weight = conv.weight.flatten(2)  # (C_out, C_in / groups, r*r)
    if conv.groups == 1:
        y = torch.einsum("bnkc,ock->bno", blocks, weight)
    elif conv.groups == x.shape[-1] == conv.out_channels:
        y = torch.einsum("bnkc,ck->bnc", blocks, weight[:, 0])
    else:
        raise ValueError("reduce_grid_reference supports groups=1 and depth-wise convs only")
    if conv.bias is not None:
        y = y + conv.bias
    return y, reduced_hw


# What reduce_grid and reduce_grid_reference are: (x, hw, conv) -> (reduced x, reduced hw).
GridReducer = Callable[[Tensor, tuple[int, int], nn.Conv2d], tuple[Tensor, tuple[int, int]]]
