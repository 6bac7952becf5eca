"""Windows for users: the specs a window edge is declared with, and reading a window table.

Window specs (:class:`Tumbling`, :class:`Hopping`, :class:`Session`, :class:`Calendar`) and
their arithmetic live in :mod:`goka.time.specs`; this module is where users find them, with
:func:`read_windows`, :func:`stream_times` and :func:`window_key`, which read the tables a
windowed group writes (from a view or a view client).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import TypeVar

from goka.time.rows import decode_composite, ms15
from goka.time.specs import (
    Calendar,
    Hopping,
    Session,
    Tumbling,
    Window,
    WindowSpec,
    duration_ms,
    epoch_ms,
)

__all__ = [
    "Calendar",
    "Hopping",
    "Session",
    "Tumbling",
    "Window",
    "WindowSpec",
    "duration_ms",
    "read_windows",
    "stream_times",
    "window_key",
]

V = TypeVar("V")


def read_windows(
    scan: Callable[..., Iterable[tuple[str, V]]],
    key: str,
    *,
    since: int | dt.datetime | None = None,
    until: int | dt.datetime | None = None,
    latest: bool = False,
) -> list[tuple[Window, V]]:
    """Read ``key``'s windows from a window table: those starting in ``[since, until)``
    (ms or datetimes; None: unbounded), earliest first, or with ``latest`` only the last.

    ``scan`` is a view's ``items`` or a view client's scan of the table, e.g.
    ``read_windows(view.items, "user-1")`` or
    ``read_windows(functools.partial(client.scan, "g-window-hourly"), "user-1", latest=True)``.

    Raises:
        ValueError: a key of the table is not a window key.
    """
    base = f"{key}@"
    start = base + ms15(max(_as_ms(since), 0)) if since is not None else base
    stop = base + ms15(max(_as_ms(until), 0)) if until is not None else None
    found = scan(prefix=base, start=start, stop=stop, **({"reverse": True, "limit": 1}
                                                         if latest else {}))  # fmt: skip
    result = []
    for row, value in found:
        owner, first, end = decode_composite(row)
        if owner == key:  # a longer key that shares the prefix is another key's
            result.append((Window(first, end), value))
        if latest and result:
            break
    return result


def stream_times(scan: Callable[..., Iterable[tuple[str, object]]]) -> dict[int, int]:
    """Each partition's stream time (ms) from a scan of a group's ``<group>-timers`` table
    (``view.items`` of a view with :class:`~goka.codec.BytesCodec`, or a view client's scan):
    a window of a partition whose end plus grace is at most its stream time is closed, its
    value final."""
    found = {}
    for row, value in scan(prefix="s"):
        if len(row) == 5 and row[1:].isdigit():
            text = value.decode() if isinstance(value, bytes) else str(value)
            found[int(row[1:])] = int(text)
    return found


def window_key(key: str) -> tuple[str, Window] | None:
    """The record key and window of a window table's key ``<key>@<start>-<end>`` (None:
    ``key`` is not one)."""
    try:
        owner, start, end = decode_composite(key)
    except ValueError:
        return None
    if not (key[-31:-16].isdigit() and key[-15:].isdigit()):
        return None
    return owner, Window(start, end)


def _as_ms(moment: int | dt.datetime) -> int:
    return moment if isinstance(moment, int) else epoch_ms(moment)
