"""What a timed group does after each record: its event time moves the stream time, and what
is due fires, in time order (see :mod:`goka.time`): timers call the group's ``timers``
callback (a TTL's deletes the key), windows close (a final result) and expire.

:class:`TimedProcessing` is the part of :class:`goka.group.engine.Engine` that runs a timed
group's records (or a group with event times); the engine holds the attributes it uses.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from goka.errors import ProcessingError
from goka.group.callback_loop import awaited_now
from goka.group.effects import FINAL, NOT_SAVED, TABLE, BatchResult, Effect, Message
from goka.group.timed_flight import TimedFlight
from goka.keys import decode_text, key_bytes, key_str
from goka.time.event_time import iso_ms
from goka.time.rows import TTL_TIMER, Due, Timer, decode_composite, headers
from goka.time.specs import Window

if TYPE_CHECKING:
    from goka.group.context import Context
    from goka.group.graph import Callback, GroupGraph
    from goka.time.event_time import EventTimes
    from goka.time.partition import PartitionTime

__all__ = ["TimedProcessing"]


class TimedProcessing:
    """The engine's loop for a timed group, and the firing of what is due (mixed into
    :class:`~goka.group.engine.Engine`, which holds the attributes)."""

    graph: GroupGraph
    partition: int
    time: PartitionTime | None
    context: Context[Any]
    effects: list[Effect]
    cache: dict[str, Any]
    nil_handling: str
    fire_budget: int | None
    _routes: dict[str, tuple[Callable[[bytes], Any], Callback]]
    _times: EventTimes

    def _failed(
        self, exc: Exception, message: Message, mark: int, result: BatchResult,
        reason: str | None = None,
    ) -> None:  # fmt: skip
        raise NotImplementedError  # the engine's

    def _fire_due(self, trigger: Message, result: BatchResult, *, wall: bool = True) -> bool:
        """Fire what is due after ``trigger`` (timers, window closes and expiries; wall
        timers only if ``wall``), in time order; each one's effects are attributed to
        ``trigger``. At most the partition's ``left`` fire (it is lowered by as many):
        return False if something due is left (the partition's backlog, attributed to
        ``trigger`` when fired)."""
        time, ctx = self.time, self.context
        assert time is not None
        time.backlog = None
        deferred = time.deferred_finals
        if deferred:
            time.close_due(trigger)
        while (due := time.next_due(wall=wall)) is not None:
            if deferred and due.kind == "close":  # no effects (the budget's concern): it is
                time.fired(due, (trigger[0], trigger[1], None, None, due.at, None))  # closed
                continue
            if time.left <= 0:
                time.backlog = trigger
                break
            time.left -= 1
            parts = None if due.kind == "timer" else decode_composite(due.key)  # a window's
            key = due.key if parts is None else parts[0]
            source: Message = (trigger[0], trigger[1], key_bytes(key), None, due.at, None)
            time.fired(due, source)
            time.mark()
            ctx._message, ctx._saved, mark = source, NOT_SAVED, len(self.effects)
            ctx.key, ctx._event_time, ctx._value = key, due.at, None
            try:
                self._fire(due, key, source, parts)
            except Exception as exc:
                time.rollback()
                self._failed(exc, source, mark, result, _describe(due, exc))
        time.closed_all()
        ctx._event_time = -1
        return time.backlog is None

    def _fire(
        self, due: Due, key: str, source: Message, parts: tuple[str, int, int] | None
    ) -> None:
        """Fire ``due`` (``parts``: a window's key, start and end)."""
        time, graph = self.time, self.graph
        assert time is not None
        if due.kind == "timer" and due.name == TTL_TIMER:
            self.cache[key] = None
            self.effects.append((TABLE, graph.table, key, None, None, source))
        elif due.kind == "timer":
            assert graph.timers is not None and graph.timers.callback is not None
            domain = "stream" if due.row[1] == "s" else "wall"
            timer = Timer(due.name, due.at, domain, time.decode_data(due.data))
            out = graph.timers.callback(self.context, timer)
            if out is not None:  # (an async def's coroutine: awaited, cut by the timeout)
                awaited_now(out, graph.timeout, (graph.group, self.partition, source, key,
                                                 graph.timers.callback))  # fmt: skip
        elif due.kind == "close":
            edge = time.edge(due.name)
            raw = time.window_rows[due.name].get("w" + due.key)
            if raw is not None and edge.output is not None:
                assert parts is not None
                _, start, end = parts
                data = graph.outputs[edge.output].codec.encode(edge.codec.decode(raw))
                self.effects.append((FINAL, edge.output, key, data,
                                     headers(due.name, Window(start, end)), source))  # fmt: skip

    def _process_timed(
        self, messages: Sequence[Message], result: BatchResult, after: Message | None
    ) -> None:
        """:meth:`Engine.process` for a timed group (or one with event time): event time,
        and what is due fired after each record (see :mod:`goka.time.partition`), up to
        the engine's ``fire_budget``."""
        ctx, routes, effects, time = self.context, self._routes, self.effects, self.time
        nil, text, times = self.nil_handling, decode_text, self._times
        event_time, stamps = times.of, not times.custom  # stamps: each input's are its records'
        ticks, group = self._ticks, self.graph.group
        if time is not None:  # a backlog first (or what a commit inside a backlog left)
            messages = self._timed_start(messages, result, after)
        for index, message in enumerate(messages):
            if message[0] == ticks:  # a tick: only the wall clock moved
                result.processed -= 1
                if time is not None and not self._fire_due(message, result):
                    _stop(result, len(messages) - index - 1)
                    break
                continue
            raw_value = message[3]
            if raw_value is None and nil == "ignore":
                continue
            if time is not None:
                time.mark()
                before = time.stream_time
            ctx._message, ctx._saved, mark = message, NOT_SAVED, len(effects)
            try:
                raw_key = message[2]
                ctx.key = text(raw_key) if raw_key is not None else ""
                decode, callback = routes[message[0]]
                if raw_value is not None:
                    value = decode(raw_value)
                else:
                    value = None if nil == "process" else decode(b"")
                at = message[4]  # (EventTimes.of's common case, inlined: a call per record)
                if not stamps or type(at) is not int or not 0 <= at <= times.horizon:
                    at = event_time(message, value)
                ctx._event_time = at
                ctx._value = value
                if time is not None and at > time.stream_time:
                    time.stream_time = at
                out = callback(ctx, value)
                if out is not None:  # (a def that returned a coroutine: awaited)
                    awaited_now(out, None, (group, self.partition, message, ctx.key, callback))
            except Exception as exc:
                if time is not None:  # undone, but for its event time: the stream time moved
                    moved = time.stream_time
                    time.rollback()
                    time.stream_time = moved
                self._failed(exc, message, mark, result)
            if time is not None:
                done = time.quiet() or self._fire_due(message, result)
                if time.stream_time > before:
                    time.raised(message, mark)
                if not done:
                    _stop(result, len(messages) - index - 1)
                    break
        ctx._event_time, ctx._value = -1, None
        if time is not None:
            self._timed_end(result)

    def _timed_start(self, messages: Sequence[Message], result: BatchResult,
                     after: Message | None) -> Sequence[Message]:  # fmt: skip
        """Begin a timed group's call: fire its backlog first, or what a commit inside a
        backlog left (given ``after``, the record before ``messages``); the messages to run
        (none if the fire budget ran out)."""
        time = self.time
        assert time is not None
        time.left = self.fire_budget or sys.maxsize
        first = time.backlog or after  # (wall timers wait for the next record or tick)
        wall = time.backlog is not None
        if first is not None and not self._fire_due(first, result, wall=wall):
            result.processed = result.consumed = 0
            return ()
        return messages

    def _timed_end(self, result: BatchResult) -> None:
        """End a timed group's call: its late records, its stream time's row."""
        time = self.time
        assert time is not None
        result.late += time.late_dropped
        for name, late in time.late_records:
            result.failed.append((self._late(name, late), late))
        time.finish()

    def _timed_flight(self, messages: Sequence[Message], result: BatchResult,
                      decoded: Callable[[Message], tuple[Any, int]]) -> TimedFlight:  # fmt: skip
        """The time of a call's records in flight (:mod:`goka.group.timed_flight`)."""
        assert self.time is not None
        return TimedFlight(self.time, self._fire_due, self._failed, messages, decoded,
                           self._ticks, result)  # fmt: skip

    @property
    def _ticks(self) -> str | None:
        """The topic of the group's ticks (None: it does not tick)."""
        return self.graph.group.ticks if self.graph.ticking else None

    def _late(self, name: str, message: Message) -> ProcessingError:
        time = self.time
        assert time is not None
        return ProcessingError(
            f"late for window {name!r}: its windows closed (stream time {time.stream_time})",
            group=self.graph.group, topic=message[0], partition=self.partition,
            offset=message[1], key=None if message[2] is None else key_str(message[2]),
        )  # fmt: skip


def _describe(due: Due, exc: Exception) -> str:
    what = f"timer {due.name!r}" if due.kind == "timer" else f"{due.kind} of window {due.name!r}"
    return f"{what} due at {iso_ms(due.at)} failed: {type(exc).__name__}: {exc}"


def _stop(result: BatchResult, left: int) -> None:
    """The budget ran out: the last ``left`` messages are not handled."""
    result.consumed -= left
    result.processed -= left
