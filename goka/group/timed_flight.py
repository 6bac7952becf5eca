"""Records in flight in a group that keeps time (windows, timers, a TTL) with ``concurrency``
above 1: what :mod:`goka.group.concurrent` adds for it.

Exactly what one record at a time gives, per key (:mod:`goka.time.partition`'s order):

* **Stream time** is worked out when records are admitted, in offset order, from their event
  times (decoded and extracted then): each record runs at the stream time it would see one at
  a time, so lateness and ``ctx.stream_time`` are the same. (A record that fails under
  ``skip``/``dead-letter`` moves the stream time too, one at a time as well: its event time
  was read.)
* **Writes to time** (window rows, timers, TTLs) are kept per record and replayed on the
  partition's time when it is released, in offset order, with its stream time
  (:class:`~goka.time.record_time.RecordTime`); then what is due fires, as after that record
  one at a time.
* **A timer changes its key's state**, so the records of its key after the place where it
  fires start only once every record up to that place is released and the timer fired: a
  stream timer or TTL due by the stream time of a record, a wall timer set by a record and
  due by the call's one reading of the wall clock (those due later fire in a later call).
  Records of other keys go on past it: a timer reads and changes its own key's state, timers
  and windows only, and what it emits is released in offset order. Every timer that may fire
  there is known when such a record would start: queued ones (the partition's queue tells
  the call of each one added or removed), and those that earlier records of its key set
  (they finished before it may start). A tick, and a queued wall timer due already, hold
  back every key: they fire after the next record released.
* **A fire budget that runs out** ends the call after the record that made it run out: the
  records after it that ran already release nothing (what they changed of the state is in
  the call's cache, which goes with the call), and the caller gives them again in its next
  call, as one at a time does.
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from goka.time.record_time import Pending, RecordTime
from goka.time.rows import MAX_TIME, decode_due, ms15

if TYPE_CHECKING:
    from goka.group.effects import BatchResult, Message
    from goka.time.partition import PartitionTime

__all__ = ["Held", "TimedFlight"]

#: ``held(number)``: must record ``number`` wait for a timer of its key?
Held = Callable[[int], bool]


class TimedFlight:
    """The time of one call's records in flight (see the module docstring).

    Args:
        time: the partition's time.
        fire: the engine's ``fire_due(trigger, result, wall=)`` (False: the fire budget ran out).
        failed: the engine's ``failed(exc, message, mark, result, context=)``.
        messages: the call's records (in offset order).
        decoded: ``decoded(message)``: its value and event time (raises what decoding or
            extracting raises).
        ticks: the group's ticks topic (its records fire the wall timers), or None.
        result: the call's result (its effects are the partition time's).
    """

    def __init__(
        self, time: PartitionTime, fire: Callable[..., bool], failed: Callable[..., None],
        messages: Sequence[Message], decoded: Callable[[Message], tuple[Any, int]],
        ticks: str | None, result: BatchResult,
    ) -> None:  # fmt: skip
        self.time, self.fire, self.failed = time, fire, failed
        self.messages, self.result = messages, result
        self.pending = Pending()
        #: the wall clock's one reading for the call: the wall timers due by it fire after the
        #: record released when they are known (a place, as a stream timer's), later ones in
        #: the next call
        self.now = time.wall_now = time.clock()  # (the engine sets it back after the call)
        #: each record's value and event time, or what decoding or extracting raised
        self.decoded: list[tuple[Any, int] | Exception] = []
        self.stream: list[int] = []  # each record's stream time (with its own event time)
        self.ticks = [n for n, m in enumerate(messages) if m[0] == ticks]  # (in order)
        self.is_tick = set(self.ticks)
        stream = time.stream_time
        for message in messages:
            if message[0] == ticks:
                self.decoded.append((None, -1))
            else:
                try:
                    value, at = decoded(message)
                except Exception as exc:  # (the record's failure, when it runs)
                    self.decoded.append(exc)
                else:
                    self.decoded.append((value, at))
                    stream = max(stream, at)
            self.stream.append(stream)
        #: the queued stream timers due by the call's last stream time, by key: ``{row: due}``
        #: (at most as many as may fire before the fire budget runs out; one past them, the
        #: records after its place wait whatever their key: the call ends there or before)
        self._due: dict[str, dict[str, int]] = {}
        last = min(stream, MAX_TIME)  # (index rows of later ones sort from this on)
        self._stop = "qt" if last >= MAX_TIME else f"qs{ms15(max(last, 0) + 1)}"
        self._below, self._beyond = self._stop, MAX_TIME + 1
        self._queue = time.due_queue("stream")
        self._rollbacks = time.rollbacks
        if messages:  # (a call that only fires a backlog starts none)
            self._scan()
            self._queue.watch = self._watched

    def _scan(self) -> None:
        """Read the queued stream timers due in the call afresh: as many as the fire budget
        left may fire, and the row after them (:attr:`_beyond`: when it is due; the records
        after its place wait whatever their key, until it is released: then they are read
        again, since a timer cancelled leaves room in the budget for one more)."""
        self._rollbacks = self.time.rollbacks
        self._due.clear()
        rows, beyond = self._queue.rows_below(self._stop, max(self.time.left, 0))
        self._below, self._beyond = self._stop, MAX_TIME + 1
        if beyond is not None:
            self._below, self._beyond = beyond, decode_due(beyond)[0]
        for row in rows:
            self._watched(row, True)

    def _watched(self, row: str, added: bool) -> None:
        """The stream queue added or removed ``row``."""
        if row >= self._below:
            return
        at, _, key = decode_due(row)
        if added:
            self._due.setdefault(key, {})[row] = at
        else:
            rows = self._due.get(key)
            if rows is not None and rows.pop(row, None) is not None and not rows:
                del self._due[key]

    def close(self) -> None:
        """The call ended: the queue tells this flight no more."""
        if self._queue.watch == self._watched:
            self._queue.watch = None

    def value(self, number: int) -> tuple[Any, int]:
        """Record ``number``'s value and event time.

        Raises:
            Exception: what decoding it or extracting its event time raised.
        """
        found = self.decoded[number]
        if isinstance(found, Exception):
            raise found
        return found

    def record_time(self, number: int) -> RecordTime:
        """A time of record ``number``'s own (for its context)."""
        return RecordTime(self.time, self.stream[number], self.pending)

    def finished(self, number: int, time: RecordTime) -> None:
        """Record ``number`` finished (did not fail): its writes are what its key's next
        records read."""
        self.pending.add(number, time)

    def places(self, released: int, keys: Sequence[Any]) -> tuple[int | None, Held | None]:
        """Where records must wait, given every record below ``released`` is released:
        the first record that may not start yet whatever its key (None: any may), the one
        after a tick, a queued wall timer due already or the first queued stream timer not
        read; and ``held(number)`` (None: none is), whether record ``number`` (of key
        ``keys[number]``) must wait for the first place at or after ``released`` where a
        timer of its key may fire."""
        time, stream = self.time, self.stream
        if time.rollbacks != self._rollbacks or (  # (undone: the watcher was not told)
            self._beyond <= MAX_TIME
            and bisect_left(stream, self._beyond) < released
            and time.left > 0  # (none left: the call ends, no record after starts)
        ):  # (or past the rows read: more may fire)
            self._scan()
        tick = bisect_left(self.ticks, released)  # (the first tick not released)
        places = self.ticks[tick : tick + 1]
        if time.first_timer_due("wall") <= self.now:  # (fires after the next record released)
            places.append(released)
        if self._beyond <= MAX_TIME:
            places.append(bisect_left(stream, self._beyond))
        places = [p for p in places if p >= released]
        first = min(places) + 1 if places else None
        pending: dict[str, int] = {}  # the places of the timers set by records in flight
        for (key, _), (timer, number) in self.pending.timers.items():
            if timer is None:
                continue
            domain, at = timer
            if domain == "stream":
                place = max(bisect_left(stream, at), number)
            elif at <= self.now:
                place = number
            else:
                continue
            if place >= released and place < pending.get(key, place + 1):
                pending[key] = place
        due = self._due
        if not due and not pending:
            return first, None
        known: dict[Any, int] = {}

        def held(number: int) -> bool:
            key = keys[number]
            place = known.get(key)
            if place is None:
                place = pending.get(key, sys.maxsize)
                rows = due.get(key)
                if rows:
                    queued = bisect_left(stream, min(rows.values()))
                    if released <= queued < place:
                        place = queued
                known[key] = place
            return place < number

        return first, held

    def release(self, records: list[tuple[int, Any, Exception | None]]) -> int | None:
        """Release ``records`` (number, context, failure), in offset order: replay each one's
        writes at its stream time (or handle its failure) and fire what is due after it, as
        one at a time would (on a thread of its own: a timers callback may be awaited on the
        callbacks' loop). The record after which the call must end (the fire budget ran
        out), or None.

        Raises:
            ProcessingError: a failure under the ``fail`` policy.
        """
        time, effects = self.time, self.time.effects
        for number, ctx, failure in records:
            message = self.messages[number]
            if number in self.is_tick:
                self.result.processed -= 1
                if not self.fire(message, self.result):
                    return number
                continue
            time.mark()
            before, mark = time.stream_time, len(effects)
            time.stream_time = self.stream[number]  # (a skipped record's moves it too)
            if failure is None:
                ctx._time.replay()
                self.pending.drop(number, ctx._time)
                effects.extend(ctx._effects)
            else:
                self.failed(failure, message, mark, self.result, context=ctx)
            done = time.quiet() or self.fire(message, self.result)
            if time.stream_time > before:
                time.raised(message, mark)
            if not done:
                return number
        return None
