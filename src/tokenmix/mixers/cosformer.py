"""cosFormer: ReLU kernel attention with a cos-based distance re-weighting (Qin et al. 2022)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..registry import register_mixer
from .linear import KernelAttentionMixer


def cos_reweighted_features(x: Tensor, pos: Tensor, horizon: Tensor) -> Tensor:
    """``[ReLU(x_i) cos(pi i / 2M), ReLU(x_i) sin(pi i / 2M)]``: (B, H, N, D) -> (B, H, N, 2D).

    ``pos`` (B|1, N) are the positions i, ``horizon`` (B|1, 1) the re-weighting horizon M. The angles are
    computed in at least float32 and the result has the dtype of ``x``.
    """
    dtype = torch.promote_types(x.dtype, torch.float32)
    angle = (math.pi / 2) * pos.to(dtype) / horizon.to(dtype)  # (B|1, N)
    cos = torch.cos(angle)[:, None, :, None].to(x.dtype)
    sin = torch.sin(angle)[:, None, :, None].to(x.dtype)
    r = torch.relu(x)
    return torch.cat([r * cos, r * sin], dim=-1)


@register_mixer(
    "cosformer",
    paper="Qin et al. (2022) §3, ReLU kernel + cos-based re-weighting",
    complexity="O(N d^2)",
    causal=True,
    recurrent=True,
    needs_max_len=True,
)
class CosFormer(KernelAttentionMixer):
    """cosFormer attention (Qin et al. 2022, "cosFormer: Rethinking softmax in attention", ICLR 2022;
    arXiv:2202.08791, §3: the ReLU linear kernel and the "cos-based re-weighting mechanism"), per head.

    The similarity of query i and key j is::

        w_ij = ReLU(q_i) . ReLU(k_j) * cos(pi/2 * (i - j) / M)

    and, by ``cos(a - b) = cos a cos b + sin a sin b`` (the paper's decomposition), it is the dot
    product of the features::

        phi(x_i) = [ReLU(x_i) cos(pi i / 2M), ReLU(x_i) sin(pi i / 2M)]      (feature dim 2 * head_dim)

    so ``out_i = sum_j w_ij v_j / sum_j w_ij`` is ordinary kernel attention, O(N d^2) time: non-causal
    ``phi(Q) (phi(K)^T V)``; causal via the chunked prefix form of
    :func:`tokenmix.ops.kernel_attention.kernel_attention` (no (N, d, d) tensor is materialised).

    Positions i are 0-based. With padding, a token's position is its rank among the real tokens of its
    row (for right padding, and without padding, that is simply its index), so padding anywhere never
    changes real outputs.

    The horizon M:
        * non-causal: each sequence's real length (number of real tokens of its row; N without padding),
          as in the paper (M = N). So a right-padded sequence gives exactly what it gives alone.
        * causal: ``M = max_len`` (required). A per-sequence length would make the feature of position
          i depend on how many tokens follow it, i.e. leak the future.
    In both cases ``|i - j| <= M - 1 < M`` for every allowed pair of real tokens (N <= max_len is enforced
    by the base; non-causally positions count real tokens only), so the angle ``pi/2 (i - j)/M`` lies in
    (-pi/2, pi/2) ([0, pi/2) when causal), the cosine is positive and all weights w_ij are non-negative.

    Padding: padded keys are zeroed after the feature map (they leave numerator and denominator);
    outputs at padded positions are zero.

    Options:
        bias: biases in the Q/K/V/out projections (default False: ``4 dim^2`` parameters).
        chunk_size: causal chunk length (default: about sqrt(2 head_dim^2)).
        eps: denominator guard.
    """

    def __init__(
        self,
        dim: int,
        *,
        num_heads: int = 1,
        causal: bool = False,
        max_len: int | None = None,
        bias: bool = False,
        chunk_size: int | None = None,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias,
                         chunk_size=chunk_size, eps=eps)
        if causal and max_len is None:
            self._fail("causal=True needs max_len (the re-weighting horizon M)")

    def positions_and_horizon(self, n: int, mask: Tensor | None, device: torch.device) -> tuple[Tensor, Tensor]:
        """Positions i (B|1, N) and horizon M (B|1, 1), both int64; see the class docstring."""
        if mask is None:
            pos = torch.arange(n, device=device)[None, :]
            real = torch.full((1, 1), n, dtype=torch.long, device=device)
        else:
            pos = (mask.long().cumsum(dim=1) - 1).clamp(min=0)  # rank among the real tokens
            real = mask.sum(dim=1, keepdim=True).clamp(min=1)  # an all-padding row: any M > 0 will do
        if self.causal:
            assert self.max_len is not None
            real = torch.full_like(real, self.max_len)
        return pos, real

    def _continued_features(self, q: Tensor, k: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, Tensor, None]:
        """Decoding and prefill: positions ``t .. t + L - 1`` from the state, horizon M = max_len."""
        assert self.max_len is not None  # causal mixers have one
        t, n = int(state["t"]), q.shape[2]
        if t + n > self.max_len:
            self._fail(f"cannot decode position {t + n - 1}: the re-weighting horizon is max_len={self.max_len}")
        pos = torch.arange(t, t + n, device=q.device)[None, :]
        horizon = torch.full((1, 1), self.max_len, device=q.device)
        both = cos_reweighted_features(torch.cat([q, k], dim=1), pos, horizon)  # one call
        phi_q, phi_k = both.split(q.shape[1], dim=1)
        return phi_q, phi_k, None

    def _features(self, q: Tensor, k: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, None]:
        pos, horizon = self.positions_and_horizon(q.shape[2], mask, q.device)
        return cos_reweighted_features(q, pos, horizon), cos_reweighted_features(k, pos, horizon), None

    @property
    def feature_dim(self) -> int:
        """F = 2 head_dim: ``[ReLU(x) cos, ReLU(x) sin]``."""
        return 2 * self.head_dim
