"""Average Attention against a position-by-position transcription of Zhang et al. (2018) §3 / 002 §4.3."""

from __future__ import annotations

import torch

import tokenmix
from conftest import lengths_mask


def by_hand(m, x: torch.Tensor, length: int, causal: bool) -> torch.Tensor:
    rows = []
    for j in range(length):
        seen = x[: j + 1] if causal else x[:length]
        g = m.ffn(seen.mean(dim=0))                                    # g_j = FFN(mean)
        gates = torch.sigmoid(m.gates(torch.cat([x[j], g])))           # i_j, f_j = sigma(W [x_j; g_j])
        i_gate, f_gate = gates[: x.shape[1]], gates[x.shape[1]:]
        rows.append(m.norm(i_gate * x[j] + f_gate * g + x[j]))         # LayerNorm(h~_j + x_j)
    return torch.stack(rows)


def test_matches_the_equations_causal_and_not():
    torch.manual_seed(0)
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    mask = lengths_mask([7, 4], 7)
    for causal in (False, True):
        m = tokenmix.create_mixer("average", 8, causal=causal, ffn_dim=12).double()
        y = m(x, mask)
        for row, length in enumerate([7, 4]):
            torch.testing.assert_close(y[row, :length], by_hand(m, x[row], length, causal))


def test_parameter_count():
    m = tokenmix.create_mixer("average", 8, bias=False)  # FFN 8->32->8, gates 16->16, LayerNorm 2*8
    assert sum(p.numel() for p in m.parameters()) == 8 * 32 * 2 + 16 * 16 + 2 * 8
