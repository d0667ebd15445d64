"""tokenmix's recurrences against flash-linear-attention's own pure-PyTorch references (``fla/ops/*/naive.py`` of
the ``fla-core`` package). Those files import torch and einops only; the package around them imports Triton,
which needs a GPU, so each file is loaded by its path without importing the package. Skipped where fla-core is
not installed (the core's test extra installs it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tokenmix.ops.delta_rule import chunk_delta_rule, chunk_gated_delta_rule
from tokenmix.ops.gla import chunk_gla, chunk_retention, chunk_simple_gla
from tokenmix.ops.linear_attn import chunk_linear_attn, fused_chunk_based

pytest.importorskip("einops")


def _naive(family: str):
    """``fla/ops/<family>/naive.py`` as a module of its own (fla's package is never imported)."""
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("fla-core is not installed")
    path = Path(spec.submodule_search_locations[0]) / "ops" / family / "naive.py"
    module_spec = importlib.util.spec_from_file_location(f"fla_naive_{family}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _inputs(seed=0, b=2, t=29, h=2, dk=8, dv=6):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, t, h, dk, generator=g) for _ in range(2))
    v = torch.randn(b, t, h, dv, generator=g)
    return q, k, v, g


def test_gla_equals_fla_naive_recurrent_gla():
    q, k, v, g = _inputs()
    gk = F.logsigmoid(torch.randn(*k.shape, generator=g))
    s0 = torch.randn(2, 2, 8, 6, generator=g)
    want, want_state = _naive("gla").naive_recurrent_gla(q, k, v, gk, initial_state=s0, output_final_state=True)
    o, state = chunk_gla(q, k, v, gk, initial_state=s0, output_final_state=True)
    torch.testing.assert_close(o, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(state, want_state, rtol=1e-4, atol=1e-4)


def test_simple_gla_equals_fla_naive_recurrent_simple_gla():
    q, k, v, g = _inputs(1)
    decay = F.logsigmoid(torch.randn(*k.shape[:3], generator=g))
    want, want_state = _naive("simple_gla").naive_recurrent_simple_gla(q, k, v, decay, output_final_state=True)
    o, state = chunk_simple_gla(q, k, v, decay, output_final_state=True, chunk_size=8)
    torch.testing.assert_close(o, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(state, want_state, rtol=1e-4, atol=1e-4)


def test_retention_equals_fla_naive_retention():
    q, k, v, _ = _inputs(2, h=4)
    want = _naive("retention").naive_retention(*(x.transpose(1, 2) for x in (q, k, v))).transpose(1, 2)
    torch.testing.assert_close(chunk_retention(q, k, v, chunk_size=8)[0], want, rtol=1e-4, atol=1e-4)


def test_delta_rule_equals_fla_delta_rule_recurrence():
    q, k, v, g = _inputs(3)
    k = F.normalize(k, dim=-1)
    beta = torch.rand(*k.shape[:3], generator=g)
    # fla's delta-rule reference takes (B, H, T, D) tensors
    want, want_state = _naive("delta_rule").delta_rule_recurrence(*(x.transpose(1, 2) for x in (q, k, v, beta)))
    o, state = chunk_delta_rule(q, k, v, beta, output_final_state=True, chunk_size=8)
    torch.testing.assert_close(o, want.transpose(1, 2), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(state, want_state, rtol=1e-4, atol=1e-4)


def test_gated_delta_rule_equals_fla_naive_recurrent_gated_delta_rule():
    q, k, v, g = _inputs(4)
    k = F.normalize(k, dim=-1)
    beta, decay = torch.rand(*k.shape[:3], generator=g), -torch.rand(*k.shape[:3], generator=g)
    s0 = torch.randn(2, 2, 8, 6, generator=g)
    # fla's reference takes beta before g; its chunked and recurrent kernels, like tokenmix, take g before beta
    want, want_state = _naive("gated_delta_rule").naive_recurrent_gated_delta_rule(
        q, k, v, beta=beta, g=decay, initial_state=s0, output_final_state=True)
    o, state = chunk_gated_delta_rule(q, k, v, decay, beta, initial_state=s0, output_final_state=True, chunk_size=8)
    torch.testing.assert_close(o, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(state, want_state, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("normalize", [False, True])
def test_linear_attention_equals_fla_naive_recurrent_linear_attn(normalize):
    """Feature-mapped (non-negative) q and k; normalised, the state is fla's pair (S, z)."""
    q, k, v, g = _inputs(5)
    q, k = q.abs(), k.abs()
    s0 = torch.randn(2, 2, 8, 6, generator=g)
    init = (s0, torch.rand(2, 1, 2, 8, generator=g)) if normalize else s0
    want, want_state = _naive("linear_attn").naive_recurrent_linear_attn(
        q, k, v, initial_state=init, output_final_state=True, normalize=normalize)
    o, state = chunk_linear_attn(q, k, v, initial_state=init, output_final_state=True, normalize=normalize,
                                 chunk_size=8)
    torch.testing.assert_close(o, want, rtol=1e-4, atol=1e-4)
    for mine, theirs in zip(state if normalize else (state,), want_state if normalize else (want_state,), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("use_norm", [True, False])
def test_based_equals_fla_naive_parallel_based(use_norm):
    q, k, v, _ = _inputs(6, dk=4)
    # fla's Based reference takes (B, H, T, D) tensors
    want = _naive("based").naive_parallel_based(*(x.transpose(1, 2) for x in (q, k, v)), use_norm=use_norm)
    o, _ = fused_chunk_based(q, k, v, use_norm=use_norm, chunk_size=8)
    torch.testing.assert_close(o, want.transpose(1, 2), rtol=1e-4, atol=1e-4)
