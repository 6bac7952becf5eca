"""Where a record's event time comes from, and what a timed group fires after each record."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from goka.context import FINAL, TABLE
from goka.edges import InputEdge
from goka.errors import EventTimeError
from goka.graph import GroupGraph
from goka.keys import key_bytes
from goka.partition_time import Due, Timer
from goka.timekeeping import TTL_TIMER, decode_composite
from goka.windowing import headers
from goka.windows import Window

if TYPE_CHECKING:
    from goka.engine import BatchResult, Engine, Message

__all__ = ["EventTimes", "fire_due"]


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


def fire_due(engine: Engine, trigger: Message, result: BatchResult) -> None:
    """Fire what is due after ``trigger`` (timers, window closes and expiries), in time
    order; each one's effects are attributed to ``trigger``."""
    time, ctx = engine.time, engine.context
    assert time is not None
    while (due := time.next_due()) is not None:
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
