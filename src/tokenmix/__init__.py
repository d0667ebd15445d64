"""tokenmix: drop-in replacements for quadratic self-attention, and tools to compare them."""

from . import mixers, models  # noqa: F401  (mixers: registers the built-in mechanisms)
from .models.hf import load_converted
from .models.replace import decoding, replace_attention
from .registry import MixerInfo, create_mixer, list_mixers, mixer_info, register_mixer
from .conversion import linearize

__version__ = "0.1.0"
__all__ = ["MixerInfo", "create_mixer", "list_mixers", "mixer_info", "register_mixer", "replace_attention",
           "linearize", "load_converted", "decoding",
           "__version__"]
