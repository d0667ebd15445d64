"""Sliding-window softmax attention beside linear attention: LoLCATs' hybrid (Zhang et al., 2024b)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..ops.kernel_attention import causal_kernel_attention, divide_away_from_zero, with_ones
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

    Causal only. Fast path: the window as banded attention over blocks of ``w`` queries (each against its own and
    the previous block's keys), the linear part as causal kernel attention over keys delayed by ``w``: O(N w d +
    N F d). Decoding keeps the last ``w`` keys and values and the linear state of all before them: a fixed size,
    ``2 w d + F (d + 1)`` per head. Padded keys enter neither part; a padded token still takes its place in the
    window, as in the forward pass (so decoding a padded batch by skipping rows is refused).

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

    def _factors(self, like: Tensor) -> tuple[Tensor, Tensor]:
        """(g, l) per head, shaped to broadcast over (B, H, N, ...)."""
        g = torch.sigmoid(self.window_logit).to(like.dtype)[None, :, None, None]
        return g, (1 - g if self.affine else torch.ones_like(g))

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
        e = _shifted_exp(self._scores(q, k).masked_fill(~window, float("-inf")))
        g, lin = self._factors(q)
        phi_q, phi_k, _ = self._features(q, k, mask)
        a = g * e + lin * (phi_q @ phi_k.transpose(-2, -1)) * linear
        return divide_away_from_zero(a, a.sum(dim=-1, keepdim=True), self.eps)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, kv: Tensor | None = None) -> Tensor:
        """The fast path; ``kv``: a linear state holding keys before the first position (a continuation)."""
        wide = torch.promote_types(v.dtype, torch.float32)  # exp in float32 under bfloat16
        num_w, den_w = self._window_part(q.to(wide), k.to(wide), v.to(wide), mask)
        num_l, den_l = (t.to(wide) for t in self._linear_part(q, k, v, mask, kv))
        g, lin = self._factors(num_w)
        return divide_away_from_zero(g * num_w + lin * num_l, g * den_w + lin * den_l, self.eps).to(v.dtype)

    def _window_part(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """sum_{j in W(i)} exp(s_ij - m_i) [v_j, 1], by blocks of c = min(w, N) queries against 2 c keys (their own
        block and the one before, which together hold every key of their windows)."""
        b, h, n, _ = q.shape
        c = min(self.window, n)
        blocks = -(-n // c)
        pad = blocks * c - n
        real = torch.ones(b, n, dtype=torch.bool, device=q.device) if mask is None else mask
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        real = F.pad(real, (c, pad))  # the c keys before the first block: none
        k, v = (F.pad(t, (0, 0, c, 0)) for t in (k, v))

        def pairs_of_blocks(t: Tensor) -> Tensor:  # (..., c + blocks c, x) -> (..., blocks, 2 c, x)
            lead = t.shape[:-2]
            return torch.cat([t[..., :-c, :].reshape(*lead, blocks, c, t.shape[-1]),
                              t[..., c:, :].reshape(*lead, blocks, c, t.shape[-1])], dim=-2)

        kb, vb = pairs_of_blocks(k), pairs_of_blocks(v)
        rb = pairs_of_blocks(real[..., None])[..., 0]  # (B, blocks, 2 c)
        lag = (torch.arange(c, device=q.device)[:, None] + c) - torch.arange(2 * c, device=q.device)[None, :]
        allowed = ((lag >= 0) & (lag < self.window))[None, None, None] & rb[:, None, :, None, :]
        e = _shifted_exp(self._scores(q.view(b, h, blocks, c, -1), kb).masked_fill(~allowed, float("-inf")))
        num, den = e @ vb, e.sum(dim=-1, keepdim=True)
        return num.reshape(b, h, blocks * c, -1)[:, :, :n], den.reshape(b, h, blocks * c, 1)[:, :, :n]

    def _linear_part(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                     kv: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """sum_{j <= i - w} phi(q_i)^T phi(k_j) [v_j, 1]: causal kernel attention over keys delayed by w, from the
        linear state ``kv`` of the keys before the first position where there is one."""
        phi_q, phi_k, _ = self._features(q, k, mask)
        if mask is not None:
            phi_k = phi_k * mask[:, None, :, None].to(phi_k.dtype)
        delayed_k = F.pad(phi_k, (0, 0, self.window, 0))[:, :, :q.shape[2]]
        delayed = F.pad(with_ones(v), (0, 0, self.window, 0))[:, :, :q.shape[2]]
        both, _ = causal_kernel_attention(phi_q, delayed_k, delayed, initial_state=kv, chunk_size=self.chunk_size,
                                          normalize=False)
        return both[..., :-1], both[..., -1:]

    def _init_state(self, batch_size: int, device: torch.device | None, dtype: torch.dtype) -> dict[str, Tensor]:
        h, d, w = self.num_heads, self.head_dim, self.window
        zeros = dict(device=device, dtype=dtype)
        return {"t": torch.zeros((), dtype=torch.long, device=device),
                "window_k": torch.zeros(batch_size, h, w, d, **zeros),
                "window_v": torch.zeros(batch_size, h, w, self.inner_dim // h, **zeros),
                "kv": torch.zeros(batch_size, h, self.feature_dim, self.inner_dim // h + 1, **zeros)}

    def _prefill_heads(self, q: Tensor, k: Tensor, v: Tensor,
                       state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """L tokens continuing the state in one pass: the tokens still in the window's ring (in position order) put
        before the new ones, the forward over them all from the linear state of everything older (only the new
        positions' outputs kept); then the last ``w`` keys and values into the ring (token t at slot t mod w) and
        every earlier one into the linear state."""
        t, n, w = int(state["t"]), q.shape[2], self.window
        kept = min(t, w)  # the ring's tokens, positions t - kept .. t - 1
        slots = torch.arange(t - kept, t, device=q.device) % w
        keys = torch.cat([state["window_k"][:, :, slots].to(k.dtype), k], dim=2)
        values = torch.cat([state["window_v"][:, :, slots].to(v.dtype), v], dim=2)
        queries = torch.cat([q.new_zeros(*q.shape[:2], kept, q.shape[3]), q], dim=2)  # their outputs are dropped
        out = self._attend(queries, keys, values, None, kv=state["kv"])[:, :, kept:]
        window_k, window_v = state["window_k"].clone(), state["window_v"].clone()
        recent = torch.arange(max(kept + n - w, 0), kept + n, device=q.device)  # indices into keys, values
        window_k[:, :, (recent + t - kept) % w] = keys[:, :, recent].to(window_k.dtype)
        window_v[:, :, (recent + t - kept) % w] = values[:, :, recent].to(window_v.dtype)
        kv, leaving = state["kv"], max(kept + n - w, 0)  # the tokens that leave the window go to the linear state
        if leaving:
            _, phi_k, _ = self._features(keys[:, :, :leaving], keys[:, :, :leaving], None)
            kv = kv + (phi_k.transpose(-2, -1) @ with_ones(values[:, :, :leaving])).to(kv.dtype)
        return out, {"t": state["t"] + n, "window_k": window_k, "window_v": window_v, "kv": kv}

    def _step_heads(self, q: Tensor, k: Tensor, v: Tensor,
                    state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """The new token enters the window's ring; the one it replaces (w tokens back) enters the linear state."""
        t, w = int(state["t"]), self.window
        slot = t % w
        window_k, window_v, kv = state["window_k"].clone(), state["window_v"].clone(), state["kv"]
        if t >= w:  # the token leaving the window
            _, phi_old, _ = self._features(window_k[:, :, slot:slot + 1], window_k[:, :, slot:slot + 1], None)
            old = with_ones(window_v[:, :, slot])
            kv = kv + (phi_old[:, :, 0, :, None] * old[:, :, None, :]).to(kv.dtype)
        window_k[:, :, slot], window_v[:, :, slot] = k, v
        seen = torch.arange(w, device=q.device) < min(t + 1, w)
        e = _shifted_exp(self._scores(q[:, :, None], window_k)[:, :, 0].masked_fill(~seen, float("-inf")))
        phi_q, _, _ = self._features(q[:, :, None], q[:, :, None], None)
        linear = (phi_q[:, :, 0, :, None] * kv).sum(dim=2)
        g, lin = (f[:, :, 0, 0, None] for f in self._factors(q[:, :, None, None]))
        num = g * (e[..., None] * window_v).sum(dim=2) + lin * linear[..., :-1]
        den = g * e.sum(dim=-1, keepdim=True) + lin * linear[..., -1:]
        out = divide_away_from_zero(num, den, self.eps).to(v.dtype)  # the features may compute in float32
        return out, {"t": state["t"] + 1, "window_k": window_k, "window_v": window_v, "kv": kv}


def _shifted_exp(scores: Tensor) -> Tensor:
    """``exp(s_ij - m_i)`` with ``m_i`` the row's largest score (0 for a row whose window holds no real key, so that
    its terms are 0 rather than NaN): the window's terms before LoLCATs' shared normalisation."""
    top = scores.amax(dim=-1, keepdim=True)
    return torch.exp(scores - torch.where(torch.isfinite(top), top, torch.zeros_like(top)))
