"""The decoder-only language model of Chen (2023) §4, with any causal mixer, and its sampler."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ..ops.init import normal_init_
from ..registry import mixer_info
from ..validate import check_positive_int
from .layers import build_blocks, check_dropout, check_ids, check_init_std
from .patterns import pattern_names

__all__ = ["CausalLM"]


class CausalLM(nn.Module):
    """The decoder-only language model of Chen (2023) section 4, with the mixer in place of self-attention.

    * token and learned position embeddings (eqs. 4-5), both multiplied by ``sqrt(dim)`` when
      ``scale_embedding`` (Chen (2023) section 4, after Vaswani et al. 2017), summed, then dropout (eqs. 6-7);
    * ``depth`` pre-LN :class:`Block` s with ``causal=True`` mixers (eqs. 9-20) -- a mechanism that cannot
      run causally makes the registry raise ``ValueError`` naming it;
    * final layernorm and a linear head with bias (eq. 21). ``forward`` returns the logits, not the
      softmax; ``softmax(logits[:, i])`` is the next-token distribution of eq. 22.

    ``init_std`` (Chen (2023) section 6 uses 0.01): every parameter of the model, every mixer's whatever its module
    type included, is drawn from ``N(0, init_std)``, every bias is zero, and LayerNorm gains are 1 and
    biases 0 (:func:`~tokenmix.ops.init.normal_init_`). With ``init_std=None`` PyTorch's / the mixer's
    defaults are kept. ``tie_weights`` shares the head's weight with the token embedding; ``positions=False``
    leaves out the position embedding (Arora et al. (2023)'s MQAR models, whose order comes from a short
    convolution). ``mixer`` is a registry name or a layer pattern (:mod:`tokenmix.models.patterns`).
    """

    def __init__(
        self,
        vocab_size: int,
        mixer: str | list,
        dim: int,
        depth: int,
        max_len: int,
        *,
        num_heads: int | None = None,
        ffn_dim: int | None = None,
        dropout: float = 0.1,
        init_std: float | None = None,
        scale_embedding: bool = True,
        tie_weights: bool = False,
        positions: bool = True,
        mixer_options: dict[str, object] | None = None,
    ) -> None:
        super().__init__()
        owner = "CausalLM"
        for value, what in ((vocab_size, "vocab_size"), (dim, "dim"), (depth, "depth"), (max_len, "max_len")):
            check_positive_int(value, what, owner)
        check_dropout(dropout, owner)
        check_init_std(init_std, owner)
        self.vocab_size = vocab_size
        self.mixer_names = pattern_names(mixer, owner)
        self.dim = dim
        self.max_len = max_len
        self.scale_embedding = bool(scale_embedding)
        self.token_embedding = nn.Embedding(vocab_size, dim)   # W[emb_tok], eq. 4
        # W[emb_pos], eq. 5; positions=False: none (Zoology's MQAR models, which get order from a short convolution)
        self.position_embedding = nn.Embedding(max_len, dim) if positions else None
        self.drop = nn.Dropout(dropout)                        # eq. 7
        self.blocks = build_blocks(dim, mixer, depth, mixer_options, owner, num_heads=num_heads, causal=True,
                              max_len=max_len, ffn_dim=ffn_dim, dropout=dropout)
        self.norm = nn.LayerNorm(dim)                          # eq. 21 layernorm
        self.head = nn.Linear(dim, vocab_size)                 # W[soft], b[soft], eq. 21
        if init_std is not None:
            self.reset_parameters(init_std)
        if tie_weights:
            self.head.weight = self.token_embedding.weight

    def reset_parameters(self, std: float) -> None:
        """Every parameter ~ N(0, std), biases 0, LayerNorm gain 1 and bias 0 (Chen (2023) section 6)."""
        normal_init_(self, std)

    def embed(self, ids: Tensor) -> Tensor:
        """``X[emb_tok] + X[emb_pos]`` (eqs. 4-5), times ``sqrt(dim)`` when ``scale_embedding``; no dropout."""
        ids = check_ids(ids, self.vocab_size, self.max_len, "CausalLM")
        x = self.token_embedding(ids)
        if self.position_embedding is not None:
            x = x + self.position_embedding(torch.arange(ids.shape[1], device=ids.device))
        return x * math.sqrt(self.dim) if self.scale_embedding else x

    def forward(self, ids: Tensor) -> Tensor:
        """``ids`` (B, N) integer, N <= ``max_len`` -> next-token logits (B, N, vocab_size) (eqs. 4-21)."""
        return self.head(self.features(ids))

    def features(self, ids: Tensor) -> Tensor:
        """The final layernorm's output (B, N, dim), what ``head`` reads: a task that scores a few positions
        applies the head to those alone."""
        x = self.drop(self.embed(ids))
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    @property
    def can_step(self) -> bool:
        """Every layer's mixer decodes incrementally (``mixer_info(name).recurrent``)."""
        return all(mixer_info(name).recurrent for name in self.mixer_names)

    def generate(
        self,
        prompt_ids: Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_p: float | None = None,
        seed: int | None = None,
        use_step: bool | None = None,
    ) -> Tensor:
        """Sample ``max_new_tokens`` continuations of ``prompt_ids`` (B, P); returns (B, P + new).

        With ``use_step`` None (default) the mixers' incremental ``step`` is used when every layer has one
        (cost per token independent of the prefix for the recurrent mechanisms), otherwise the whole
        prefix is recomputed for each token; ``use_step=False`` forces recomputation. Both give the same
        tokens for the same ``seed``. ``temperature=0`` is greedy decoding; ``top_p`` keeps the smallest
        set of tokens whose probability reaches ``top_p`` (nucleus sampling). The model is in eval mode
        while generating. The learned positions cap ``P + max_new_tokens`` at ``max_len``.
        """
        owner = "CausalLM.generate"
        ids = check_ids(prompt_ids, self.vocab_size, self.max_len, owner)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"{owner}: max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
        if ids.shape[1] + max_new_tokens > self.max_len:
            raise ValueError(f"{owner}: prompt length {ids.shape[1]} + {max_new_tokens} new tokens exceeds "
                             f"max_len={self.max_len} (the learned positions)")
        if not isinstance(temperature, (int, float)) or temperature < 0:
            raise ValueError(f"{owner}: temperature must be >= 0, got {temperature!r}")
        if top_p is not None and not 0.0 < top_p <= 1.0:
            raise ValueError(f"{owner}: top_p must be in (0, 1], got {top_p!r}")
        if use_step and not self.can_step:
            raise ValueError(f"{owner}: mixer(s) {self.mixer_names} lack an incremental step; use use_step=False")
        stepping = self.can_step if use_step is None else use_step
        # inference_mode: no autograd bookkeeping at all (cheaper per token than no_grad); the result is
        # cloned outside it, so that callers may use it in autograd-recorded code
        with torch.inference_mode():
            ids = self._generate(ids, max_new_tokens, temperature, top_p, seed, stepping)
        return ids.clone()

    def _generate(self, ids: Tensor, max_new_tokens: int, temperature: float, top_p: float | None,
                  seed: int | None, stepping: bool) -> Tensor:
        generator = torch.Generator(device=ids.device)
        generator.manual_seed(seed if seed is not None else int(torch.randint(2**62, ()).item()))
        was_training = self.training
        self.eval()
        try:
            if stepping:
                states = [block.mixer.init_state(ids.shape[0]) for block in self.blocks]
                for t in range(ids.shape[1]):
                    logits, states = self._step(ids[:, t], t, states)
            else:
                logits = self(ids)[:, -1]
            for i in range(max_new_tokens):
                token = _sample(logits, temperature, top_p, generator)
                ids = torch.cat([ids, token[:, None]], dim=1)
                if i + 1 == max_new_tokens:
                    break
                if stepping:
                    logits, states = self._step(token, ids.shape[1] - 1, states)
                else:
                    logits = self(ids)[:, -1]
        finally:
            self.train(was_training)
        return ids

    def _step(self, tokens: Tensor, position: int, states: list) -> tuple[Tensor, list]:
        """Next-token logits (B, vocab) after feeding ``tokens`` (B,) at ``position`` through every layer."""
        x = self.token_embedding(tokens)
        if self.position_embedding is not None:
            x = x + self.position_embedding.weight[position]
        x = x * math.sqrt(self.dim) if self.scale_embedding else x
        new_states = []
        for block, state in zip(self.blocks, states):
            x, state = block.step(x, state)
            new_states.append(state)
        return self.head(self.norm(x)), new_states

    def state_bytes(self, length: int | None = None) -> int:
        """Bytes of the decoding state (every layer's, batch 1) after ``length`` tokens (default ``max_len``): what
        generation keeps between tokens -- a fixed-size state for the recurrent mechanisms, the key-value cache
        for softmax attention (growing with ``length``). Measured on the state the mixers' ``step`` holds."""
        return self.state_bytes_at([self.max_len if length is None else length])[0]

    def state_bytes_at(self, lengths: list[int]) -> list[int]:
        """:meth:`state_bytes` after each of ``lengths`` tokens, read along one pass of steps."""
        for length in lengths:
            if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length <= self.max_len:
                raise ValueError(f"CausalLM.state_bytes: length must be an int in [1, max_len={self.max_len}], "
                                 f"got {length!r}")
        if not self.can_step:
            raise ValueError(f"CausalLM.state_bytes: mixer(s) {self.mixer_names} lack an incremental step")
        wanted, sizes = set(lengths), {}
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode():
                token = torch.zeros(1, dtype=torch.long, device=self.head.weight.device)
                states = [block.mixer.init_state(1) for block in self.blocks]
                for t in range(max(lengths)):
                    _, states = self._step(token, t, states)
                    if t + 1 in wanted:
                        sizes[t + 1] = sum(x.numel() * x.element_size() for state in states for x in state.values())
        finally:
            self.train(was_training)
        return [sizes[length] for length in lengths]

    def loss(self, ids: Tensor) -> Tensor:
        """Mean next-token cross-entropy: ``logits[:, :-1]`` against ``ids[:, 1:]`` (eq. 22); needs N >= 2."""
        if isinstance(ids, Tensor) and ids.dim() == 2 and ids.shape[1] < 2:
            raise ValueError(f"CausalLM.loss: needs at least 2 tokens per row, got shape {tuple(ids.shape)}")
        logits = self(ids)
        return F.cross_entropy(logits[:, :-1].reshape(-1, self.vocab_size), ids[:, 1:].reshape(-1).long())


def _sample(logits: Tensor, temperature: float, top_p: float | None, generator: torch.Generator) -> Tensor:
    """One token per row from ``logits`` (B, vocab): greedy at temperature 0, else softmax sampling,
    restricted to the nucleus of probability ``top_p`` when given."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p is not None and top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of the more likely tokens
        sorted_probs = sorted_probs * (before < top_p)  # the most likely token always stays
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    # inverse-CDF sampling: one uniform per row (torch.multinomial draws an exponential per vocabulary entry,
    # which costs more than a whole decoding step of a small model)
    cdf = probs.double().cumsum(dim=-1)  # float64: u and the bin edges never coincide on a float32 grid
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=cdf.dtype) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp_(max=probs.shape[-1] - 1).squeeze(-1)
