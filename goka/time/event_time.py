"""Where a record's event time comes from: its Kafka timestamp, the wall clock, or what the
input edge's extractor finds in its value (:data:`goka.group.edges.EventTime`)."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from goka.errors import EventTimeError
from goka.group.edges import InputEdge

if TYPE_CHECKING:
    from goka.group.effects import Message
    from goka.group.graph import GroupGraph

__all__ = ["EventTimes", "iso_ms"]


class EventTimes:
    """The event time of each input's records (see :data:`goka.group.edges.EventTime`)."""

    def __init__(self, graph: GroupGraph, clock: Callable[[], int]) -> None:
        self._extract = {
            topic: edge.event_time for topic, edge in graph.inputs.items()
            if isinstance(edge, InputEdge) and edge.event_time != "record"
        }  # fmt: skip
        self.custom = bool(self._extract)
        self._future, self._clock = graph.max_future, clock
        #: The wall clock plus ``max_future`` when last read (no ``max_future``: the largest
        #: int): an event time up to it is not too far ahead (the clock only goes forward), so
        #: the clock is read only for a later one. A hot path: the engine takes a record's
        #: timestamp as its event time without calling :meth:`of` when no input extracts
        #: one and the timestamp is an int from 0 to this.
        self.horizon = -1 if self._future is not None else sys.maxsize

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
        if self._future is not None and at > self.horizon:
            self.horizon = self._clock() + self._future
            if at <= self.horizon:
                return at
            raise EventTimeError(
                f"event time {iso_ms(at)} is more than {self._future} ms ahead of the wall "
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


def iso_ms(ms: int) -> str:
    """``ms`` since the epoch as an ISO 8601 time in UTC (for messages)."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat()
