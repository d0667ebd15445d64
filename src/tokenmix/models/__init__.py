"""Models built around an interchangeable token mixer (see :mod:`tokenmix.models.core`)."""

import importlib
import pkgutil

from .core import Block, CausalLM, FeedForward, RelationNet, SequenceClassifier, sinusoidal_positions

__all__ = ["sinusoidal_positions", "FeedForward", "Block", "SequenceClassifier", "CausalLM", "RelationNet"]

# Further model families live in their own modules here and list their public names in __all__.
for _module in pkgutil.iter_modules(__path__):
    if _module.name != "core":
        _loaded = importlib.import_module(f"{__name__}.{_module.name}")
        globals().update({name: getattr(_loaded, name) for name in _loaded.__all__})
        __all__ += list(_loaded.__all__)
