"""Sliding-window softmax attention beside linear attention: LoLCATs' hybrid (Zhang et al., 2024b)."""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import Tensor, nn

from ..ops.kernel_attention import divide_away_from_zero
from ..ops.window_linear import (
    WindowLinearState,
    chunk_window_linear_attn,
    empty_window_linear_state,
    fused_recurrent_window_linear_attn,
    shifted_exp,
    window_linear_heads,
)
from ..registry import register_mixer
from ..validate import is_positive_int
from .linear import LinearAttention


@register_mixer(
    "window_linear",
    paper="Zhang et al. (2024b, LoLCATs) §3.2, sliding window + linear attention; feature maps as for 'linear' "
          "(Katharopoulos et al. 2020; Kasai et al. 2021; Zhang et al. 2024)",
    complexity="O(N w d + N d^2)",
    causal=True,
    bidirectional=False,
    recurrent=True,
)
class WindowLinearAttention(LinearAttention):
    """Exact softmax attention over the last ``window`` tokens, linear attention over every token before them, in one
    normalisation (LoLCATs' "sliding window + linear" layer, in the arrangement of its released code)::

        y_i = (g_h sum_{j in W(i)} exp(s_ij - m_i) v_j + l_h sum_{j <= i - w} phi(q_i)^T phi(k_j) v_j)
              / (g_h sum_{j in W(i)} exp(s_ij - m_i)     + l_h sum_{j <= i - w} phi(q_i)^T phi(k_j))

    with ``W(i) = {i - w + 1, ..., i}``, ``s_ij = q_i^T k_j / sqrt(d)``, ``m_i = max_{j in W(i)} s_ij``, a learned
    per-head ``g_h = sigmoid(omega_h)`` (``omega`` starts at 0, tokenmix's choice) and ``l_h = 1`` (or ``1 - g_h``
    with ``affine=True``). ``phi`` is any of linear attention's maps (``feature_map``: elu + 1, T2R, Hedgehog);
    converted from a softmax model by :func:`tokenmix.linearize` (``method="lolcats"`` fits the maps to each
    layer's softmax outputs). A Hugging Face model with a sliding window (Mistral) keeps its window this way: the
    window is the model's own unless ``window`` is given.

    Causal only. The mixer's projections and feature maps around :mod:`tokenmix.ops.window_linear`'s functions.
    Fast path: the window as banded attention over blocks of ``w`` queries (each against its own and the previous
    block's keys), the linear part as causal kernel attention over keys delayed by ``w``: O(N w d + N F d).
    Decoding keeps the last ``w`` keys, key features and values and the linear state of all before them: at most
    ``w (2 d + F) + F (d + 1)`` numbers per head, whatever the length; a prompt continues it in one chunked pass.
    Padded keys enter neither part; a padded token still takes its place in the window, as in the forward pass (so
    decoding a padded batch by skipping rows is refused).

    Options: those of ``linear`` except ``rotary`` and ``normalize=False``, and
        window: tokens seen exactly, the query's own included (default 64, LoLCATs').
        affine: weight the linear part by ``1 - g_h`` instead of 1 (default False).
    """

    padded_decoding = False  # a padded token occupies a window slot: keeping a row's old state is not equivalent
    transferred = ("phi", "window_logit")  # fitted to the softmax teacher by tokenmix.linearize, as LoLCATs does

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = True, max_len: int | None = None,
                 bias: bool = False, chunk_size: int | None = None, eps: float | None = None,
                 inner_dim: int | None = None, out_proj: bool = True, feature_map: str = "elu",
                 feature_dim: int | None = None, window: int = 64, affine: bool = False) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias, chunk_size=chunk_size,
                         eps=eps, inner_dim=inner_dim, out_proj=out_proj, feature_map=feature_map,
                         feature_dim=feature_dim)
        if not is_positive_int(window):
            self._fail(f"window must be a positive int, got {window!r}")
        self._check_flag(affine, "affine")
        self.window = window
        self.affine = affine
        self.window_logit = nn.Parameter(torch.zeros(self.num_heads))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, window={self.window}, affine={self.affine}"

    def _scores(self, q: Tensor, k: Tensor) -> Tensor:
        return (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])

    def _masks(self, n: int, mask: Tensor | None, device: torch.device) -> tuple[Tensor, Tensor]:
        """(window, linear) boolean (B or 1, 1, N, N) masks of the keys each query sees in each part."""
        i = torch.arange(n, device=device)
        lag = i[:, None] - i[None, :]
        window, linear = (lag >= 0) & (lag < self.window), lag >= self.window
        window, linear = window[None, None], linear[None, None]
        if mask is not None:
            window, linear = window & mask[:, None, None, :], linear & mask[:, None, None, :]
        return window, linear

    def _attend_reference(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """The whole N x N weight matrix, written as the formula above."""
        return self._weights(q, k, mask) @ v

    def _attention_weights(self, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
        return self._weights(q, k, mask)

    def _weights(self, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
        window, linear = self._masks(q.shape[2], mask, q.device)
        e = shifted_exp(self._scores(q, k).masked_fill(~window, float("-inf")))
        g, lin = (x.to(q.dtype)[None, :, None, None] for x in self._weights_per_head())
        phi_q, phi_k, _ = self._features(q, k, mask)
        a = g * e + lin * (phi_q @ phi_k.transpose(-2, -1)) * linear
        return divide_away_from_zero(a, a.sum(dim=-1, keepdim=True), self.eps)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """The fast path: :func:`~tokenmix.ops.window_linear.window_linear_heads`."""
        phi_q, phi_k, _ = self._features(q, k, mask)
        g, lin = self._weights_per_head()
        return window_linear_heads(q, k, v, phi_q, phi_k, self.window, g, lin, eps=self.eps,
                                   chunk_size=self.chunk_size, key_mask=mask)

    def _weights_per_head(self) -> tuple[Tensor, Tensor]:
        g = torch.sigmoid(self.window_logit)
        return g, (1 - g if self.affine else torch.ones_like(g))

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        state = empty_window_linear_state(batch_size, self.num_heads, self.head_dim, self.feature_dim,
                                          self.inner_dim // self.num_heads, torch.promote_types(dtype, torch.float32),
                                          device)
        return {"t": torch.zeros((), dtype=torch.long, device=device), **state._asdict()}

    def _continue(self, form, q: Tensor, k: Tensor, v: Tensor,
                  state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """L tokens (B, H, L, ·) continuing the state with one of :mod:`tokenmix.ops.window_linear`'s forms."""
        phi_q, phi_k, _ = self._features(q, k, None)
        g, lin = self._weights_per_head()
        previous = WindowLinearState(*(state[name] for name in WindowLinearState._fields))
        out, new = form(*(x.transpose(1, 2) for x in (q, k, v, phi_q, phi_k)), self.window, g, lin,
                        initial_state=previous, output_final_state=True, eps=self.eps)
        return out.transpose(1, 2), {"t": state["t"] + q.shape[2], **new._asdict()}

    def _prefill_heads(self, q: Tensor, k: Tensor, v: Tensor,
                       state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """L tokens in one pass (the chunked form, the state's window tokens put before the new ones)."""
        return self._continue(partial(chunk_window_linear_attn, chunk_size=self.chunk_size), q, k, v, state)

    def _step_heads(self, q: Tensor, k: Tensor, v: Tensor,
                    state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """The new token enters the window; the one it pushes out enters the linear state."""
        out, state = self._continue(fused_recurrent_window_linear_attn, q[:, :, None], k[:, :, None], v[:, :, None],
                                    state)
        return out[:, :, 0], state
