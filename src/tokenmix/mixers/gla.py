"""Linear attention with decay: retention (RetNet) and gated linear attention (GLA), on the functions of
:mod:`tokenmix.ops.gla`."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..ops.gla import chunk_gla, chunk_simple_gla, fused_recurrent_gla, naive_recurrent_gla, retention_decays
from ..ops.rotary import rotary_angles, rotate
from ..registry import register_mixer
from ..validate import is_positive_int
from .base import merge_heads, rms_norm
from .heads import GatedHeadsMixer

__all__ = ["Retention", "GatedLinearAttention"]


class _DecayedLinearMixer(GatedHeadsMixer):
    """What both layers share: q, k, v projections split into heads, a recurrence with decay on a (K, V) state
    per head, each head's output normalised (RetNet: GroupNorm; GLA: RMSNorm; both without a shift), gated by
    ``SiLU(x W_g)`` per channel, then ``W_o``. Padded positions write nothing and decay nothing (``k = v = 0``,
    log decay 0), so the state a real token reads holds real tokens only. Decoding keeps the (K, V) state per
    head, O(H K V) per token whatever the length. On a host's Q, K, V (:func:`tokenmix.create_heads`) the keys are
    the host's, as wide as its values, and the decay and the output gate read its hidden states."""

    key_ratio = 1.0  # a head's key width / its value width (rounded down, at least 1), with its own projections
    transferred: ClassVar[tuple[str, ...]] = ("g_proj", "norm_weight")  # what tokenmix.linearize fits to a teacher

    def __init__(self, dim: int, *, num_heads: int, causal: bool, max_len: int | None, chunk_size: int,
                 bias: bool) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len)
        if not is_positive_int(chunk_size):
            self._fail(f"chunk_size must be a positive int, got {chunk_size!r}")
        self._check_flag(bias, "bias")
        ratio = self.key_ratio if self.has_projections else 1.0  # a host's keys are as wide as its values
        key_dim = num_heads * max(1, int(self.head_dim * ratio))
        self.chunk_size, self.key_dim = chunk_size, key_dim
        if self.has_projections:
            self.q_proj, self.k_proj = nn.Linear(dim, key_dim, bias=bias), nn.Linear(dim, key_dim, bias=bias)
            self.v_proj = nn.Linear(dim, dim, bias=bias)
        self.g_proj = nn.Linear(dim, dim, bias=bias)
        self.norm_weight = nn.Parameter(torch.ones(self.head_dim))
        self.proj = nn.Linear(dim, dim, bias=bias) if self.has_projections else None

    def parameter_roles(self) -> dict[str, str]:
        return {"norm_weight": "norm_gain"}

    def _split(self, t: Tensor) -> Tensor:
        return t.view(*t.shape[:2], self.num_heads, -1)

    def _positioned(self, q: Tensor, k: Tensor, offset: int) -> tuple[Tensor, Tensor]:
        """q, k (B, H, N, K) of positions ``offset ..``: as they are (retention rotates them)."""
        return q, k

    def _log_decay(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def _rule_inputs(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor, mask: Tensor | None,
                     offset: int) -> tuple[Tensor, ...]:
        """The recurrence's inputs (B, N, H, ·) from heads q, k, v (B, H, N, ·) of positions ``offset ..`` and the
        hidden states x (B, N, dim) they came from: q, k positioned, the log decay from x; padding writes nothing."""
        q, k = self._positioned(q, k, offset)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        decay = self._log_decay(x)
        if mask is not None:
            real = mask[..., None].to(x.dtype)
            k, v = k * real[..., None], v * real[..., None]
            decay = decay * (real[..., None] if decay.dim() == 4 else real)
        return q, k, v, decay

    def _heads_output(self, o: Tensor, x: Tensor) -> Tensor:
        """Each head RMS-normalised and gated by ``SiLU(x W_g)``: (B, H, N, D)."""
        return (rms_norm(o.to(x.dtype), self.norm_weight) * F.silu(self._split(self.g_proj(x)))).transpose(1, 2)

    def _chunked(self, q: Tensor, k: Tensor, v: Tensor, decay: Tensor,
                 initial_state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The chunked form: (o, the final state)."""
        raise NotImplementedError

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *, hidden: Tensor) -> Tensor:
        o, _ = self._chunked(*self._rule_inputs(q, k, v, hidden, mask, 0))
        return self._heads_output(o, hidden)

    def _mix_reference(self, x: Tensor, mask: Tensor | None) -> Tensor:
        q, k, v, decay = self._rule_inputs(*self._projected_heads(x), x, mask, 0)
        gk = decay if decay.dim() == 4 else decay[..., None].expand(*k.shape)
        o, _ = naive_recurrent_gla(q, k, v, gk)
        return self.proj(merge_heads(self._heads_output(o, x)))

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        state_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        return {"t": torch.zeros((), dtype=torch.long, device=device),
                "S": torch.zeros(batch_size, self.num_heads, self.key_dim // self.num_heads, self.head_dim,
                                 dtype=state_dtype, device=device)}

    def _continue(self, q: Tensor, k: Tensor, v: Tensor, state: dict[str, Tensor],
                  hidden: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        q, k, v, decay = self._rule_inputs(q, k, v, hidden, None, int(state["t"]))
        if q.shape[1] == 1:  # one token: the recurrent form (the chunked one would pad it to a whole chunk)
            gk = decay if decay.dim() == 4 else decay[..., None].expand(*k.shape)
            o, s = fused_recurrent_gla(q, k, v, gk, initial_state=state["S"], output_final_state=True)
        else:
            o, s = self._chunked(q, k, v, decay, initial_state=state["S"])
        return self._heads_output(o, hidden), {"t": state["t"] + q.shape[1], "S": s}


@register_mixer(
    "retention",
    paper="Sun, Dong, Huang, Ma, Xia, Xue, Wang, Wei (2023) 'Retentive Network: A Successor to Transformer for "
          "Large Language Models' eqs. 1-8 (retention, its parallel, recurrent and chunkwise forms), §2.2 (the "
          "multi-scale decays, GroupNorm, the swish gate)",
    complexity="O(N C d + N d^2 / H)",
    causal=True,
    bidirectional=False,
    recurrent=True,
)
class Retention(_DecayedLinearMixer):
    """Multi-scale retention (Sun et al. 2023 eqs. 1-8): ``S_n = gamma S_{n-1} + k_n^T v_n``, ``o_n = q_n S_n``
    per head, with a fixed decay ``gamma_h = 1 - 2^(-5 - h)`` for head ``h`` (§2.2), q and k rotated by their
    position (``xpos=True``, the default: RetNet's xPos ``Theta``, here the rotary rotation of Su et al. 2021, the
    part of xPos that carries the relative position; xPos's extra per-dimension decay is left out, and an odd
    head's last dimension is not rotated), scaled by
    ``head_dim^-1/2``, each head normalised (GroupNorm without a shift: the RMS over the head) and gated by
    ``swish(X W_G)``, then ``W_O``.

    Options:
        xpos: rotate q and k by their position.
        chunk_size: tokens per chunk of the chunkwise form (speed only).
        bias: biases of the projections.
    """

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = True, max_len: int | None = None,
                 xpos: bool = True, chunk_size: int = 64, bias: bool = False) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, chunk_size=chunk_size, bias=bias)
        self._check_flag(xpos, "xpos")
        self.xpos = xpos

    def _positioned(self, q: Tensor, k: Tensor, offset: int) -> tuple[Tensor, Tensor]:
        if not self.xpos:
            return q, k
        pairs = self.head_dim // 2 * 2  # an odd head's last dimension stays unrotated
        cos, sin = rotary_angles(torch.arange(offset, offset + q.shape[2], device=q.device), pairs)
        return tuple(torch.cat([rotate(t[..., :pairs], cos, sin), t[..., pairs:]], -1) for t in (q, k))

    def _log_decay(self, x: Tensor) -> Tensor:
        return retention_decays(self.num_heads).to(x).expand(*x.shape[:2], self.num_heads)

    def _chunked(self, q: Tensor, k: Tensor, v: Tensor, decay: Tensor,
                 initial_state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return chunk_simple_gla(q, k, v, decay, initial_state=initial_state, output_final_state=True,
                                chunk_size=self.chunk_size)


@register_mixer(
    "gla",
    paper="Yang, Wang, Shen, Panda, Kim (2024) 'Gated Linear Attention Transformers with Hardware-Efficient "
          "Training' eq. 3 (the recurrence), §4.3 (the layer: low-rank gates with temperature, keys half the "
          "width, the swish output gate)",
    complexity="O(N C d_k + N d_k d / H)",
    causal=True,
    bidirectional=False,
    recurrent=True,
)
class GatedLinearAttention(_DecayedLinearMixer):
    """Gated linear attention (Yang et al. 2024 eq. 3): ``S_t = diag(alpha_t) S_{t-1} + k_t^T v_t``, ``o_t = q_t
    S_t`` per head, with a data-dependent decay per key dimension ``alpha_t = sigmoid(x W_1 W_2 + b)^(1/tau)``
    (§4.3: rank 16, temperature ``tau = 16``, so that decays start near 1), keys and queries half the width
    of the values (``d_k = dim / 2``; per head ``head_dim // 2``, at least 1), each head RMS-normalised and gated
    by ``swish(x W_r)``, then ``W_O``.

    Options:
        gate_rank: the rank of ``W_1 W_2`` (16 in the paper).
        chunk_size: tokens per chunk of the chunkwise form (speed only).
        bias: biases of the q, k, v, gate and output projections.
    """

    key_ratio = 0.5
    temperature = 16.0
    transferred = ("g_proj", "norm_weight", "gk_down", "gk_up")  # the output gate, the norm, the decay's gate

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = True, max_len: int | None = None,
                 gate_rank: int = 16, chunk_size: int = 16, bias: bool = False) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, chunk_size=chunk_size, bias=bias)
        if not is_positive_int(gate_rank):
            self._fail(f"gate_rank must be a positive int, got {gate_rank!r}")
        self.gate_rank = gate_rank
        self.gk_down = nn.Linear(dim, gate_rank, bias=False)
        self.gk_up = nn.Linear(gate_rank, self.key_dim, bias=True)

    def _log_decay(self, x: Tensor) -> Tensor:
        return self._split(F.logsigmoid(self.gk_up(self.gk_down(x))) / self.temperature)

    def _chunked(self, q: Tensor, k: Tensor, v: Tensor, decay: Tensor,
                 initial_state: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return chunk_gla(q, k, v, decay, initial_state=initial_state, output_final_state=True,
                         chunk_size=self.chunk_size)
