"""Operation counts of the delta-rule family: ``deltanet``, ``gated_deltanet`` (:mod:`tokenmix.mixers.delta`).

Counted in the recurrent form (the one decoding runs), whose total over a sequence is the training count: per
token, the projections and, per head of width ``D``, the rule on a (D, D) state. The chunked form computes the
same outputs with other products (a C x C triangular solve and C x C score blocks per chunk), which
``FlopCounterMode`` sees as other work.
"""

from __future__ import annotations

from ..mixers.delta import GatedDeltaNet, _DeltaRuleMixer
from .opcounts import OpCounts, elementwise, linears, short_conv_ops
from .registry import step, training

__all__ = ["delta_token", "delta_training", "delta_step"]


def _head_rule(d: int, gated: bool) -> OpCounts:
    """One head, one token, on a (D, D) state: q and k L2-normalised (``D`` squares, ``D - 1`` additions, the
    eps, one root counted as a division, ``D`` divisions each); with the gate the state decayed (``D^2``
    multiplications); the state's answer for the key ``S^T k`` (``D^2`` multiplications, ``D (D - 1)``
    additions); the write ``beta (v - S^T k)`` (``D`` additions and multiplications); ``S += k u^T`` (``D^2``
    each); the read-out ``S^T q`` (``D^2`` multiplications, ``D (D - 1)`` additions); the output's RMS norm
    (``D`` squares, ``D - 1`` additions, the eps, a mean and a root as 2 divisions, then ``2 D``
    multiplications: the scale and the weight)."""
    l2 = OpCounts(mults=d, adds=d, divs=d + 1) * 2
    decay = OpCounts(mults=d * d) if gated else OpCounts()
    read = OpCounts(mults=d * d, adds=d * (d - 1))
    write = OpCounts(mults=d + d * d, adds=d + d * d)
    rms = OpCounts(mults=3 * d, adds=d, divs=2)
    return l2 + decay + read + write + read + rms


def delta_token(mixer: _DeltaRuleMixer) -> OpCounts:
    """One token: the projections (q, k, v, beta, output; with the gate also its decay's ``a`` and the output
    gate's), the short convolution on q, k, v where there is one (:func:`~.opcounts.short_conv_ops`), SiLU on q,
    k, v (``x / (1 + exp(-x))``: an exp, an addition and a division per entry), beta's
    sigmoid per head (the same), and every head's :func:`_head_rule`. Gated DeltaNet adds per head its decay
    ``-exp(A_log) softplus(a + dt_bias)`` and ``exp`` of it (2 additions, 1 multiplication, 3 exps: softplus
    counted as an exp and a log) and the output gate (SiLU and a multiplication per channel)."""
    gated = isinstance(mixer, GatedDeltaNet)
    layers = [mixer.q_proj, mixer.k_proj, mixer.v_proj, mixer.b_proj, mixer.proj]
    if gated:
        layers += [mixer.a_proj, mixer.g_proj]
    h, dim = mixer.num_heads, mixer.dim
    ops = linears(1, layers) + short_conv_ops(mixer.short_conv) + elementwise(3 * dim, adds=1, divs=1, exps=1)
    ops = ops + elementwise(h, adds=1, divs=1, exps=1)
    ops = ops + _head_rule(mixer.head_dim, gated) * h
    if gated:
        ops = ops + elementwise(h, mults=1, adds=2, exps=3) + elementwise(dim, mults=1, adds=1, divs=1, exps=1)
    return ops


@training(_DeltaRuleMixer)
def delta_training(mixer: _DeltaRuleMixer, length: int) -> OpCounts:
    """Every token's :func:`delta_token`: O(N d^2 / H) for the rule, O(N d^2) with the projections."""
    return delta_token(mixer) * length


@step(_DeltaRuleMixer)
def delta_step(mixer: _DeltaRuleMixer, t: int) -> OpCounts:
    """One token from the state, whatever ``t``: :func:`delta_token`."""
    return delta_token(mixer)
