"""The delta-rule family: DeltaNet and Gated DeltaNet, on the functions of :mod:`tokenmix.ops.delta_rule`."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..ops.delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule, naive_recurrent_gated_delta_rule
from ..registry import register_mixer
from ..validate import is_positive_int
from .base import merge_heads, rms_norm, split_heads
from .heads import GatedHeadsMixer
from .shortconv import ShortConvolution

__all__ = ["DeltaNet", "GatedDeltaNet"]


class _DeltaRuleMixer(GatedHeadsMixer):
    """The layer both papers build around the rule: ``q, k, v = SiLU(x W_q), SiLU(x W_k), SiLU(x W_v)`` split
    into heads, ``q`` and ``k`` L2-normalised per head, ``beta = sigmoid(x W_beta)`` one writing strength per
    head and token, the rule (:func:`~tokenmix.ops.delta_rule.chunk_gated_delta_rule`, ``scale = head_dim^-1/2``),
    each head's output RMS-normalised, then ``W_o``. Padded positions write nothing (``k = v = beta = 0``, no
    decay), so the state a real token reads holds real tokens only. Decoding keeps the (K, V) state per head,
    O(H K V) per token whatever the length. On a host's Q, K, V (:func:`tokenmix.create_heads`) the SiLU and the
    normalisation apply to the host's heads, the gates read its hidden states.

    ``conv_size``: the short causal convolution both papers put on q, k and v (4 taps in both; fla's
    ``use_short_conv``), ``q = SiLU(conv(x W_q))`` and alike for k and v, a depthwise filter per channel without
    bias (:class:`~tokenmix.mixers.shortconv.ShortConvolution`); decoding then also keeps the last ``conv_size - 1``
    projected tokens. Off by default (None), as the recall sweep's files ran it; the layer as both papers build it
    is ``conv_size=4``. It runs on the mechanism's own projections only.
    """

    transferred: ClassVar[tuple[str, ...]] = ("b_proj", "norm_weight")  # what tokenmix.linearize fits to a teacher

    def __init__(self, dim: int, *, num_heads: int, causal: bool, max_len: int | None, chunk_size: int,
                 bias: bool, conv_size: int | None) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len)
        if not is_positive_int(chunk_size):
            self._fail(f"chunk_size must be a positive int, got {chunk_size!r}")
        self._check_flag(bias, "bias")
        if conv_size is not None and not is_positive_int(conv_size):
            self._fail(f"conv_size must be a positive int (the short convolution's taps) or None, got {conv_size!r}")
        if conv_size is not None and not self.has_projections:
            self._fail(f"conv_size={conv_size}: the short convolution runs on the mechanism's own projections, not on "
                       f"a host's Q, K, V (tokenmix.create_heads)")
        self.chunk_size = chunk_size
        if self.has_projections:
            self.q_proj, self.k_proj, self.v_proj = (nn.Linear(dim, dim, bias=bias) for _ in range(3))
        self.short_conv = None if conv_size is None else ShortConvolution(3 * dim, conv_size, bias=False)
        self.b_proj = nn.Linear(dim, num_heads, bias=True)
        self.norm_weight = nn.Parameter(torch.ones(self.head_dim))
        self.proj = nn.Linear(dim, dim, bias=bias) if self.has_projections else None

    def parameter_roles(self) -> dict[str, str]:
        return {"norm_weight": "norm_gain"}  # the output RMSNorm's gain starts at one under any initialisation

    def _heads(self, t: Tensor) -> Tensor:
        return t.view(*t.shape[:2], self.num_heads, self.head_dim)

    def _rule_inputs(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor, mask: Tensor | None) -> tuple[Tensor, ...]:
        """The rule's inputs (B, N, H, ·) from projected heads q, k, v (B, H, N, D) and the hidden states x (B, N,
        dim) they came from: SiLU on each, q and k L2-normalised, beta and the decay from x; padded positions write
        nothing."""
        q, k, v = (F.silu(t.transpose(1, 2)) for t in (q, k, v))
        q, k = F.normalize(q, dim=-1, eps=1e-6), F.normalize(k, dim=-1, eps=1e-6)
        beta, decay = torch.sigmoid(self.b_proj(x)), self._log_decay(x)
        if mask is not None:
            real = mask[..., None].to(x.dtype)
            k, v, beta = k * real[..., None], v * real[..., None], beta * real
            decay = None if decay is None else decay * real
        return q, k, v, decay, beta

    def _log_decay(self, x: Tensor) -> Tensor | None:
        return None

    def _heads_output(self, o: Tensor, x: Tensor) -> Tensor:
        """Each head RMS-normalised (its weight shared by the heads), then gated (:meth:`_gated`): (B, H, N, D)."""
        return self._gated(rms_norm(o.to(x.dtype), self.norm_weight), x).transpose(1, 2)

    def _gated(self, heads: Tensor, x: Tensor) -> Tensor:
        """The normalised heads (B, N, H, D) before the concatenation: as they are (DeltaNet)."""
        return heads

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *, hidden: Tensor) -> Tensor:
        o, _ = chunk_gated_delta_rule(*self._rule_inputs(q, k, v, hidden, mask), chunk_size=self.chunk_size)
        return self._heads_output(o, hidden)

    def _convolved_heads(self, x: Tensor, mask: Tensor | None, conv: Tensor | None = None, *,
                         reference: bool = False) -> tuple[tuple[Tensor, Tensor, Tensor], Tensor | None]:
        """q, k, v (B, H, N, D) of ``x`` through the projections and the short convolution (continuing its state
        ``conv`` where given), and the convolution's state after ``x``."""
        projected = torch.cat([p(x) for p in (self.q_proj, self.k_proj, self.v_proj)], dim=-1)
        filtered, conv = self.short_conv(projected, mask, conv, reference=reference)
        return tuple(split_heads(t, self.num_heads) for t in filtered.chunk(3, dim=-1)), conv

    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        if self.short_conv is None:
            return super()._mix(x, mask)
        heads, _ = self._convolved_heads(x, mask)
        return self.proj(merge_heads(self.attend_heads(*heads, mask, hidden=x)))

    def _mix_reference(self, x: Tensor, mask: Tensor | None) -> Tensor:
        heads = self._projected_heads(x) if self.short_conv is None else \
            self._convolved_heads(x, mask, reference=True)[0]
        o, _ = naive_recurrent_gated_delta_rule(*self._rule_inputs(*heads, x, mask))
        return self.proj(self._heads_output(o, x).transpose(1, 2).reshape(*x.shape[:2], self.dim))

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        state_dtype = torch.float64 if dtype == torch.float64 else torch.float32  # the rule's own state dtype
        state = {"S": torch.zeros(batch_size, self.num_heads, self.head_dim, self.head_dim, dtype=state_dtype,
                                  device=device)}
        if self.short_conv is not None:  # the last conv_size - 1 projected tokens, q, k and v side by side
            state["conv"] = torch.zeros(batch_size, self.short_conv.size - 1, 3 * self.dim, device=device,
                                        dtype=dtype)
        return state

    def _prefill(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        if self.short_conv is None:
            return super()._prefill(x, state)
        heads, conv = self._convolved_heads(x, None, state["conv"])
        out, rule_state = self.prefill_heads(*heads, {"S": state["S"]}, hidden=x)
        return self.proj(merge_heads(out)), {**rule_state, "conv": conv}

    def _continue(self, q: Tensor, k: Tensor, v: Tensor, state: dict[str, Tensor],
                  hidden: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        inputs = self._rule_inputs(q, k, v, hidden, None)
        if q.shape[2] == 1:  # one token: the recurrent form (the chunked one would pad it to a whole chunk)
            o, s = fused_recurrent_gated_delta_rule(*inputs, initial_state=state["S"], output_final_state=True)
        else:
            o, s = chunk_gated_delta_rule(*inputs, initial_state=state["S"], output_final_state=True,
                                          chunk_size=self.chunk_size)
        return self._heads_output(o, hidden), {"S": s}


@register_mixer(
    "deltanet",
    paper="Schlag, Irie, Schmidhuber (2021) 'Linear Transformers Are Secretly Fast Weight Programmers' eqs. 17-18 "
          "(the delta rule); Yang, Wang, Zhang, Shen, Kim (2024) 'Parallelizing Linear Transformers with the Delta "
          "Rule over Sequence Length' §3 (the chunked form), §4 (the layer)",
    complexity="O(N C d + N d^2 / H)",
    causal=True,
    bidirectional=False,
    recurrent=True,
)
class DeltaNet(_DeltaRuleMixer):
    """DeltaNet: ``S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T``, ``o_t = S_t^T q_t / sqrt(D)`` per
    head (Schlag et al. 2021 eqs. 17-18): each token first removes what the state recalls for its key, then
    writes its value, with strength ``beta_t`` in (0, 1). Trained in the chunked form of Yang et al. (2024) (a
    triangular solve per chunk of ``chunk_size`` tokens); the layer around it is :class:`_DeltaRuleMixer`'s.

    Options:
        chunk_size: tokens per chunk of the chunked form (speed only; the outputs are the same).
        bias: biases of the q, k, v and output projections (the beta projection always has one).
        conv_size: taps of the short convolution on q, k and v (the paper's layer: 4), or None (default): none.
    """

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = True, max_len: int | None = None,
                 chunk_size: int = 64, bias: bool = False, conv_size: int | None = None) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, chunk_size=chunk_size, bias=bias,
                         conv_size=conv_size)


@register_mixer(
    "gated_deltanet",
    paper="Yang, Kautz, Hatamizadeh (2025) 'Gated Delta Networks: Improving Mamba2 with Delta Rule' eq. 10 (the "
          "gated delta rule), §3.3 (the layer); the decay's parameterisation and initialisation from Dao, Gu (2024) "
          "'Transformers are SSMs' (Mamba-2)",
    complexity="O(N C d + N d^2 / H)",
    causal=True,
    bidirectional=False,
    recurrent=True,
)
class GatedDeltaNet(_DeltaRuleMixer):
    """Gated DeltaNet: ``S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T`` (Yang et al. 2025 eq.
    10): DeltaNet with a data-dependent decay per head and token, ``alpha_t = exp(-exp(A_log) softplus(x W_a +
    dt_bias))`` as Mamba-2 parameterises it (``A`` drawn from U(0, 16), ``dt_bias`` the inverse softplus of a
    ``dt`` drawn log-uniformly in [0.001, 0.1]), and the output gated per channel, ``RMSNorm(o) * SiLU(x W_g)``
    (§3.3), before ``W_o``. The form Qwen3-Next ships.

    Options:
        chunk_size: tokens per chunk of the chunked form (speed only).
        bias: biases of the q, k, v, gate and output projections.
        conv_size: taps of the short convolution on q, k and v (the paper's layer: 4), or None (default): none.
    """

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = True, max_len: int | None = None,
                 chunk_size: int = 64, bias: bool = False, conv_size: int | None = None) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, chunk_size=chunk_size, bias=bias,
                         conv_size=conv_size)
        self.a_proj = nn.Linear(dim, num_heads, bias=False)
        self.g_proj = nn.Linear(dim, dim, bias=bias)
        self.A_log = nn.Parameter(torch.empty(num_heads).uniform_(0, 16).clamp_(min=1e-4).log())
        dt = torch.exp(torch.empty(num_heads).uniform_(math.log(1e-3), math.log(1e-1))).clamp_(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt

    transferred = ("b_proj", "norm_weight", "a_proj", "g_proj", "A_log", "dt_bias")  # the gates, the norm

    def parameter_roles(self) -> dict[str, str]:
        # Mamba-2's draws, not a model-wide initialisation
        return {**super().parameter_roles(), "A_log": "keep", "dt_bias": "keep"}

    def _log_decay(self, x: Tensor) -> Tensor:
        return -self.A_log.exp() * F.softplus(self.a_proj(x) + self.dt_bias)

    def _gated(self, heads: Tensor, x: Tensor) -> Tensor:
        """The SiLU output gate per channel (§3.3)."""
        return heads * F.silu(self._heads(self.g_proj(x)))
