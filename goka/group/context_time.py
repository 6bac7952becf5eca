"""The time part of :class:`goka.group.context.Context`: event, stream and wall time, timers and
windows (for groups with windows, timers or a TTL)."""

from __future__ import annotations

import datetime as dt
from typing import Any, NoReturn

from goka.errors import ContextError
from goka.time.open_windows import Windows
from goka.time.ports import PartitionClock

__all__ = ["TimeAccess"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class TimeAccess:
    """What a context knows and does about time (mixed into :class:`~goka.group.context.Context`,
    which holds the attributes)."""

    __slots__ = ()
    _time: PartitionClock | None
    _event_time: int
    _message: Any
    key: str
    group: str

    def _keyless(self) -> NoReturn:
        raise NotImplementedError  # Context's

    # -- time ------------------------------------------------------------------------------------
    @property
    def event_time_ms(self) -> int:
        """The record's event time (its input's ``event_time``: by default its timestamp; in
        a timer callback, when the timer was due), in ms since the epoch."""
        return self._event_time if self._event_time >= 0 else int(self._message[4])

    @property
    def event_time(self) -> dt.datetime:
        """:attr:`event_time_ms` in UTC."""
        return _EPOCH + dt.timedelta(milliseconds=self.event_time_ms)

    @property
    def stream_time_ms(self) -> int:
        """The partition's stream time: the highest event time it has seen (it never goes
        back, also across restarts; -1 before any record).

        Raises:
            ContextError: the group keeps no time (no window, timers or TTL).
        """
        return self._timed("stream time").stream_time

    @property
    def stream_time(self) -> dt.datetime | None:
        """:attr:`stream_time_ms` in UTC (None before any record)."""
        ms = self.stream_time_ms
        return None if ms < 0 else _EPOCH + dt.timedelta(milliseconds=ms)

    @property
    def wall_time_ms(self) -> int:
        """The wall clock (the tester's clock in tests), in ms since the epoch (with records in
        flight in a group that keeps time: read once per call, as what is due is)."""
        time = self._time
        return time.wall_clock() if time is not None else int(dt.datetime.now(dt.UTC).timestamp()
                                                           * 1000)  # fmt: skip

    def schedule(
        self, at: dt.datetime | dt.timedelta | int, name: str = "", *,
        domain: str = "stream", data: Any = None,
    ) -> None:  # fmt: skip
        """Set the current key's timer ``name`` (replacing one of that name) to fire at
        ``at``: a datetime (naive: UTC), ms since the epoch, or a timedelta after now by
        ``domain``'s clock (``"stream"``: stream time, ``"wall"``: the wall clock). It fires
        once, with ``data``, calling the group's ``timers`` callback with this key's context;
        one due already fires after the current record.

        Raises:
            ContextError: no timers edge, no key, a bad domain or name.
        """
        time = self._timed("timers")
        if domain not in ("stream", "wall"):
            raise ContextError(f"timer domain must be 'stream' or 'wall', got {domain!r}")
        if not isinstance(name, str) or "\x00" in name or name.startswith("\x01"):
            raise ContextError(f"timer names are str without NUL or \\x01 first, got {name!r}")
        if self._message[2] is None:
            self._keyless()
        now = time.stream_time if domain == "stream" else time.wall_clock()
        time.schedule(self.key, name, _at_ms(at, now), domain, data, self._message)

    def cancel(self, name: str = "") -> bool:
        """Delete the current key's timer ``name``; return whether it was set.

        Raises:
            ContextError: no timers edge.
        """
        return self._timed("timers").cancel(self.key, name, self._message)

    def window(self, name: str) -> Windows:
        """The windows of the record's event time in window table ``name`` that are still
        open: read and change them (see :class:`goka.time.open_windows.Windows`).

        Raises:
            ContextError: the group has no window ``name``, or the message has no key.
        """
        if self._message[2] is None:
            self._keyless()
        time = self._time if self._time is not None else self._timed("windows")
        return Windows(self, time, name)  # type: ignore[arg-type]  # a Context

    def _timed(self, what: str) -> PartitionClock:
        if self._time is None:
            edge = {"windows": "window(name, spec, codec)", "timers": "timers(callback)"}.get(
                what, "a window, timers or a persist ttl")  # fmt: skip
            raise ContextError(f"group {self.group!r} keeps no {what}: declare {edge}")
        return self._time


def _at_ms(at: dt.datetime | dt.timedelta | int, now: int) -> int:
    if isinstance(at, dt.timedelta):
        return max(now, 0) + round(at.total_seconds() * 1000)
    if isinstance(at, dt.datetime):
        aware = at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)
        return round(aware.timestamp() * 1000)
    if isinstance(at, int) and not isinstance(at, bool):
        return at
    raise ContextError(f"a timer is due at a datetime, a timedelta or ms, got {at!r}")
