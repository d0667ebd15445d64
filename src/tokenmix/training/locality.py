"""How local a trained model's attention is (Gan et al. (2023) §3.5, Fig. 5: "Kerformer places more weight on
neighboring tokens, thus enhancing locality", which the paper credits to the SE-K re-weighting).

:func:`local_mass` is the share of each query's attention within ``window`` positions of it (the band
``|i - j| <= window`` of the matrix a mechanism shows through ``attention_weights``); :func:`attention_locality`
averages it over every such layer, head and real query of a split, the model run as its task evaluates it.
Layers without an attention matrix to show are left out; a model with none gives None. Uniform attention over
N keys gives about ``(2 window + 1) / N``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ..mixers.heads import QKVMixer

__all__ = ["local_mass", "LocalityMeter", "attention_locality"]


def local_mass(weights: Tensor, window: int) -> Tensor:
    """Per (batch, head, query) the attention weight on keys within ``window`` positions: (B, H, N, N) -> (B, H, N)."""
    n = weights.shape[-1]
    position = torch.arange(n, device=weights.device)
    near = (position[:, None] - position[None, :]).abs() <= window
    return (weights * near).sum(dim=-1)


def _shows_its_matrix(module: nn.Module) -> bool:
    return isinstance(module, QKVMixer) and type(module)._attention_weights is not QKVMixer._attention_weights


class LocalityMeter:
    """While active (``with``), every forward of ``model``'s attention layers that show their matrix adds the
    :func:`local_mass` of its real queries, per head; :attr:`value` is their mean (None when no layer shows one
    or nothing ran). Wrap the test evaluation in it to measure locality in the same pass as the test metric."""

    def __init__(self, model: nn.Module, window: int) -> None:
        self.layers = [m for m in model.modules() if _shows_its_matrix(m)]
        self.window = window
        self.total, self.count = 0.0, 0
        self._hooks: list[Any] = []

    def _measure(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        x = args[0]
        mask = args[1] if len(args) > 1 else kwargs.get("mask")
        with torch.no_grad():
            mass = local_mass(module.attention_weights(x, mask), self.window)  # (B, H, N)
        if mask is not None:
            mass = mass * mask[:, None, :]
            self.count += int(mask.sum()) * mass.shape[1]
        else:
            self.count += mass.numel()
        self.total += float(mass.sum())

    def __enter__(self) -> "LocalityMeter":
        self._hooks = [layer.register_forward_pre_hook(self._measure, with_kwargs=True) for layer in self.layers]
        return self

    def __exit__(self, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    @property
    def value(self) -> float | None:
        return self.total / self.count if self.layers and self.count else None


def attention_locality(model: nn.Module, task: Any, split: str, window: int, batch_size: int) -> float | None:
    """The mean :func:`local_mass` over the attention layers of ``model`` that show their matrix, their heads and
    the real queries of ``split`` of ``task`` (the model run by ``task.evaluate``, in eval mode, no gradients);
    None when no layer shows one. Training measures it in its test pass (:class:`LocalityMeter`)."""
    meter = LocalityMeter(model, window)
    if not meter.layers:
        return None
    with meter, torch.no_grad():
        task.evaluate(model, split, batch_size)
    return meter.value
