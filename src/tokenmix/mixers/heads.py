"""The two kinds of mechanism whose rule runs per head on queries, keys and values, and so can take a host model's
own: :class:`QKVMixer` (Q/K/V projections, a per-head attention rule, the output projection) and
:class:`GatedHeadsMixer` (the same, with gates read from the hidden states). :func:`tokenmix.create_heads` builds either
without its projections (``has_projections`` False)."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn as nn
from torch import Tensor

from ..registry import building_projections
from .base import Mixer, merge_heads, split_heads

__all__ = ["QKVMixer", "GatedHeadsMixer", "WITHOUT_PROJECTIONS"]

WITHOUT_PROJECTIONS = ("built without projections (tokenmix.create_heads), it takes per-head tensors: call "
                       "attend_heads, step_heads or prefill_heads with a host's own Q, K and V")



class QKVMixer(Mixer):
    """Multi-head Q/K/V projections, a per-head attention rule, and the output projection.

    This is the sub-layer of Chen (2023) eqs. 10-12 and 16-17 (Yamada et al. (2022) eqs. 1-3): ``Q = x W_Q``,
    ``K = x W_K``, ``V = x W_V`` with ``W_* in R^{dim x inner_dim}`` split into heads of ``inner_dim /
    num_heads``, ``R_j = attend(Q_j, K_j, V_j)``, concatenation, ``W_out in R^{inner_dim x dim}``. With
    ``bias=False`` it has ``4 dim inner_dim`` parameters (``4 dim^2`` at the default ``inner_dim = dim``).
    ``out_proj=False`` drops ``W_out``, as Yamada et al. (2022) eqs. 4-5 have none: the output is the
    concatenated heads, ``out_dim = inner_dim`` wide, and ``bias=False`` gives ``3 dim inner_dim``
    parameters. Subclasses implement ``_attend`` (the fast path) and ``_attend_reference`` (the plain one).
    """

    takes_qkv: ClassVar[bool] = True  # read by the registry: MixerInfo.qkv

    def __init__(self, dim: int, *, num_heads: int, causal: bool, max_len: int | None, bias: bool,
                 inner_dim: int | None = None, out_proj: bool = True) -> None:
        self._check_flag(bias, "bias")
        self._check_flag(out_proj, "out_proj")
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, inner_dim=inner_dim,
                         out_dim=None if out_proj else (dim if inner_dim is None else inner_dim))
        inner = self.inner_dim
        self.out_proj = out_proj
        self.has_projections = building_projections()  # False: built by tokenmix.create_heads for a host's Q, K, V
        if not self.has_projections:
            self.q_proj = self.k_proj = self.v_proj = self.proj = None
            return
        # Separate matrices, as the papers write them, so that per-matrix initialisations (Glorot in Yamada et al.
        # (2022), N(0, 0.01) in Chen (2023)) mean what they say.
        self.q_proj = nn.Linear(dim, inner, bias=bias)
        self.k_proj = nn.Linear(dim, inner, bias=bias)
        self.v_proj = nn.Linear(dim, inner, bias=bias)
        self.proj = nn.Linear(inner, dim, bias=bias) if out_proj else None

    def qkv_heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V of ``x`` (B, N, dim), each split into heads: (B, H, N, head_dim)."""
        if not self.has_projections:
            self._fail(WITHOUT_PROJECTIONS, TypeError)
        return tuple(split_heads(p(x), self.num_heads) for p in (self.q_proj, self.k_proj, self.v_proj))

    def attend_heads(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
        """The attention rule on per-head tensors q, k, v (B, H, N, D), mask (B, N) or None: (B, H, N, D). What the
        mixer's forward computes between its projections, and what a host model with its own projections calls;
        inside :meth:`substituted_attention`, the substitute's output."""
        if self._substitute is not None:
            return self._substitute(q, k, v, mask)
        return self._attend(q, k, v, mask)

    def attention_weights_of_heads(self, q: Tensor, k: Tensor, mask: Tensor | None = None) -> Tensor:
        """The (B, H, N, N) attention matrix on per-head q, k (see :meth:`attention_weights`)."""
        return self._attention_weights(q, k, mask)

    def _output(self, heads: Tensor) -> Tensor:
        """The concatenated heads (..., inner_dim) through ``W_out``, or as they are when ``out_proj=False``."""
        return heads if self.proj is None else self.proj(heads)

    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        q, k, v = self.qkv_heads(x)
        return self._output(merge_heads(self.attend_heads(q, k, v, mask)))

    def _mix_reference(self, x: Tensor, mask: Tensor | None) -> Tensor:
        q, k, v = self.qkv_heads(x)
        return self._output(merge_heads(self._attend_reference(q, k, v, mask)))

    forms_attention_matrix = False  # True where the forward pass itself computes the N x N matrix (softmax)

    def attention_weights(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """The (B, H, N, N) attention matrix of ``x`` (B, N, dim): row i holds the weights query i gives every key
        (zero for padded keys, later keys when causal, and in the rows of padded queries), so that the heads'
        output is ``weights @ V``. O(N^2) memory: for inspecting a trained model (how local its attention is,
        Gan et al. (2023) Fig. 5), not for the forward pass. A mechanism without an attention matrix raises
        ``NotImplementedError`` naming itself."""
        mask = self._check_input(x, mask)
        q, k, _ = self.qkv_heads(x)
        weights = self._attention_weights(q, k, mask)
        return weights if mask is None else weights.masked_fill(~mask[:, None, :, None], 0.0)

    def _attention_weights(self, q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
        """The attention matrix per head: q, k (B, H, N, D), mask (B, N) or None -> (B, H, N, N)."""
        self._fail("attention_weights: this mechanism has no attention matrix to show", NotImplementedError)
        raise AssertionError  # unreachable: _fail raises

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """The attention rule per head: (B, H, N, D) each, mask (B, N) or None -> (B, H, N, D)."""
        raise NotImplementedError

    def step_heads(self, q: Tensor, k: Tensor, v: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """One causal step of the attention rule on the new position's heads, q, k, v (B, H, D) each, already
        projected (by this mixer's projections in :meth:`step`, or by a host model's own): returns the heads'
        output (B, H, D) and the new state (:meth:`init_state`'s)."""
        self._check_recurrent()
        return self._step_heads(q, k, v, state)

    def _step_heads(self, q: Tensor, k: Tensor, v: Tensor,
                    state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        self._fail("step_heads: this mechanism has no per-head decoding step", NotImplementedError)
        raise AssertionError  # unreachable: _fail raises

    def _step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        q, k, v = (t[:, :, 0] for t in self.qkv_heads(x_t[:, None]))
        out, state = self._step_heads(q, k, v, state)
        return self._output(out.reshape(x_t.shape[0], self.inner_dim)), state

    def prefill_heads(self, q: Tensor, k: Tensor, v: Tensor,
                      state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """Several causal steps of the attention rule at once on heads q, k, v (B, H, L, D) that continue the
        sequences ``state`` has seen: the outputs (B, H, L, D) and the state after them, what L calls of
        :meth:`step_heads` give; in one pass where the mechanism has one (a prompt into a fresh kernel state)."""
        self._check_recurrent()
        return self._prefill_heads(q, k, v, state)

    def _prefill_heads(self, q: Tensor, k: Tensor, v: Tensor,
                       state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        outputs = []
        for t in range(q.shape[2]):
            out, state = self._step_heads(q[:, :, t], k[:, :, t], v[:, :, t], state)
            outputs.append(out)
        return torch.stack(outputs, dim=2), state

    def _prefill(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        q, k, v = self.qkv_heads(x)
        out, state = self._prefill_heads(q, k, v, state)
        return self._output(merge_heads(out)), state

    def _attend_reference(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """The plain computation of :meth:`_attend` (an explicit N x N matrix)."""
        raise NotImplementedError


class GatedHeadsMixer(Mixer):
    """A mechanism whose rule runs on per-head queries, keys and values and reads its gates (writing strengths,
    decays, output gates) from the hidden states ``x`` they were projected from: ``attend_heads(q, k, v, mask,
    hidden=x)``. A host model with its own Q, K, V and output projections (a Hugging Face attention module) feeds it
    through :func:`tokenmix.create_heads`, which builds it without ``W_Q``, ``W_K``, ``W_V``, ``W_O`` and keeps the
    gates. Its own forward is its projections around :meth:`attend_heads`.

    Subclasses create ``q_proj``, ``k_proj``, ``v_proj`` and ``proj`` only where ``self.has_projections`` and
    implement ``_attend(q, k, v, mask, *, hidden)`` (the rule on (B, H, L, ·) heads: the heads ``W_O`` takes,
    (B, H, L, D)) and ``_continue(q, k, v, state, hidden)`` (L positions from a decoding state: heads and state).
    """

    takes_hidden: ClassVar[bool] = True  # read by the registry: MixerInfo.hidden

    def __init__(self, dim: int, *, num_heads: int, causal: bool, max_len: int | None,
                 inner_dim: int | None = None) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, inner_dim=inner_dim)
        self.has_projections = building_projections()  # False: built by tokenmix.create_heads for a host's Q, K, V

    def _check_hidden(self, q: Tensor, hidden: Tensor) -> None:
        want = (q.shape[0], q.shape[2], self.dim)
        if not isinstance(hidden, Tensor) or hidden.dim() != 3 or tuple(hidden.shape) != want:
            self._fail(f"hidden must be the host's hidden states (B, L, dim) = {want}, got "
                       f"{tuple(hidden.shape) if isinstance(hidden, Tensor) else type(hidden).__name__}")

    def _projected_heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V of ``x`` (B, N, dim) by the mechanism's own projections, as (B, H, N, ·) heads."""
        if not self.has_projections:
            self._fail(WITHOUT_PROJECTIONS + " (and hidden=, the hidden states they came from)", TypeError)
        return tuple(split_heads(p(x), self.num_heads) for p in (self.q_proj, self.k_proj, self.v_proj))

    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self.proj(merge_heads(self.attend_heads(*self._projected_heads(x), mask, hidden=x)))

    def attend_heads(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
                     hidden: Tensor) -> Tensor:
        """The rule on a host's heads q, k, v (B, H, L, ·), its gates from the hidden states ``hidden`` (B, L, dim)
        the heads were projected from: the heads (B, H, L, D) ready for the host's ``W_O``; inside
        :meth:`substituted_attention`, the substitute's output."""
        self._check_hidden(q, hidden)
        if self._substitute is not None:
            return self._substitute(q, k, v, mask, hidden=hidden)
        return self._attend(q, k, v, mask, hidden=hidden)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *, hidden: Tensor) -> Tensor:
        raise NotImplementedError

    def step_heads(self, q: Tensor, k: Tensor, v: Tensor, state: dict[str, Tensor], *,
                   hidden: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """One step on a host's heads q, k, v (B, H, ·) and hidden state (B, dim): (B, H, D) and the new state."""
        out, state = self.prefill_heads(q[:, :, None], k[:, :, None], v[:, :, None], state, hidden=hidden[:, None])
        return out[:, :, 0], state

    def prefill_heads(self, q: Tensor, k: Tensor, v: Tensor, state: dict[str, Tensor], *,
                      hidden: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """L positions continuing the state on a host's heads (B, H, L, ·): in the chunked form, one step in the
        recurrent one."""
        self._check_recurrent()
        self._check_hidden(q, hidden)
        return self._continue(q, k, v, state, hidden)

    def _continue(self, q: Tensor, k: Tensor, v: Tensor, state: dict[str, Tensor],
                  hidden: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        raise NotImplementedError

    def _step(self, x_t: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        out, state = self._prefill(x_t[:, None], state)
        return out[:, 0], state

    def _prefill(self, x: Tensor, state: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        out, state = self.prefill_heads(*self._projected_heads(x), state, hidden=x)
        return self.proj(merge_heads(out)), state
