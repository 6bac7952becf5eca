"""Loads the optional C fast paths, goka._speedups (built from goka/_speedups.c and
goka/_window_update.c when a C compiler is available). The pure-Python code is the reference;
``GOKA_NO_SPEEDUPS=1`` uses it even where the C module is installed."""

from __future__ import annotations

import os
from types import ModuleType


def load() -> ModuleType | None:
    """Return goka._speedups, or None if it is not built or is switched off."""
    if os.environ.get("GOKA_NO_SPEEDUPS", "") not in ("", "0"):
        return None
    try:
        from goka import _speedups
    except ImportError:
        return None
    return _speedups


speedups = load()
