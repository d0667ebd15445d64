"""Models built around an interchangeable token mixer (the shared layers: :mod:`tokenmix.models.layers`)."""

import importlib
import pkgutil

__all__: list[str] = []

# Each model family lives in its own module here and lists its public names in __all__.
for _module in pkgutil.iter_modules(__path__):
    _loaded = importlib.import_module(f"{__name__}.{_module.name}")
    globals().update({name: getattr(_loaded, name) for name in _loaded.__all__})
    __all__ += list(_loaded.__all__)
