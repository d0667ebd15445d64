"""Turning a trained softmax model into one with a linear-time mechanism: :func:`linearize` (T2R, Hedgehog,
LoLCATs: swap the attention, transfer, fine-tune) and attention transfer itself (:mod:`.transfer`), which the
lab's warm starts reuse."""

from .linearize import METHODS, LayerGap, LinearizeReport, linearize
from .transfer import METHOD_LOSS, attention_transfer, only_feature_maps, swapped_mechanisms

__all__ = ["linearize", "LinearizeReport", "LayerGap", "METHODS", "METHOD_LOSS", "attention_transfer",
           "only_feature_maps", "swapped_mechanisms"]
