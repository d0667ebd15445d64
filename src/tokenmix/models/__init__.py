"""Models built around an interchangeable token mixer (the shared layers: :mod:`tokenmix.models.layers`), and
the swap of attention in models of your own or Hugging Face's (:mod:`tokenmix.models.replace`,
:mod:`tokenmix.models.hf`)."""

from .classifier import SequenceClassifier
from .contextualizer import ContextualizerClassifier
from .dual import DualEncoderClassifier
from .hf import HFMechanism
from .hf_auto import load_converted, save_converted
from .layers import Block, FeedForward, sinusoidal_positions
from .lm import CausalLM
from .patterns import LayerMixer, layer_mixers, parse_layer_mixer
from .relationnet import RelationNet
from .replace import MixerAttention, decoding, replace_attention
from .vit import ViT

__all__ = ["SequenceClassifier", "DualEncoderClassifier", "CausalLM", "ViT", "RelationNet", "ContextualizerClassifier",
           "Block", "FeedForward", "sinusoidal_positions", "LayerMixer", "layer_mixers", "parse_layer_mixer",
           "MixerAttention", "replace_attention", "decoding", "HFMechanism", "save_converted", "load_converted"]
