"""The Contextualizer: a context vector refined over K steps by second-order (per-feature) attention.

Maupomé & Meurs (2021), "An Iterative Contextualization Algorithm with Second-Order Attention"
(arXiv 2021), §2 and Algorithm 1.

The paper numbers only eqs. (1) (the token encoding) and (2) (the Hadamard contextualization); the other
display equations of §2 are unnumbered. Here they are cited by the tags below, in order of appearance::

    (2)   contextualize(c^(k-1), x_i) = alpha_i^(k) * x_i                       (* = Hadamard product)
    [2a]  alpha~_i^(k) = W^(k) (U^(k) x_i * V^(k) c^(k-1))                      U, V: u x m;  W: m x u
    [2b]  alpha_ij^(k) = exp(alpha~_ij^(k)) / sum_l exp(alpha~_lj^(k))          softmax over tokens i, per feature j
    [2c]  c^(k)        = sum_i alpha_i^(k) * x_i                                 the new context REPLACES the old
    [2d]  (W^(k), U^(k), V^(k)) = (W, U, V) for k = 1..K                         "recurrent contextualizers"

The paper has no biases and no nonlinearity in [2a]; c^(0) is "a constant, for example" (§2), and §3.1
(Table 3) compares c^(0) = 1, a learned c_d, and U(-1, 1) redrawn for every document.

Position i receives: **the final context vector c^(K) of its sequence, broadcast** (the same vector at every
real position; zero at padded positions). The paper's output is the context vector alone (Algorithm 1),
which a classifier maps to its decision; no projection is added here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn as nn
from torch import Tensor

from ..ops.masked_softmax import masked_softmax
from ..registry import register_mixer
from ..validate import is_positive_int as _positive_int
from .base import Mixer

__all__ = ["Contextualizer"]

_CONTEXTS = ("ones", "learned", "random")

# A computation of Algorithm 1: (x, mask, c^(0), keep_weights) -> (c^(K), the weights or None).
_Algorithm = Callable[[Tensor, Tensor | None, Tensor, bool], tuple[Tensor, Tensor | None]]


@register_mixer(
    "contextualizer",
    paper="Maupomé & Meurs (2021) 'An Iterative Contextualization Algorithm with Second-Order Attention', "
          "§2 eq. (2), Algorithm 1, second-order attention; Table 1 O(n u m) per step",
    complexity="O(K N d u)",
    causal=False,
    bidirectional=True,
    padding=True,
    recurrent=False,
    multihead=False,
)
class Contextualizer(Mixer):
    """The Contextualizer of Maupomé & Meurs (2021) §2 (Algorithm 1) with second-order attention,
    ``K = steps`` iterations::

        c = c^(0)                                              # "ones" | "learned" c_d | "random" U(-1, 1)
        for k = 1..K:
            alpha~_i = W_k (U_k x_i * V_k c)                   # [2a], rank-u factorised 3-way tensor
            alpha_i  = softmax over tokens i, per feature      # [2b], alpha_i is a d-vector, sum_i alpha_i = 1
            c        = sum_i alpha_i * x_i                     # [2c] with (2); c is replaced, not combined
        y_i = c                                                # every real position receives c^(K)

    Cost O(N u d) per step (Maupomé & Meurs (2021) Table 1: O(n u m)), O(K N d u) in all; O(N d + N u)
    memory, no N x N matrix.

    **What each position receives**: position i of a sequence receives that sequence's final context
    vector c^(K) (the same (dim,) vector at every real position); padded positions receive 0. The final
    context itself is :meth:`context`, the per-step weights :meth:`attention_weights`.

    Padding: padded tokens are left out of the softmax over tokens (weight exactly 0) and of the sum, so
    a padded sequence gives what it gives alone; a row with no real token has context 0 (never NaN,
    forward or backward).

    Parameters (``S = 1`` if ``recurrent`` else ``steps``): ``U``, ``V`` of shape (S, rank, dim), ``W`` of
    shape (S, dim, rank); with ``bias`` also ``b_U``, ``b_V`` (S, rank) and ``b_W`` (S, dim); with
    ``context="learned"`` also ``default_context`` (dim,). At the defaults: ``3 * rank * dim`` parameters.
    Initialisation (unspecified in the paper): PyTorch's ``nn.Linear`` default, U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    for every weight and bias; ``default_context`` starts at ones (the constant default).

    bf16/fp16: computed in float32, the result is cast back.

    Options:
        steps: K, the number of contextualization steps (default 5: the paper's §3.2 uses 5, and Table 2 shows no
            gain beyond K = 5).
        rank: u, the rank of the factorised 3-way tensor (default 100: the paper does not state u, but its
            parameter counts do -- 157k for the recurrent MR model at m = 500 + 20 = 520 is
            3 * 100 * 520 + the 520 -> 2 head, and "3M" for non-recurrent K = 20 is 20 * 3 * 100 * 520).
        recurrent: share (U, V, W) across the steps ([2d], default True) or give each step its own.
        context: c^(0): ``"ones"`` (the constant 1), ``"learned"`` (a parameter c_d) or ``"random"`` (drawn
            U(-1, 1) per sequence, from the global torch RNG, on **every** call -- in training and in eval
            alike, as the paper's §3.1 redraws it "for every document"; seed with ``torch.manual_seed`` or pass
            ``c0=`` to :meth:`context` / :meth:`attention_weights` for reproducible outputs). The draw is
            made in float32 and cast, so a seed gives the same c^(0) whatever the dtype.
        bias: add biases to ``U x``, ``V c`` and ``W(.)`` (default False: the paper has none).
    """

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = False, max_len: int | None = None,
                 steps: int = 5, rank: int = 100, recurrent: bool = True, context: str = "ones",
                 bias: bool = False) -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len)
        if num_heads != 1:
            self._fail(f"num_heads={num_heads} is unsupported: the Contextualizer has no heads "
                       "(second-order attention replaces them, Maupomé & Meurs (2021) §2)")
        for value, what in ((steps, "steps"), (rank, "rank")):
            if not _positive_int(value):
                self._fail(f"{what} must be a positive int, got {value!r}")
        if not isinstance(recurrent, bool):
            self._fail(f"recurrent must be a bool, got {recurrent!r}")
        if not isinstance(bias, bool):
            self._fail(f"bias must be a bool, got {bias!r}")
        if context not in _CONTEXTS:
            self._fail(f"context must be one of {_CONTEXTS}, got {context!r}")
        self.steps = steps
        self.rank = rank
        self.recurrent = recurrent
        self.context_kind = context
        self.bias = bias
        sets = 1 if recurrent else steps
        self.U = nn.Parameter(torch.empty(sets, rank, dim))
        self.V = nn.Parameter(torch.empty(sets, rank, dim))
        self.W = nn.Parameter(torch.empty(sets, dim, rank))
        if bias:
            self.b_U = nn.Parameter(torch.empty(sets, rank))
            self.b_V = nn.Parameter(torch.empty(sets, rank))
            self.b_W = nn.Parameter(torch.empty(sets, dim))
        else:
            self.register_parameter("b_U", None)
            self.register_parameter("b_V", None)
            self.register_parameter("b_W", None)
        if context == "learned":
            self.default_context = nn.Parameter(torch.ones(dim))
        else:
            self.register_parameter("default_context", None)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """nn.Linear's default: every weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)); c_d = 1."""
        for weight, b in ((self.U, self.b_U), (self.V, self.b_V), (self.W, self.b_W)):
            bound = 1.0 / math.sqrt(weight.shape[-1])
            weight.uniform_(-bound, bound)
            if b is not None:
                b.uniform_(-bound, bound)
        if self.default_context is not None:
            self.default_context.fill_(1.0)

    def parameter_roles(self) -> dict[str, str]:
        """For a model-wide initialisation (:func:`tokenmix.ops.init.normal_init_`): ``b_U``, ``b_V``, ``b_W``
        are biases (zero), and the learned default context keeps its start at ones, the constant default
        c^(0) of §2, instead of being redrawn near zero."""
        return {"b_U": "bias", "b_V": "bias", "b_W": "bias", "default_context": "keep"}

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, steps={self.steps}, rank={self.rank}, recurrent={self.recurrent}, "
                f"context={self.context_kind!r}, bias={self.bias}")

    # -- pieces ---------------------------------------------------------------------------------
    def _step_params(self, k: int, dtype: torch.dtype) -> tuple[Tensor, ...]:
        """(U, V, W, b_U, b_V, b_W) of step k (0-based), in ``dtype``; biases are None without ``bias``."""
        s = 0 if self.recurrent else k
        params = (self.U, self.V, self.W, self.b_U, self.b_V, self.b_W)
        return tuple(None if p is None else p[s].to(dtype) for p in params)

    def _initial_context(self, x: Tensor, c0: Tensor | None) -> Tensor:
        """c^(0) for every sequence of ``x`` (B, N, d): (B, d) in the dtype of ``x``."""
        batch = x.shape[0]
        if c0 is not None:
            if not isinstance(c0, Tensor) or c0.shape not in ((self.dim,), (batch, self.dim)):
                shape = tuple(c0.shape) if isinstance(c0, Tensor) else type(c0).__name__
                self._fail(f"c0 must have shape ({self.dim},) or ({batch}, {self.dim}), got {shape}")
            return c0.to(device=x.device, dtype=x.dtype).expand(batch, self.dim)
        if self.context_kind == "ones":
            return x.new_ones(batch, self.dim)
        if self.context_kind == "learned":
            return self.default_context.to(x.dtype).expand(batch, self.dim)
        draw = torch.rand(batch, self.dim, device=x.device, dtype=torch.float32)
        return (2.0 * draw - 1.0).to(x.dtype)

    @staticmethod
    def _compute_dtype(x: Tensor) -> torch.dtype:
        return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype

    def _run(self, x: Tensor, mask: Tensor | None, c0: Tensor | None, algorithm: _Algorithm,
             keep_weights: bool) -> tuple[Tensor, Tensor | None]:
        """Algorithm 1 computed by ``algorithm`` (:meth:`_run_fast` or :meth:`_run_reference`) in the compute
        dtype: (c^(K) (B, d) in x's dtype, the weights (B, K, N, d) or None)."""
        out_dtype = x.dtype
        dtype = self._compute_dtype(x)
        x = x.to(dtype)
        c = self._initial_context(x, c0).to(dtype)
        c, weights = algorithm(x, mask, c, keep_weights)
        return c.to(out_dtype), (None if weights is None else weights.to(out_dtype))

    def _run_fast(self, x: Tensor, mask: Tensor | None, c: Tensor,
                  keep_weights: bool) -> tuple[Tensor, Tensor | None]:
        """Vectorised over tokens: U x for all tokens at once (once in all when recurrent)."""
        if mask is not None:  # padded content never enters a product (weights there are 0 anyway)
            x = x.masked_fill(~mask[..., None], 0.0)
        weights = []
        ux = None
        for k in range(self.steps):
            u, v, w, b_u, b_v, b_w = self._step_params(k, x.dtype)
            if ux is None or not self.recurrent:
                ux = x @ u.transpose(0, 1)                                    # (B, N, u)
                if b_u is not None:
                    ux = ux + b_u
            vc = c @ v.transpose(0, 1)                                        # (B, u)
            if b_v is not None:
                vc = vc + b_v
            logits = (ux * vc[:, None, :]) @ w.transpose(0, 1)                # [2a], (B, N, d)
            if b_w is not None:
                logits = logits + b_w
            alpha = masked_softmax(logits, None if mask is None else mask[..., None], dim=1)                 # [2b]
            c = (alpha * x).sum(dim=1)                                        # [2c] with (2)
            if keep_weights:
                weights.append(alpha)
        return c, (torch.stack(weights, dim=1) if keep_weights else None)

    def _run_reference(self, x: Tensor, mask: Tensor | None, c: Tensor,
                       keep_weights: bool) -> tuple[Tensor, Tensor | None]:
        """The plain way: per sequence, per step, per real token, the paper's formulas one by one."""
        batch, n, d = x.shape
        contexts, all_weights = [], []
        for b in range(batch):
            real = [i for i in range(n) if mask is None or bool(mask[b, i])]
            cb = c[b]
            step_weights = []
            for k in range(self.steps):
                u, v, w, b_u, b_v, b_w = self._step_params(k, x.dtype)
                if not real:  # nothing to attend to: the sum [2c] is empty
                    cb = torch.zeros_like(cb)
                    step_weights.append(x.new_zeros(n, d))
                    continue
                vc = v @ cb if b_v is None else v @ cb + b_v
                scores = []
                for i in real:
                    ux = u @ x[b, i] if b_u is None else u @ x[b, i] + b_u
                    score = w @ (ux * vc)                                     # [2a]
                    scores.append(score if b_w is None else score + b_w)
                alpha = torch.softmax(torch.stack(scores), dim=0)             # [2b], over tokens, per feature
                cb = sum(alpha[t] * x[b, i] for t, i in enumerate(real))      # [2c] with (2)
                rows = {i: alpha[t] for t, i in enumerate(real)}
                step_weights.append(torch.stack([rows.get(i, x.new_zeros(d)) for i in range(n)]))
            contexts.append(cb)
            all_weights.append(torch.stack(step_weights))
        weights = torch.stack(all_weights) if keep_weights else None
        return torch.stack(contexts), weights

    # -- public API -----------------------------------------------------------------------------
    def context(self, x: Tensor, mask: Tensor | None = None, *, c0: Tensor | None = None) -> Tensor:
        """The final context vector c^(K) of each sequence: ``x`` (B, N, dim), ``mask`` (B, N) bool ->
        (B, dim); zero for a row with no real token. ``c0`` (dim,) or (B, dim) overrides c^(0)."""
        mask = self._check_input(x, mask)
        return self._run(x, mask, c0, self._run_fast, keep_weights=False)[0]

    def context_reference(self, x: Tensor, mask: Tensor | None = None, *, c0: Tensor | None = None) -> Tensor:
        """:meth:`context` computed the plain way (per sequence, step and token)."""
        mask = self._check_input(x, mask)
        return self._run(x, mask, c0, self._run_reference, keep_weights=False)[0]

    def attention_weights(self, x: Tensor, mask: Tensor | None = None, *, c0: Tensor | None = None) -> Tensor:
        """The weights alpha_i^(k) of every step: (B, K, N, dim). For every step and feature they sum to 1
        over the real tokens of a row ([2b]); padded tokens (and rows with no real token) get 0."""
        mask = self._check_input(x, mask)
        return self._run(x, mask, c0, self._run_fast, keep_weights=True)[1]

    def attention_weights_reference(self, x: Tensor, mask: Tensor | None = None, *,
                                    c0: Tensor | None = None) -> Tensor:
        """:meth:`attention_weights` computed the plain way (per sequence, step and token)."""
        mask = self._check_input(x, mask)
        return self._run(x, mask, c0, self._run_reference, keep_weights=True)[1]

    def _mix(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self._broadcast(x, self._run(x, mask, None, self._run_fast, keep_weights=False)[0])

    def _mix_reference(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self._broadcast(x, self._run(x, mask, None, self._run_reference, keep_weights=False)[0])

    @staticmethod
    def _broadcast(x: Tensor, c: Tensor) -> Tensor:
        """Position i receives c^(K): (B, d) -> the shape of ``x``."""
        return c[:, None, :].expand(x.shape).contiguous()
