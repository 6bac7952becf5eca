"""Moved to :mod:`goka.group.context` (this path warns, and goes away in goka-py 0.2)."""

from goka._moved import moved

__getattr__ = moved(
    __name__,
    {
        "Context": "goka.group.context",
        "Headers": "goka.group.effects",
    },
)
