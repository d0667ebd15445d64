"""What the functional forms of :mod:`tokenmix.ops` share (flash-linear-attention's conventions): the shape checks of
per-head ``(B, T, H, ·)`` inputs and states, the compute dtype, and the way back to the inputs' layout."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["check_heads", "check_state", "compute_dtype", "finish", "check_cache", "cached", "Cache"]

Cache = tuple[Tensor, Tensor]  # a key/value cache: (B, L, HKV, K) keys and (B, L, HKV, V) values


def check_heads(where: str, q: Tensor, k: Tensor, v: Tensor, *, grouped_values: bool = False) -> None:
    """``q, k`` (B, T, H, K) alike and ``v`` (B, T, H, V); with ``grouped_values`` v may have HV heads, a multiple
    of H (each query/key head serving HV / H value heads)."""
    if grouped_values:
        if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:2] != q.shape[:2]:
            raise ValueError(f"{where}: q and k must be (B, T, H, K) and v (B, T, HV, V) with the same B and T; got "
                             f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
        if v.shape[2] % q.shape[2]:
            raise ValueError(f"{where}: the value heads ({v.shape[2]}) must be a multiple of the query/key heads "
                             f"({q.shape[2]})")
    elif q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"{where}: q and k must be (B, T, H, K) and v (B, T, H, V) with the same B, T and H; got "
                         f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")


def check_state(where: str, state: Tensor | None, shape: tuple[int, ...], layout: str,
                label: str = "initial_state") -> None:
    """``state`` None or of ``shape`` (``layout`` names its axes in the message, e.g. "(B, H, K, V)")."""
    if state is not None and tuple(state.shape) != shape:
        raise ValueError(f"{where}: {label} must be {layout} = {shape}, got {tuple(state.shape)}")


def compute_dtype(q: Tensor) -> torch.dtype:
    """float64 inputs compute in float64, everything else (float32, bfloat16, float16) in float32."""
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def finish(o: Tensor, state: Tensor, dtype: torch.dtype, output_final_state: bool) -> tuple[Tensor, Tensor | None]:
    """(B, H, T, V) back to (B, T, H, V) in the inputs' dtype; the state only if asked for."""
    return o.transpose(1, 2).to(dtype), (state if output_final_state else None)


def check_cache(where: str, k: Tensor, v: Tensor, initial_state: Cache | None) -> None:
    """``initial_state`` None or a key/value cache for keys and values shaped as ``k`` and ``v`` (any length)."""
    if initial_state is None:
        return
    if not isinstance(initial_state, tuple) or len(initial_state) != 2:
        raise ValueError(f"{where}: initial_state must be the cache (k_cache, v_cache)")
    k_cache, v_cache = initial_state
    b, _, hkv, dk = k.shape
    if k_cache.dim() != 4 or tuple(k_cache.shape[::2]) != (b, hkv) or k_cache.shape[3] != dk \
            or tuple(v_cache.shape) != (*k_cache.shape[:3], v.shape[3]):
        raise ValueError(f"{where}: the cache must be k_cache (B, L, HKV, K) and v_cache (B, L, HKV, V) with B = {b}, "
                         f"HKV = {hkv}, K = {dk}, V = {v.shape[3]}; got {tuple(k_cache.shape)}, "
                         f"{tuple(v_cache.shape)}")


def cached(k: Tensor, v: Tensor, initial_state: Cache | None) -> Cache:
    """The cache after the new keys and values (in the cache's dtype where there is one)."""
    if initial_state is None:
        return k, v
    k_cache, v_cache = initial_state
    return torch.cat([k_cache, k.to(k_cache.dtype)], dim=1), torch.cat([v_cache, v.to(v_cache.dtype)], dim=1)
