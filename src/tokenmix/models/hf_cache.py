"""Decoding a Hugging Face model from its mechanisms' recurrent states: the ``transformers`` cache that keeps no keys
or values (:func:`recurrent_cache`, which :func:`tokenmix.decoding` and a converted model's ``generate`` hand to the
model), and what a mechanism's state can do (:func:`state_grows`, :func:`decodes_padding`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ..mixers.heads import QKVMixer
from .hf import HFMechanism

__all__ = ["recurrent_cache", "state_grows", "decodes_padding"]


def state_grows(mixer: QKVMixer) -> bool:
    """Whether the mechanism's decoding state grows with every token (a key/value cache: softmax, the sparse
    patterns) rather than keeping one size: looked at on two steps of a one-row, one-value input."""
    like = next((t for t in [*mixer.parameters(), *mixer.buffers()] if t.is_floating_point()), torch.zeros(()))
    zeros = torch.zeros(1, getattr(mixer, "num_heads", 1), mixer.head_dim, device=like.device, dtype=like.dtype)
    state = mixer.init_state(1, device=like.device, dtype=like.dtype)
    gates = {"hidden": torch.zeros(1, mixer.dim, device=like.device, dtype=like.dtype)} if mixer.info.hidden else {}
    shapes = []
    for _ in range(2):
        _, state = mixer.step_heads(zeros, zeros, zeros, state, **gates)
        shapes.append({name: tuple(value.shape) for name, value in state.items()})
    return shapes[0] != shapes[1]


def decodes_padding(mixer: QKVMixer) -> bool:
    """Whether decoding from the mechanism's state can skip a padded token by keeping its row's state: a fixed-size
    state (:func:`state_grows`) whose tokens take no place in it (not a window: ``padded_decoding``)."""
    return getattr(mixer, "padded_decoding", True) and not state_grows(mixer)


def recurrent_cache(model: nn.Module) -> Any:
    """A ``transformers`` cache for decoding from the mechanisms' recurrent states (:func:`tokenmix.decoding`):
    it keeps no keys or values, only how many tokens each layer has seen (for the model's positions and masks),
    and hands each layer's new keys and values straight to its mechanism; resetting it resets their states."""
    from transformers.cache_utils import Cache, CacheLayerMixin

    mechanisms = [m for m in model.modules() if isinstance(m, HFMechanism)]

    class RecurrentLayer(CacheLayerMixin):
        is_sliding = False
        is_croppable = False

        def __init__(self) -> None:
            super().__init__()
            self.seen = 0

        def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
            self.dtype, self.device = key_states.dtype, key_states.device
            self.is_initialized = True

        def update(self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self.seen += key_states.shape[-2]
            return key_states, value_states  # the mechanism's state holds the past

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return query_length, self.seen

        def get_seq_length(self) -> int:
            return self.seen

        def get_max_length(self) -> int:
            return -1

        def reset(self) -> None:
            self.seen = 0

        def offload(self) -> None:  # nothing held here to move
            return None

        def prefetch(self) -> None:
            return None

        def reorder_cache(self, beam_idx: Tensor) -> None:  # the states are reordered once, by the cache below
            return None

    class RecurrentCache(Cache):
        def __init__(self) -> None:
            super().__init__(layer_class_to_replicate=RecurrentLayer)

        def reset(self) -> None:
            super().reset()
            for mechanism in mechanisms:
                mechanism.decoding_state = None

        def reorder_cache(self, beam_idx: Tensor) -> None:
            """Beam search: each row of every mechanism's state becomes the row of the beam it continues."""
            for mechanism in mechanisms:
                if mechanism.decoding_state is not None:
                    mechanism.decoding_state = {
                        name: value.index_select(0, beam_idx.to(value.device)) if value.dim() else value
                        for name, value in mechanism.decoding_state.items()}

        def crop(self, tokens_to_remove: int) -> None:
            raise NotImplementedError("tokenmix decoding: a recurrent state cannot drop tokens (no assisted "
                                      "decoding)")

    return RecurrentCache()
