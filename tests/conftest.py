"""Shared helpers: build any registered mixer in a configuration the generic tests can run."""

from __future__ import annotations

import pytest
import torch

import tokenmix

# The generic tests pass max_len=MAX_LEN to every mixer and keep N <= MAX_LEN.
MAX_LEN = 24


def sequence_mixers() -> list[str]:
    return [n for n in tokenmix.list_mixers() if not n.startswith("_") and not tokenmix.mixer_info(n).spatial]


def modes(name: str) -> list[bool]:
    info = tokenmix.mixer_info(name)
    return [c for c, ok in ((False, info.bidirectional), (True, info.causal)) if ok]


def mixer_cases() -> list:
    """(name, causal) for every registered 1-D mixer and every mode it supports."""
    return [pytest.param(n, c, id=f"{n}-{'causal' if c else 'bidir'}") for n in sequence_mixers() for c in modes(n)]


def build(name: str, dim: int = 16, *, causal: bool = False, heads: int = 2, max_len: int = MAX_LEN,
          dtype: torch.dtype = torch.float64, **options) -> torch.nn.Module:
    info = tokenmix.mixer_info(name)
    num_heads = heads if info.multihead else 1
    mixer = tokenmix.create_mixer(name, dim, num_heads=num_heads, causal=causal, max_len=max_len, **options)
    return mixer.to(dtype).eval()


def lengths_mask(lengths: list[int], n: int) -> torch.Tensor:
    return torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]
