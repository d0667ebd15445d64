"""A tokenmix mechanism in place of the attention rule of a Hugging Face ``transformers`` model.

Models of ``transformers`` (5.x) compute their queries, keys and values themselves (with their own rotary positions,
grouped key/value heads and caches) and hand them to an attention function picked by name from the library's
``AttentionInterface``. :func:`replace_hf_attention` registers one more such function, ``"tokenmix"``, and gives each
self-attention module of the model a :class:`HFMechanism`: the per-head rule of a Q/K/V mechanism (``softmax``,
``linear``, ``performer``, ``cosformer``, ``kerformer``, ``efficient``, ``sparse_strided``, ``sparse_fixed``) applied
to the model's own Q, K and V. The model's projections and weights stay as they were, so a pretrained model keeps
them; the mechanism adds only its own parameters (SE-K's, for instance), registered under
``<module path>.tokenmix``.

What the function does with what the model passes:

* the mask: the model's masks are made by ``"tokenmix"``'s mask function, which keeps the 2-D padding mask (True =
  real token) and refuses every pattern other than causal or bidirectional attention over the real tokens (sliding
  windows, chunks, packed sequences, image-token overlays): a mechanism has its own pattern and cannot take another.
  Causal or not is the module's (``is_causal``), as for the library's own functions; a mechanism created the other
  way raises. Outputs at padded positions are zero.
* a key/value cache (``generate``): the new queries are placed at the last positions of the keys and the causal
  mechanism computes them over the whole cached prefix, exactly what a call without the cache computes for them;
  a bidirectional mechanism with a cache raises.
* grouped key/value heads (Llama's ``num_key_value_heads``) are repeated to the query heads, as the eager function
  does; a ``scaling`` other than ``1/sqrt(head_dim)`` (T5's 1, GPT-2's inverse layer index, Gemma's
  ``query_pre_attn_scalar``) is folded into the queries, so that the mechanism's own ``1/sqrt(head_dim)`` gives the
  model's (``softmax`` then computes exactly what the model did); attention dropout goes to a mechanism with an
  ``attn_dropout`` option, and for any other one :func:`replace_hf_attention` raises unless ``ignore_dropout=True``.
* what a mechanism has no place for is refused when :func:`replace_hf_attention` runs, naming the module and the
  setting: a sliding window shorter than the model's longest sequence (Mistral's default ``sliding_window=4096``),
  logit soft-capping (Gemma 2), attention sinks (gpt-oss), a position bias added to the scores (T5's relative
  buckets, ALiBi), ``output_attentions`` in the config for a mechanism that forms no weights, and a ``rotary``
  option where the model already rotates Q and K. Per call, ``output_attentions=True`` returns the weights of a
  mechanism that forms them (``softmax``) and raises for any other; a custom 4-D mask raises naming the module.
* cross-attention (T5's ``EncDecAttention``, the ``encoder_attn`` of BART, mBART, Marian and Whisper, BERT's
  ``crossattention``, any module ``is_cross_attention`` or in a decoder and not causal) is left as it is; picked by
  ``filter=``, it is refused at :func:`replace_hf_attention` (keys and values from another sequence: a mechanism
  mixes a sequence with itself).
* modules left as they are compute PyTorch's scaled dot-product attention with the same masks made explicit, so they
  compute what they did before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..mixers.heads import QKVMixer
from ..registry import create_heads, mixer_info
from .hf_checks import (
    attention_dropout,
    calls_attention_interface,
    head_dim_of,
    is_cross_attention,
    longest,
    sliding_window,
    unsupported,
)

__all__ = ["HFMechanism", "replace_hf_attention", "is_hf_model", "ATTENTION_NAME", "RECORD_KEY"]

ATTENTION_NAME = "tokenmix"
RECORD_KEY = "tokenmix"  # the config attribute recording the replacement (tokenmix.models.hf_auto reads it)
_REFUSED_KWARGS = ("sliding_window", "softcap", "s_aux", "sinks")


def is_hf_model(model: nn.Module) -> bool:
    """Whether ``model`` is a ``transformers.PreTrainedModel`` (False without ``transformers`` imported)."""
    import sys

    if "transformers" not in sys.modules:
        return False
    from transformers import PreTrainedModel

    return isinstance(model, PreTrainedModel)


class HFMechanism(nn.Module):
    """The per-head rule of a Q/K/V mechanism, called by a ``transformers`` attention module with its own Q, K, V
    (B, H, N, D); returns its output as ``(B, N, H, D)``, as the library's attention functions do. Built by
    :func:`replace_hf_attention`; ``mixer`` is the mechanism without projections (:func:`tokenmix.create_heads`)."""

    def __init__(self, mixer: QKVMixer, *, path: str, head_dim: int, ignore_dropout: bool) -> None:
        super().__init__()
        self.mixer = mixer
        self.path = path
        self.head_dim = head_dim
        self.ignore_dropout = ignore_dropout

    @property
    def mixer_name(self) -> str:
        return self.mixer.info.name

    def extra_repr(self) -> str:
        return f"{self.mixer_name!r} in place of the attention rule at {self.path!r}, causal={self.mixer.causal}"

    def _fail(self, message: str) -> None:
        raise ValueError(f"{self.path} ({self.mixer_name!r} in place of the attention rule): {message}")

    decoding = False  # in tokenmix.decoding(model): continue from decoding_state, one recurrent step per token
    decoding_state: dict[str, Tensor] | None = None

    def forward(self, module: nn.Module, query: Tensor, key: Tensor, value: Tensor, padding: Tensor | None,
                scaling: float | None, dropout: float, kwargs: dict[str, Any]) -> tuple[Tensor, Tensor | None]:
        for name in _REFUSED_KWARGS:
            setting = kwargs.get(name)
            if name == "sliding_window" and isinstance(setting, int) and getattr(self.mixer, "window",
                                                                                 setting + 1) <= setting:
                continue  # a windowed mechanism (window_linear) within the model's window
            if setting is not None:
                self._fail(f"the model passes {name}={setting!r}, which the mechanism has no place for")
        causal = kwargs.get("is_causal")
        causal = bool(getattr(module, "is_causal", False) if causal is None else causal)
        if causal != self.mixer.causal:
            self._fail(f"the module is {'causal' if causal else 'bidirectional'}, the mechanism was created "
                       f"{'causal' if self.mixer.causal else 'bidirectional'}")
        if padding is not None and padding.dim() != 2:
            self._fail(f"a custom {padding.dim()}-D attention mask of shape {tuple(padding.shape)}: a mechanism has "
                       f"its own pattern; pass a 2-D padding mask (batch, length; 1 = real token) instead")
        query = self._scaled(query, scaling)
        self._dropout(dropout)
        key, value = (_repeat_heads(t, query.shape[1]) for t in (key, value))
        q_len, kv_len = query.shape[2], key.shape[2]
        mask = _real_tokens(padding, key)
        weights_wanted = _attentions_requested()
        if weights_wanted and not getattr(self.mixer, "forms_attention_matrix", False):
            self._fail("output_attentions=True, but the mechanism forms no attention-weight matrix to return; "
                       "call the model with output_attentions=False")
        if self.decoding:
            if weights_wanted:
                self._fail("output_attentions=True while decoding from the recurrent state, which keeps no weights")
            return self._decode(query, key, value, mask)
        if q_len != kv_len:  # a key/value cache: the new queries are the last positions
            if not causal or q_len > kv_len:
                self._fail(f"queries ({q_len}) and keys ({kv_len}) differ in length; only a causal mechanism "
                           f"decodes with a key/value cache")
            query = torch.cat([query.new_zeros(*query.shape[:2], kv_len - q_len, query.shape[3]), query], dim=2)
        if self.mixer.info.hidden and q_len != kv_len:
            self._fail("decoding with a key/value cache: the mechanism's gates need every position's hidden states; "
                       "decode from its recurrent state (generate() does, or call inside tokenmix.decoding(model))")
        out = self.mixer.attend_heads(query, key, value, mask, **self._gates(q_len))[:, :, kv_len - q_len:]
        if mask is not None:
            out = out.masked_fill(~mask[:, None, kv_len - q_len:, None], 0.0)
        weights = (self.mixer.attention_weights_of_heads(query, key, mask)[:, :, kv_len - q_len:] if weights_wanted
                   else None)
        return out.transpose(1, 2).contiguous(), weights

    hidden: Tensor | None = None  # the module's input while it runs, for a mechanism with gates (MixerInfo.hidden)

    def _gates(self, length: int) -> dict[str, Tensor]:
        """``hidden=`` for a mechanism whose gates read the hidden states (B, L, dim); nothing for the others."""
        if not self.mixer.info.hidden:
            return {}
        hidden = self.hidden
        if not isinstance(hidden, Tensor) or hidden.dim() != 3 or hidden.shape[1] != length:
            self._fail("the mechanism's gates read the module's hidden states (B, L, dim), and the module was not "
                       "called with them (as its first argument or hidden_states=)")
        return {"hidden": hidden}

    def _scaled(self, query: Tensor, scaling: float | None) -> Tensor:
        """The model's score scale folded into the queries: the mechanism divides by sqrt(head_dim) itself."""
        if scaling is None or abs(scaling * self.head_dim ** 0.5 - 1) <= 1e-6:
            return query
        return query * (scaling * self.head_dim ** 0.5)

    def _decode(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None) -> tuple[Tensor, None]:
        """The new positions (B, H, L, D) continue the state: one :meth:`step_heads` each. A padded position (a
        left-padded prompt) leaves its row's state as it was and outputs zero, as the forward pass masks it."""
        if key.shape[2] != query.shape[2]:
            self._fail("decoding with a key/value cache of the model's own: in tokenmix.decoding(model), pass the "
                       "cache it gives (generate(..., past_key_values=cache))")
        if self.decoding_state is None:
            self.decoding_state = self.mixer.init_state(query.shape[0], device=query.device, dtype=query.dtype)
        gates = self._gates(query.shape[2])
        if query.shape[2] > 1 and mask is None:  # a prompt: in one pass where the mechanism has one
            out, self.decoding_state = self.mixer.prefill_heads(query, key, value, self.decoding_state, **gates)
            return out.transpose(1, 2), None
        outputs = []
        for t in range(query.shape[2]):
            out, state = self.mixer.step_heads(query[:, :, t], key[:, :, t], value[:, :, t], self.decoding_state,
                                               **{name: x[:, t] for name, x in gates.items()})
            if mask is not None:
                real = mask[:, t]
                state = self._keep_padded_rows(real, state, self.decoding_state)
                out = out * real[:, None, None].to(out.dtype)
            self.decoding_state = state
            outputs.append(out)
        return torch.stack(outputs, dim=1), None  # (B, L, H, D), as the attention functions return

    def _keep_padded_rows(self, real: Tensor, new: dict[str, Tensor], old: dict[str, Tensor]) -> dict[str, Tensor]:
        """``new`` where the row's token is real, ``old`` where it is padding (an entry not yet in ``old``: the
        empty sum, zero). A state that grows with every token (a key/value cache) cannot keep a row as it was."""
        if bool(real.all()):
            return new
        if not getattr(self.mixer, "padded_decoding", True):
            self._fail(f"padding while decoding: a padded token takes a place in {self.mixer_name!r}'s window, which "
                       f"keeping a row's state cannot give; generate without tokenmix.decoding (the model's own "
                       f"cache), or pad on neither side")
        kept = {}
        for name, value in new.items():
            if value.dim() == 0:  # shared by the rows (the step count): padding counts, as in the forward pass
                kept[name] = value
                continue
            before = old.get(name)
            if before is not None and before.shape != value.shape:
                self._fail(f"padding while decoding: {self.mixer_name!r} keeps a growing key/value cache ({name!r}) "
                           f"that cannot skip a padded token; generate without tokenmix.decoding (the model's own "
                           f"cache), or pad on neither side")
            before = torch.zeros_like(value) if before is None else before
            kept[name] = torch.where(real.view(-1, *([1] * (value.dim() - 1))), value, before)
        return kept

    def _dropout(self, p: float) -> None:
        if "attn_dropout" in self.mixer.info.options:
            self.mixer.attn_dropout = float(p)  # the model passes its rate in training, 0 in evaluation
        elif p and not self.ignore_dropout:
            self._fail(f"the model applies attention dropout {p}, which {self.mixer_name!r} cannot apply; "
                       f"replace_attention(..., ignore_dropout=True) drops it")


def _attentions_requested() -> bool:
    """Whether the model's call collects attention weights (``output_attentions=True``, by argument or config):
    ``transformers`` records them from each attention module's second output."""
    try:
        from transformers.utils.output_capturing import _active_collector
    except ImportError:  # another version of the library: nothing to look at
        return False
    try:
        collected = _active_collector.get()
    except LookupError:
        return False
    return isinstance(collected, dict) and "attentions" in collected


def _repeat_heads(t: Tensor, heads: int) -> Tensor:
    """Grouped key/value heads (B, H_kv, N, D) repeated to the query heads (B, H, N, D)."""
    return t if t.shape[1] == heads else t.repeat_interleave(heads // t.shape[1], dim=1)


def _real_tokens(padding: Tensor | None, key: Tensor) -> Tensor | None:
    """The mask function's 2-D padding mask as the mechanism's (B, N_kv) bool mask; None when nothing is padded
    (looked at on the CPU only: on a GPU reading it would wait for the device, and an all-True mask computes the
    same, as :meth:`tokenmix.mixers.Mixer.forward` does)."""
    if padding is None:
        return None
    mask = padding[:, -key.shape[2]:].to(device=key.device, dtype=torch.bool)
    return None if mask.device.type == "cpu" and bool(mask.all()) else mask


def tokenmix_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                       scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[Tensor, Any]:
    """The ``"tokenmix"`` entry of ``transformers``' AttentionInterface: the module's :class:`HFMechanism`, or for a
    module left as it was, PyTorch's scaled dot-product attention with the padding and causal masks made explicit.
    (``kwargs`` are the model's per-call extras; those that change the pattern raise in the mechanism.)"""
    mechanism = getattr(module, "tokenmix", None)
    if isinstance(mechanism, HFMechanism):
        return mechanism(module, query, key, value, attention_mask, scaling, dropout, kwargs)
    if not getattr(module, "tokenmix_left", False):
        record = getattr(getattr(module, "config", None), "tokenmix", None)
        raise ValueError(f"this model's attention was replaced by tokenmix ({_mechanisms_of(record)}) when it was "
                         f"saved, and it was loaded without it ({type(module).__name__} has no mechanism): load it "
                         f"with tokenmix.load_converted(folder) or transformers' AutoModel... .from_pretrained(folder, "
                         f"trust_remote_code=True)")
    return _plain_attention(module, query, key, value, attention_mask, scaling, dropout, kwargs)


def _mechanisms_of(record: Any) -> str:
    steps = (record or {}).get("replacements", []) if isinstance(record, dict) else []
    return ", ".join(sorted({repr(step.get("mechanism")) for step in steps})) or "no record of which"


def _plain_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, padding: Tensor | None,
                     scaling: float | None, dropout: float, kwargs: dict[str, Any]) -> tuple[Tensor, Tensor | None]:
    key, value = (_repeat_heads(t, query.shape[1]) for t in (key, value))
    if padding is not None and padding.dim() == 4:  # the caller's own mask, bool (True = attend) or additive
        allowed = padding.to(query.device)
    else:
        allowed = _allowed(module, query, key, padding, kwargs)
    p = dropout if module.training else 0.0
    if not _attentions_requested():
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=allowed, scale=scaling, dropout_p=p)
        return out.transpose(1, 2).contiguous(), None
    scores = (query @ key.transpose(-2, -1)) * (query.shape[-1] ** -0.5 if scaling is None else scaling)
    scores = scores.masked_fill(~allowed, float("-inf")) if allowed.dtype == torch.bool else scores + allowed
    weights = scores.softmax(dim=-1)
    out = F.dropout(weights, p) @ value
    return out.transpose(1, 2).contiguous(), weights


def _allowed(module: nn.Module, query: Tensor, key: Tensor, padding: Tensor | None,
             kwargs: dict[str, Any]) -> Tensor:
    """The causal and padding masks, explicit, as a boolean (B or 1, 1, N_q, N_kv) mask (True = attend)."""
    q_len, kv_len = query.shape[2], key.shape[2]
    causal = kwargs.get("is_causal")
    causal = bool(getattr(module, "is_causal", False) if causal is None else causal) and q_len > 1
    allowed = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device)
    if causal:
        allowed = allowed.tril(kv_len - q_len)
    window = sliding_window(module, module.config) if hasattr(module, "config") else None
    if window is not None:  # Mistral's modules left as they are keep their window
        allowed = allowed.triu(kv_len - q_len - window + 1)
    allowed = allowed[None, None]
    if padding is not None:
        allowed = allowed & padding[:, None, None, -kv_len:].to(device=query.device, dtype=torch.bool)
    return allowed


def padding_mask(batch_size: int, q_length: int | None = None, kv_length: int | None = None, q_offset: int = 0,
                 kv_offset: int = 0, mask_function: Callable | None = None, attention_mask: Tensor | None = None,
                 **kwargs: Any) -> Tensor | None:
    """The ``"tokenmix"`` entry of ``transformers``' AttentionMaskInterface: the 2-D padding mask (True = real
    token; None when there is none), for causal, bidirectional or sliding-window causal attention (each module's
    window was checked when :func:`replace_hf_attention` ran); any other pattern (chunks, packed sequences, an
    overlay) raises. (``kwargs`` are the mask interface's extras for other backends: dtype, device, config, ...)"""
    from transformers.masking_utils import bidirectional_mask_function, causal_mask_function

    if mask_function not in (causal_mask_function, bidirectional_mask_function) and not _causal_window(mask_function):
        name = getattr(mask_function, "__qualname__", repr(mask_function))
        raise ValueError(f"replace_attention: the model asks for an attention pattern other than causal, "
                         f"sliding-window causal or bidirectional over the real tokens ({name}: chunks, packed "
                         f"sequences or an overlay), which a tokenmix mechanism cannot take")
    if attention_mask is None:
        return None
    return attention_mask[:, -kv_length:] if kv_length is not None else attention_mask


def _causal_window(mask_function: Callable | None, probe: int = 64) -> bool:
    """Whether ``mask_function`` (batch, head, query, key) -> allowed is causal attention within some window: looked
    at on a ``probe`` x ``probe`` grid of positions."""
    if mask_function is None:
        return False
    i = torch.arange(probe)
    try:
        allowed = torch.as_tensor(mask_function(0, 0, i[:, None], i[None, :])).expand(probe, probe)
    except Exception:  # a pattern that needs what the probe does not carry (packed sequences' ids, ...)
        return False
    lag = i[:, None] - i[None, :]
    window = int(allowed[-1].sum())
    return window > 0 and torch.equal(allowed, (lag >= 0) & (lag < window))


@functools.lru_cache(maxsize=None)
def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, tokenmix_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, padding_mask)


def replace_hf_attention(model: nn.Module, name: str, *, max_len: int | None, ignore_dropout: bool,
                         filter: Callable[[str], bool] | None, options: dict[str, Any]) -> int:
    """:func:`tokenmix.replace_attention` for a ``transformers`` model: give every self-attention module that calls
    the library's attention interface an :class:`HFMechanism` for ``name`` (causal where the module is), and switch
    the model to the ``"tokenmix"`` attention and mask functions; return how many modules were given one."""
    info = mixer_info(name)
    if info.spatial or not (info.qkv or info.hidden):
        raise ValueError(f"replace_attention: {name!r} is not a Q/K/V mechanism; in a Hugging Face model only the "
                         f"attention rule between the model's own queries, keys and values is replaced (mechanisms: "
                         f"{', '.join(_qkv_mechanisms())})")
    dropout = attention_dropout(model.config)
    if dropout > 0 and "attn_dropout" not in info.options and not ignore_dropout:
        raise ValueError(f"replace_attention: the model has attention dropout {dropout}, which {name!r} cannot apply "
                         f"(it has no attention weights to drop); pass ignore_dropout=True to replace it without")
    replaced: list[str] = []
    left: list[str] = []
    for path, module in list(model.named_modules()):
        if not calls_attention_interface(type(module)):
            continue
        cross = is_cross_attention(path, module)
        if filter is None and cross:
            left.append(f"{path} (cross-attention, left as it is unless filter= picks it)")
            continue
        if filter is not None and not filter(path):
            left.append(f"{path} (not accepted by filter=)")
            continue
        if cross:
            raise ValueError(f"replace_attention: {path} is cross-attention (its keys and values come from another "
                             f"sequence), and {name!r} mixes a sequence with itself; leave it out of filter=")
        problems = unsupported(model, module, module.config, info, options)
        if problems:
            raise ValueError(f"replace_attention: {path} ({type(module).__name__}) has " + "; and ".join(problems)
                             + f": {name!r} has no place for it (or leave the module out with filter=)")
        window = sliding_window(module, module.config)
        own = {"window": window, **options} if window is not None and "window" in info.options else options
        module.tokenmix = _mechanism(module, path, name, max_len or longest(module.config), ignore_dropout, own)
        replaced.append(path)
    if not replaced:
        raise ValueError(f"replace_attention: nothing replaced in the Hugging Face model ({type(model).__name__}): "
                         + (f"every attention module is left out: {', '.join(left)}" if left else
                            "none of its modules calls the library's attention interface (transformers 5 models do)"))
    _register()
    model.set_attn_implementation(ATTENTION_NAME)
    _record(model, name, replaced, max_len=max_len, ignore_dropout=ignore_dropout, options=options)
    return len(replaced)


def _record(model: nn.Module, name: str, replaced: list[str], **step: Any) -> None:
    """Write the replacement of the modules ``replaced`` into the model's config (so ``save_pretrained`` carries it;
    an earlier replacement keeps the modules this one did not take) and mark the attention modules left as they
    are."""
    for module in model.modules():
        if calls_attention_interface(type(module)) and not isinstance(getattr(module, "tokenmix", None), HFMechanism):
            module.tokenmix_left = True  # computes as before: see tokenmix_attention
    record = dict(getattr(model.config, RECORD_KEY, None) or {"replacements": []})
    earlier = [{**s, "replaced": [p for p in s["replaced"] if p not in replaced]} for s in record["replacements"]]
    record["replacements"] = [*(s for s in earlier if s["replaced"]), {"mechanism": name, **step,
                                                                        "replaced": replaced}]
    setattr(model.config, RECORD_KEY, record)


def _mechanism(module: nn.Module, path: str, name: str, max_len: int | None, ignore_dropout: bool,
               options: dict[str, Any]) -> HFMechanism:
    config = module.config
    heads = config.num_attention_heads
    head_dim = head_dim_of(module, config)
    try:  # the rule alone: the model's own projections stay in use
        mixer = create_heads(name, num_heads=heads, head_dim=head_dim, causal=bool(getattr(module, "is_causal", False)),
                             max_len=max_len, **options)
    except (ValueError, TypeError, NotImplementedError) as error:
        raise ValueError(f"replace_attention: {path}: {error}") from error
    weight = next((p for p in module.parameters()), None)
    if weight is not None:
        mixer.to(device=weight.device, dtype=weight.dtype)
    if mixer.info.hidden:  # its gates read the hidden states the module projects Q, K, V from
        module.register_forward_pre_hook(_keep_hidden_states, with_kwargs=True)
        module.register_forward_hook(_drop_hidden_states)
    return HFMechanism(mixer, path=path, head_dim=head_dim, ignore_dropout=ignore_dropout)


def _keep_hidden_states(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
    """Before the attention module runs: its input, the hidden states, for the gates of its mechanism."""
    mechanism = getattr(module, "tokenmix", None)
    if isinstance(mechanism, HFMechanism):
        mechanism.hidden = kwargs.get("hidden_states", args[0] if args else None)


def _drop_hidden_states(module: nn.Module, args: tuple, output: Any) -> None:
    mechanism = getattr(module, "tokenmix", None)
    if isinstance(mechanism, HFMechanism):
        mechanism.hidden = None


def _qkv_mechanisms() -> list[str]:
    """The registered mechanisms a host's own queries, keys and values can feed (``MixerInfo.qkv``)."""
    from ..registry import list_mixers

    return [name for name in list_mixers()
            if (mixer_info(name).qkv or mixer_info(name).hidden) and not mixer_info(name).spatial]
