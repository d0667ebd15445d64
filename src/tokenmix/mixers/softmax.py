"""Softmax attention: the quadratic baseline every other mechanism is measured against."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..ops.rotary import rotary_angles, rotate
from ..ops.softmax_attn import parallel_softmax_attn
from ..registry import register_mixer
from .heads import QKVMixer


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
    Chen (2023)) the sub-layer has ``4 dim^2`` parameters (Chen (2023) Table 7: 65,536 at dim 128). Yamada et al. (2022)
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
        rotary: rotary position embedding (Su et al. 2021): Q and K rotated by their positions before the scores
            (default False; ``head_dim`` must be even). The KV cache keeps the rotated keys.
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
        rotary: bool = False,
    ) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias, inner_dim=inner_dim,
                         out_proj=out_proj)
        if not 0.0 <= attn_dropout < 1.0:
            self._fail(f"attn_dropout must be in [0, 1), got {attn_dropout}")
        self._check_flag(rotary, "rotary")
        if rotary and self.head_dim % 2:
            self._fail(f"rotary positions rotate pairs of features: head_dim {self.head_dim} is odd")
        self.attn_dropout = attn_dropout
        self.rotary = rotary

    def _positions(self, q: Tensor, k: Tensor, start: int = 0) -> tuple[Tensor, Tensor]:
        """Q and K rotated by their positions ``start, start + 1, ...`` (Su et al. 2021 eq. 34) when ``rotary``."""
        if not self.rotary:
            return q, k
        cos, sin = rotary_angles(torch.arange(start, start + q.shape[2], device=q.device), q.shape[-1])
        return rotate(q, cos, sin), rotate(k, cos, sin)

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        empty = torch.zeros(batch_size, 0, self.num_heads, self.head_dim, device=device, dtype=dtype)
        return {"k": empty, "v": empty.clone()}  # the cache, (B, L, H, D): tokenmix.ops.softmax_attn's layout

    def _continue(self, q: Tensor, k: Tensor, v: Tensor,
                  state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """L tokens (B, H, L, D) continuing the cache in one pass (:func:`~tokenmix.ops.softmax_attn.
        parallel_softmax_attn`), rotated from the cache's length on."""
        start = state["k"].shape[1]
        if self.max_len is not None and start + q.shape[2] > self.max_len:
            self._fail(f"cannot decode past max_len={self.max_len}")
        q, k = self._positions(q, k, start=start)
        out, (keys, values) = parallel_softmax_attn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                    initial_state=(state["k"], state["v"]), output_final_state=True,
                                                    dropout_p=self._dropout_p)
        return out.transpose(1, 2), {"k": keys, "v": values}

    def _prefill_heads(self, q: Tensor, k: Tensor, v: Tensor,
                       state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        return self._continue(q, k, v, state)

    def _step_heads(self, q: Tensor, k: Tensor, v: Tensor,
                    state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        out, state = self._continue(q[:, :, None], k[:, :, None], v[:, :, None], state)
        return out[:, :, 0], state

    @property
    def _dropout_p(self) -> float:
        return self.attn_dropout if self.training else 0.0

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """Fused attention (SDPA), with its own causal mask when there is no padding."""
        q, k = self._positions(q, k)
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=self._dropout_p, is_causal=self.causal)
        allowed = attention_mask(q.shape[2], mask, self.causal, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=self._dropout_p)

    def _attend_reference(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """The explicit N x N score matrix, masked, softmax, times V."""
        return F.dropout(self._weights(q, k, mask), self._dropout_p) @ v

    forms_attention_matrix = True

    def _attention_weights(self, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
        return self._weights(q, k, mask)

    def _weights(self, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
        q, k = self._positions(q, k)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        allowed = attention_mask(q.shape[2], mask, self.causal, q.device)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        return scores.softmax(dim=-1)
