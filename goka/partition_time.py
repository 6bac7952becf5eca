"""Moved to :mod:`goka.time.rows` (this path warns, and goes away in goka-py 0.2)."""

from goka._moved import moved

__getattr__ = moved(
    __name__,
    {
        "Due": "goka.time.rows",
        "Timer": "goka.time.rows",
    },
)
