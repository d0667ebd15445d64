"""What a Hugging Face attention module is and does that a tokenmix mechanism must know before it takes its place
(:func:`tokenmix.models.hf.replace_hf_attention` reads them): whether it calls the library's attention interface,
whether it is cross-attention, its head width, window, dropout and longest sequence, and every setting of it a
mechanism has no place for (:func:`unsupported`)."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from torch import nn

__all__ = ["calls_attention_interface", "is_cross_attention", "sliding_window", "unsupported", "head_dim_of",
           "longest", "attention_dropout", "DROPOUT_KEYS", "CROSS_NAMES"]

DROPOUT_KEYS = ("attention_probs_dropout_prob", "attn_pdrop", "attention_dropout")


@functools.lru_cache(maxsize=None)
def calls_attention_interface(cls: type) -> bool:
    try:
        return "ALL_ATTENTION_FUNCTIONS" in inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False


CROSS_NAMES = ("encoderdecattention", "encoder_attn", "crossattention", "cross_attn", "cross_attention")


def is_cross_attention(path: str, module: nn.Module) -> bool:
    """Cross-attention by what the architectures say of it: the flag or class name some give, the attribute name
    others use (T5's ``EncDecAttention``, BART's ``encoder_attn``, BERT's ``crossattention``), or a module of a
    decoder that is not causal (T5, BART, mBART, Marian, Whisper: their cross-attention shares the class)."""
    if bool(getattr(module, "is_cross_attention", False)) or "CrossAttention" in type(module).__name__:
        return True
    if any(part.lower() in CROSS_NAMES for part in path.split(".")):
        return True
    return bool(getattr(module, "is_decoder", False)) and not bool(getattr(module, "is_causal", True))


def sliding_window(module: nn.Module, config: Any) -> int | None:
    """The module's sliding window, where it is shorter than the longest sequence the model takes (else None)."""
    window = getattr(module, "sliding_window") if hasattr(module, "sliding_window") else (
        getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None)
    limit = longest(config)
    return window if isinstance(window, int) and (limit is None or window < limit) else None


def unsupported(model: nn.Module, module: nn.Module, config: Any, info: Any, options: dict[str, Any]) -> list[str]:
    """What the module does that the mechanism has no place for, each with the setting to change (empty: none)."""
    problems = []
    window = sliding_window(module, config)
    if window is not None and "window" in info.options:
        if options.get("window", window) > window:
            problems.append(f"a sliding window of {window} tokens, narrower than window={options['window']}")
    elif window is not None:
        problems.append(f"a sliding window of {window} tokens (sliding_window={window}; build the model with "
                        f"sliding_window=None for full attention, or use 'window_linear', which keeps the window "
                        f"exact and adds linear attention beyond it)")
    for name in ("attn_logit_softcapping", "softcap"):
        cap = getattr(module, name, None) if hasattr(module, name) else getattr(config, name, None)
        if cap is not None:
            problems.append(f"its scores soft-capped at {cap} ({name}={cap}; set it to None)")
    if any(name in ("sinks", "s_aux") for name, _ in module.named_parameters(recurse=False)):
        problems.append("attention sinks (a learned logit per head beside the keys)")
    if hasattr(module, "has_relative_attention_bias"):
        problems.append(f"a relative position bias added to its scores (relative_attention_num_buckets="
                        f"{getattr(config, 'relative_attention_num_buckets', '?')}), the model's only positions")
    elif getattr(config, "alibi", False) or getattr(config, "position_embedding_type", None) not in (
            "absolute", "rotary", None):
        problems.append("a position bias added to its scores (ALiBi or relative position embeddings), the model's "
                        "own positions")
    if getattr(config, "output_attentions", False) and not info.weights:
        problems.append("output_attentions=True in its config, and the mechanism forms no attention weights (set "
                        "config.output_attentions=False)")
    # the mechanism's own rotation: rotary=True, or retention's xpos (on by default, as in RetNet)
    rotation = next((o for o in ("rotary", "xpos") if options.get(o, o == "xpos" and o in info.options)), None)
    rotary = [path for path, m in model.named_modules() if "rotary" in type(m).__name__.lower()] if rotation else []
    if rotary:  # looked for only when the mechanism rotates (unsupported runs once per attention module)
        problems.append(f"its queries and keys rotated by the model ({rotary[0]}), and {rotation}=True would rotate "
                        f"them a second time (pass {rotation}=False)")
    return problems


def head_dim_of(module: nn.Module, config: Any) -> int:
    for name in ("head_dim", "attention_head_size"):
        value = getattr(module, name, None)
        if isinstance(value, int):
            return value
    return config.hidden_size // config.num_attention_heads


def longest(config: Any) -> int | None:
    """The longest sequence the model takes: its position table, or a vision model's patches and class token."""
    if isinstance(getattr(config, "max_position_embeddings", None), int):
        return config.max_position_embeddings
    image, patch = getattr(config, "image_size", None), getattr(config, "patch_size", None)
    if isinstance(image, int) and isinstance(patch, int):
        return (image // patch) ** 2 + 1
    return None


def attention_dropout(config: Any) -> float:
    return max(float(getattr(config, key, 0.0) or 0.0) for key in DROPOUT_KEYS)
