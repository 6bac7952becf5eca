"""The time state of one partition: stream time, timers and windows, and how they are stored.

A timed group (windows, timers or a TTL) keeps, beside its table, a *timers* section (changelog
``<group>-timers``) and a section per window table (changelog ``<group>-window-<name>``) in its
partition store. Their layouts, with times as 15 decimal digits (milliseconds since the epoch):

* timers section: ``k<name>\\0<key>`` -> domain (``s`` stream, ``w`` wall) + time + data: a
  timer (the changelog holds these and ``s``); ``q<domain><time><name>\\0<key>`` -> data: the
  due index, derived from the ``k`` rows (never in the changelog); ``s<partition, 4 digits>``
  -> the partition's stream time (so a view of ``<group>-timers`` tells the partitions apart);
  ``c<window>`` -> the close index key of the last window closed (windows close in time order).
* window section ``<name>``: ``w<key>@<start>-<end>`` -> the window's value (the changelog
  key is ``<key>@<start>-<end>``); ``c<end + grace><key>@<start>-<end>`` -> ``b""``: the close
  index, derived.

The index rows are derived by :func:`section_rows` wherever the changelog rows are written (a
commit, a replay), so a store rebuilt from its changelogs has the same indexes. During a batch
:class:`~goka.time.overlay.Overlay` holds what the batch changed over the committed section,
and :class:`~goka.time.timers.DueQueue` yields index rows in order from both.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any, NamedTuple

from goka.time.specs import Window

__all__ = [
    "Due",
    "Timer",
    "composite",
    "decode_composite",
    "headers",
    "ms15",
    "section_rows",
    "stream_time_key",
    "timer_key",
]

#: Digits of a time in keys: milliseconds since the epoch up to the year 33658.
DIGITS = 15
#: The largest time a key can hold.
MAX_TIME = 999_999_999_999_999  # DIGITS nines
STREAM_TIME = "s"


#: The header of a changelog row written for a record that moved its partition's stream time,
#: naming the stream time after it (see :meth:`goka.time.partition.PartitionTime.raised`).
STREAM_TIME_HEADER = "goka-stream-time"


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class Timer(NamedTuple):
    """A timer that fired: its name, when it was due (ms), its clock and its data."""

    name: str
    at_ms: int
    domain: str
    data: Any

    @property
    def at(self) -> dt.datetime:
        """When it was due, in UTC."""
        return _EPOCH + dt.timedelta(milliseconds=self.at_ms)


class Due(NamedTuple):
    """Something to do at ``at``: ``kind`` is ``close``, ``expire`` (a window: ``name`` is the
    window table, ``key`` its composite key) or ``timer`` (``name``, ``key``, ``data``)."""

    at: int
    order: int
    kind: str
    name: str
    key: str
    data: bytes
    row: str


def stream_time_key(partition: int) -> str:
    """The row of a partition's stream time."""
    return f"{STREAM_TIME}{partition:04d}"


#: Internal timer names start with this (user names may not).
INTERNAL = "\x01"
TTL_TIMER = INTERNAL + "ttl"


def ms15(time: int) -> str:
    """A time as it stands in keys."""
    return f"{time:015d}"  # DIGITS wide


def timer_key(name: str, key: str) -> str:
    """The ``k`` row of timer ``name`` of ``key``."""
    return f"k{name}\x00{key}"


def encode_timer(domain: str, at: int, data: bytes) -> bytes:
    """A timer's ``k`` value."""
    return domain[0].encode() + ms15(at).encode() + data


def decode_timer(value: bytes) -> tuple[str, int, bytes]:
    """``(domain, at, data)`` of a ``k`` value."""
    domain = "stream" if value[:1] == b"s" else "wall"
    return domain, int(value[1 : 1 + DIGITS]), value[1 + DIGITS :]


def due_key(domain: str, at: int, name: str, key: str) -> str:
    """The due index row of a timer."""
    return f"q{domain[0]}{ms15(at)}{name}\x00{key}"


def decode_due(row: str) -> tuple[int, str, str]:
    """``(at, name, key)`` of a due index row (:func:`due_key`'s)."""
    name, _, key = row[2 + DIGITS :].partition("\x00")
    return int(row[2 : 2 + DIGITS]), name, key


def composite(key: str, start: int, end: int) -> str:
    """A window's changelog key: the record key, ``@``, fixed-width start and end."""
    return f"{key}@{start:015d}-{end:015d}"  # ms15 inlined: a hot path


def decode_composite(text: str) -> tuple[str, int, int]:
    """``(key, start, end)`` of a window's changelog key.

    Raises:
        ValueError: ``text`` is not a window key.
    """
    tail = 2 * DIGITS + 2
    if len(text) < tail or text[-tail] != "@" or text[-DIGITS - 1] != "-":
        raise ValueError(f"{text!r} is not a window key (<key>@<start>-<end>)")
    return text[:-tail], int(text[-tail + 1 : -DIGITS - 1]), int(text[-DIGITS:])


def close_key(close_at: int, window: str) -> str:
    """A window's close index row (``window``: its composite key)."""
    return f"c{close_at:015d}{window}"  # ms15 inlined: a hot path


def section_rows(
    old: Callable[[str], bytes | None], key: str, value: bytes | None, *, grace: int | None
) -> dict[str, bytes | None]:
    """The rows of a section to write for changelog row ``key`` = ``value`` (None: deleted),
    given the committed rows (``old``): the row itself and the index rows derived from it.
    ``grace`` is the window's (None: the timers section)."""
    if grace is not None:  # a window: its value, and its close index when created or deleted
        window = f"w{key}"
        rows: dict[str, bytes | None] = {window: value}
        index = window_index(key, value, grace, existed=old(window) is not None)
        if index is not None:
            rows[index[0]] = index[1]
        return rows
    rows = {key: value}
    if key.startswith("k"):
        name, _, owner = key[1:].partition("\x00")
        previous = old(key)
        if previous is not None:
            domain, at, _ = decode_timer(previous)
            rows[due_key(domain, at, name, owner)] = None
        if value is not None:
            domain, at, data = decode_timer(value)
            rows[due_key(domain, at, name, owner)] = data
    return rows


def window_index(
    key: str, value: bytes | None, grace: int, *, existed: bool
) -> tuple[str, bytes | None] | None:
    """The close index row to write with window ``key`` = ``value`` (None: deleted) and how,
    given whether the window ``existed``; None if the index does not change (an update)."""
    if value is not None and existed:
        return None
    end = decode_composite(key)[2]
    return close_key(min(end + grace, MAX_TIME), key), None if value is None else b""


#: Headers of a window's results in its output topic.
WINDOW_NAME, WINDOW_START, WINDOW_END = "goka-window", "goka-window-start", "goka-window-end"


def headers(name: str, window: Window) -> list[tuple[str, bytes]]:
    """The headers naming a window, on its results."""
    return [(WINDOW_NAME, name.encode()), (WINDOW_START, str(window.start).encode()),
            (WINDOW_END, str(window.end).encode())]  # fmt: skip
