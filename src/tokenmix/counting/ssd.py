"""Operation counts of Mamba-2's SSD layer (``mamba2``, :mod:`tokenmix.mixers.ssd`).

Counted in the recurrent form (the one decoding runs), whose total over a sequence is the training count; the
chunked (dual) form computes the same outputs with C x C blocks per chunk, which ``FlopCounterMode`` sees as other
work.
"""

from __future__ import annotations

from ..mixers.ssd import Mamba2
from .opcounts import OpCounts, elementwise, linears, short_conv_ops
from .registry import step, training

__all__ = ["mamba2_token", "mamba2_training", "mamba2_step"]


def mamba2_token(mixer: Mamba2) -> OpCounts:
    """One token: the input and output projections; per head ``dt = softplus(dt_raw + dt_bias)`` (2 additions,
    2 exps counting the log), its decay ``exp(-exp(A_log) dt)`` (a multiplication, 2 exps), ``v = dt x`` (``P``
    multiplications), the state decayed (``S P``), ``B v^T`` added in (``S P`` each), the read-out ``h^T C``
    (``S P`` multiplications, ``(S - 1) P`` additions) and ``D x`` added (``P`` each); over the inner width
    ``e``: the gate ``y * SiLU(z)`` (an exp, an addition, a division and a multiplication per channel) and the
    RMS norm (``e`` squares, ``e - 1`` additions, the eps, a mean and a root as 2 divisions, ``2 e``
    multiplications). With the short convolution, x, B and C through it (:func:`~.opcounts.short_conv_ops`) and
    SiLU (an exp, an addition and a division per channel)."""
    h, s, p, e = mixer.num_heads, mixer.state_size, mixer.head_dim, mixer.inner_dim
    head = OpCounts(mults=1 + p + 3 * s * p + p, adds=2 + s * p + (s - 1) * p + p, exps=4)
    gate = elementwise(e, mults=1, adds=1, divs=1, exps=1)
    rms = OpCounts(mults=3 * e, adds=e, divs=2)
    conv = OpCounts() if mixer.short_conv is None else \
        short_conv_ops(mixer.short_conv) + elementwise(e + 2 * s, adds=1, divs=1, exps=1)
    return linears(1, [mixer.in_proj, mixer.out_proj]) + head * h + gate + rms + conv


@training(Mamba2)
def mamba2_training(mixer: Mamba2, length: int) -> OpCounts:
    """Every token's :func:`mamba2_token`: O(N e S) for the recurrence, O(N d e) with the projections."""
    return mamba2_token(mixer) * length


@step(Mamba2)
def mamba2_step(mixer: Mamba2, t: int) -> OpCounts:
    """One token from the state, whatever ``t``: :func:`mamba2_token`."""
    return mamba2_token(mixer)
