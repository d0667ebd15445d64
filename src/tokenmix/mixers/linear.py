"""Linear attention with the elu+1 feature map."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..ops.kernel_attention import (kernel_attention, kernel_attention_reference, kernel_attention_step,
                                     kernel_attention_weights)
from ..registry import register_mixer
from ..validate import is_positive_int
from .base import QKVMixer


def elu_feature_map(x: Tensor) -> Tensor:
    """tau(x) = x + 1 for x > 0, e^x otherwise (Yamada et al. (2022) eq. 6), i.e. elu(x) + 1 > 0."""
    return F.elu(x) + 1.0


class KernelAttentionMixer(QKVMixer):
    """A :class:`QKVMixer` whose attention is ``kernel_attention`` over feature-mapped Q and K.

    Subclasses provide ``_features(q, k, mask) -> (phi_q, phi_k, key_log_scale | None)``. Causal mixers
    decode step by step with a running ``sum phi(k_j) [v_j, 1]^T`` state (``sum phi(k_j) v_j^T`` when
    ``normalize=False``), O(F D) per token; a subclass whose features depend on the position or on earlier
    keys overrides ``_step_features``. ``inner_dim`` and ``out_proj`` are :class:`QKVMixer`'s; ``normalize``
    and ``eps`` are :func:`~tokenmix.ops.kernel_attention.kernel_attention`'s (``eps=None``: 1e-6, and only
    with ``normalize=True``).
    """

    def __init__(self, dim: int, *, num_heads: int, causal: bool, max_len: int | None, bias: bool,
                 chunk_size: int | None, eps: float | None, inner_dim: int | None = None, out_proj: bool = True,
                 normalize: bool = True) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias, inner_dim=inner_dim,
                         out_proj=out_proj)
        if chunk_size is not None and not is_positive_int(chunk_size):
            self._fail(f"chunk_size must be a positive int or None, got {chunk_size!r}")
        if chunk_size is not None and not causal:
            self._fail("chunk_size only applies to causal=True")
        self._check_flag(normalize, "normalize")
        if eps is not None and not normalize:
            self._fail("eps guards the denominator, which normalize=False leaves out; drop eps or normalize")
        eps = 1e-6 if eps is None else eps
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            self._fail(f"eps must be a positive number, got {eps!r}")
        self.chunk_size = chunk_size
        self.normalize = normalize
        self.eps = float(eps)

    def _features(self, q: Tensor, k: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
        raise NotImplementedError

    def _step_features(self, q: Tensor, k: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor | None]:
        """Features of the new position (q, k: (B, H, D)) given the decoding state; position-free default."""
        phi_q, phi_k, _ = self._features(q[:, :, None], k[:, :, None], None)
        return phi_q[:, :, 0], phi_k[:, :, 0], None

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        return {"t": torch.zeros((), dtype=torch.long, device=device)}

    def _step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        q, k, v = (t[:, :, 0] for t in self.qkv_heads(x_t[:, None]))
        phi_q, phi_k, log_scale = self._step_features(q, k, state)
        out, kv = kernel_attention_step(phi_q, phi_k, v, state.get("kv"), log_scale=log_scale,
                                        prev_log_scale=state.get("log_scale"), eps=self.eps,
                                        normalize=self.normalize)
        new_state = {"t": state["t"] + 1, "kv": kv}
        if log_scale is not None:
            new_state["log_scale"] = log_scale
        return self._output(out.reshape(x_t.shape[0], self.inner_dim)), new_state

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        phi_q, phi_k, log_scale = self._features(q, k, mask)
        return kernel_attention(phi_q, phi_k, v, causal=self.causal, key_mask=mask, key_log_scale=log_scale,
                                chunk_size=self.chunk_size, eps=self.eps, normalize=self.normalize)

    def _attend_reference(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        phi_q, phi_k, log_scale = self._features(q, k, mask)
        return kernel_attention_reference(phi_q, phi_k, v, causal=self.causal, key_mask=mask,
                                          key_log_scale=log_scale, eps=self.eps, normalize=self.normalize)

    def _attention_weights(self, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
        phi_q, phi_k, log_scale = self._features(q, k, mask)
        return kernel_attention_weights(phi_q, phi_k, causal=self.causal, key_mask=mask, key_log_scale=log_scale,
                                        eps=self.eps, normalize=self.normalize)

    @property
    def feature_dim(self) -> int:
        """F, the width of ``phi(q)`` and ``phi(k)`` per head (``head_dim`` unless a subclass says otherwise)."""
        return self.head_dim


@register_mixer(
    "linear",
    paper="Katharopoulos et al. (2020) eqs. 2-7; Yamada et al. (2022) eqs. 5-6",
    complexity="O(N d^2)",
    causal=True,
    recurrent=True,
)
class LinearAttention(KernelAttentionMixer):
    """Linear attention with ``tau = elu + 1`` (Yamada et al. (2022) eq. 6), per head. By default
    Katharopoulos et al. (2020) eq. 6's normalised form
    ``V'_i = tau(Q_i) sum_j tau(K_j)^T V_j / tau(Q_i) sum_j tau(K_j)^T``; ``normalize=False`` is Yamada et
    al. (2022) eq. 5 as written, ``L(x) = tau(Q) (tau(K)^T V)``, with no denominator (its outputs grow with
    the number of keys).

    Non-causal: ``tau(Q) (tau(K)^T V)`` in O(N d^2). Causal: the chunked prefix form of
    :func:`tokenmix.ops.kernel_attention.kernel_attention` (no (N, d, d) tensor). Padded keys are
    zeroed after the feature map, so they leave numerator and denominator.

    Yamada et al. (2022) §3.1.1 project the ``m = dim``-wide tokens to a depth ``d`` with no output
    projection: ``inner_dim=d, out_proj=False, normalize=False, bias=False`` (one head) is their linear
    attention, ``3 m d`` parameters and ``d``-wide outputs, whose multiplications are their §4.2 count
    ``2 N d^2 + 3 N d m`` (see :mod:`tokenmix.counting.kernel`).

    Options:
        bias: biases in the projections (default False: ``4 dim^2`` parameters).
        chunk_size: causal chunk length (default: about sqrt(head_dim^2)).
        eps: denominator guard (default 1e-6); only with ``normalize=True``.
        inner_dim: width of Q, K and V, split into ``num_heads`` heads (default ``dim``).
        out_proj: the output projection ``W_out`` back to ``dim`` (default True); False: the output is the
            concatenated heads, ``inner_dim`` wide.
        normalize: divide by ``tau(Q_i) sum_j tau(K_j)^T`` (default True, Katharopoulos et al. 2020); False:
            Yamada et al. (2022) eq. 5 without it.
    """

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = False, max_len: int | None = None,
                 bias: bool = False, chunk_size: int | None = None, eps: float | None = None,
                 inner_dim: int | None = None, out_proj: bool = True, normalize: bool = True) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias,
                         chunk_size=chunk_size, eps=eps, inner_dim=inner_dim, out_proj=out_proj,
                         normalize=normalize)

    def _features(self, q: Tensor, k: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, None]:
        return elu_feature_map(q), elu_feature_map(k), None
