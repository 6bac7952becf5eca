"""Moved to :mod:`goka.time.open_windows` (this path warns, and goes away in goka-py 0.2)."""

from goka._moved import moved

__getattr__ = moved(
    __name__,
    {
        "WindowState": "goka.time.open_windows",
        "Windows": "goka.time.open_windows",
    },
)
