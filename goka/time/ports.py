"""What the time of a partition and a record's context see of each other, as protocols.

A callback's context (:class:`goka.group.context.Context`) reads and changes time through the
partition's :class:`~goka.time.partition.PartitionTime`, and the windows it opens
(:mod:`goka.time.open_windows`) call back into the context (its key, its emits). The
partition's time is built from the group's declaration, whose callbacks take a context: the
concrete classes would import each other. These protocols are the part each side uses, so
both import this module and neither the other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from goka.codec import Codec
from goka.time.overlay import Overlay
from goka.time.specs import Window, WindowSpec

__all__ = ["PartitionClock", "RecordContext", "WindowDeclaration", "WindowTimes"]


class WindowDeclaration(Protocol):
    """A window table as declared (a :class:`goka.group.edges.WindowEdge`)."""

    @property
    def codec(self) -> Codec[Any]: ...
    @property
    def spec(self) -> WindowSpec | None: ...
    @property
    def emit(self) -> str: ...
    @property
    def output(self) -> str | None: ...
    @property
    def late(self) -> Literal["drop", "dead-letter"] | Callable[..., object]: ...
    @property
    def merge(self) -> Callable[[Any, Any], Any] | None: ...
    @property
    def index_grace(self) -> int: ...


class RecordContext(Protocol):
    """What a record's windows use of its context (a :class:`goka.group.context.Context`)."""

    key: str
    _message: Any
    _value: Any

    @property
    def event_time_ms(self) -> int: ...

    def emit(self, topic: str, key: str | bytes, value: Any,
             headers: list[tuple[str, bytes]] | None = None) -> None: ...  # fmt: skip


class WindowTimes(Protocol):
    """What a record's windows use of its partition's time."""

    stream_time: int
    late_dropped: int

    @property
    def fixed(self) -> Mapping[str, tuple[Callable[[int], list[Window]], int]]: ...
    @property
    def late_seen(self) -> set[str]: ...
    @property
    def late_records(self) -> list[tuple[str, Any]]: ...
    @property
    def window_rows(self) -> Mapping[str, Overlay]: ...
    @property
    def updaters(self) -> Mapping[str, Callable[..., None]]: ...

    def edge(self, name: str) -> WindowDeclaration: ...
    def window_reader(self, name: str) -> Callable[[str, int], bytes | None]: ...
    def set_window(self, name: str, key: str, window: Window, value: bytes | None,
                   source: Any) -> None: ...  # fmt: skip
    def write_window_row(self, name: str, row: str, value: bytes | None, source: Any,
                         end: int, existed: bool | None = None) -> None: ...  # fmt: skip


class PartitionClock(WindowTimes, Protocol):
    """What a context uses of its partition's time: clocks, timers, TTL, windows."""

    @property
    def clock(self) -> Callable[[], int]: ...
    @property
    def has_ttl(self) -> bool: ...
    def wall_clock(self) -> int: ...

    def schedule(self, key: str, name: str, at: int, domain: str, data: Any,
                 source: Any) -> None: ...  # fmt: skip
    def cancel(self, key: str, name: str, source: Any, *, quiet: bool = False) -> bool: ...
    def touch(self, key: str, source: Any) -> None: ...
    def expired(self, key: str) -> bool: ...
