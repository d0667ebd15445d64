"""tokenmix: drop-in replacements for quadratic self-attention (the core: mechanisms, ``replace_attention``,
``decoding``, ``linearize``). The lab that compares them (tasks, training, sweeps, the report, the ``tokenmix``
command) is a second installable, ``tokenmix-lab``, in the same namespace; importing this package loads none of it."""

from . import mixers, models  # noqa: F401  (mixers: registers the built-in mechanisms)
from .models.hf_auto import load_converted, save_converted
from .models.replace import decoding, replace_attention
from .registry import MixerInfo, create_heads, create_mixer, list_mixers, mixer_info, register_mixer
from .conversion import linearize

__version__ = "0.1.0"
__all__ = ["MixerInfo", "create_mixer", "create_heads", "list_mixers", "mixer_info", "register_mixer",
           "replace_attention", "linearize", "load_converted", "save_converted", "decoding",
           "__version__"]
