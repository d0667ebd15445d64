"""The text classifier of Maupomé & Meurs (2021) §3 around the Contextualizer mixer.

Maupomé & Meurs (2021), "An Iterative Contextualization Algorithm with Second-Order Attention".
The model reaches the mechanism only through the registry (``create_mixer("contextualizer", ...)``).
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from ..registry import create_mixer, mixer_info
from ..validate import check_positive_int
from .layers import check_dropout, check_ids, check_mask, sinusoidal_positions

__all__ = ["ContextualizerClassifier"]

_EMBEDDINGS = ("random", "trained")
_MIXER = "contextualizer"


class ContextualizerClassifier(nn.Module):
    """Maupomé & Meurs (2021) §3: token encoding (eq. 1) -> Contextualizer (§2) -> final context c^(K) -> affine head::

        x_i = [w_{id_i} ; PE_i]                  # eq. (1): word vector (dim = v) and position (pos_dim = p)
        c   = contextualizer.context(x, mask)    # K steps of second-order attention, (B, v + p)
        logits = dropout(c) A + b                # "the affine transformation mapping the final context"

    * ``embeddings="random"`` (Maupomé & Meurs (2021) §3): each word has a fixed random vector ``w ~ U(-1, 1)^dim``,
    never
      trained: a buffer (not in ``parameters()``), drawn from the global RNG at construction, so
      ``torch.manual_seed`` fixes it. ``"trained"``: an ``nn.Embedding`` learned jointly (Maupomé & Meurs (2021) §3.2,
      Table 4),
      initialised U(-1, 1) as well.
    * positions: the sinusoidal encoding of Vaswani et al. (2017) ("as described by Vaswani et al.",
      Maupomé & Meurs (2021) §3), fixed, of its own width ``pos_dim`` and **concatenated** to the word vector: Maupomé
      & Meurs (2021) gives the
      word vectors v = 500 and the position vectors p = 20 dimensions (so they cannot be added), and its
      parameter counts work out only for m = v + p = 520 (see below). ``pos_dim=0`` leaves positions out.
    * the Contextualizer runs at width ``m = dim + pos_dim`` with ``steps``, ``rank``, ``recurrent``,
      ``context`` (entries of ``mixer_options`` -- e.g. ``{"bias": True}`` -- are passed on too and
      override these).
    * the head is ``nn.Linear(m, num_classes)``; ``dropout`` (default 0, Maupomé & Meurs (2021) mentions none) acts on
    c^(K).

    With Maupomé & Meurs (2021)'s MR settings (dim=500, pos_dim=20, rank=100, 2 classes, recurrent) the trainable
    parameters
    are ``3 * 100 * 520 + 520 * 2 + 2 = 157,042`` ("157k"); non-recurrent with K = 20 they are 3,121,042
    ("3M"). With ``embeddings="trained"`` and dim=250 add ``vocab_size * 250`` ("about half a million"
    for CR's 1.7k words).

    ``forward(ids, mask=None)``: ``ids`` (B, N) integer with N <= ``max_len``; ``mask`` (B, N) bool, True =
    real token. Returns logits (B, num_classes). Padded tokens never change the logits; a row with no
    real token has c^(K) = 0, so its logits are the head's bias. With ``context="random"`` c^(0) is
    redrawn on every call (see the mixer), so outputs vary from call to call unless the RNG is seeded.

    Default context: Maupomé & Meurs (2021)'s experiments (Tables 2-3, §3.2) draw c^(0) ~ U(-1, 1), and the
    ``paper-003``
    protocol of the tasks (``task.build_model("contextualizer", protocol="paper-003", depth=1)``) uses that.
    The library default stays ``"ones"`` because it makes the classifier a deterministic function of its
    input (evaluation, gradient checks and exported models give the same output twice); ``"random"`` does not.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        dim: int,
        *,
        max_len: int = 512,
        pos_dim: int = 20,
        steps: int = 5,
        rank: int = 100,
        recurrent: bool = True,
        context: str = "ones",
        embeddings: str = "random",
        dropout: float = 0.0,
        mixer_options: dict[str, object] | None = None,
    ) -> None:
        super().__init__()
        owner = "ContextualizerClassifier"
        for value, what in ((vocab_size, "vocab_size"), (num_classes, "num_classes"), (dim, "dim"),
                            (max_len, "max_len")):
            check_positive_int(value, what, owner)
        if isinstance(pos_dim, bool) or not isinstance(pos_dim, int) or pos_dim < 0:
            raise ValueError(f"{owner}: pos_dim must be a non-negative int, got {pos_dim!r}")
        check_dropout(dropout, owner)
        if embeddings not in _EMBEDDINGS:
            raise ValueError(f"{owner}: embeddings must be one of {_EMBEDDINGS}, got {embeddings!r}")
        if mixer_options is not None and not isinstance(mixer_options, dict):
            raise ValueError(f"{owner}: mixer_options must be a dict or None, got {type(mixer_options).__name__}")
        if not mixer_info(_MIXER).padding:
            raise ValueError(f"{owner}: mixer {_MIXER!r} must support padding")
        self.vocab_size = vocab_size
        self.num_classes = num_classes
        self.dim = dim
        self.pos_dim = pos_dim
        self.width = dim + pos_dim
        self.max_len = max_len
        self.embeddings = embeddings
        words = torch.empty(vocab_size, dim).uniform_(-1.0, 1.0)  # w ~ U(-1, 1), Maupomé & Meurs (2021) §3
        if embeddings == "random":
            self.register_buffer("word_vectors", words)
            self.embedding = None
        else:
            self.embedding = nn.Embedding(vocab_size, dim)
            with torch.no_grad():
                self.embedding.weight.copy_(words)
        if pos_dim > 0:
            self.register_buffer("positions", sinusoidal_positions(max_len, pos_dim), persistent=False)
        else:
            self.positions = None
        options: dict[str, object] = {"steps": steps, "rank": rank, "recurrent": recurrent, "context": context}
        options.update(mixer_options or {})
        self.contextualizer = create_mixer(_MIXER, self.width, causal=False, max_len=max_len, **options)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(self.width, num_classes)

    def encode(self, ids: Tensor) -> Tensor:
        """Eq. (1): ``ids`` (B, N) -> x (B, N, dim + pos_dim), word vector then position encoding."""
        ids = check_ids(ids, self.vocab_size, self.max_len, "ContextualizerClassifier")
        words = self.word_vectors[ids] if self.embedding is None else self.embedding(ids)
        if self.positions is None:
            return words
        pos = self.positions[: ids.shape[1]].to(words.dtype).expand(ids.shape[0], -1, -1)
        return torch.cat([words, pos], dim=-1)

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """``ids`` (B, N) integer, ``mask`` (B, N) bool or None -> logits (B, num_classes)."""
        owner = "ContextualizerClassifier"
        ids = check_ids(ids, self.vocab_size, self.max_len, owner)
        if mask is not None:
            mask = check_mask(mask, ids, owner)
        x = self.encode(ids)
        c = self.contextualizer.context(x, mask)  # c^(K), (B, width)
        return self.head(self.drop(c))
