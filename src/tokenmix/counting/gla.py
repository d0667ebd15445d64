"""Operation counts of linear attention with decay: ``retention``, ``gla`` (:mod:`tokenmix.mixers.gla`).

Counted in the recurrent form (the one decoding runs), whose total over a sequence is the training count: per
token, the projections and, per head with a (K, V) state, the decay, the write and the read-out. The chunked
form computes the same outputs with C x C score blocks per chunk, which ``FlopCounterMode`` sees as other work.
"""

from __future__ import annotations

from ..mixers.gla import GatedLinearAttention, Retention, _DecayedLinearMixer
from .opcounts import OpCounts, elementwise, linears
from .registry import step, training

__all__ = ["decayed_token", "decayed_training", "decayed_step"]


def _head(k: int, v: int) -> OpCounts:
    """One head, one token: the state decayed (``K V`` multiplications), ``k v^T`` added in (``K V`` each), the
    read-out ``q S`` (``K V`` multiplications, ``(K - 1) V`` additions), the q scaling (``K``), and the output's
    RMS norm (``V`` squares, ``V - 1`` additions, the eps, a mean and a root as 2 divisions, ``2 V``
    multiplications: the scale and the gain)."""
    state = OpCounts(mults=2 * k * v, adds=k * v)
    read = OpCounts(mults=k * v + k, adds=(k - 1) * v)
    rms = OpCounts(mults=3 * v, adds=v, divs=2)
    return state + read + rms


def decayed_token(mixer: _DecayedLinearMixer) -> OpCounts:
    """One token: the projections (q, k, v, the output gate, the output), every head's :func:`_head`, and the
    gate ``SiLU(x W_g) *`` (an exp, an addition, a division and a multiplication per channel). Retention with
    xPos: each rotated pair of q and of k, 4 multiplications and 2 additions. GLA: its low-rank gate
    (``W_1 W_2 + b``) and ``logsigmoid / tau`` per key channel (2 exps counting the log, an addition and a
    division)."""
    h, dim = mixer.num_heads, mixer.dim
    k = mixer.key_dim // h
    layers = [mixer.q_proj, mixer.k_proj, mixer.v_proj, mixer.g_proj, mixer.proj]
    ops = elementwise(dim, mults=1, adds=1, divs=1, exps=1) + _head(k, mixer.head_dim) * h
    if isinstance(mixer, Retention) and mixer.xpos:
        ops = ops + elementwise(2 * h * (mixer.head_dim // 2), mults=4, adds=2)
    if isinstance(mixer, GatedLinearAttention):
        layers += [mixer.gk_down, mixer.gk_up]
        ops = ops + elementwise(mixer.key_dim, adds=1, divs=1, exps=2)
    return linears(1, layers) + ops


@training(_DecayedLinearMixer)
def decayed_training(mixer: _DecayedLinearMixer, length: int) -> OpCounts:
    """Every token's :func:`decayed_token`: O(N d_k d / H) for the recurrence, O(N d^2) with the projections."""
    return decayed_token(mixer) * length


@step(_DecayedLinearMixer)
def decayed_step(mixer: _DecayedLinearMixer, t: int) -> OpCounts:
    """One token from the state, whatever ``t``: :func:`decayed_token`."""
    return decayed_token(mixer)
