"""What the functional forms of :mod:`tokenmix.ops` share (flash-linear-attention's conventions): the shape checks of
per-head ``(B, T, H, ·)`` inputs and states, the compute dtype, and the way back to the inputs' layout."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["check_heads", "check_state", "compute_dtype", "finish"]


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
