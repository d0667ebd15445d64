"""Kerformer: sigmoid/softmax kernel attention with the SE-K key re-weighting (Gan et al. 2023)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..registry import register_mixer
from ..validate import is_positive_int as _positive_int
from .linear import KernelAttentionMixer

_SEK_INPUTS = ("keys", "activated")  # what SE-K pools: the pre-activation K, or K' = phi(K) (§3.5 literally)


@register_mixer(
    "kerformer",
    paper="Gan et al. (2023) eqs. 7-9, §3.5",
    complexity="O(N d^2 + L^2 / r) (SE-K: Linear(L, L/r), Linear(L/r, L) over the L = max_len >= N positions, "
               "2 L^2 / r parameters; O(N^2 / r) at L = N; O(N d^2) with se_k=False)",
    causal=True,
    recurrent=True,
    needs_max_len=True,
)
class Kerformer(KernelAttentionMixer):
    """Kerformer attention (Gan et al. (2023) §3.3 eqs. 7-9 and the SE-K module of §3.5), per head.

    Feature maps (Gan et al. (2023) eqs. 7-8), applied row by row::

        phi(Q_i) = sigmoid(Q_i)            (eq. 7; identity if q_act=False)
        phi(K_j) = softmax(K_j)            (eq. 8; over the head's feature dimension; identity if k_act=False)

    and ``V'_i = phi(Q_i) sum_j phi(K_j)^T V_j / phi(Q_i) sum_j phi(K_j)^T`` (eq. 9), computed as
    ``phi(Q) (phi(K)^T V)`` in O(N d^2) time (non-causal) or by the chunked prefix form of
    :func:`tokenmix.ops.kernel_attention.kernel_attention` (causal; no (N, d, d) tensor).

    SE-K (§3.5): a squeeze-and-excitation block over the *sequence* axis re-weights the rows of ``phi(K)``.
    Each key row is squeezed to one number, by default the mean over the whole feature dimension (all heads)
    of the **pre-activation** K (``sek_input="keys"``). §3.5 and its Figure 4 pool the activated ``K'``, but
    after the row softmax of eq. 8 every row of a head sums to 1, so its mean over the features is exactly
    ``1/head_dim``: pooling ``K'`` gives the same constant at every position, and the weights then depend on
    nothing but which positions are real. ``sek_input="activated"`` is that literal form, for ablations (it
    equals the default when ``k_act=False``, as ``K' = K`` then). The (B, N) vector is zero-padded to
    ``max_len`` (padded tokens also contribute 0, so padding never influences the weights of real positions,
    and a right-padded sequence gets the same weights as when run alone), passed through
    ``Linear(max_len, max_len // se_reduction)``, ``Linear(max_len // se_reduction, max_len)`` with no ReLU
    in between (the paper removes it, as K is already non-negative) and a sigmoid; the first N weights scale
    the rows of ``phi(K)`` of every head. This costs O(B max_len^2 / se_reduction) time and
    ``2 max_len^2 / se_reduction`` parameters, independent of d but quadratic in the sequence length the model
    is built for (``max_len >= N``): Gan et al.'s "linear in N" holds only with ``se_k=False``. It also
    ties the module to ``max_len``: ``se_k=True`` requires ``max_len`` and sequences longer than ``max_len``
    are rejected. With ``se_k=False`` no ``max_len`` is needed.

    Padding: padded keys are zeroed *after* the feature map (inside ``kernel_attention``; the softmax rows
    are positive, so zeroing the inputs would not remove them), so they leave numerator and denominator;
    their SE-K squeeze value is 0. Outputs at padded positions are zero.

    Causal: only without SE-K, since SE-K's fully-connected layers mix all positions, so the weight
    of key j would depend on later tokens. ``causal=True`` leaves SE-K off by default, and
    ``causal=True, se_k=True`` raises ``ValueError``.

    Ablations (Gan et al. (2023) Table 6): ``q_act=False`` is "Q + Softmax(K) + SE-K", ``k_act=False`` is
    "Sigmoid(Q) + K + SE-K", ``se_k=False`` is "Sigmoid(Q) + Softmax(K)". With an activation off the
    features can be negative, so the normaliser ``phi(Q_i) sum_j phi(K_j)^T`` can be near zero or change
    sign; the sign-preserving ``eps`` of the denominator keeps the output finite, but these ablations can
    produce very large outputs.

    Options:
        bias: biases in the Q/K/V/out projections (default False: ``4 dim^2`` parameters). The SE-K
            linear layers always have biases.
        q_act: apply the sigmoid of eq. 7 to Q.
        k_act: apply the softmax of eq. 8 to K.
        se_k: apply the SE-K re-weighting (§3.5); needs ``max_len``, non-causal only. Default:
            on when bidirectional, off when causal.
        se_reduction: SE-K bottleneck ratio r (hidden width ``max(1, max_len // r)``).
        sek_input: what SE-K pools per position: ``"keys"`` (default), the pre-activation K, or
            ``"activated"``, the ``K' = phi(K)`` of eq. 8 as §3.5 writes it (a constant ``1/head_dim`` when
            ``k_act``). Only with ``se_k=True``.
        chunk_size: causal chunk length (default: about sqrt(head_dim^2)).
        eps: denominator guard (sign-preserving).
        rotary: rotary positions, Su et al. (2021) eq. 19's form (rotated features in the numerator, unrotated
            in the normaliser; default False).
    """

    def __init__(
        self,
        dim: int,
        *,
        num_heads: int = 1,
        causal: bool = False,
        max_len: int | None = None,
        bias: bool = False,
        q_act: bool = True,
        k_act: bool = True,
        se_k: bool | None = None,
        se_reduction: int = 4,
        sek_input: str = "keys",
        chunk_size: int | None = None,
        eps: float = 1e-6,
        rotary: bool = False,
    ) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias,
                         chunk_size=chunk_size, eps=eps, rotary=rotary)
        if rotary and self.head_dim % 2:
            self._fail(f"rotary positions rotate pairs of features: head_dim {self.head_dim} is odd")
        if not _positive_int(se_reduction):
            self._fail(f"se_reduction must be a positive int, got {se_reduction!r}")
        if se_k is None:  # SE-K by default, except causally where it cannot apply
            se_k = not causal
        if se_k and causal:
            self._fail("causal=True is unsupported with se_k=True (SE-K mixes all positions, so the weight "
                       "of a key would depend on later tokens); pass se_k=False for causal use")
        if not isinstance(sek_input, str) or sek_input not in _SEK_INPUTS:
            self._fail(f"sek_input must be one of {_SEK_INPUTS}, got {sek_input!r}")
        if sek_input != "keys" and not se_k:
            self._fail(f"sek_input={sek_input!r} is an SE-K option and needs se_k=True (SE-K is off)")
        if se_k and max_len is None:
            self._fail("se_k=True needs max_len (the SE-K fully-connected layers act on the sequence axis, "
                       "of length max_len); pass max_len or se_k=False")
        self.q_act = bool(q_act)
        self.k_act = bool(k_act)
        self.se_k = bool(se_k)
        self.se_reduction = se_reduction
        self.sek_input = sek_input
        if self.se_k:
            assert max_len is not None
            hidden = max(1, max_len // se_reduction)
            self.se_fc1 = nn.Linear(max_len, hidden)
            self.se_fc2 = nn.Linear(hidden, max_len)
        else:
            self.se_fc1 = None
            self.se_fc2 = None

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, q_act={self.q_act}, k_act={self.k_act}, se_k={self.se_k}, "
                f"se_reduction={self.se_reduction}, sek_input={self.sek_input!r}")

    def _phi_k(self, k: Tensor) -> Tensor:
        return torch.softmax(k, dim=-1) if self.k_act else k

    def se_squeeze(self, k: Tensor, mask: Tensor | None, phi_k: Tensor | None = None) -> Tensor:
        """The SE-K squeeze (B, N) from the pre-activation keys ``k`` (B, H, N, D): per position, the mean over
        the feature dimension of all heads of ``k`` (``sek_input="keys"``) or of ``phi(k)`` ("activated";
        ``phi_k`` when given, else computed); 0 at padded positions."""
        # Pre-activation by default: a softmax row of eq. 8 sums to 1, so its mean is 1/head_dim at every
        # position and pooling K' (the literal §3.5) leaves the excitation nothing input-dependent to use.
        source = k if self.sek_input == "keys" else (self._phi_k(k) if phi_k is None else phi_k)
        squeeze = source.mean(dim=(1, 3))
        return squeeze if mask is None else squeeze.masked_fill(~mask, 0.0)

    def se_weights(self, k: Tensor, mask: Tensor | None, phi_k: Tensor | None = None) -> Tensor:
        """SE-K weights (B, N) in (0, 1) from the pre-activation keys ``k`` (B, H, N, D) (and ``phi_k``, see
        :meth:`se_squeeze`), mask (B, N) or None."""
        assert self.se_fc1 is not None and self.se_fc2 is not None and self.max_len is not None
        n = k.shape[2]
        squeeze = F.pad(self.se_squeeze(k, mask, phi_k), (0, self.max_len - n))  # positions beyond N give 0
        excite = torch.sigmoid(self.se_fc2(self.se_fc1(squeeze)))  # no ReLU between the FCs (§3.5)
        return excite[:, :n]

    def _features(self, q: Tensor, k: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, None]:
        phi_q = torch.sigmoid(q) if self.q_act else q
        phi_k = self._phi_k(k)
        if self.se_k:
            phi_k = phi_k * self.se_weights(k, mask, phi_k)[:, None, :, None]
        return phi_q, phi_k, None
