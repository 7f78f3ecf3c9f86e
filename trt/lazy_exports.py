"""A package's public names, imported from their modules when first used (PEP 562).

A package whose ``__init__`` imported its whole face made every light module inside it heavy:
``trt.server.core.errors`` brought in the server, protobuf and numpy with it, a third of a second of
``trt serve --help``. With ``__getattr__ = lazy_exports(...)`` the face stays as it was, for code and
for type checkers (which read the ``TYPE_CHECKING`` imports beside it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """``package``'s module ``__getattr__``: each name of ``homes`` imported from the module named there
    when first asked for, then kept in the package as if imported there."""

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(importlib.import_module(package), name, value)
        return value

    return __getattr__
