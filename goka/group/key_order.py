"""Which records of one partition may be in flight together, and when their effects go out.

Groundwork for a group's ``concurrency`` (several records of a partition in flight): the
records are admitted in offset order and numbered from 0. A record may start when every
earlier record of its key has finished (so it sees their state) and fewer than ``limit``
records are in flight; a record of a busy key holds back only the later records of that key.
A finished record is released (its effects may go out) once every record before it has
finished, so effects leave in offset order and the released count is the position a commit
may record: a crash replays only what was never released.

Example::

    order = KeyOrder(limit=2)
    a, b, c = order.admit("k1"), order.admit("k1"), order.admit("k2")
    order.start()        # [0, 2]: record 1 waits for record 0 (same key)
    order.finish(2)
    order.release()      # []: record 0 is still in flight
    order.finish(0)
    order.release()      # [0]: record 2 waits for record 1
    order.start()        # [1]

Not thread-safe: one owner per partition (the task that reads it), which runs callbacks
elsewhere and reports their ends here.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Hashable

from goka.errors import ConfigurationError

__all__ = ["KeyOrder"]


class KeyOrder:
    """The in-flight records of one partition (see the module docstring).

    Args:
        limit: the most records in flight at once (a group's ``concurrency``).

    Raises:
        ConfigurationError: ``limit`` is not a whole number of at least 1.
    """

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigurationError(f"concurrency must be a whole number of at least 1, "
                                     f"got {limit!r}")  # fmt: skip
        self.limit = limit
        self._next = 0  # the number of the next record admitted
        self._released = 0  # every record below it is released
        self._keys: dict[Hashable, deque[int]] = {}  # a key's unfinished records, oldest first
        self._key_of: dict[int, Hashable] = {}  # each unfinished record's key
        self._ready: list[int] = []  # a heap: records whose earlier ones of their key finished
        self._running: set[int] = set()
        self._finished: set[int] = set()  # finished, not yet released

    def admit(self, key: Hashable) -> int:
        """Admit the next record of the partition (offset order), of key ``key``; its number.

        Raises:
            TypeError: the key is not hashable (nothing admitted).
        """
        waiting = self._keys.get(key)  # (first: an unhashable key raises before a number
        number = self._next  # is taken, which would hold back every later release)
        if waiting is None:
            waiting = self._keys[key] = deque()
            heapq.heappush(self._ready, number)
        waiting.append(number)
        self._key_of[number] = key
        self._next += 1
        return number

    def start(self, before: int | None = None,
              held: Callable[[int], bool] | None = None) -> list[int]:  # fmt: skip
        """The records that may start now, oldest first (each is then in flight); only those
        numbered below ``before`` if given (a failure ends the call there), and none for which
        ``held(number)`` is true (it stays ready: a timer of its key fires before it)."""
        started, kept = [], []
        while (
            self._ready
            and len(self._running) < self.limit
            and (before is None or self._ready[0] < before)
        ):
            number = heapq.heappop(self._ready)
            if held is not None and held(number):
                kept.append(number)
                continue
            self._running.add(number)
            started.append(number)
        for number in kept:
            heapq.heappush(self._ready, number)
        return started

    def finish(self, number: int) -> None:
        """Record ``number`` finished (its callback returned or its failure was handled): the
        next record of its key may start.

        Raises:
            ValueError: the record is not in flight.
        """
        if number not in self._running:
            raise ValueError(f"record {number} is not in flight")
        self._running.remove(number)
        self._finished.add(number)
        key = self._key_of.pop(number)
        waiting = self._keys[key]
        waiting.popleft()  # (the oldest unfinished record of its key: the one in flight)
        if waiting:
            heapq.heappush(self._ready, waiting[0])
        else:
            del self._keys[key]

    def release(self) -> list[int]:
        """The finished records whose earlier records have all finished, in order: their
        effects may go out now (each record is released once)."""
        released = []
        while self._released in self._finished:
            self._finished.remove(self._released)
            released.append(self._released)
            self._released += 1
        return released

    @property
    def released(self) -> int:
        """How many records are released (the first ones admitted): the position to commit."""
        return self._released

    @property
    def held(self) -> int:
        """How many records finished but are not released (an earlier one has not)."""
        return len(self._finished)

    @property
    def in_flight(self) -> int:
        """How many records are running."""
        return len(self._running)

    @property
    def pending(self) -> int:
        """How many admitted records are not released yet (waiting, running or finished):
        the caller bounds it (stops admitting), as ``limit`` bounds only those running; a
        slow record holds back the release of every later one."""
        return self._next - self._released

    @property
    def idle(self) -> bool:
        """Is every admitted record released (nothing kept for any)?"""
        return not (self._keys or self._key_of or self._ready or self._running or self._finished)
