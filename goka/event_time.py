"""Where a record's event time comes from, and what a timed group fires after each record."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from goka.context import FINAL, NOT_SAVED, TABLE
from goka.edges import InputEdge
from goka.errors import EventTimeError, ProcessingError
from goka.graph import GroupGraph
from goka.keys import decode_text, key_bytes, key_str
from goka.partition_time import Due, Timer
from goka.timekeeping import TTL_TIMER, decode_composite
from goka.windowing import headers
from goka.windows import Window

if TYPE_CHECKING:
    from goka.engine import BatchResult, Engine, Message

__all__ = ["EventTimes", "fire_due", "process_timed"]


class EventTimes:
    """The event time of each input's records (see :data:`goka.edges.EventTime`)."""

    def __init__(self, graph: GroupGraph, clock: Callable[[], int]) -> None:
        self._extract = {
            topic: edge.event_time for topic, edge in graph.inputs.items()
            if isinstance(edge, InputEdge) and edge.event_time != "record"
        }  # fmt: skip
        self.custom = bool(self._extract)
        self._future, self._clock = graph.max_future, clock

    def of(self, message: Message, value: Any) -> int:
        """The event time of ``message`` (decoded: ``value``), in ms.

        Raises:
            EventTimeError: there is no usable one.
        """
        how = self._extract.get(message[0])
        if how is None:
            at = int(message[4])
        elif how == "wall":
            at = self._clock()
        else:
            assert callable(how)
            try:
                found = how(value)
            except Exception as exc:
                raise EventTimeError(f"the event time extractor raised {type(exc).__name__}: "
                                     f"{exc} (value {value!r})") from exc  # fmt: skip
            at = _ms(found, value)
        if at < 0:
            raise EventTimeError(f"event time {at} ms is before 1970 (value {value!r})")
        if self._future is not None and at > self._clock() + self._future:
            raise EventTimeError(
                f"event time {_iso(at)} is more than {self._future} ms ahead of the wall "
                f"clock (define_group(max_future=...)); value {value!r}"
            )
        return at


def _ms(found: object, value: Any) -> int:
    if isinstance(found, dt.datetime):
        aware = found if found.tzinfo is not None else found.replace(tzinfo=dt.UTC)
        return round(aware.timestamp() * 1000)
    if isinstance(found, int) and not isinstance(found, bool):
        return found
    raise EventTimeError(f"the event time extractor returned {found!r}, not a datetime or "
                         f"milliseconds (value {value!r})")  # fmt: skip


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat()


def fire_due(engine: Engine, trigger: Message, result: BatchResult, *, wall: bool = True) -> bool:
    """Fire what is due after ``trigger`` (timers, window closes and expiries; wall timers
    only if ``wall``), in time order; each one's effects are attributed to ``trigger``. At
    most the partition's ``left`` fire (it is lowered by as many): return False if something
    due is left (the partition's backlog, attributed to ``trigger`` when fired)."""
    time, ctx = engine.time, engine.context
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
        ctx._message, ctx._saved, mark = source, ctx._saved, len(engine.effects)
        ctx.key, ctx._event_time = key, due.at
        try:
            _fire(engine, due, key, source, parts)
        except Exception as exc:
            time.rollback()
            engine._failed(exc, source, mark, result, _describe(due, exc))
    time.closed_all()
    ctx._event_time = -1
    return time.backlog is None


def _describe(due: Due, exc: Exception) -> str:
    what = f"timer {due.name!r}" if due.kind == "timer" else f"{due.kind} of window {due.name!r}"
    return f"{what} due at {_iso(due.at)} failed: {type(exc).__name__}: {exc}"


def _fire(
    engine: Engine, due: Due, key: str, source: Message, parts: tuple[str, int, int] | None
) -> None:
    """Fire ``due`` (``parts``: a window's key, start and end)."""
    time, graph = engine.time, engine.graph
    assert time is not None
    if due.kind == "timer" and due.name == TTL_TIMER:
        engine.cache[key] = None
        engine.effects.append((TABLE, graph.table, key, None, None, source))
    elif due.kind == "timer":
        assert graph.timers is not None and graph.timers.callback is not None
        domain = "stream" if due.row[1] == "s" else "wall"
        timer = Timer(due.name, due.at, domain, time.decode_data(due.data))
        graph.timers.callback(engine.context, timer)
    elif due.kind == "close":
        edge = time.edge(due.name)
        raw = time.window_rows[due.name].get("w" + due.key)
        if raw is not None and edge.output is not None:
            assert parts is not None
            _, start, end = parts
            data = graph.outputs[edge.output].codec.encode(edge.codec.decode(raw))
            engine.effects.append((FINAL, edge.output, key, data,
                                   headers(due.name, Window(start, end)), source))  # fmt: skip


def process_timed(
    engine: Engine, messages: Sequence[Message], result: BatchResult, after: Message | None
) -> None:
    """:meth:`Engine.process` for a timed group (or one with event time): event time, and
    what is due fired after each record (see :mod:`goka.partition_time`), up to the
    engine's ``fire_budget``."""
    ctx, routes, effects, time = engine.context, engine._routes, engine.effects, engine.time
    nil, text, event_time = engine.nil_handling, decode_text, engine._times.of
    ticks = engine.graph.group.ticks if engine.graph.ticking else None
    if time is not None:  # a backlog first (or what a commit inside a backlog left)
        time.left = engine.fire_budget or sys.maxsize
        first = time.backlog or after  # (wall timers wait for the next record or tick)
        wall = time.backlog is not None
        if first is not None and not fire_due(engine, first, result, wall=wall):
            result.processed = result.consumed = 0
            messages = ()
    for index, message in enumerate(messages):
        if message[0] == ticks:  # a tick: only the wall clock moved
            result.processed -= 1
            if time is not None and not fire_due(engine, message, result):
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
            ctx._event_time = at = event_time(message, value)
            ctx._value = value
            if time is not None and at > time.stream_time:
                time.stream_time = at
            callback(ctx, value)
        except Exception as exc:
            if time is not None:
                time.rollback()
            engine._failed(exc, message, mark, result)
        if time is not None:
            done = fire_due(engine, message, result)
            if time.stream_time > before:
                time.raised(message, mark)
            if not done:
                _stop(result, len(messages) - index - 1)
                break
    ctx._event_time, ctx._value = -1, None
    if time is not None:
        result.late += time.late_dropped
        for name, late in time.late_records:
            result.failed.append((_late(engine, name, late), late))
        time.finish()


def _stop(result: BatchResult, left: int) -> None:
    """The budget ran out: the last ``left`` messages are not handled."""
    result.consumed -= left
    result.processed -= left


def _late(engine: Engine, name: str, message: Message) -> ProcessingError:
    time = engine.time
    assert time is not None
    return ProcessingError(
        f"late for window {name!r}: its windows closed (stream time {time.stream_time})",
        group=engine.graph.group, topic=message[0], partition=engine.partition,
        offset=message[1], key=None if message[2] is None else key_str(message[2]),
    )  # fmt: skip
