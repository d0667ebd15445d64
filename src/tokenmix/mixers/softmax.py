"""Softmax attention: the quadratic baseline every other mechanism is measured against."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..ops.opcounts import OpCounts, attention_pairs_ops, softmax_attention_ops
from ..registry import register_mixer
from .base import QKVMixer


def attention_mask(n: int, mask: Tensor | None, causal: bool, device: torch.device) -> Tensor | None:
    """Boolean (B|1, 1, N, N) mask of allowed (query, key) pairs, or None when everything is allowed.

    The diagonal is always allowed, so that a padded query (whose output is discarded) never has an
    empty row, which would make softmax produce NaN.
    """
    if mask is None and not causal:
        return None
    allowed = torch.ones(n, n, dtype=torch.bool, device=device)
    if causal:
        allowed = allowed.tril()
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    return allowed | torch.eye(n, dtype=torch.bool, device=device)


@register_mixer(
    "softmax",
    paper="Vaswani et al. (2017); Yamada et al. (2022) eq. 4; Chen (2023) eqs. 10-17",
    complexity="O(N^2 d)",
    causal=True,
    recurrent=True,
)
class SoftmaxAttention(QKVMixer):
    """Multi-head scaled dot-product attention, ``softmax(Q K^T / sqrt(h)) V`` per head of width ``h``
    (Yamada et al. (2022) eq. 4; Chen (2023) eqs. 10-17).

    The fast path is ``torch.nn.functional.scaled_dot_product_attention`` with a causal and/or key-padding
    mask; the reference forms the N x N score matrix explicitly. With ``bias=False`` (the default, as in
    004) the sub-layer has ``4 dim^2`` parameters (004 Table 7: 65,536 at dim 128). Yamada et al. (2022)
    §3.1.1 project the ``m = dim``-wide tokens to a depth ``d`` (``inner_dim``) with no output projection
    (eq. 4 ends at ``... V``): ``inner_dim=d, out_proj=False, bias=False`` is that, ``3 m d`` parameters and
    ``d``-wide outputs (``out_dim = d``).

    Decoding (causal): a KV cache; step t costs O(t d). With ``max_len`` set, decoding past it raises.

    Options:
        bias: biases in the Q/K/V and output projections.
        attn_dropout: dropout on the attention weights during training.
        inner_dim: width of Q, K and V, split into ``num_heads`` heads (default ``dim``).
        out_proj: the output projection ``W_out`` back to ``dim`` (default True); False: the output is the
            concatenated heads, ``inner_dim`` wide.
    """

    def __init__(
        self,
        dim: int,
        *,
        num_heads: int = 1,
        causal: bool = False,
        max_len: int | None = None,
        bias: bool = False,
        attn_dropout: float = 0.0,
        inner_dim: int | None = None,
        out_proj: bool = True,
    ) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias, inner_dim=inner_dim,
                         out_proj=out_proj)
        if not 0.0 <= attn_dropout < 1.0:
            self._fail(f"attn_dropout must be in [0, 1), got {attn_dropout}")
        self.attn_dropout = attn_dropout

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        empty = torch.zeros(batch_size, self.num_heads, 0, self.head_dim, device=device, dtype=dtype)
        return {"k": empty, "v": empty}

    def _step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        if self.max_len is not None and state["k"].shape[2] >= self.max_len:
            self._fail(f"cannot decode past max_len={self.max_len}")
        q, k, v = self.qkv_heads(x_t[:, None])
        keys, values = torch.cat([state["k"], k], dim=2), torch.cat([state["v"], v], dim=2)
        out = F.scaled_dot_product_attention(q, keys, values, dropout_p=self._dropout_p)  # the newest query sees all
        return self._output(out.reshape(x_t.shape[0], self.inner_dim)), {"k": keys, "v": values}

    @property
    def _dropout_p(self) -> float:
        return self.attn_dropout if self.training else 0.0

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """Fused attention (SDPA), with its own causal mask when there is no padding."""
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=self._dropout_p, is_causal=self.causal)
        allowed = attention_mask(q.shape[2], mask, self.causal, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=self._dropout_p)

    def _attend_reference(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """The explicit N x N score matrix, masked, softmax, times V."""
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        allowed = attention_mask(q.shape[2], mask, self.causal, q.device)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        return F.dropout(scores.softmax(dim=-1), self._dropout_p) @ v

    # -- operation counts (004 Tables 3 and 5; the projections are QKVMixer._count_projections) -----------
    def _count_attend(self, length: int) -> OpCounts:
        """One head over ``length`` tokens, 004 Table 3: query ``t`` (1-based) attends to ``t`` keys when causal,
        to all ``length`` keys otherwise; each (query, key) pair costs one score (``head_dim`` multiplications,
        ``head_dim - 1`` additions), one division by ``sqrt(head_dim)``, one exp, one addition into the softmax
        sum, one normalising division and one weighted value row (``head_dim`` multiplications and, but for
        the first key, ``head_dim`` additions); see :func:`~tokenmix.ops.opcounts.attention_pairs_ops`.

        Causal: ``sum_t t = l (l + 1) / 2`` pairs, so with the projections (``4 l d^2`` multiplications,
        ``4 l d (d - 1)`` additions) ``l^2 d + 4 l d^2 + l d`` multiplications, ``l^2 d + 4 l d^2 - 4 l d - l n``
        additions, ``n l^2 + n l`` divisions and ``(n l^2 + n l) / 2`` exps over ``n`` heads (Table 3; at
        d = l = 128: Table 7's 10,502,144 / 10,420,096 (n = 1) or 10,416,128 (n = 32) / 16,512 n / 8,256 n).
        Bidirectional: ``l^2`` pairs. In Yamada et al. (2022)'s setting (one head of width ``d = inner_dim``
        over ``m = dim``-wide tokens, no ``W_out``, bidirectional) that is ``2 l^2 d + 3 l m d``
        multiplications; 000 §4.2 gives no count for Attention to compare with."""
        pairs = length * (length + 1) // 2 if self.causal else length * length
        return attention_pairs_ops(pairs, length, self.head_dim)

    def _count_attend_step(self, t: int) -> OpCounts:
        """One head for the newest query at length ``t`` over the KV cache (004 Table 5): ``t`` keys, so with
        the projections of the new token ``2 t d + 4 d^2`` multiplications, ``2 t d + 4 d^2 - 5 d - n``
        additions, ``2 t n`` divisions and ``t n`` exps. (Table 5 prints the additions as
        ``2td - tn + t + 4d^2 - 5d - 1``, which equals its own unsimplified sum
        ``(3 (d - 1) d/n + t (d/n - 1) + (t - 1) d/n + (t - 1)) n + (d - 1) d`` only for ``n = 1``; the sum,
        counted here, is ``2td + 4d^2 - 5d - n`` and adds up over t = 1..l to Table 3's training count.)"""
        return softmax_attention_ops(1, t, self.head_dim)
