"""Sparse Transformer attention: strided and fixed factorised patterns (Child et al. 2019; survey 002 §4.1).

Query ``i`` attends only to a sparse set of keys ``S_i = A_i^(1) ∪ A_i^(2)`` (002 §4.1, Child et al. 2019
§4.2-4.3). The two parts of the factorisation are *not* spread over two heads or two layers: every head
attends to their union in ONE softmax (the "attend to the union" variant, the merged-head form of Child
et al. §4.3, "merged" attention), ``a(x_i, S_i) = softmax(q_i K_{S_i}^T / sqrt(d)) V_{S_i}``.

The fast path is computed block-wise, never by masking an N x N score matrix: the sequence is padded
to a multiple of the stride ``l`` and cut into ``N / l`` blocks of ``l``; each query scores O(l) local keys
(a band of neighbouring blocks) plus O(N / l) "column" keys (same residue mod ``l`` for the strided
pattern, the summary positions for the fixed one), so the cost is O(N (l + N / l) d), O(N sqrt(N) d)
at ``l ~ sqrt(N)``. The reference builds the dense pattern with :func:`sparse_pattern` and masks.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

from ..ops.opcounts import OpCounts
from ..registry import register_mixer
from .base import QKVMixer

__all__ = ["sparse_pattern", "fast_score_shape", "SparseStridedAttention", "SparseFixedAttention"]

_KINDS = ("strided", "fixed")


def sparse_pattern(n: int, kind: str, stride: int, summary: int = 1, causal: bool = True,
                   device: torch.device | str | None = None) -> Tensor:
    """Dense (N, N) bool matrix, ``[i, j]`` True when query ``i`` may attend to key ``j``.

    Positions are absolute indices ``0 .. N-1``; ``l = stride``, ``c = summary``.

    * ``"strided"``, causal: ``A(1) = {j : i - l < j <= i}``, ``A(2) = {j <= i : (i - j) mod l = 0}``;
      bidirectional: ``|i - j| < l`` or ``(i - j) mod l = 0``.
    * ``"fixed"``, causal: ``A(1) = {j <= i : floor(j / l) = floor(i / l)}``,
      ``A(2) = {j <= i : j mod l in {l - c, ..., l - 1}}``; bidirectional: the whole current block, and the
      summary positions of every block.

    Child et al. write ``A(1) = {max(0, i - l), ..., i}`` (l + 1 positions); the extra key ``i - l`` is in
    ``A(2)`` anyway, so the union (all this module uses) is the same.
    """
    if kind not in _KINDS:
        raise ValueError(f"sparse_pattern: kind must be one of {_KINDS}, got {kind!r}")
    if stride <= 0 or not 1 <= summary <= stride:
        raise ValueError(f"sparse_pattern: need stride >= 1 and 1 <= summary <= stride, got {stride}, {summary}")
    pos = torch.arange(n, device=device)
    i, j = pos[:, None], pos[None, :]
    if kind == "strided":
        d = i - j
        local = (d >= 0) & (d < stride) if causal else d.abs() < stride
        allowed = local | (torch.remainder(d, stride) == 0)
    else:
        allowed = (i // stride == j // stride) | (torch.remainder(j, stride) >= stride - summary)
    if causal:
        allowed &= j <= i
    return allowed


def fast_score_shape(n: int, kind: str, stride: int, summary: int = 1, causal: bool = True) -> tuple[int, int, int]:
    """Shape ``(N / l blocks, l queries per block, keys scored per query)`` of the one score tensor the
    fast path evaluates per (batch, head); its product is the number of (query, key) scores computed,
    ``ceil(N / l) l (w l + ceil(N / l) [c])`` with ``w`` = 2 (strided causal), 3 (strided bidir), 1 (fixed)."""
    nb = -(-n // stride)
    if kind == "strided":
        return nb, stride, (2 if causal else 3) * stride + nb
    if kind == "fixed":
        return nb, stride, stride + nb * summary
    raise ValueError(f"fast_score_shape: kind must be one of {_KINDS}, got {kind!r}")


def _band(t: Tensor, before: int, after: int) -> Tensor:
    """Blocks ``t`` (..., nb, l, D) -> (..., nb, (before + 1 + after) l, D): block ``b`` followed by its
    neighbours ``b - before .. b + after`` concatenated in order (zeros / False beyond the ends)."""
    if before == 0 and after == 0:
        return t
    nb = t.shape[-3]
    pad = t.new_zeros(t.shape[:-3] + (1,) + t.shape[-2:])
    padded = torch.cat([pad] * before + [t] + [pad] * after, dim=-3)
    return torch.cat([padded[..., s:s + nb, :, :] for s in range(before + 1 + after)], dim=-2)


@functools.lru_cache(maxsize=4096)
def causal_keys(kind: str, stride: int, summary: int, t: int) -> Tensor:
    """The keys query ``t`` sees in the causal pattern (cached: decoding asks for each position per layer)."""
    if kind == "strided":
        start = max(0, t - stride + 1)
        far = torch.arange(t % stride, max(start, t % stride), stride)
    else:
        start = (t // stride) * stride
        far = (torch.arange(t // stride)[:, None] * stride + torch.arange(stride - summary, stride)[None, :]).flatten()
    return torch.cat([far, torch.arange(start, t + 1)])


class _SparseAttention(QKVMixer):
    """Shared machinery; subclasses set ``kind`` and are registered."""

    kind: str = ""

    def __init__(self, dim: int, *, num_heads: int, causal: bool, max_len: int | None, bias: bool,
                 stride: int | None, summary: int) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias)
        if stride is not None and (isinstance(stride, bool) or not isinstance(stride, int) or stride <= 0):
            self._fail(f"stride must be a positive int or None (auto), got {stride!r}")
        if isinstance(summary, bool) or not isinstance(summary, int) or summary <= 0:
            self._fail(f"summary must be a positive int, got {summary!r}")
        self.stride = stride
        self.summary = summary
        fixed_stride = self._stride_for(max_len) if (stride is not None or max_len is not None) else None
        if fixed_stride is not None and summary > fixed_stride:
            self._fail(f"summary={summary} exceeds the stride (block length) {fixed_stride}")

    def extra_repr(self) -> str:
        extra = f", summary={self.summary}" if self.kind == "fixed" else ""
        return f"{super().extra_repr()}, stride={self.stride}{extra}"

    # -- the pattern ----------------------------------------------------------------------------
    def _stride_for(self, n: int | None) -> int:
        """The stride used for sequences of length ``n``: the explicit one, else round(sqrt(max_len)) when
        max_len is set, else round(sqrt(n)) (at least 1)."""
        if self.stride is not None:
            return self.stride
        ref = self.max_len if self.max_len is not None else n
        return max(1, round(math.sqrt(ref)))

    def _summary_for(self, stride: int) -> int:
        return min(self.summary, stride) if self.kind == "fixed" else 1

    def pattern(self, n: int, device: torch.device | str | None = None) -> Tensor:
        """The (N, N) bool pattern this mixer uses for length ``n`` (see :func:`sparse_pattern`)."""
        stride = self._stride_for(n)
        return sparse_pattern(n, self.kind, stride, self._summary_for(stride), self.causal, device)

    def score_shape(self, n: int) -> tuple[int, int, int]:
        """Per-(batch, head) shape of the score tensor the fast path evaluates at length ``n``."""
        stride = self._stride_for(n)
        return fast_score_shape(n, self.kind, stride, self._summary_for(stride), self.causal)

    # -- attention ------------------------------------------------------------------------------
    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, reference: bool) -> Tensor:
        out_dtype = v.dtype
        if any(t.dtype in (torch.float16, torch.bfloat16) for t in (q, k, v)):
            q, k, v = q.float(), k.float(), v.float()
        q = q * (1.0 / math.sqrt(q.shape[-1]))
        out = self._reference(q, k, v, mask) if reference else self._blockwise(q, k, v, mask)
        return out.to(out_dtype)

    def _reference(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """Dense N x N: scores masked by pattern & key padding, diagonal always allowed (so a padded query,
        whose output is discarded, never has an empty row), softmax, times V."""
        n = q.shape[2]
        allowed = self.pattern(n, q.device)
        if mask is not None:
            allowed = allowed & mask[:, None, None, :]
        allowed = allowed | torch.eye(n, dtype=torch.bool, device=q.device)
        scores = (q @ k.transpose(-2, -1)).masked_fill(~allowed, float("-inf"))
        return scores.softmax(dim=-1) @ v

    def _blockwise(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        b, h, n, d = q.shape
        stride = self._stride_for(n)
        summary = self._summary_for(stride)
        nb = -(-n // stride)
        m = nb * stride
        dev = q.device
        if m != n:
            q, k, v = (torch.cat([t, t.new_zeros(b, h, m - n, d)], dim=2) for t in (q, k, v))
        real = torch.arange(m, device=dev) < n
        real = real[None, :] if mask is None else torch.cat([mask, mask.new_zeros(b, m - n)], dim=1) & real
        rb = real.view(real.shape[0], nb, stride)  # (B|1, nb, l) key is real
        qb, kb, vb = (t.view(b, h, nb, stride, d) for t in (q, k, v))
        r = torch.arange(stride, device=dev)[:, None]  # query offset in its block
        blk = torch.arange(nb, device=dev)
        neg_inf = float("-inf")

        # Local part: a band of whole blocks around the query's block.
        before, after = (1, 0 if self.causal else 1) if self.kind == "strided" else (0, 0)
        k_loc, v_loc = _band(kb, before, after), _band(vb, before, after)
        real_loc = _band(rb[..., None], before, after)[..., 0]  # (B|1, nb, W)
        c = torch.arange((before + 1 + after) * stride, device=dev)[None, :]
        rel = r + before * stride - c  # i - j for query offset r, band column c
        if self.kind == "strided":
            pat_loc = (rel >= 0) & (rel < stride) if self.causal else rel.abs() < stride
        else:
            pat_loc = rel >= 0 if self.causal else torch.ones_like(rel, dtype=torch.bool)
        allowed_loc = (pat_loc & real_loc[:, :, None, :]) | (rel == 0)  # (B|1, nb, l, W)
        s_loc = (qb @ k_loc.transpose(-2, -1)).masked_fill(~allowed_loc[:, None], neg_inf)

        # Far part: whole other blocks only (keys in the query's own block are local, counted once there).
        far_blocks = blk[None, :] < blk[:, None] if self.causal else blk[None, :] != blk[:, None]  # (nb_q, nb_k)
        if self.kind == "strided":
            # Same residue mod l: per residue r, queries of every block against keys of every block.
            qr, kr, vr = (t.transpose(-3, -2) for t in (qb, kb, vb))  # (B, H, l, nb, D)
            allowed_far = far_blocks & rb.transpose(-2, -1)[:, :, None, :]  # (B|1, l, nb_q, nb_k)
            s_far = (qr @ kr.transpose(-2, -1)).masked_fill(~allowed_far[:, None], neg_inf)
            s_far = s_far.transpose(-3, -2)  # (B, H, nb_q, l, nb_k)
        else:
            # Summary keys: the last c positions of every block, shared by all queries of a block.
            ks = kb[..., stride - summary:, :].reshape(b, h, nb * summary, d)
            vs = vb[..., stride - summary:, :].reshape(b, h, nb * summary, d)
            real_s = rb[..., stride - summary:].reshape(rb.shape[0], nb * summary)
            allowed_far = far_blocks.repeat_interleave(summary, dim=1) & real_s[:, None, :]  # (B|1, nb_q, S)
            s_far = (qb @ ks[:, :, None].transpose(-2, -1)).masked_fill(~allowed_far[:, None, :, None, :], neg_inf)

        scores = torch.cat([s_loc, s_far], dim=-1)  # one softmax over the union
        self.last_score_shape = tuple(scores.shape)  # (B, H, nb, l, keys per query): for the cost tests
        p = scores.softmax(dim=-1)
        p_loc, p_far = p[..., :s_loc.shape[-1]], p[..., s_loc.shape[-1]:]
        out = p_loc @ v_loc
        if self.kind == "strided":
            out = out + (p_far.transpose(-3, -2) @ vr).transpose(-3, -2)
        else:
            out = out + p_far @ vs[:, :, None]
        return out.reshape(b, h, m, d)[:, :, :n]

    # -- incremental decoding -------------------------------------------------------------------
    def _allowed_keys(self, t: int, device: torch.device) -> Tensor:
        """Indices of the keys position ``t`` attends to (causal pattern), O(l + t / l) of them."""
        return causal_keys(self.kind, self._stride_for(None), self.summary, t).to(device)

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        if self.stride is None and self.max_len is None:
            self._fail("incremental decoding needs a fixed stride: create the mixer with an explicit `stride` "
                       "(or with max_len, which fixes the automatic stride to round(sqrt(max_len)))")
        empty = torch.zeros(batch_size, self.num_heads, 0, self.head_dim, device=device, dtype=dtype)
        return {"k": empty, "v": empty.clone(), "t": torch.zeros((), dtype=torch.long, device=device)}

    def _step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        t = state["k"].shape[2]
        if self.max_len is not None and t >= self.max_len:
            self._fail(f"cannot step past max_len={self.max_len} (this would be position {t})")
        q, k_new, v_new = self.qkv_heads(x_t[:, None])
        k = torch.cat([state["k"], k_new.to(state["k"].dtype)], dim=2)
        v = torch.cat([state["v"], v_new.to(state["v"].dtype)], dim=2)
        idx = self._allowed_keys(t, k.device)
        kk, vv = k[:, :, idx], v[:, :, idx]  # every one of them is allowed
        out_dtype = vv.dtype
        if any(z.dtype in (torch.float16, torch.bfloat16) for z in (q, kk, vv)):
            q, kk, vv = q.float(), kk.float(), vv.float()
        scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ kk.transpose(-2, -1)
        out = (scores.softmax(dim=-1) @ vv).to(out_dtype)  # (B, H, 1, D)
        y = self.proj(out.transpose(1, 2).reshape(x_t.shape[0], self.dim))
        return y, {"k": k, "v": v, "t": state["t"] + 1}

    # -- operation counts ----------------------------------------------------------------------
    def _count_pairs(self, pairs: int, queries: int) -> OpCounts:
        """One head, ``queries`` queries with ``pairs`` allowed (query, key) pairs in all, counted as softmax
        attention (004 Table 3, :func:`~tokenmix.ops.opcounts.attention_pairs_ops`) restricted to the pattern:
        per pair a score (``D`` multiplications, ``D - 1`` additions), an exp, an addition into the softmax
        sum, a normalising division and a weighted value row (``D`` multiplications, ``D`` additions but for
        each query's first key); but the ``1 / sqrt(D)`` scaling is applied, as this module does, to the
        query (``D`` divisions per query) rather than to each score. Only allowed pairs are counted: the
        block-wise fast path also scores masked-out keys of its bands (up to about twice as many scores,
        :meth:`score_shape`), which ``FlopCounterMode`` sees."""
        e = self.head_dim
        return OpCounts(mults=2 * pairs * e, adds=2 * pairs * e - queries * (e + 1), divs=pairs + queries * e,
                        exps=pairs)

    def _count_attend(self, length: int) -> OpCounts:
        """The pattern's allowed pairs at this length (:meth:`pattern`; O(l sqrt(l)) of them at the automatic
        stride ``~ sqrt(l)``), each query's own position included, through :meth:`_count_pairs`."""
        return self._count_pairs(int(self.pattern(length).sum()), length)

    def _count_attend_step(self, t: int) -> OpCounts:
        """The newest query (position ``t - 1``, 0-based) over its allowed cached keys (``_allowed_keys``:
        ``O(l + t / l)`` of them), through :meth:`_count_pairs`; needs a fixed stride, as decoding does."""
        if self.stride is None and self.max_len is None:
            self._fail("incremental counts need a fixed stride: create the mixer with an explicit `stride` "
                       "(or with max_len, which fixes the automatic stride to round(sqrt(max_len)))")
        return self._count_pairs(len(self._allowed_keys(t - 1, torch.device("cpu"))), 1)


_PAPER = ("Child et al. (2019) §4.2-4.3, factorised attention A_i^(1) ∪ A_i^(2) in one softmax; "
          "survey 002 §4.1 (Sparse Transformer)")


@register_mixer("sparse_strided", paper=_PAPER, complexity="O(N sqrt(N) d)", causal=True, recurrent=True)
class SparseStridedAttention(_SparseAttention):
    """Sparse Transformer, strided pattern (Child et al. 2019 §4.2-4.3; 002 §4.1), attending to the union.

    Query ``i`` attends, in one softmax, to ``A_i^(1) ∪ A_i^(2)`` with (causal)
    ``A_i^(1) = {j : i - l < j <= i}`` (the previous ``l`` positions, itself included) and
    ``A_i^(2) = {j <= i : (i - j) mod l = 0}`` (every ``l``-th position before it); bidirectionally the
    symmetric sets ``|i - j| < l`` and ``(i - j) mod l = 0``. (002/Child et al. write
    ``A_i^(1) = {max(0, i - l), ..., i}``; the extra position ``i - l`` lies in ``A_i^(2)``, so the union is
    the same.) Child et al. split the two sets over heads or layers; here each head attends to their union
    (their "merged" variant).

    Fast path: blocks of ``l``; the local part is an ``l x 2l`` band per block (``l x 3l`` bidirectional)
    and the strided part, for each residue ``r = i mod l``, scores the ``N / l`` keys of that residue; the
    two score sets are concatenated (key ``i`` itself, in both sets, is counted once) into one softmax.
    Cost O(N (l + N / l) d) = O(N sqrt(N) d) at ``l ~ sqrt(N)``. The reference masks a dense N x N matrix
    with :func:`sparse_pattern`.

    Positions are absolute indices ``0 .. N-1``; padding is supported with padded keys excluded, and a
    right-padded row gives what it gives alone (left padding shifts the positions, hence the pattern).

    Options:
        stride: ``l``. None (default) picks ``round(sqrt(max_len))`` when ``max_len`` is set, else
            ``round(sqrt(N))`` at call time (then the pattern depends on the padded length, so "a padded row
            equals the row alone" only holds with an explicit stride or max_len). Decoding with
            ``init_state``/``step`` needs an explicit stride or max_len.
        bias: biases in the Q/K/V/out projections (default False: ``4 dim^2`` parameters).
    """

    kind = "strided"

    def __init__(
        self,
        dim: int,
        *,
        num_heads: int = 1,
        causal: bool = False,
        max_len: int | None = None,
        stride: int | None = None,
        bias: bool = False,
    ) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias, stride=stride,
                         summary=1)


@register_mixer("sparse_fixed", paper=_PAPER, complexity="O(N sqrt(N) d)", causal=True, recurrent=True)
class SparseFixedAttention(_SparseAttention):
    """Sparse Transformer, fixed pattern (Child et al. 2019 §4.3; 002 §4.1), attending to the union.

    With block length ``l`` and ``c`` summary positions per block, query ``i`` attends, in one softmax,
    to ``A_i^(1) ∪ A_i^(2)`` with (causal) ``A_i^(1) = {j <= i : floor(j / l) = floor(i / l)}`` (its block up
    to itself) and ``A_i^(2) = {j <= i : j mod l in {l - c, ..., l - 1}}`` (the last ``c`` positions of
    every block; of the current block only those ``<= i``); bidirectionally ``A_i^(1)`` is the whole
    current block and ``A_i^(2)`` the summary positions of every block. Child et al. split the two sets
    over heads; here each head attends to their union.

    Fast path: blocks of ``l``; an ``l x l`` score block per block plus the ``(N / l) c`` summary keys of
    the other blocks (summary keys of the query's own block are already local and counted once), one
    softmax over both. Cost O(N (l + c N / l) d) = O(N sqrt(N) d) at ``l ~ sqrt(N)``, ``c`` fixed. The
    reference masks a dense N x N matrix with :func:`sparse_pattern`.

    Positions are absolute indices ``0 .. N-1`` (blocks start at 0); padded keys are excluded, and a
    right-padded row gives what it gives alone.

    Options:
        stride: the block length ``l``; None (default) as for ``sparse_strided``: ``round(sqrt(max_len))``
            when ``max_len`` is set, else ``round(sqrt(N))`` at call time (``summary`` is then capped at
            ``l``). Decoding needs an explicit stride or max_len.
        summary: ``c``, summary positions per block, ``1 <= c <= l`` (default 1).
        bias: biases in the Q/K/V/out projections (default False: ``4 dim^2`` parameters).
    """

    kind = "fixed"

    def __init__(
        self,
        dim: int,
        *,
        num_heads: int = 1,
        causal: bool = False,
        max_len: int | None = None,
        stride: int | None = None,
        summary: int = 1,
        bias: bool = False,
    ) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias, stride=stride,
                         summary=summary)
