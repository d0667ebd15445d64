"""Linear attention: the elu+1 feature map, or a learned one (T2R's ReLU MLP, Hedgehog's exp MLP)."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..ops.kernel_attention import (
    causal_kernel_attention,
    divide_away_from_zero,
    kernel_attention,
    kernel_attention_reference,
    kernel_attention_step,
    kernel_attention_weights,
)
from ..ops.rotary import rotary_angles, rotate
from ..registry import register_mixer
from ..validate import is_positive_int
from .heads import QKVMixer


def elu_feature_map(x: Tensor) -> Tensor:
    """tau(x) = x + 1 for x > 0, e^x otherwise (Yamada et al. (2022) eq. 6), i.e. elu(x) + 1 > 0."""
    return F.elu(x) + 1.0


FEATURE_MAPS = ("elu", "t2r", "hedgehog")


class T2RFeatureMap(nn.Module):
    """Kasai et al. (2021) §3.2 (T2R): ``phi(x) = relu(W x + b)``, a trainable single-layer MLP per head, the same
    map for queries and keys; ``W`` per head is (head_dim, features), drawn as ``nn.Linear`` draws its weights."""

    def __init__(self, num_heads: int, head_dim: int, features: int) -> None:
        super().__init__()
        bound = 1 / math.sqrt(head_dim)
        self.weight = nn.Parameter(torch.empty(num_heads, head_dim, features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(num_heads, features).uniform_(-bound, bound))

    def forward(self, x: Tensor) -> Tensor:
        """(B, H, N, D) -> (B, H, N, features), non-negative."""
        return F.relu(torch.einsum("bhnd,hdf->bhnf", x, self.weight) + self.bias[:, None])


class HedgehogFeatureMap(nn.Module):
    """Zhang et al. (2024) §4.1 (Hedgehog): ``phi(x) = [softmax(W x + b), softmax(-(W x + b))]``, a trainable
    single-layer MLP per head with the exponential activation, normalised over its features (the stable form of
    ``[exp(Wx + b), exp(-Wx - b)]``: a per-query scale cancels in the normalised attention), ``2 features``
    wide. ``W`` starts as the identity (``parameter_roles``: a model-wide initialisation keeps it), ``b`` at 0."""

    def __init__(self, num_heads: int, head_dim: int, features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.eye(head_dim, features).repeat(num_heads, 1, 1))
        self.bias = nn.Parameter(torch.zeros(num_heads, features))

    def parameter_roles(self) -> dict[str, str]:
        return {"weight": "keep"}

    def forward(self, x: Tensor) -> Tensor:
        """(B, H, N, D) -> (B, H, N, 2 features), positive, each half summing to one."""
        u = torch.einsum("bhnd,hdf->bhnf", x, self.weight) + self.bias[:, None]
        return torch.cat([u.softmax(dim=-1), (-u).softmax(dim=-1)], dim=-1)


class KernelAttentionMixer(QKVMixer):
    """A :class:`QKVMixer` whose attention is ``kernel_attention`` over feature-mapped Q and K.

    Subclasses provide ``_features(q, k, mask) -> (phi_q, phi_k, key_log_scale | None)``. Causal mixers
    decode step by step with a running ``sum phi(k_j) [v_j, 1]^T`` state (``sum phi(k_j) v_j^T`` when
    ``normalize=False``), O(F D) per token; a subclass whose features depend on the position or on earlier
    keys overrides ``_continued_features``. ``inner_dim`` and ``out_proj`` are :class:`QKVMixer`'s; ``normalize``
    and ``eps`` are :func:`~tokenmix.ops.kernel_attention.kernel_attention`'s (``eps=None``: 1e-6, and only
    with ``normalize=True``).
    """

    def __init__(self, dim: int, *, num_heads: int, causal: bool, max_len: int | None, bias: bool,
                 chunk_size: int | None, eps: float | None, inner_dim: int | None = None, out_proj: bool = True,
                 normalize: bool = True, rotary: bool = False) -> None:
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
        self._check_flag(rotary, "rotary")
        if rotary and not normalize:
            self._fail("rotary positions rotate the numerator and leave the normaliser unrotated (Su et al. 2021 "
                       "eq. 19): they need normalize=True")
        self.chunk_size = chunk_size
        self.normalize = normalize
        self.eps = float(eps)
        self.rotary = rotary

    def _features(self, q: Tensor, k: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
        raise NotImplementedError

    def _continued_features(self, q: Tensor, k: Tensor,
                            state: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor | None]:
        """Features of the positions that continue the decoding state (q, k: (B, H, L, D)); the log-scales, where
        the mechanism has them, continue the state's. Position-free default."""
        return self._features(q, k, None)

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        return {"t": torch.zeros((), dtype=torch.long, device=device)}

    def _step_heads(self, q: Tensor, k: Tensor, v: Tensor,
                    state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        phi_q, phi_k, log_scale = (None if f is None else f[:, :, 0]
                                   for f in self._continued_features(q[:, :, None], k[:, :, None], state))
        if self.rotary:
            return self._rotary_step(phi_q, phi_k, v, state)
        out, kv = kernel_attention_step(phi_q, phi_k, v, state.get("kv"), log_scale=log_scale,
                                        prev_log_scale=state.get("log_scale"), eps=self.eps,
                                        normalize=self.normalize)
        new_state = {"t": state["t"] + 1, "kv": kv}
        if log_scale is not None:
            new_state["log_scale"] = log_scale
        return out, new_state

    def _prefill_heads(self, q: Tensor, k: Tensor, v: Tensor,
                       state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """L positions continuing the state in one chunked pass
        (:func:`~tokenmix.ops.kernel_attention.causal_kernel_attention` from the state's ``kv``): what L steps
        give."""
        phi_q, phi_k, log_scale = self._continued_features(q, k, state)
        if self.rotary:
            return self._rotary_prefill(phi_q, phi_k, v, state)
        out, kv = causal_kernel_attention(
            phi_q, phi_k, v, initial_state=state.get("kv"),
            initial_log_scale=state.get("log_scale") if log_scale is not None and "kv" in state else None,
            output_final_state=True, key_log_scale=log_scale, chunk_size=self.chunk_size, eps=self.eps,
            normalize=self.normalize)
        new_state = {"t": state["t"] + q.shape[2], "kv": kv}
        if log_scale is not None:
            new_state["log_scale"] = log_scale[..., -1]
        return out, new_state

    def _rotary_step(self, phi_q: Tensor, phi_k: Tensor, v: Tensor,
                     state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """One step of the rotary form: rotated features into the numerator's state, unrotated into the
        normaliser's (``kv``: sum of rotated phi(k_j) v_j^T; ``z``: sum of phi(k_j))."""
        cos, sin = rotary_angles(state["t"].reshape(1), phi_q.shape[-1])
        rq, rk = (rotate(f[:, :, None], cos, sin)[:, :, 0] for f in (phi_q, phi_k))
        num, kv = kernel_attention_step(rq, rk, v, state.get("kv"), normalize=False)
        ones = v.new_ones(*v.shape[:-1], 1)
        den, z = kernel_attention_step(phi_q, phi_k, ones, state.get("z"), normalize=False)
        return divide_away_from_zero(num, den, self.eps), {"t": state["t"] + 1, "kv": kv, "z": z}

    def _rotary_prefill(self, phi_q: Tensor, phi_k: Tensor, v: Tensor,
                        state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """:meth:`_rotary_step` for L positions at once: the numerator and the normaliser each one chunked pass
        from their states, rotated by the positions ``t .. t + L - 1``."""
        rq, rk = self._rotated(phi_q, phi_k, start=state["t"])
        options = dict(output_final_state=True, chunk_size=self.chunk_size, normalize=False)
        num, kv = causal_kernel_attention(rq, rk, v, initial_state=state.get("kv"), **options)
        den, z = causal_kernel_attention(phi_q, phi_k, v.new_ones(*v.shape[:-1], 1), initial_state=state.get("z"),
                                         **options)
        return (divide_away_from_zero(num, den, self.eps),
                {"t": state["t"] + phi_q.shape[2], "kv": kv, "z": z})

    def _rotated(self, phi_q: Tensor, phi_k: Tensor, start: Tensor | int = 0) -> tuple[Tensor, Tensor]:
        positions = torch.arange(phi_q.shape[2], device=phi_q.device) + start
        cos, sin = rotary_angles(positions, phi_q.shape[-1])
        return rotate(phi_q, cos, sin), rotate(phi_k, cos, sin)

    def _rotary_attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, attention: Any) -> Tensor:
        """Su et al. (2021) eq. 19: ``sum_j (R_i phi(q_i))^T (R_j phi(k_j)) v_j / sum_j phi(q_i)^T phi(k_j)``, the
        numerator and the normaliser each an unnormalised kernel attention (``attention``: the fast or the
        reference one)."""
        phi_q, phi_k, log_scale = self._features(q, k, mask)
        if log_scale is not None:
            self._fail("rotary positions cannot take log-scaled features", NotImplementedError)
        rq, rk = self._rotated(phi_q, phi_k)
        options = dict(causal=self.causal, key_mask=mask, normalize=False)
        if attention is kernel_attention:
            options["chunk_size"] = self.chunk_size
        num = attention(rq, rk, v, **options)
        den = attention(phi_q, phi_k, v.new_ones(*v.shape[:-1], 1), **options)
        return divide_away_from_zero(num, den, self.eps)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        if self.rotary:
            return self._rotary_attend(q, k, v, mask, kernel_attention)
        phi_q, phi_k, log_scale = self._features(q, k, mask)
        return kernel_attention(phi_q, phi_k, v, causal=self.causal, key_mask=mask, key_log_scale=log_scale,
                                chunk_size=self.chunk_size, eps=self.eps, normalize=self.normalize)

    def _attend_reference(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        if self.rotary:
            return self._rotary_attend(q, k, v, mask, kernel_attention_reference)
        phi_q, phi_k, log_scale = self._features(q, k, mask)
        return kernel_attention_reference(phi_q, phi_k, v, causal=self.causal, key_mask=mask,
                                          key_log_scale=log_scale, eps=self.eps, normalize=self.normalize)

    def _attention_weights(self, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
        phi_q, phi_k, log_scale = self._features(q, k, mask)
        if self.rotary:
            rq, rk = self._rotated(phi_q, phi_k)
            options = dict(causal=self.causal, key_mask=mask, normalize=False)
            num = kernel_attention_weights(rq, rk, **options)
            den = kernel_attention_weights(phi_q, phi_k, **options).sum(dim=-1, keepdim=True)
            return divide_away_from_zero(num, den, self.eps)
        return kernel_attention_weights(phi_q, phi_k, causal=self.causal, key_mask=mask, key_log_scale=log_scale,
                                        eps=self.eps, normalize=self.normalize)

    @property
    def feature_dim(self) -> int:
        """F, the width of ``phi(q)`` and ``phi(k)`` per head (``head_dim`` unless a subclass says otherwise)."""
        return self.head_dim


@register_mixer(
    "linear",
    paper="Katharopoulos et al. (2020) eqs. 2-7; Yamada et al. (2022) eqs. 5-6; learned maps: Kasai et al. (2021) "
          "§3.2 (T2R), Zhang et al. (2024) §4.1 (Hedgehog)",
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
        feature_map: ``"elu"`` (default, the fixed ``elu + 1``); ``"t2r"``: Kasai et al. (2021)'s learned
            ``relu(W x + b)``, one map per head shared by Q and K (:class:`T2RFeatureMap`); ``"hedgehog"``: Zhang et
            al. (2024)'s learned ``[softmax(W x + b), softmax(-W x - b)]``, separate maps for Q and K, starting from
            the identity (:class:`HedgehogFeatureMap`). Both are trained with the model, or first fitted to a softmax
            teacher (:func:`tokenmix.linearize`).
        feature_dim: features of a learned map per head (default ``head_dim``; Hedgehog's ``phi`` is twice as wide);
            not with ``"elu"``.
        rotary: rotary positions in Su et al. (2021) eq. 19's form for linear attention: the feature-mapped Q and K
            rotated by their positions in the numerator, unrotated in the normaliser (default False; the
            features per head must be even).
    """

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = False, max_len: int | None = None,
                 bias: bool = False, chunk_size: int | None = None, eps: float | None = None,
                 inner_dim: int | None = None, out_proj: bool = True, normalize: bool = True,
                 feature_map: str = "elu", feature_dim: int | None = None, rotary: bool = False) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias,
                         chunk_size=chunk_size, eps=eps, inner_dim=inner_dim, out_proj=out_proj,
                         normalize=normalize, rotary=rotary)
        if feature_map not in FEATURE_MAPS:
            self._fail(f"feature_map must be one of {', '.join(FEATURE_MAPS)}; got {feature_map!r}")
        if feature_dim is not None and feature_map == "elu":
            self._fail("feature_dim sets the width of a learned feature map; elu + 1 has none (feature_map='t2r' or "
                       "'hedgehog')")
        if feature_dim is not None and not is_positive_int(feature_dim):
            self._fail(f"feature_dim must be a positive int, got {feature_dim!r}")
        self.feature_map = feature_map
        features = feature_dim or self.head_dim
        if feature_map == "t2r":
            self.phi = T2RFeatureMap(self.num_heads, self.head_dim, features)
        elif feature_map == "hedgehog":
            self.phi_q = HedgehogFeatureMap(self.num_heads, self.head_dim, features)
            self.phi_k = HedgehogFeatureMap(self.num_heads, self.head_dim, features)
        self._features_per_head = {"elu": self.head_dim, "t2r": features, "hedgehog": 2 * features}[feature_map]
        if rotary and self._features_per_head % 2:
            self._fail(f"rotary positions rotate pairs of features: {self._features_per_head} features per head is "
                       f"odd")

    def _features(self, q: Tensor, k: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, None]:
        if self.feature_map == "t2r":
            return self.phi(q), self.phi(k), None
        if self.feature_map == "hedgehog":
            return self.phi_q(q), self.phi_k(k), None
        return elu_feature_map(q), elu_feature_map(k), None

    @property
    def feature_dim(self) -> int:
        return self._features_per_head
