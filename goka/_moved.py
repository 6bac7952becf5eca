"""Modules that moved: their old import paths keep working for a while, with a warning.

Each old module is a few lines that hand :func:`moved` its new place; a name imported from it
is looked up there, warning (``DeprecationWarning``) that the path is going away.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable

__all__ = ["moved"]


def moved(old: str, names: dict[str, str]) -> Callable[[str], object]:
    """The ``__getattr__`` of module ``old``, whose ``names`` now live in the modules given."""

    def __getattr__(name: str) -> object:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(f"{old}.{name} moved to {where}.{name}; import it from there or from "
                      f"goka ({old} goes away in goka-py 0.2)", DeprecationWarning,
                      stacklevel=2)  # fmt: skip
        return getattr(importlib.import_module(where), name)

    return __getattr__
