"""Based's linear attention: the second-order Taylor feature map on a small projected dimension."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..ops.linear_attn import taylor_feature_map
from ..registry import register_mixer
from ..validate import is_positive_int
from .linear import KernelAttentionMixer

__all__ = ["BasedAttention", "taylor_feature_map"]


@register_mixer(
    "based",
    paper="Arora, Eyuboglu, Zhang, Timalsina, Alberti, Zinsley, Zou, Rudra, Ré (2024) 'Simple linear attention "
          "language models balance the recall-throughput tradeoff' §4.1 (Based's linear attention: the "
          "second-order Taylor feature map of the exponential on a feature dimension of 16)",
    complexity="O(N d r^2)",
    causal=True,
    recurrent=True,
)
class BasedAttention(KernelAttentionMixer):
    """Based's linear attention (Arora et al. 2024 §4.1): per head, q and k brought down to ``feature_dim = r``
    (16 in the paper) and mapped by :func:`taylor_feature_map` to ``1 + r + r^2`` features, so that the weights
    ``phi(q_i) . phi(k_j) = 1 + z + z^2 / 2`` (``z = q_i . k_j / sqrt(r)``) approximate ``exp(z)``; then
    normalised linear attention, ``sum_j phi(q_i) . phi(k_j) v_j / sum_j phi(q_i) . phi(k_j)`` (causal: the
    chunked prefix form, decoding from the ``(1 + r + r^2) x D`` state). The paper projects the tokens to ``r``
    directly; here the Q/K/V mixer's ``W_Q``, ``W_K`` are followed by a per-head ``head_dim x r`` map (drawn as
    ``nn.Linear`` draws its weights), the same rank-``r`` map of the tokens with more parameters. Not here: the
    sliding-window attention and short convolutions the Based architecture puts in other layers.

    Options:
        feature_dim: ``r``, the projected dimension the Taylor map expands (16 in the paper).
        bias: biases in the projections.
        chunk_size: causal chunk length (default: about sqrt of the state's size).
        eps: denominator guard.
    """

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = False, max_len: int | None = None,
                 feature_dim: int = 16, bias: bool = False, chunk_size: int | None = None,
                 eps: float = 1e-6) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias,
                         chunk_size=chunk_size, eps=eps)
        if not is_positive_int(feature_dim):
            self._fail(f"feature_dim must be a positive int, got {feature_dim!r}")
        self.reduced_dim = feature_dim
        bound = 1 / math.sqrt(self.head_dim)
        self.reduce = nn.Parameter(torch.empty(num_heads, self.head_dim, feature_dim).uniform_(-bound, bound))

    @property
    def feature_dim(self) -> int:
        """Features per head: ``1 + r + r^2``."""
        return 1 + self.reduced_dim + self.reduced_dim ** 2

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, feature_dim={self.reduced_dim}"

    def _features(self, q: Tensor, k: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, None]:
        reduce = self.reduce.to(q.dtype)
        return tuple(taylor_feature_map(torch.einsum("bhnd,hdr->bhnr", x, reduce)) for x in (q, k)) + (None,)
