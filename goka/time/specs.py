"""Window specs and their arithmetic: the time intervals a record's event time belongs to.

A window is ``[start, end)`` in milliseconds since the epoch (UTC). A window spec says which
windows a time belongs to:

* :class:`Tumbling`: fixed size, back to back, aligned to the epoch (``Tumbling(hours=1)``).
* :class:`Hopping`: fixed size, starting every ``advance``; a time belongs to ``size/advance``
  windows.
* :class:`Session`: per key, records less than ``gap`` apart share a window, which grows and
  merges as records arrive (so sessions are not assigned here; the engine merges them).
* :class:`Calendar`: hours, days, weeks (from Monday) or months of a time zone, starting at a
  local time of day (``Calendar("day", tz="Europe/Berlin", start="06:00")``). Days across a
  daylight-saving switch are 23 or 25 hours long; a local start that does not exist that day
  (in the skipped hour) falls at the same offset as before the switch, a start that occurs
  twice is its first occurrence.

Specs are immutable, validated when built (:class:`~goka.errors.ConfigurationError`), and
picklable.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from goka.errors import ConfigurationError

__all__ = [
    "Calendar",
    "Hopping",
    "Session",
    "Tumbling",
    "Window",
    "WindowSpec",
    "duration_ms",
    "epoch_ms",
    "remembered",
]


_UTC = dt.UTC
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)
_START = re.compile(r"([01]\d|2[0-3]):([0-5]\d)\Z")
UNITS = ("hour", "day", "week", "month")


class Window(NamedTuple):
    """One window, ``[start, end)`` in milliseconds since the epoch."""

    start: int
    end: int

    @property
    def start_time(self) -> dt.datetime:
        """The start, in UTC."""
        return _EPOCH + dt.timedelta(milliseconds=self.start)

    @property
    def end_time(self) -> dt.datetime:
        """The end (exclusive), in UTC."""
        return _EPOCH + dt.timedelta(milliseconds=self.end)

    def __repr__(self) -> str:
        return f"Window({self.start_time.isoformat()}, {self.end_time.isoformat()})"


def duration_ms(value: dt.timedelta | int | float, what: str) -> int:
    """Milliseconds of ``value`` (a timedelta, or a number of milliseconds).

    Raises:
        ConfigurationError: ``value`` is neither.
    """
    if isinstance(value, dt.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return round(value)
    raise ConfigurationError(f"{what} must be a timedelta or milliseconds, got {value!r}")


def _size(value: dt.timedelta | int | None, parts: dict[str, float], what: str) -> int:
    if value is not None and any(parts.values()):
        raise ConfigurationError(f"{what}: give a timedelta or keyword units, not both")
    ms = duration_ms(value, what) if value is not None else duration_ms(dt.timedelta(**parts), what)
    if ms <= 0:
        raise ConfigurationError(f"{what} must be positive, got {ms} ms")
    return ms


@dataclass(frozen=True, init=False)
class Tumbling:
    """Back-to-back windows of ``size``, aligned to the epoch: each time is in exactly one.

    ``Tumbling(dt.timedelta(hours=1))``, ``Tumbling(hours=1)`` or ``Tumbling(3_600_000)``.
    """

    size: int

    def __init__(
        self, size: dt.timedelta | int | None = None, *, days: float = 0, hours: float = 0,
        minutes: float = 0, seconds: float = 0,
    ) -> None:  # fmt: skip
        parts = {"days": days, "hours": hours, "minutes": minutes, "seconds": seconds}
        object.__setattr__(self, "size", _size(size, parts, "Tumbling size"))

    def windows(self, time: int) -> list[Window]:
        """The window ``time`` belongs to."""
        start = time - time % self.size
        return [Window(start, start + self.size)]

    @property
    def longest(self) -> int:
        """The longest a window can be, in milliseconds."""
        return self.size


@dataclass(frozen=True)
class Hopping:
    """Windows of ``size`` starting every ``advance`` (aligned to the epoch); each time is in
    ``size / advance`` of them (rounded up). ``advance`` must be at most ``size`` and divide it
    (so every time is in the same number of windows)."""

    size: int
    advance: int

    def __init__(self, size: dt.timedelta | int, advance: dt.timedelta | int) -> None:
        size_ms = _size(size, {}, "Hopping size")
        advance_ms = _size(advance, {}, "Hopping advance")
        if advance_ms > size_ms:
            raise ConfigurationError(
                f"Hopping advance ({advance_ms} ms) must not exceed the size ({size_ms} ms)"
            )
        if size_ms % advance_ms:
            raise ConfigurationError(
                f"Hopping advance ({advance_ms} ms) must divide the size ({size_ms} ms)"
            )
        object.__setattr__(self, "size", size_ms)
        object.__setattr__(self, "advance", advance_ms)

    def windows(self, time: int) -> list[Window]:
        """The windows ``time`` belongs to, earliest first."""
        last = time - time % self.advance
        first = last - self.size + self.advance
        return [Window(s, s + self.size) for s in range(first, last + 1, self.advance)]

    @property
    def longest(self) -> int:
        """The longest a window can be, in milliseconds."""
        return self.size


@dataclass(frozen=True)
class Session:
    """Per key, records less than ``gap`` apart (in event time) share a window ``[first
    record, last record + 1 ms)``; a record between two sessions merges them."""

    gap: int

    def __init__(self, gap: dt.timedelta | int) -> None:
        object.__setattr__(self, "gap", _size(gap, {}, "Session gap"))

    @property
    def longest(self) -> int:
        """How far a session reaches past its last record, in milliseconds (its gap)."""
        return self.gap


@dataclass(frozen=True)
class Calendar:
    """Hours, days, weeks (from Monday) or months of time zone ``tz``, each starting at the
    local time of day ``start`` (``"HH:MM"``; hours ignore it)."""

    unit: Literal["hour", "day", "week", "month"]
    tz: str = "UTC"
    start: str = "00:00"
    _zone: zoneinfo.ZoneInfo = field(init=False, repr=False, compare=False)
    _start: dt.time = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ConfigurationError(
                f"Calendar unit must be one of {', '.join(UNITS)}, got {self.unit!r}"
            )
        try:
            zone = zoneinfo.ZoneInfo(self.tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError) as exc:
            raise ConfigurationError(f"Calendar time zone {self.tz!r} is unknown: {exc}") from None
        found = _START.match(self.start) if isinstance(self.start, str) else None
        if found is None:
            raise ConfigurationError(f"Calendar start must be 'HH:MM', got {self.start!r}")
        object.__setattr__(self, "_zone", zone)
        object.__setattr__(self, "_start", dt.time(int(found[1]), int(found[2])))

    def __reduce__(self) -> tuple[type[Calendar], tuple[str, str, str]]:
        return Calendar, (self.unit, self.tz, self.start)

    def windows(self, time: int) -> list[Window]:
        """The calendar period ``time`` belongs to."""
        local = (_EPOCH + dt.timedelta(milliseconds=time)).astimezone(self._zone)
        if self.unit == "hour":
            start = local.replace(minute=0, second=0, microsecond=0)
            first = epoch_ms(start)
            return [Window(first, first + 3_600_000)]
        day = self._period_start(local.date())
        first = self._boundary(day)
        if first > time:
            day = self._period_start(day - dt.timedelta(days=1))
            first = self._boundary(day)
        return [Window(first, self._boundary(self._next(day)))]

    @property
    def longest(self) -> int:
        """The longest a period can be, in milliseconds (31 days and an hour for months)."""
        days = {"hour": 0, "day": 1, "week": 7, "month": 31}[self.unit]
        return (days * 24 + 1) * 3_600_000

    def _period_start(self, day: dt.date) -> dt.date:
        if self.unit == "week":
            return day - dt.timedelta(days=day.weekday())
        if self.unit == "month":
            return day.replace(day=1)
        return day

    def _next(self, day: dt.date) -> dt.date:
        if self.unit == "week":
            return day + dt.timedelta(days=7)
        if self.unit == "month":
            return (day.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
        return day + dt.timedelta(days=1)

    def _boundary(self, day: dt.date) -> int:
        """The period boundary on ``day``: ``start`` o'clock local time, in UTC ms."""
        local = dt.datetime.combine(day, self._start, tzinfo=self._zone)
        return epoch_ms(local)


def epoch_ms(moment: dt.datetime) -> int:
    """``moment`` in ms since the epoch (exact: no float on the way)."""
    delta = moment.astimezone(_UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


#: What a window edge can be declared with.
WindowSpec = Tumbling | Hopping | Session | Calendar


def remembered(spec: Tumbling | Hopping | Calendar) -> Callable[[int], list[Window]]:
    """``spec.windows``, remembering the windows of the last few hundred buckets it was asked
    for (a time's tumbling or hopping windows depend only on its bucket; the lists are
    shared: not to be changed)."""
    if isinstance(spec, Calendar):
        return spec.windows
    step, windows_of = spec.advance if isinstance(spec, Hopping) else spec.size, spec.windows
    found: dict[int, list[Window]] = {}

    def windows(time: int) -> list[Window]:
        bucket = time - time % step
        known = found.get(bucket)
        if known is None:
            if len(found) >= 256:
                found.clear()
            known = found[bucket] = windows_of(time)
        return known

    return windows
