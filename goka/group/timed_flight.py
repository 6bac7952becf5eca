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
* **A timer changes its key's state**, so the records after the place where a timer fires
  start only once every record up to that place is released and the timer fired: a stream
  timer or TTL due by the stream time of a record, a wall timer due by the call's one reading
  of the wall clock (those due later fire in a later call), a tick. Every timer that may fire
  there is known when such a record would start: queued ones, and those that earlier records
  of its key set (they finished before it may start).
* **A fire budget that runs out** ends the call after the record that made it run out: the
  records after it that ran already release nothing (what they changed of the state is in
  the call's cache, which goes with the call), and the caller gives them again in its next
  call, as one at a time does.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from goka.time.record_time import Pending, RecordTime

if TYPE_CHECKING:
    from goka.group.effects import BatchResult, Message
    from goka.time.partition import PartitionTime

__all__ = ["TimedFlight"]


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

    def bound(self, released: int) -> int | None:
        """The first record that may not start yet (None: any may): the one after the first
        place, at or after ``released``, where a timer may fire or a tick is."""
        time, stream = self.time, self.stream
        tick = bisect_left(self.ticks, released)  # (the first tick not released)
        places = self.ticks[tick : tick + 1]
        first = bisect_left(stream, time.first_timer_due())
        if first < len(stream):
            places.append(first)
        if time.first_timer_due("wall") <= self.now:  # (fires after the next record released)
            places.append(released)
        for timer, number in self.pending.timers.values():
            if timer is None:
                continue
            domain, at = timer
            if domain == "stream":
                places.append(max(bisect_left(stream, at), number))
            elif at <= self.now:
                places.append(number)
        places = [p for p in places if p >= released]
        return min(places) + 1 if places else None

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
