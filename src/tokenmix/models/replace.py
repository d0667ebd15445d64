"""Any registered sequence mechanism in place of ``torch.nn.MultiheadAttention`` inside a user's own model.

:func:`replace_attention` swaps every self-attention ``nn.MultiheadAttention`` of a model (those of
``nn.TransformerEncoderLayer``, the self-attention of ``nn.TransformerDecoderLayer``, and so of
``nn.Transformer``, or the user's own) for a :class:`MixerAttention`: an adapter around
``create_mixer(name, embed_dim, num_heads=..., causal=...)`` that keeps ``nn.MultiheadAttention``'s call
contract, so that the model around it does not change.

What the adapter does with each argument of that call:

* ``key_padding_mask`` (True, or ``-inf`` when PyTorch's layers have made it additive, = padding) becomes the
  mixer's mask (True = real token). The mixer's outputs at padded positions are zero (``nn.MultiheadAttention``
  computes values there that nothing should read; PyTorch's own nested-tensor fast path zeroes them too).
* a causal ``attn_mask`` (True or ``-inf`` above the diagonal, nothing else) or ``is_causal=True`` needs a
  mixer created causal (``causal=True``), and a mixer created causal needs a causal call: either mismatch
  raises. Any other ``attn_mask`` raises: a mechanism has its own pattern and cannot take an arbitrary one.
* ``key`` and ``value`` must be the ``query`` tensor itself: cross-attention raises (the decoder layer's
  ``multihead_attn`` is cross-attention and is never replaced).
* ``need_weights=True`` returns the attention weights of a mixer that forms them (``softmax``), averaged over
  the heads when ``average_attn_weights``; any other mixer raises (PyTorch's Transformer layers pass
  ``need_weights=False``; a model of one's own must do the same).
* attention dropout (``nn.MultiheadAttention(dropout=p)``) goes to a mixer with an ``attn_dropout`` option;
  for any other mixer :func:`replace_attention` raises unless ``ignore_dropout=True`` says to drop it.

Every error names the module's path in the model. Under ``torch.compile`` the adapter works as it is (tested
with the inductor and aot_eager backends); its checks of mask values break the graph there, they do not fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from ..registry import MixerInfo, create_mixer, mixer_info
from .hf import HFMechanism, is_hf_model
from .hf_cache import recurrent_cache

__all__ = ["MixerAttention", "replace_attention", "decoding", "PROJECTIONS_COPIED"]

# The cross-attention of PyTorch's own decoder layer (its key and value are the encoder's memory).
_CROSS_ATTENTION = ((nn.TransformerDecoderLayer, "multihead_attn"),)
PROJECTIONS_COPIED = ("q_proj", "k_proj", "v_proj", "proj")  # what copy_weights=True fills: in_proj thirds, out_proj


class MixerAttention(nn.Module):
    """``nn.MultiheadAttention``'s call contract around a tokenmix mixer (built by :func:`replace_attention`).

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False) -> (output, weights or None)``: ``query`` is (L, B, E), (B, L, E)
    when ``batch_first``, or unbatched (L, E); see :mod:`tokenmix.models.replace` for each argument.
    """

    # PyTorch's Transformer layers read these attributes of their ``self_attn`` to decide whether to take a fused
    # fast path that only a real nn.MultiheadAttention can take; these values make them decline it.
    _qkv_same_embed_dim = False
    in_proj_weight = None
    in_proj_bias = None

    def __init__(self, mixer: nn.Module, *, embed_dim: int, num_heads: int, batch_first: bool, path: str,
                 copied: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.mixer = mixer
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.batch_first = batch_first
        self.path = path
        self.copied = copied

    @property
    def mixer_name(self) -> str:
        return self.mixer.info.name

    def extra_repr(self) -> str:
        copied = ", ".join(self.copied) or "none"
        return (f"{self.mixer_name!r} in place of nn.MultiheadAttention at {self.path!r}, "
                f"batch_first={self.batch_first}, causal={self.mixer.causal}, copied from it: {copied}")

    decoding_state: dict[str, Tensor] | None = None  # the recurrent state while in tokenmix.decoding(model)
    decoding = False

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        if key is not query or value is not query:
            self._fail("cross-attention (key or value is not the query tensor) is unsupported: a mechanism mixes "
                       "a sequence with itself; leave this module out with replace_attention(..., filter=...)")
        x, unbatched = self._to_batch_first(query)
        if self.decoding:
            return self._decode(x, unbatched, key_padding_mask, need_weights, attn_mask, is_causal)
        mask = self._real_tokens(key_padding_mask, x, unbatched)
        self._check_causal(attn_mask, is_causal, x.shape[1])
        y = self.mixer(x, mask)
        weights = self._weights(x, mask, average_attn_weights, unbatched) if need_weights else None
        return self._from_batch_first(y, unbatched), weights

    def _fail(self, message: str) -> None:
        raise ValueError(f"{self.path} ({self.mixer_name!r} in place of nn.MultiheadAttention): {message}")

    def _decode(self, x: Tensor, unbatched: bool, key_padding_mask: Tensor | None, need_weights: bool,
                attn_mask: Tensor | None, is_causal: bool) -> tuple[Tensor, None]:
        """In :func:`decoding`: the new tokens ``x`` (B, L, E) continue the sequences seen so far, one recurrent
        step each (a prompt of L > 1 tokens goes through :meth:`Mixer.prefill`, in one chunked pass where the
        mechanism has one; it must come with the causal mask)."""
        if need_weights:
            self._fail("need_weights=True while decoding: a recurrent step forms no attention matrix")
        if key_padding_mask is not None and bool(self._blocked(
                key_padding_mask[None] if unbatched else key_padding_mask, "key_padding_mask").any()):
            self._fail("padding while decoding: every sequence of the batch takes its next token at each call "
                       "(decode unpadded sequences, or sequences of one length)")
        if x.shape[1] > 1:
            self._check_causal(attn_mask, is_causal, x.shape[1])
        if self.decoding_state is None:
            self.decoding_state = self.mixer.init_state(x.shape[0], device=x.device, dtype=x.dtype)
        y, self.decoding_state = self.mixer.prefill(x, self.decoding_state)  # one pass where a chunked form exists
        return self._from_batch_first(y, unbatched), None

    def _to_batch_first(self, query: Tensor) -> tuple[Tensor, bool]:
        if not isinstance(query, Tensor) or query.dim() not in (2, 3) or query.shape[-1] != self.embed_dim:
            shape = tuple(query.shape) if isinstance(query, Tensor) else type(query).__name__
            self._fail(f"query must be (L, E), (L, B, E) or, with batch_first, (B, L, E) with E = {self.embed_dim}; "
                       f"got {shape}")
        if query.dim() == 2:
            return query[None], True
        return (query if self.batch_first else query.transpose(0, 1).contiguous()), False

    def _from_batch_first(self, y: Tensor, unbatched: bool) -> Tensor:
        if unbatched:
            return y[0]
        return y if self.batch_first else y.transpose(0, 1)

    def _real_tokens(self, key_padding_mask: Tensor | None, x: Tensor, unbatched: bool) -> Tensor | None:
        """nn.MultiheadAttention's key_padding_mask (True or -inf = padding) as the mixer's (True = real)."""
        if key_padding_mask is None:
            return None
        padding = key_padding_mask[None] if unbatched else key_padding_mask
        if padding.shape != x.shape[:2]:
            self._fail(f"key_padding_mask must have shape (B, L) = {tuple(x.shape[:2])}, got "
                       f"{tuple(key_padding_mask.shape)}")
        return ~self._blocked(padding, "key_padding_mask")

    def _blocked(self, mask: Tensor, what: str) -> Tensor:
        """A boolean or additive (0 / -inf) mask as a boolean tensor, True = blocked."""
        if mask.dtype == torch.bool:
            return mask
        if not mask.is_floating_point():
            self._fail(f"{what} must be bool or floating, got {mask.dtype}")
        blocked = mask == float("-inf")
        if not bool(((mask == 0) | blocked).all()):
            self._fail(f"an additive {what} with values other than 0 and -inf (a bias on the scores) is "
                       f"unsupported: a mechanism has no score matrix to add it to")
        return blocked

    def _check_causal(self, attn_mask: Tensor | None, is_causal: bool, n: int) -> None:
        causal = is_causal if attn_mask is None else self._is_causal_mask(attn_mask, n)
        name = self.mixer_name
        if causal and not self.mixer.causal:
            self._fail(f"called causally (a causal attn_mask or is_causal=True), but {name!r} was created "
                       + ("non-causal: pass causal=True to replace_attention" if self.mixer.info.causal
                          else f"non-causal, and {name!r} cannot run causally"))
        if self.mixer.causal and not causal:
            self._fail(f"{name!r} was created causal (causal=True), but is called without a causal attn_mask or "
                       f"is_causal=True: it would hide the future from a model that expects to see it")

    def _is_causal_mask(self, attn_mask: Tensor, n: int) -> bool:
        """Whether ``attn_mask`` blocks exactly the future; False when it blocks nothing; any other mask raises."""
        if attn_mask.shape != (n, n):
            self._fail(f"attn_mask must be an (L, L) = ({n}, {n}) causal mask or none; got shape "
                       f"{tuple(attn_mask.shape)} (per-batch or per-head masks are unsupported)")
        blocked = self._blocked(attn_mask, "attn_mask")
        if not bool(blocked.any()):
            return False
        future = torch.ones(n, n, dtype=torch.bool, device=blocked.device).triu(1)
        if not torch.equal(blocked, future):
            self._fail("attn_mask is neither causal nor empty: a mechanism has its own attention pattern and cannot "
                       "take an arbitrary mask")
        return True

    def _weights(self, x: Tensor, mask: Tensor | None, average: bool, unbatched: bool) -> Tensor:
        if not getattr(self.mixer, "forms_attention_matrix", False):  # a linear mechanism would build one per call
            self._fail(f"need_weights=True, but {self.mixer_name!r} forms no attention-weight matrix to return; call "
                       f"it with need_weights=False (PyTorch's Transformer layers do)")
        weights = self.mixer.attention_weights(x, mask)  # (B, H, L, L)
        weights = weights.mean(dim=1) if average else weights
        return weights[0] if unbatched else weights


def replace_attention(model: nn.Module, name: str, *, causal: bool | Callable[[str], bool] = False,
                      max_len: int | None = None, copy_weights: bool = False, ignore_dropout: bool = False,
                      filter: Callable[[str], bool] | None = None, **options: Any) -> int:
    """Replace every self-attention ``nn.MultiheadAttention`` inside ``model`` by the mechanism ``name``, in place;
    return how many modules were replaced (at least one: a model with none to replace raises ``ValueError``
    naming the attention-like modules it has instead).

    Args:
        model: any module holding ``nn.MultiheadAttention`` children (``nn.TransformerEncoder``,
            ``nn.Transformer``, a model of one's own). The cross-attention of ``nn.TransformerDecoderLayer`` is
            left as it is. A Hugging Face ``transformers`` model (5.x) goes to
            :func:`tokenmix.models.hf.replace_hf_attention`: its own projections stay, the Q/K/V mechanism's rule
            replaces softmax in each self-attention module, causal where the module is (``causal`` and
            ``copy_weights`` do not apply and raise).
        name: a registered sequence mechanism (``tokenmix.list_mixers()``; vision mixers need a 2-D grid that the
            call does not carry, and ``average`` brings its own residual and LayerNorm, so both raise).
        causal: create the mixers causal (for models called with a causal mask); a function of the module's
            path decides per module (e.g. ``lambda path: path.startswith("decoder")`` for ``nn.Transformer``).
        max_len: the longest sequence, for mechanisms that need one (``mixer_info(name).needs_max_len``).
        copy_weights: copy the module's ``in_proj`` (split into Q, K, V) and ``out_proj`` weights and biases into
            the mixer's ``q_proj``, ``k_proj``, ``v_proj`` and ``proj``. Only mechanisms with those projections at
            the module's width can take them (the Q/K/V mechanisms: ``softmax``, ``linear``, ``performer``,
            ``cosformer``, ``kerformer``, ``efficient``, ``sparse_strided``, ``sparse_fixed``, ``based``,
            ``window_linear``); any other raises.
            With ``softmax`` the model computes what it computed before.
        ignore_dropout: replace modules with attention dropout by a mechanism that has no attention weights to drop
            (without it, that raises).
        filter: replace only the modules whose path (as in ``model.named_modules()``) it accepts.
        options: the mechanism's own options (``mixer_info(name).options``); those not given keep the
            mechanism's defaults (its paper's), except that with ``copy_weights`` a ``bias`` option follows the
            module. ``num_heads`` is the module's for multi-head mechanisms, 1 for the others.
    """
    if isinstance(model, nn.MultiheadAttention):
        raise ValueError("replace_attention: pass the model that holds the nn.MultiheadAttention, not the module "
                         "itself (it is replaced in its parent)")
    if is_hf_model(model):
        if causal is not False or copy_weights:
            raise ValueError("replace_attention: in a Hugging Face model each attention module's own is_causal decides "
                             "causality and its own projections stay in use: causal= and copy_weights= do not apply")
        _checked_mechanism(name)
        from .hf_auto import convert  # the converted class: saves, loads and generates as a converted model

        return convert(model, name, max_len=max_len, ignore_dropout=ignore_dropout, filter=filter, options=options)
    info = _checked_mechanism(name)
    adapters: dict[int, MixerAttention] = {}
    left: list[str] = []  # the nn.MultiheadAttention modules left as they are, and why: for the error below
    for parent_path, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            path = f"{parent_path}.{child_name}" if parent_path else child_name
            if not isinstance(child, nn.MultiheadAttention):
                continue
            if _is_cross_attention(parent, child_name):
                left.append(f"{path} (cross-attention, never replaced)")
                continue
            if filter is not None and not filter(path):
                left.append(f"{path} (not accepted by filter=)")
                continue
            if id(child) not in adapters:  # a module shared by two parents gets one adapter
                is_causal = causal(path) if callable(causal) else causal
                adapters[id(child)] = _adapter(child, path, info, is_causal, max_len, copy_weights, ignore_dropout,
                                               options)
            setattr(parent, child_name, adapters[id(child)])
    if not adapters:
        _nothing_replaced(model, left)
    _decline_nested_tensors(model)
    return len(adapters)


def _nothing_replaced(model: nn.Module, left: list[str]) -> None:
    """Raise why no module was replaced: every nn.MultiheadAttention was left out (``left``: each with why), or
    there is none (naming the attention-like modules the model has instead)."""
    if left:
        raise ValueError(f"replace_attention: nothing replaced: every nn.MultiheadAttention of the model is left "
                         f"out: {', '.join(left)}")
    similar: list[str] = []  # "path (class)", the outermost of nested matches only
    for path, module in model.named_modules():
        named = f"{path.rsplit('.', 1)[-1]} {type(module).__name__}".lower()
        if path and ("attention" in named or "attn" in named) and not any(
                path.startswith(f"{outer.split(' ')[0]}.") for outer in similar):
            similar.append(f"{path} ({type(module).__name__})")
    shown = ", ".join(similar[:8]) + (f" and {len(similar) - 8} more" if len(similar) > 8 else "")
    raise ValueError(f"replace_attention: the model ({type(model).__name__}) has no nn.MultiheadAttention to "
                     f"replace; attention-like modules found instead: {shown or 'none'} (a model's "
                     f"own attention class cannot be replaced: build it on nn.MultiheadAttention, or use a "
                     f"tokenmix model)")


def _checked_mechanism(name: str) -> MixerInfo:
    """The registry entry of ``name``, refused when it cannot sit in an nn.MultiheadAttention slot."""
    info = mixer_info(name)
    if info.spatial:
        raise ValueError(f"replace_attention: {name!r} is a vision mixer: it needs the 2-D grid of its tokens (hw), "
                         f"which nn.MultiheadAttention's call does not carry")
    if info.residual:
        raise ValueError(f"replace_attention: {name!r}'s formula ends with its own residual connection and "
                         f"LayerNorm, and the layer around an nn.MultiheadAttention adds another; use it in a tokenmix "
                         f"model instead")
    return info


def _is_cross_attention(parent: nn.Module, child_name: str) -> bool:
    return any(isinstance(parent, kind) and child_name == attribute for kind, attribute in _CROSS_ATTENTION)


def _adapter(mha: nn.MultiheadAttention, path: str, info: MixerInfo, causal: bool, max_len: int | None,
             copy_weights: bool, ignore_dropout: bool, options: dict[str, Any]) -> MixerAttention:
    def fail(message: str) -> None:
        raise ValueError(f"replace_attention: {path}: {message}")

    if not mha._qkv_same_embed_dim:
        fail("its kdim/vdim differ from embed_dim, so it is cross-attention; leave it out with filter=...")
    if mha.bias_k is not None or mha.add_zero_attn:
        fail("add_bias_kv / add_zero_attn add keys that a mechanism has no place for")
    name = info.name
    kwargs = dict(options)
    if copy_weights and "bias" in info.options and "bias" not in kwargs:
        kwargs["bias"] = mha.in_proj_bias is not None
    if mha.dropout > 0 and "attn_dropout" in info.options:
        kwargs.setdefault("attn_dropout", mha.dropout)
    elif mha.dropout > 0 and not ignore_dropout:
        fail(f"it has attention dropout {mha.dropout}, which {name!r} cannot apply (it has no attention weights to "
             f"drop); pass ignore_dropout=True to replace it without, or build the module with dropout=0")
    try:
        mixer = create_mixer(name, mha.embed_dim, num_heads=mha.num_heads if info.multihead else 1, causal=causal,
                             max_len=max_len, **kwargs)
    except (ValueError, TypeError, NotImplementedError) as error:
        raise ValueError(f"replace_attention: {path}: {error}") from error
    mixer.to(device=mha.out_proj.weight.device, dtype=mha.out_proj.weight.dtype)
    copied = _copy_projections(mha, mixer, fail) if copy_weights else ()
    return MixerAttention(mixer, embed_dim=mha.embed_dim, num_heads=mha.num_heads, batch_first=mha.batch_first,
                          path=path, copied=copied)


def _copy_projections(mha: nn.MultiheadAttention, mixer: nn.Module, fail: Callable[[str], None]) -> tuple[str, ...]:
    """``in_proj`` (Q, K, V thirds) and ``out_proj`` into the mixer's projections; the names filled."""
    targets = tuple(getattr(mixer, name, None) for name in PROJECTIONS_COPIED)
    square = (mha.embed_dim, mha.embed_dim)
    if not all(isinstance(t, nn.Linear) and tuple(t.weight.shape) == square for t in targets):
        fail(f"copy_weights=True: {mixer.info.name!r} has no Q/K/V and output projections of the module's shape "
             f"({' and '.join(PROJECTIONS_COPIED)}, each {square[0]} x {square[1]}) to copy into")
    weights = (*mha.in_proj_weight.chunk(3), mha.out_proj.weight)
    biases = (*mha.in_proj_bias.chunk(3), mha.out_proj.bias) if mha.in_proj_bias is not None else (None,) * 4
    with torch.no_grad():
        for target, weight, bias in zip(targets, weights, biases):
            target.weight.copy_(weight)
            if bias is not None and target.bias is None:
                fail(f"copy_weights=True: the module has biases and {mixer.info.name!r} was built without (bias=False)")
            if target.bias is not None:
                target.bias.copy_(bias if bias is not None else torch.zeros_like(target.bias))
    return PROJECTIONS_COPIED


def _decline_nested_tensors(model: nn.Module) -> None:
    """An ``nn.TransformerEncoder`` built around real attention may turn padded input into nested tensors in eval
    mode, which only nn.MultiheadAttention's fused path reads: switch that off where a layer was replaced."""
    for module in model.modules():
        if isinstance(module, nn.TransformerEncoder) and any(
                isinstance(getattr(layer, "self_attn", None), MixerAttention) for layer in module.layers):
            module.use_nested_tensor = False


@contextmanager
def decoding(model: nn.Module) -> Iterator[nn.Module]:
    """Decode with constant memory from a model whose attention :func:`replace_attention` replaced by causal
    mechanisms: inside ``with tokenmix.decoding(model):`` each call continues the sequences of the previous calls
    instead of starting over: every replaced layer keeps its mechanism's recurrent state (``init_state`` /
    ``step``: a fixed-size state for the kernel mechanisms, a growing key/value cache for softmax) and feeds the
    new tokens through it. The first call may carry the whole prompt (with its causal mask, as in training); then
    one new token per sequence per call, the model's own positions continued by the caller. Padding is refused
    in a PyTorch model; leaving the context drops the states. Raises ``ValueError`` for a model with no replaced
    attention or a non-causal one.

    A Hugging Face model: the context gives a cache to pass to the model (``generate(ids, cache=cache)``, or
    ``past_key_values=`` in older releases, or ``model(ids, past_key_values=cache)``), which keeps no keys or values,
    only the length seen, so that the model's positions and masks continue while each layer decodes from its
    mechanism's state. Plain ``generate`` on a replaced causal model does this by itself
    (:mod:`tokenmix.models.hf_auto`). Greedy, sampled and beam-search decoding; left-padded prompts for the
    mechanisms with a fixed-size state (a padded token leaves its row's state as it was; a growing key/value cache
    raises); assisted decoding raises."""
    adapters = [m for m in model.modules() if isinstance(m, (MixerAttention, HFMechanism))]
    if not adapters:
        raise ValueError("decoding: the model has no attention replaced by tokenmix.replace_attention")
    for adapter in adapters:
        if not adapter.mixer.causal:
            raise ValueError(f"decoding: {adapter.path} ({adapter.mixer_name!r}) is not causal; decoding continues "
                             f"sequences left to right (a PyTorch model: replace_attention(..., causal=True))")
        if adapter.decoding:
            raise ValueError(f"decoding: {adapter.path} is already decoding (nested tokenmix.decoding)")
    for adapter in adapters:
        adapter.decoding, adapter.decoding_state = True, None
    try:
        yield recurrent_cache(model) if is_hf_model(model) else model
    finally:
        for adapter in adapters:
            adapter.decoding, adapter.decoding_state = False, None
