"""Timers of a partition: setting and cancelling them, and the queues of what is due.

A timer is a row of the timers section (``k<name>\\0<key>``, :mod:`goka.time.rows`) with a
derived due index row; :class:`DueQueue` yields a section's index rows in time order, the
committed ones and those the batch added. What is due is chosen by
:meth:`goka.time.partition.PartitionTime.next_due` and fired by the engine
(:mod:`goka.group.firing`).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from goka.errors import ContextError
from goka.group.effects import TIMER, Effect
from goka.time.overlay import ABSENT, Journal, Overlay, Section
from goka.time.rows import INTERNAL, MAX_TIME, decode_timer, due_key, encode_timer, timer_key

if TYPE_CHECKING:
    from goka.group.graph import GroupGraph

__all__ = ["DueQueue", "TimerMethods"]


class TimerMethods:
    """Setting, reading and cancelling timers (mixed into
    :class:`~goka.time.partition.PartitionTime`, which holds the attributes)."""

    graph: GroupGraph
    timers_topic: str
    timer_rows: Overlay
    effects: list[Effect]
    _queues: dict[str, DueQueue]
    _encode_data: Callable[[Any], bytes] | None
    _decode_data: Callable[[bytes], Any] | None
    _floor_stream: int
    _floor_wall: int

    def schedule(self, key: str, name: str, at: int, domain: str, data: Any, source: Any) -> None:
        """Set timer ``name`` of ``key`` (replacing one of that name)."""
        encoded = self.timer_data(name, domain, data)
        self.cancel(key, name, source, quiet=True)
        value = encode_timer(domain, min(max(at, 0), MAX_TIME), encoded)
        self._row(timer_key(name, key), value, source)
        row = due_key(domain, min(max(at, 0), MAX_TIME), name, key)
        self._queues[domain].add(row, encoded)
        self._lower(domain, at)

    def timer_data(self, name: str, domain: str, data: Any) -> bytes:
        """The encoded ``data`` of a timer ``name`` of ``domain`` to be set.

        Raises:
            ContextError: the group has no timers edge, or allows stream timers only.
        """
        if self._encode_data is None and not name.startswith(INTERNAL):
            raise ContextError(f"group {self.graph.group!r} has no timers edge; declare "
                               "timers(on_timer)")  # fmt: skip
        if domain == "wall" and not self.graph.ticking:
            raise ContextError(f"group {self.graph.group!r} allows stream-time timers only "
                               "(timers(..., wall=False))")  # fmt: skip
        return b"" if data is None or self._encode_data is None else self._encode_data(data)

    def cancel(self, key: str, name: str, source: Any, *, quiet: bool = False) -> bool:
        """Delete timer ``name`` of ``key``; return whether there was one."""
        row = timer_key(name, key)
        found = self.timer_rows.get(row)
        if found is None:
            return False
        domain, at, _ = decode_timer(found)
        self._queues[domain].remove(due_key(domain, at, name, key))
        if not quiet:
            self._row(row, None, source)
        return True

    def timer(self, key: str, name: str) -> tuple[str, int] | None:
        """``(domain, at)`` of timer ``name`` of ``key``, or None."""
        found = self.timer_rows.get(timer_key(name, key))
        return None if found is None else decode_timer(found)[:2]

    def decode_data(self, data: bytes) -> Any:
        """A fired timer's data, decoded."""
        return None if not data or self._decode_data is None else self._decode_data(data)

    def _lower(self, domain: str, at: int) -> None:
        """A row due at ``at`` was queued: the bounds of what is queued may drop."""
        if domain == "wall":
            self._floor_wall = min(self._floor_wall, at)
        else:
            self._floor_stream = min(self._floor_stream, at)

    def _row(self, key: str, value: bytes | None, source: Any) -> None:
        self.timer_rows.put(key, value)
        self.effects.append((TIMER, self.timers_topic, key, value, None, source))


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
        self._section, self._prefix = section, prefix
        self._rows = section.items(prefix=prefix, start=start)
        self._head: tuple[str, bytes] | None = next(self._rows, None)
        self._added: list[tuple[str, bytes]] = []
        self._live: dict[str, bytes | None] = {}
        #: told of each row added (True) or removed (False), if set: ``watch(row, added)``
        #: (not of a rollback's: :attr:`goka.time.partition.PartitionTime.rollbacks` counts them)
        self.watch: Callable[[str, bool], None] | None = None

    def add(self, key: str, value: bytes) -> None:
        """A row the batch adds."""
        self._note(key)
        self._live[key] = value
        heapq.heappush(self._added, (key, value))
        if self.watch is not None:
            self.watch(key, True)

    def remove(self, key: str) -> None:
        """A row the batch removes."""
        if self.watch is not None:
            self.watch(key, False)
        head = self._head
        if head is not None and head[0] == key and self._journal is None and key not in self._live:
            self._head = next(self._rows, None)  # the committed first row (what fires): let go
            return
        self._note(key)
        self._live[key] = None

    def _note(self, key: str) -> None:
        if self._journal is not None:
            self._journal.append((self._live, key, self._live.get(key, ABSENT)))

    def rows_below(self, stop: str, most: int) -> tuple[list[str], str | None]:
        """The first ``most`` rows queued now that sort below ``stop``, in order, and the
        row after them (None: no more below ``stop``); the queue is left as it is."""
        live, head = self._live, self._head
        committed: Iterator[tuple[str, bytes]] = iter(())
        if head is not None:  # (the committed rows from the first not yet let go)
            committed = itertools.chain(
                [head], self._section.items(prefix=self._prefix, start=head[0] + "\x00")
            )
        live_committed = (r for r, v in committed if live.get(r, v) is not None)
        added = heapq.nsmallest(most + 1, {r for r, _ in self._added
                                           if r < stop and live.get(r) is not None})  # fmt: skip
        rows: list[str] = []
        for row in heapq.merge(live_committed, added):
            if row >= stop:
                return rows, None
            if rows and rows[-1] == row:  # (committed, and added again)
                continue
            if len(rows) == most:
                return rows, row
            rows.append(row)
        return rows, None

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
