"""Package attributes imported where first used (PEP 562), so that importing one module of a
package does not import all the others.

Why: every Python process Spark starts for a processor imports ``goka.spark.source`` (to
unpickle the data source), and each paid ~0.28 s importing what ``goka`` and ``goka.spark``
re-export (the emitter, metrics, the processor driver) on the way to the first epoch.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``, whose names in ``exports``
    (module -> names) are imported from their module when first asked for, then kept.

    Raises (from ``__getattr__``):
        AttributeError: a name the package does not export.
    """
    where = {name: module for module, names in exports.items() for name in names}
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
