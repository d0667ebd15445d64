"""Efficient attention: softmax-normalised queries and keys, multiplied right to left (Shen et al. 2021)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..ops.kernel_attention import upcast_low_precision
from ..ops.masked_softmax import masked_softmax
from ..registry import register_mixer
from .heads import QKVMixer


def masked_softmax_over_positions(k: Tensor, mask: Tensor | None) -> Tensor:
    """rho_k: softmax of each feature column of ``k`` (B, H, N, D) over the N positions, real keys only
    (padded keys get weight exactly 0; a row with no real key gives zeros, never NaN)."""
    return masked_softmax(k, None if mask is None else mask[:, None, :, None], dim=2)


@register_mixer(
    "efficient",
    paper="Shen et al. (2021) §3, efficient attention with softmax normalisation",
    complexity="O(N d^2)",
    causal=False,
)
class EfficientAttention(QKVMixer):
    """Efficient attention (Shen et al. 2021, "Efficient Attention: Attention with Linear Complexities",
    WACV 2021, §3), per head::

        E(Q, K, V) = rho_q(Q) (rho_k(K)^T V)

    with the softmax normalisation: ``rho_q`` is a softmax over the feature dimension of each query row
    and ``rho_k`` a softmax over positions of each feature column of K (each column of ``rho_k(K)`` is a
    distribution over the sequence, a "global context" template). Multiplying right to left costs
    O(N d^2) time and O(N d + d^2) memory; the reference forms the explicit N x N matrix
    ``rho_q(Q) rho_k(K)^T`` (whose rows sum to 1) and multiplies it by V.

    Non-causal only: the column softmax over positions normalises over the whole sequence, so there is
    no prefix form (``causal=True`` raises ``ValueError``).

    Padding: the softmax over positions runs over real keys only (padded keys get weight exactly 0), so
    padding never changes real outputs and a right-padded sequence gives what it gives alone; a row with
    no real token gives zeros, never NaN. Outputs at padded positions are zero.

    bf16/fp16: the softmaxes and products are computed in float32, the result is cast back.

    Options:
        bias: biases in the Q/K/V/out projections (default False: ``4 dim^2`` parameters).
    """

    def __init__(
        self,
        dim: int,
        *,
        num_heads: int = 1,
        causal: bool = False,
        max_len: int | None = None,
        bias: bool = False,
    ) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """``rho_q(Q) (rho_k(K)^T V)``, right to left."""
        out_dtype = v.dtype
        q, k, v = upcast_low_precision(q, k, v)
        rho_k = masked_softmax_over_positions(k, mask)
        return (torch.softmax(q, dim=-1) @ (rho_k.transpose(-2, -1) @ v)).to(out_dtype)

    def _attend_reference(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """A plainer masked softmax (fill -inf, softmax; rows without real keys use any finite input and are
        zeroed by the mask), then the explicit N x N matrix ``rho_q(Q) rho_k(K)^T`` times V."""
        out_dtype = v.dtype
        q, k, v = upcast_low_precision(q, k, v)
        rho_q = torch.softmax(q, dim=-1)
        if mask is None:
            rho_k = torch.softmax(k, dim=2)
        else:
            real = mask[:, None, :, None]
            has_real = mask.any(dim=1)[:, None, None, None]
            logits = torch.where(has_real, k.masked_fill(~real, float("-inf")), torch.zeros_like(k))
            rho_k = torch.softmax(logits, dim=2) * real.to(k.dtype)
        attn = rho_q @ rho_k.transpose(-2, -1)  # (B, H, N, N)
        return (attn @ v).to(out_dtype)
