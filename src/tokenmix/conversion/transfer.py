"""Attention transfer: each mechanism of a model with a per-head rule (Q/K/V, or with gates read from the hidden
states) learns from a softmax teacher computed on its own Q, K and V (Zhang et al. (2024), Hedgehog §4.2:
cross-entropy between the attention weights; LoLCATs: mean squared error between the outputs), while the teacher's
output is passed on so that every layer learns on the activations the softmax model gives it. Used by
:func:`tokenmix.linearize` and by experiment runs that start from a trained softmax model
(:mod:`tokenmix.training.warmstart`)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

from ..mixers.base import Mixer
from ..mixers.heads import QKVMixer
from ..mixers.softmax import attention_mask
from ..models.hf import HFMechanism
from ..models.replace import MixerAttention

__all__ = ["swapped_mechanisms", "attention_transfer", "feature_map_parameters", "only_feature_maps",
           "METHOD_LOSS"]

METHOD_LOSS = {"hedgehog": "weights", "lolcats": "outputs"}  # the recipes with a transfer stage, and what it fits


def _per_head(mixer: nn.Module) -> bool:
    """A mechanism with a per-head rule a teacher can sit beside: a Q/K/V mixer, or one whose gates read the hidden
    states (``MixerInfo.hidden``)."""
    return isinstance(mixer, QKVMixer) or (isinstance(mixer, Mixer) and mixer.info.hidden)


def swapped_mechanisms(model: nn.Module) -> dict[str, Mixer]:
    """Every mechanism with a per-head rule in ``model``, by path: those :func:`tokenmix.replace_attention` put in
    (the path of the module they replaced) and those of a tokenmix model (their own path)."""
    found: dict[str, Mixer] = {}
    inside: set[int] = set()
    for path, module in model.named_modules():
        if isinstance(module, (MixerAttention, HFMechanism)) and _per_head(module.mixer):
            found[module.path if isinstance(module, HFMechanism) else path] = module.mixer
            inside.add(id(module.mixer))
    for path, module in model.named_modules():
        if _per_head(module) and id(module) not in inside:
            found[path] = module
    return found


def _teacher(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> tuple[Tensor, Tensor]:
    """Softmax attention on the mechanism's own Q, K, V, computed plainly: (output, weights), with softmax
    attention's own mask (a padded query sees itself: its row is read by no loss or output)."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    allowed = attention_mask(q.shape[-2], mask, causal, q.device)
    weights = (scores if allowed is None else scores.masked_fill(~allowed, float("-inf"))).softmax(dim=-1)
    return weights @ v, weights


class _Transfer:
    """While active, each swapped mechanism computes its softmax teacher and itself on the same Q, K, V, records
    the loss (``loss``), or with ``loss=None`` each layer's gap (``kl``, ``error``), and returns the teacher's
    output."""

    def __init__(self, mechanisms: dict[str, Mixer], loss: str | None) -> None:
        self.mechanisms, self.loss = mechanisms, loss
        self.losses: list[Tensor] = []
        self.kl: dict[str, list[float]] = {path: [] for path in mechanisms}
        self.error: dict[str, list[float]] = {path: [] for path in mechanisms}

    def __enter__(self) -> "_Transfer":
        self._stack = contextlib.ExitStack()
        for path, mixer in self.mechanisms.items():
            self._stack.enter_context(mixer.substituted_attention(self._attend_for(path, mixer)))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _attend_for(self, path: str, mixer: Mixer) -> Callable[..., Tensor]:
        has_weights = isinstance(mixer, QKVMixer)  # the gated mechanisms form no attention weights

        def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, **gates: Tensor) -> Tensor:
            q, k, v = q.detach(), k.detach(), v.detach()
            gates = {name: x.detach() for name, x in gates.items()}
            out_t, w_t = _teacher(q, k, v, mask, mixer.causal)
            real = torch.ones(q.shape[0], q.shape[-2], dtype=torch.bool, device=q.device) if mask is None else mask
            rows = real[:, None, :].expand(q.shape[0], q.shape[1], q.shape[-2])  # (B, H, N) real queries
            if self.loss != "outputs" and has_weights:  # the student's weights: the "weights" loss, or the KL
                w_s = mixer.attention_weights_of_heads(q, k, mask)
                cross_entropy = -(w_t * torch.log(w_s.clamp_min(1e-12))).sum(-1)
            if self.loss != "weights":  # the student's outputs: the loss of "outputs", or the measured error
                out_s = mixer._attend(q, k, v, mask, **gates)  # its own rule, not the substitute
                diff = (out_s - out_t).transpose(1, 2)[real]  # (real tokens, H, D)
            if self.loss == "weights":
                self.losses.append(cross_entropy[rows].mean())
            elif self.loss == "outputs":
                self.losses.append(diff.square().mean())
            else:  # measuring only: each layer's gap, read once per call
                entropy = -(w_t * torch.log(w_t.clamp_min(1e-12))).sum(-1)
                self.kl[path].append((cross_entropy - entropy)[rows].mean().item() if has_weights else float("nan"))
                self.error[path].append((diff.norm() / out_t.transpose(1, 2)[real].norm().clamp_min(1e-12)).item())
            return out_t
        return attend


def attention_transfer(model: nn.Module, loss: str | None = None) -> _Transfer:
    """A context in which every Q/K/V mechanism of ``model`` (:func:`swapped_mechanisms`) learns from its softmax
    teacher on its own Q, K, V (``loss``: ``"weights"`` or ``"outputs"``; None only measures the gaps) and passes
    the teacher's output on."""
    mechanisms = swapped_mechanisms(model)
    if not mechanisms:
        raise ValueError("attention_transfer: the model has no Q/K/V mechanism (a tokenmix model's, or one put in "
                         "by tokenmix.replace_attention)")
    return _Transfer(mechanisms, loss)


@contextlib.contextmanager
def only_feature_maps(model: nn.Module) -> Iterator[list[nn.Parameter]]:
    """Within it, only the learned feature maps of ``model`` are trainable (every other parameter that was is
    frozen, and trainable again on leaving); yields the maps' parameters."""
    maps = feature_map_parameters(model)
    trainable = {id(p) for p in maps}
    frozen = [p for p in model.parameters() if id(p) not in trainable and p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        yield maps
    finally:
        for p in frozen:
            p.requires_grad_(True)


def feature_map_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The learned feature maps' parameters (``phi*``) of every Q/K/V mechanism of ``model``, and whatever else a
    mechanism lists as fitted to its teacher (``transferred``: ``window_linear``'s window weights): what a transfer
    trains."""
    return [p for mixer in swapped_mechanisms(model).values() for n, p in mixer.named_parameters()
            if n.startswith(tuple(getattr(mixer, "transferred", ("phi",))))]
