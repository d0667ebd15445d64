"""Performer: softmax attention approximated by positive orthogonal random features (FAVOR+)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..registry import register_mixer
from ..validate import is_positive_int as _positive_int
from .linear import KernelAttentionMixer

__all__ = ["Performer", "orthogonal_gaussian_projection", "iid_gaussian_projection", "FEATURE_DRAWS"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def orthogonal_gaussian_projection(nb_features: int, dim: int, *, generator: torch.Generator | None = None,
                                   device: torch.device | str | None = None) -> Tensor:
    """An (nb_features, dim) float64 matrix of orthogonal random features ("regular" FAVOR+ scaling).

    Rows come in blocks of ``dim`` mutually orthogonal unit rows (the Q factor of the QR decomposition of
    a Gaussian ``dim x dim`` matrix, sign-corrected so that it is Haar-distributed; the last block is
    truncated), and each row is then rescaled by the norm of an independent ``N(0, I_dim)`` vector, so
    that every row is marginally ``N(0, I_dim)`` as the unbiased estimator requires, while rows of a
    block stay exactly orthogonal (Choromanski et al. 2021, sec. 2.4).
    """
    nb_blocks = -(-nb_features // dim)
    blocks = []
    for _ in range(nb_blocks):
        g = torch.randn(dim, dim, generator=generator, device=device, dtype=torch.float64)
        q, r = torch.linalg.qr(g)
        sign = torch.where(torch.diagonal(r) >= 0, 1.0, -1.0).to(q.dtype)
        blocks.append((q * sign).T)  # rows orthonormal
    rows = torch.cat(blocks, dim=0)[:nb_features]
    norms = torch.randn(nb_features, dim, generator=generator, device=device, dtype=torch.float64).norm(dim=1)
    return rows * norms[:, None]


def iid_gaussian_projection(nb_features: int, dim: int, *, generator: torch.Generator | None = None,
                            device: torch.device | str | None = None) -> Tensor:
    """An (nb_features, dim) float64 matrix of independent ``N(0, I_dim)`` rows: the i.i.d. random features
    that Choromanski et al. (2021, sec. 2.4, Theorem 2) compare the orthogonal ones with."""
    return torch.randn(nb_features, dim, generator=generator, device=device, dtype=torch.float64)


FEATURE_DRAWS = {"orthogonal": orthogonal_gaussian_projection, "iid": iid_gaussian_projection}


@register_mixer(
    "performer",
    paper="Choromanski et al. (2021) 'Rethinking attention with Performers' (FAVOR+, Lemma 1, sec. 2.4); "
          "Ruggeri (2022) §4.2",
    complexity="O(N m d)",
    causal=True,
    recurrent=True,
)
class Performer(KernelAttentionMixer):
    """Performer attention (FAVOR+, Choromanski et al. 2021; Ruggeri (2022) §4.2), per head.

    ``Att(Q, K, V) = D^-1 (Q' ((K')^T V))``, ``D = diag(Q' ((K')^T 1_N))`` (Ruggeri (2022) §4.2), where the rows of
    ``Q'``, ``K'`` are the positive random features

        ``phi(x) = h(x) / sqrt(m) (f(w_1^T x), ..., f(w_m^T x))``, ``h(x) = exp(-|x|^2 / 2)``, ``f = exp``,

    with ``w_1..w_m ~ N(0, I_d)`` made orthogonal in blocks of ``d`` (orthogonal random features, norms redrawn from
    the chi distribution; ``features="iid"``: independent rows, which sec. 2.4 and Theorem 2 show to give a larger
    mean squared error of the kernel estimate). ``E[phi(x) . phi(y)] = exp(x . y)`` (Lemma 1), so with ``q`` and ``k``
    each scaled by ``d^(-1/4)`` the weights estimate the softmax kernel ``exp(q . k / sqrt(d))`` without bias and with
    every weight positive. Time O(N m d), memory O(N (m + d) + m d); causal attention uses the chunked prefix form of
    :func:`tokenmix.ops.kernel_attention.kernel_attention`.

    Stabilisers (all detached; each cancels exactly in the ratio ``D^-1 ...``):

    * queries: each query's exponents ``w_r^T q - |q|^2/2`` are shifted by their own max over ``r``;
    * keys, non-causal: one shift per (batch, head), the max over all *real* keys and features;
    * keys, causal: a key-wise running max ``s_j = max_{j' <= j} max_r (w_r^T k_j' - |k_j'|^2/2)`` over real
      keys, passed as ``key_log_scale`` so that query ``i`` rescales key ``j <= i`` by ``exp(s_j - s_i) <= 1``:
      no output depends on keys after it, not even through the stabiliser. Positions before the first
      real key (left padding) get the first real key's ``s`` (0 if a row has no real key), which keeps
      ``s`` finite and non-decreasing; their features are zero anyway.

    Padded keys get zero feature rows (not zero inputs: ``phi(0) > 0``), so they leave numerator and
    denominator. For float16/bfloat16 inputs the features and the attention are computed in float32.

    The projection ``(nb_features, head_dim)`` is a persistent buffer drawn at construction from the
    global torch RNG; it changes only through :meth:`redraw_features`, never inside ``forward``.

    Options:
        bias: biases in the projections (default False: ``4 dim^2`` parameters).
        nb_features: number ``m`` of random features per head (default 256).
        chunk_size: causal chunk length (default: :func:`~tokenmix.ops.kernel_attention.auto_chunk_size`).
        eps: denominator guard.
        features: ``"orthogonal"`` (default, FAVOR+) or ``"iid"``: how the projection is drawn.
    """

    projection: Tensor

    def __init__(self, dim: int, *, num_heads: int = 1, causal: bool = False, max_len: int | None = None,
                 bias: bool = False, nb_features: int = 256, chunk_size: int | None = None,
                 eps: float = 1e-6, features: str = "orthogonal") -> None:
        super().__init__(dim, num_heads=num_heads, causal=causal, max_len=max_len, bias=bias,
                         chunk_size=chunk_size, eps=eps)
        if not _positive_int(nb_features):
            self._fail(f"nb_features must be a positive int, got {nb_features!r}")
        if not isinstance(features, str) or features not in FEATURE_DRAWS:
            self._fail(f"features must be one of {sorted(FEATURE_DRAWS)}, got {features!r}")
        self.nb_features = nb_features
        self.features = features
        projection = FEATURE_DRAWS[features](nb_features, self.head_dim)
        self.register_buffer("projection", projection.to(torch.get_default_dtype()), persistent=True)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, nb_features={self.nb_features}, features={self.features!r}"

    @torch.no_grad()
    def redraw_features(self, generator: torch.Generator | None = None) -> None:
        """Draw a fresh random projection (from ``generator``, or the global torch RNG), in place, the same way
        as at construction (``features``)."""
        device = generator.device if generator is not None else torch.device("cpu")
        new = FEATURE_DRAWS[self.features](self.nb_features, self.head_dim, generator=generator, device=device)
        self.projection.copy_(new)

    # -- features -----------------------------------------------------------------------------
    def _exponents(self, x: Tensor) -> Tensor:
        """``w_r^T x' - |x'|^2 / 2`` with ``x' = x d^(-1/4)``: (B, H, N, D) -> (B, H, N, m)."""
        x = x * self.head_dim ** -0.25
        w = self.projection.to(dtype=x.dtype, device=x.device)
        return x @ w.T - 0.5 * (x * x).sum(dim=-1, keepdim=True)

    def _query_features(self, q: Tensor) -> Tensor:
        """phi(q), each query shifted by its own (detached) max exponent, which cancels in the ratio."""
        uq = self._exponents(q)
        return torch.exp(uq - uq.detach().amax(dim=-1, keepdim=True)) / math.sqrt(self.nb_features)

    def _continued_features(self, q: Tensor, k: Tensor,
                            state: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """Decoding and prefill: the key log-scale is the running max of the exponents, continuing the state's."""
        if q.dtype in _LOW_PRECISION:
            q, k = q.float(), k.float()
        uk = self._exponents(k)
        s = torch.cummax(uk.detach().amax(dim=-1), dim=-1).values  # (B, H, L)
        previous = state.get("log_scale")
        if previous is not None:
            s = torch.maximum(s, previous[..., None])
        return self._query_features(q), torch.exp(uk - s[..., None]) / math.sqrt(self.nb_features), s

    def _features(self, q: Tensor, k: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
        if q.dtype in _LOW_PRECISION:
            q, k = q.float(), k.float()
        norm = 1.0 / math.sqrt(self.nb_features)
        neg_inf = float("-inf")
        phi_q = self._query_features(q)

        uk = self._exponents(k)
        if mask is not None:  # padded keys: exponent -inf -> feature row exactly 0 (and so is its gradient)
            uk = uk.masked_fill(~mask[:, None, :, None], neg_inf)
        a = uk.detach().amax(dim=-1)  # (B, H, N), -inf at padded keys
        if not self.causal:
            stab = a.amax(dim=-1, keepdim=True)  # over real keys only
            stab = torch.where(torch.isfinite(stab), stab, torch.zeros_like(stab))
            return phi_q, torch.exp(uk - stab[..., None]) * norm, None
        s = torch.cummax(a, dim=-1).values  # non-decreasing; -inf only before the first real key
        seen = torch.isfinite(s)
        first = s.masked_fill(~seen, float("inf")).amin(dim=-1, keepdim=True)  # first real key's s
        first = torch.where(torch.isfinite(first), first, torch.zeros_like(first))  # no real key at all
        s = torch.where(seen, s, first)
        return phi_q, torch.exp(uk - s[..., None]) * norm, s

    @property
    def feature_dim(self) -> int:
        """F = m, the number of random features."""
        return self.nb_features
