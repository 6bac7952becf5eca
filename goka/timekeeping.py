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
:class:`Overlay` holds what the batch changed over the committed section, and :class:`DueQueue`
yields index rows in order from both.
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from goka.graph import GroupGraph

__all__ = [
    "Due",
    "DueQueue",
    "Overlay",
    "Section",
    "Timer",
    "composite",
    "decode_composite",
    "ms15",
    "section_graces",
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
#: naming the stream time after it (see :meth:`goka.partition_time.PartitionTime.raised`).
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


class Section(Protocol):
    """What the time state reads of a committed section (a :class:`~goka.storage.Storage`
    is one)."""

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None."""
        ...

    def items(
        self, *, start: str | None = None, stop: str | None = None, prefix: str | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[str, bytes]]:  # fmt: skip
        """``(key, value)`` in key order."""
        ...


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


def section_graces(graph: GroupGraph) -> dict[str, int | None]:
    """The time sections of ``graph`` by changelog topic, with the grace their close index
    adds to a window's end (None: the timers section)."""
    graces: dict[str, int | None] = {graph.group.timers: None}
    for edge in graph.windows.values():
        graces[edge.topic] = edge.index_grace
    return graces


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


#: What undoes a change: ``(mapping, key, previous value or ABSENT)``.
Journal = list[tuple[dict[str, Any], str, Any]]
ABSENT: Any = object()


def rollback(journal: Journal) -> None:
    """Undo the changes ``journal`` recorded, newest first; empty it."""
    for mapping, key, previous in reversed(journal):
        if previous is ABSENT:
            mapping.pop(key, None)
        else:
            mapping[key] = previous
    journal.clear()


class Overlay:
    """A section as a batch sees it: the committed rows with the batch's changes on top.
    Changes are recorded in ``journal`` (if given), to be undone."""

    def __init__(self, section: Section, journal: Journal | None = None) -> None:
        self.section = section
        self.changes: dict[str, bytes | None] = {}
        self._journal = journal
        # what a batch reads below its changes does not change during the batch; over a
        # PendingView, its layers are read directly (a hot path: a read per window update)
        self._pending: dict[str, bytes | None]
        self._committed: dict[str, bytes | None]
        self._read: Callable[[str], bytes | None]
        layers = getattr(section, "layers", None)  # a PendingView (goka.pending_rows)
        if layers is not None:
            self._pending, self._committed, self._read = layers()
        else:
            self._pending, self._committed, self._read = {}, {}, section.get

    def get(self, key: str) -> bytes | None:
        """The row's value as of now in the batch."""
        changes = self.changes
        if key in changes:
            return changes[key]
        pending = self._pending
        if key in pending:
            return pending[key]
        committed = self._committed
        if key in committed:
            return committed[key]
        value = committed[key] = self._read(key)
        return value

    def put(self, key: str, value: bytes | None) -> None:
        """Change a row (None: delete it)."""
        if self._journal is not None:
            self._journal.append((self.changes, key, self.changes.get(key, ABSENT)))
        self.changes[key] = value

    def items(self, prefix: str) -> list[tuple[str, bytes]]:
        """Rows under ``prefix`` as of now, in key order."""
        found = dict(self.section.items(prefix=prefix))
        for key, value in self.changes.items():
            if key.startswith(prefix):
                if value is None:
                    found.pop(key, None)
                else:
                    found[key] = value
        return sorted(found.items())


class DueQueue:
    """Index rows under ``prefix`` in key (time) order, committed and added in the batch.

    The committed rows are read once, in order, with one iterator; rows the batch removes are
    skipped, rows it adds come from a heap.
    """

    def __init__(
        self, section: Section, prefix: str, *, after: str | None = None,
        journal: Journal | None = None,
    ) -> None:  # fmt: skip
        start = None if after is None else after + "\x00"
        self._journal = journal
        self._rows = section.items(prefix=prefix, start=start)
        self._head: tuple[str, bytes] | None = next(self._rows, None)
        self._added: list[tuple[str, bytes]] = []
        self._live: dict[str, bytes | None] = {}

    def add(self, key: str, value: bytes) -> None:
        """A row the batch adds."""
        self._note(key)
        self._live[key] = value
        heapq.heappush(self._added, (key, value))

    def remove(self, key: str) -> None:
        """A row the batch removes."""
        head = self._head
        if head is not None and head[0] == key and self._journal is None and key not in self._live:
            self._head = next(self._rows, None)  # the committed first row (what fires): let go
            return
        self._note(key)
        self._live[key] = None

    def _note(self, key: str) -> None:
        if self._journal is not None:
            self._journal.append((self._live, key, self._live.get(key, ABSENT)))

    def first(self) -> tuple[str, bytes] | None:
        """The first row, or None."""
        head = self._head
        while head is not None and self._live.get(head[0], head[1]) is None:
            head = self._head = next(self._rows, None)
        added = self._added
        while added and self._live.get(added[0][0]) != added[0][1]:
            heapq.heappop(added)
        if head is not None:
            head = (head[0], self._live.get(head[0], head[1]) or head[1])
            if not added or head[0] <= added[0][0]:
                return head
        return added[0] if added else None
