"""Sparse Transformer attention: strided and fixed factorised patterns (Child et al. 2019; Ruggeri (2022) §4.1).

Query ``i`` attends only to a sparse set of keys built from the two factorised index sets ``A_i^(1)`` (the
local one) and ``A_i^(2)`` (the strided/summary one) of Ruggeri (2022) §4.1 and Child et al. 2019 §4.2-4.3, with
``a(x_i, S_i) = softmax(q_i K_{S_i}^T / sqrt(d)) V_{S_i}``. Child et al. §4.3 give several ways to use the
two sets; the option ``factorization`` picks one of them:

* ``"merged"`` (default): every head attends to the union ``S_i = A_i^(1) ∪ A_i^(2)`` in ONE softmax
  (their "merged head" attention);
* ``"split"``: the heads are divided between the sets (their "multi-head" attention, and Ruggeri (2022) §4.1's
  "p heads with ``S_i = A_i^(m)``", ``p = 2``): the first half of the heads attends only to ``A_i^(1)``, the
  second half only to ``A_i^(2)``, each in its own softmax. A head whose set is empty for a query (the
  fixed pattern's ``A_i^(2)`` before the first summary position, or when all its keys are padding)
  outputs 0 there;
* ``"A1"`` / ``"A2"``: every head attends only to that one set. Child et al.'s interleaved form ("one
  attention type per residual block") is then a layer pattern of the models:
  ``["sparse_strided:factorization=A1", "sparse_strided:factorization=A2"]``.

The fast path (:func:`tokenmix.ops.sparse_attn.blockwise_sparse_attention`; decoding and prompts through the
same module's functions, the key/value cache their state) is computed block-wise, never by masking an N x N score
matrix: the sequence is padded
to a multiple of the stride ``l`` and cut into ``N / l`` blocks of ``l``; each query scores O(l) local keys
(a band of neighbouring blocks: ``A^(1)``) and/or O(N / l) "column" keys (same residue mod ``l`` for the
strided pattern, the summary positions for the fixed one: ``A^(2)``), so the cost is
O(N (l + N / l) d), O(N sqrt(N) d) at ``l ~ sqrt(N)``. The reference builds the dense sets with
:func:`sparse_sets` and masks.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..ops.sparse_attn import (
    FACTORIZATIONS,
    blockwise_sparse_attention,
    fused_recurrent_sparse_attn,
    head_parts,
    parallel_sparse_attn,
)
from ..ops.sparse_patterns import (
    causal_keys,
    fast_score_shape,
    softmax_or_zero,
    sparse_pattern,
    sparse_sets,
)
from ..registry import register_mixer
from ..validate import is_positive_int as _positive_int
from .heads import QKVMixer

__all__ = ["sparse_sets", "sparse_pattern", "fast_score_shape", "causal_keys", "SparseStridedAttention",
           "SparseFixedAttention"]


# One way to attend with the pattern: (q scaled, k, v, key mask) -> (B, H, N, D).
_Attention = Callable[[Tensor, Tensor, Tensor, Tensor | None], Tensor]


class _SparseAttention(QKVMixer):
    """Shared machinery; subclasses set ``kind``, define the local band and the column part, and are
    registered."""

    kind: str = ""

    def __init__(self, dim: int, *, num_heads: int, causal: bool, max_len: int | None, bias: bool,
                 stride: int | None, summary: int, factorization: str) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias)
        if stride is not None and not _positive_int(stride):
            self._fail(f"stride must be a positive int or None (auto), got {stride!r}")
        if not _positive_int(summary):
            self._fail(f"summary must be a positive int, got {summary!r}")
        if not isinstance(factorization, str) or factorization not in FACTORIZATIONS:
            self._fail(f"factorization must be one of {FACTORIZATIONS}, got {factorization!r}")
        if factorization == "split" and num_heads % 2:
            self._fail(f"factorization='split' needs an even num_heads >= 2 (the first half of the heads attends "
                       f"to A(1), the second half to A(2)), got num_heads={num_heads}")
        self.stride = stride
        self.summary = summary
        self.factorization = factorization
        fixed_stride = self._stride_for(max_len) if (stride is not None or max_len is not None) else None
        if fixed_stride is not None and summary > fixed_stride:
            self._fail(f"summary={summary} exceeds the stride (block length) {fixed_stride}")

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, {self._pattern_repr()}, factorization={self.factorization!r}"

    def _pattern_repr(self) -> str:
        """The pattern's options, for :meth:`extra_repr`."""
        return f"stride={self.stride}"

    # -- the pattern ----------------------------------------------------------------------------
    def _stride_for(self, n: int | None) -> int:
        """The stride used for sequences of length ``n``: the explicit one, else round(sqrt(max_len)) when
        max_len is set, else round(sqrt(n)) (at least 1)."""
        if self.stride is not None:
            return self.stride
        ref = self.max_len if self.max_len is not None else n
        return max(1, round(math.sqrt(ref)))

    def _summary_for(self, stride: int) -> int:
        return 1

    def head_parts(self) -> tuple[tuple[str, int], ...]:
        """``(part, number of heads)`` in head order (:func:`~tokenmix.ops.sparse_attn.head_parts`)."""
        return head_parts(self.factorization, self.num_heads)

    def pattern(self, n: int, device: torch.device | str | None = None, part: str = "union") -> Tensor:
        """The (N, N) bool pattern of ``part`` this mixer uses for length ``n`` (see :func:`sparse_pattern`)."""
        stride = self._stride_for(n)
        return sparse_pattern(n, self.kind, stride, self._summary_for(stride), self.causal, device, part)

    def head_patterns(self, n: int, device: torch.device | str | None = None) -> Tensor:
        """(H, N, N) bool: the keys each head may attend to at length ``n`` (before key padding)."""
        return torch.cat([self.pattern(n, device, part).expand(g, n, n) for part, g in self.head_parts()])

    def score_shapes(self, n: int) -> dict[str, tuple[int, int, int]]:
        """Per part of :meth:`head_parts`: the per-(batch, head) shape of the score tensor the fast path
        evaluates at length ``n``."""
        stride = self._stride_for(n)
        return {part: fast_score_shape(n, self.kind, stride, self._summary_for(stride), self.causal, part)
                for part, _ in self.head_parts()}

    # -- attention ------------------------------------------------------------------------------
    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        return self._scaled(self._blockwise, q, k, v, mask)

    def _attend_reference(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        return self._scaled(self._dense, q, k, v, mask)

    @staticmethod
    def _scaled(attention: _Attention, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """``attention`` on ``q / sqrt(D)``, ``k``, ``v`` in at least float32, cast back to the dtype of ``v``."""
        out_dtype = v.dtype
        if any(t.dtype in (torch.float16, torch.bfloat16) for t in (q, k, v)):
            q, k, v = q.float(), k.float(), v.float()
        q = q * (1.0 / math.sqrt(q.shape[-1]))
        return attention(q, k, v, mask).to(out_dtype)

    def _dense(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """Dense N x N: scores masked by each head's pattern & key padding, softmax (an empty row gives 0),
        times V."""
        allowed = self.head_patterns(q.shape[2], q.device)  # (H, N, N)
        if mask is not None:
            allowed = allowed & mask[:, None, None, :]
        scores = (q @ k.transpose(-2, -1)).masked_fill(~allowed, float("-inf"))
        return softmax_or_zero(scores, allowed.any(dim=-1, keepdim=True)) @ v

    def _blockwise(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """Blocks of ``l`` (:func:`~tokenmix.ops.sparse_attn.blockwise_sparse_attention`); the score tensors have
        the shapes of :meth:`score_shapes`."""
        stride = self._stride_for(q.shape[2])
        return blockwise_sparse_attention(q, k, v, self.kind, stride, self._summary_for(stride), self.causal,
                                          self.head_parts(), mask)

    # -- incremental decoding -------------------------------------------------------------------
    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        if self.stride is None and self.max_len is None:
            self._fail("incremental decoding needs a fixed stride: create the mixer with an explicit `stride` "
                       "(or with max_len, which fixes the automatic stride to round(sqrt(max_len)))")
        empty = torch.zeros(batch_size, 0, self.num_heads, self.head_dim, device=device, dtype=dtype)
        return {"k": empty, "v": empty.clone()}  # the cache, (B, L, H, D): tokenmix.ops.sparse_attn's layout

    def allowed_keys(self, t: int, part: str = "union") -> Tensor:
        """Indices of the keys position ``t`` attends to in ``part`` (causal), O(l + t / l) of them."""
        stride = self._stride_for(None)
        return causal_keys(self.kind, stride, self._summary_for(stride), t, part)

    def _continue(self, form, q: Tensor, k: Tensor, v: Tensor,
                  state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """L tokens (B, H, L, D) continuing the cache with one of :mod:`tokenmix.ops.sparse_attn`'s forms."""
        t, n = state["k"].shape[1], q.shape[2]
        if self.max_len is not None and t + n > self.max_len:
            self._fail(f"cannot step past max_len={self.max_len} (this would be position {t + n - 1})")
        stride = self._stride_for(None)
        out, (keys, values) = form(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), self.kind, stride,
                                   self._summary_for(stride), self.factorization,
                                   initial_state=(state["k"], state["v"]), output_final_state=True)
        return out.transpose(1, 2), {"k": keys, "v": values}

    def _prefill_heads(self, q: Tensor, k: Tensor, v: Tensor,
                       state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """L tokens in one block-wise pass over the cached keys and the new ones."""
        return self._continue(parallel_sparse_attn, q, k, v, state)

    def _step_heads(self, q: Tensor, k: Tensor, v: Tensor,
                    state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """The token joins the cache; its query reads the O(l + t / l) keys its pattern allows."""
        out, state = self._continue(fused_recurrent_sparse_attn, q[:, :, None], k[:, :, None], v[:, :, None], state)
        return out[:, :, 0], state


_PAPER = ("Child et al. (2019) §4.2-4.3, factorised attention A_i^(1), A_i^(2): their union in one softmax, or "
          "split over heads; Ruggeri (2022) §4.1 (Sparse Transformer)")

@register_mixer("sparse_strided", paper=_PAPER, complexity="O(N sqrt(N) d)", causal=True, recurrent=True)
class SparseStridedAttention(_SparseAttention):
    """Sparse Transformer, strided pattern (Child et al. 2019 §4.2-4.3; Ruggeri (2022) §4.1).

    With stride ``l``, (causal) ``A_i^(1) = {max(0, i - l), ..., i}`` (the previous ``l`` positions and
    itself) and ``A_i^(2) = {j <= i : (i - j) mod l = 0}`` (every ``l``-th position before it);
    bidirectionally the symmetric sets ``|i - j| <= l`` and ``(i - j) mod l = 0``. By default each head
    attends to their union (Child et al.'s "merged" variant); ``factorization="split"`` gives half of the
    heads each set.

    Fast path: blocks of ``l``; the local part (``A(1)``) is an ``l x 2l`` band per block (``l x 3l``
    bidirectional) and the strided part (``A(2)``), for each residue ``r = i mod l``, scores the ``N / l``
    keys of that residue. Merged, the two score sets are concatenated into one softmax (the band then
    leaves ``i - l`` to the strided part, so every key is scored once); split, each half of the heads
    scores only its own part. Cost O(N (l + N / l) d) = O(N sqrt(N) d) at ``l ~ sqrt(N)``. The reference
    masks a dense N x N matrix with :func:`sparse_sets`.

    Positions are absolute indices ``0 .. N-1``; padding is supported with padded keys excluded, and a
    right-padded row gives what it gives alone (left padding shifts the positions, hence the pattern).

    Options:
        stride: ``l``. None (default) picks ``round(sqrt(max_len))`` when ``max_len`` is set, else
            ``round(sqrt(N))`` at call time (then the pattern depends on the padded length, so "a padded row
            equals the row alone" only holds with an explicit stride or max_len). Decoding with
            ``init_state``/``step`` needs an explicit stride or max_len.
        factorization: how the heads use the two sets (Child et al. 2019 §4.3). ``"merged"`` (default):
            every head attends to ``A(1) ∪ A(2)`` in one softmax. ``"split"``: the first half of the heads
            attends only to ``A(1)``, the second half only to ``A(2)``; needs an even ``num_heads``.
            ``"A1"`` / ``"A2"``: every head on that set only (one layer of the interleaved form).
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
        factorization: str = "merged",
        bias: bool = False,
    ) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias, stride=stride,
                         summary=1, factorization=factorization)

@register_mixer("sparse_fixed", paper=_PAPER, complexity="O(N sqrt(N) d)", causal=True, recurrent=True)
class SparseFixedAttention(_SparseAttention):
    """Sparse Transformer, fixed pattern (Child et al. 2019 §4.3; Ruggeri (2022) §4.1).

    With block length ``l`` and ``c`` summary positions per block, (causal)
    ``A_i^(1) = {j <= i : floor(j / l) = floor(i / l)}`` (its block up to itself) and
    ``A_i^(2) = {j <= i : j mod l in {l - c, ..., l - 1}}`` (the last ``c`` positions of every block; of the
    current block only those ``<= i``); bidirectionally ``A_i^(1)`` is the whole current block and
    ``A_i^(2)`` the summary positions of every block. By default each head attends to their union;
    ``factorization="split"`` gives half of the heads each set (causally, a query before the first summary
    position then has an empty ``A(2)``, and those heads output 0 for it).

    Fast path: blocks of ``l``; an ``l x l`` score block per block (``A(1)``) and the ``(N / l) c`` summary
    keys (``A(2)``; merged, those of the query's own block are left to the local block, counted once
    there), in one softmax (merged) or each for its half of the heads (split). Cost
    O(N (l + c N / l) d) = O(N sqrt(N) d) at ``l ~ sqrt(N)``, ``c`` fixed. The reference masks a dense
    N x N matrix with :func:`sparse_sets`.

    Positions are absolute indices ``0 .. N-1`` (blocks start at 0); padded keys are excluded, and a
    right-padded row gives what it gives alone.

    Options:
        stride: the block length ``l``; None (default) as for ``sparse_strided``: ``round(sqrt(max_len))``
            when ``max_len`` is set, else ``round(sqrt(N))`` at call time (``summary`` is then capped at
            ``l``). Decoding needs an explicit stride or max_len.
        summary: ``c``, summary positions per block, ``1 <= c <= l`` (default 1).
        factorization: ``"merged"`` (default), each head on ``A(1) ∪ A(2)``, or ``"split"``, the first half
            of the heads on ``A(1)`` only and the second half on ``A(2)`` only (Child et al. 2019 §4.3);
            ``"split"`` needs an even ``num_heads``. ``"A1"`` / ``"A2"``: every head on that set only (one
            layer of the interleaved form).
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
        factorization: str = "merged",
        bias: bool = False,
    ) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias, stride=stride,
                         summary=summary, factorization=factorization)

    def _pattern_repr(self) -> str:
        return f"{super()._pattern_repr()}, summary={self.summary}"

    def _summary_for(self, stride: int) -> int:
        return min(self.summary, stride)
