"""The edges of a group graph: what a processor group consumes, keeps and writes.

Build them with the functions of this module and hand them to :func:`goka.define_group`,
which validates the whole graph. Each function checks what it can alone (a window's size, a
TTL's domain) and raises :class:`~goka.errors.GraphError` naming the edge.
"""

from __future__ import annotations

import datetime as dt
import inspect
import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from goka.codec import Codec, JsonCodec
from goka.errors import ConfigurationError, GraphError
from goka.time.specs import Session, WindowSpec, duration_ms

if TYPE_CHECKING:
    from goka.group.context import Context

__all__ = [
    "Callback",
    "Domain",
    "Edge",
    "EventTime",
    "Group",
    "InputEdge",
    "PersistEdge",
    "Stream",
    "Table",
    "TimersEdge",
    "WindowEdge",
    "input",
    "inputs",
    "join",
    "lookup",
    "loop",
    "output",
    "persist",
    "spelled",
    "timers",
    "window",
]

#: ``callback(ctx, msg)``: processes one message; its return value is ignored.
Callback = Callable[["Context[Any]", Any], object]

#: Where an input's event time comes from: the record's Kafka timestamp (``"record"``), the
#: wall clock when it is processed (``"wall"``), or ``extract(value)`` returning a datetime
#: (naive means UTC) or milliseconds since the epoch.
EventTime = Literal["record", "wall"] | Callable[[Any], "dt.datetime | int"]

#: The clock of a timer or a TTL: the partition's stream time (the highest event time seen),
#: or the wall clock.
Domain = Literal["stream", "wall"]
DOMAINS = ("stream", "wall")

#: What a window edge emits to its output: every change, or one final result when it closes.
Emit = Literal["update", "final"]

#: What happens to a record behind a closed window: dropped (and counted), sent to the
#: dead-letter topic, or ``late(ctx, msg, window)`` is called.
Late = Literal["drop", "dead-letter"] | Callable[["Context[Any]", Any, Any], object]

TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}\Z")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}\Z")
_DEFAULT_RETENTION = 86_400_000


class Stream(str):
    """Name of a stream topic (distinct from tables so they are not mixed up)."""

    __slots__ = ()


class Table(str):
    """Name of a table topic (compacted; the latest value per key)."""

    __slots__ = ()


class Group(str):
    """Name of a processor group; its table is ``<group>-table``, its loop ``<group>-loop``."""

    __slots__ = ()

    @property
    def table(self) -> Table:
        """The group table topic."""
        return Table(f"{self}-table")

    @property
    def loop(self) -> Stream:
        """The loop stream topic."""
        return Stream(f"{self}-loop")

    @property
    def ticks(self) -> Stream:
        """The stream of wall-clock ticks, ``<group>-ticks``: a record per partition every
        tick interval, so wall timers fire on partitions that get no records."""
        return Stream(f"{self}-ticks")

    @property
    def timers(self) -> Table:
        """The changelog of the group's timers and stream time, ``<group>-timers``."""
        return Table(f"{self}-timers")

    def window(self, name: str) -> Table:
        """The changelog of window table ``name``, ``<group>-window-<name>``."""
        return Table(f"{self}-window-{name}")


@dataclass(frozen=True)
class Edge:
    """One edge of a group graph; build them with the functions of this module."""

    kind: str
    topic: str
    codec: Codec[Any]
    callback: Callback | None = field(default=None, compare=False)

    def describe(self) -> str:
        """One line: ``input user-clicks (string) -> count``."""
        target = f" -> {callable_name(self.callback)}" if self.callback else ""
        return f"{self.kind:<7} {self.topic or '<group>'} ({_codec_name(self.codec)}){target}"


@dataclass(frozen=True)
class InputEdge(Edge):
    """An input stream, with where its records' event time comes from."""

    event_time: EventTime = field(default="record", compare=False)


@dataclass(frozen=True)
class PersistEdge(Edge):
    """The group table, with how long a key lives after its last change (None: forever)."""

    ttl: int | None = None
    ttl_domain: Domain | None = None


@dataclass(frozen=True)
class TimersEdge(Edge):
    """The timers of the group (see :func:`timers`): ``wall`` says whether wall-clock timers
    may be scheduled."""

    wall: bool = True


@dataclass(frozen=True)
class WindowEdge(Edge):
    """A windowed table of the group (see :func:`window`); ``topic`` is empty until the
    graph names its changelog ``<group>-window-<name>``."""

    name: str = ""
    spec: WindowSpec | None = None
    grace: int = 0
    retention: int = _DEFAULT_RETENTION
    emit: Emit = "update"
    output: str | None = None
    late: Late = field(default="drop", compare=False)
    merge: Callable[[Any, Any], Any] | None = field(default=None, compare=False)

    @property
    def index_grace(self) -> int:
        """How long after its end a window closes: the grace, and for sessions their gap (a
        record that far after a session's last one still joins it). The one definition the
        close queue, the derived close index rows and late records share."""
        return self.grace + (self.spec.gap if isinstance(self.spec, Session) else 0)

    def describe(self) -> str:
        """One line: ``window hourly Tumbling(size=3600000) (int64) -> hourly-views``."""
        target = f" -> {self.output}" if self.output else ""
        return f"window  {self.name} {self.spec!r} ({_codec_name(self.codec)}) {self.emit}{target}"


def spelled(policy: str, where: str) -> str:
    """``policy`` as it is spelled now: ``dead_letter`` (the spelling until 2026-11, before
    it was spelled as every other choice, ``micro-batch``, ``exactly-once``) is
    ``dead-letter``, with a FutureWarning (shown by default) naming ``where`` it was written."""
    if policy != "dead_letter":
        return policy
    warnings.warn(
        f"{where}='dead_letter' is spelled 'dead-letter' now; the old spelling "
        "will be refused in a later release",
        FutureWarning,
        stacklevel=3,
    )
    return "dead-letter"


def input(
    topic: str, codec: Codec[Any], callback: Callback, *, event_time: EventTime = "record"
) -> Edge:
    """Consume stream ``topic``, decoding values with ``codec``, calling ``callback(ctx, msg)``.

    ``event_time`` says where a record's event time comes from (see :data:`EventTime`); it
    drives windows, stream-time timers and stream-time TTL. A callable is a quick function of
    the decoded value: in a group with ``concurrency`` it runs on the event loop of the
    callbacks, each record's before its callback (no I/O, no asyncio of its own there).
    """
    where = f"input edge {topic}"
    if event_time not in ("record", "wall") and not callable(event_time):
        raise GraphError(f"{where}: event_time must be 'record', 'wall' or a callable(value), "
                         f"got {event_time!r}")  # fmt: skip
    return InputEdge("input", Stream(topic), codec, callback, event_time)


def inputs(
    topics: Iterable[str], codec: Codec[Any], callback: Callback, *,
    event_time: EventTime = "record",
) -> tuple[Edge, ...]:  # fmt: skip
    """Consume several streams with one codec, one callback and one event time.

    Raises:
        GraphError: ``topics`` is one string (its letters would be the topics).
    """
    if isinstance(topics, str | bytes):
        raise GraphError(f"inputs() takes a list of topics, got the string {topics!r}: use "
                         f"inputs([{topics!r}], ...) or input({topics!r}, ...)")  # fmt: skip
    return tuple(input(topic, codec, callback, event_time=event_time) for topic in topics)


def output(topic: str, codec: Codec[Any]) -> Edge:
    """Declare that callbacks may ``ctx.emit`` to stream ``topic``, encoded with ``codec``."""
    return Edge("output", Stream(topic), codec)


def loop(codec: Codec[Any], callback: Callback) -> Edge:
    """Declare the loop stream ``<group>-loop``: ``ctx.loopback`` re-keys messages into it."""
    return Edge("loop", "", codec, callback)


def join(table: str, codec: Codec[Any]) -> Edge:
    """Join a co-partitioned table: ``ctx.join(table)`` reads the value of the current key."""
    return Edge("join", Table(table), codec)


def lookup(table: str, codec: Codec[Any]) -> Edge:
    """Look up any key of a table (not co-partitioned): ``ctx.lookup(table, key)``."""
    return Edge("lookup", Table(table), codec)


def persist(
    codec: Codec[Any], *, ttl: dt.timedelta | int | None = None, ttl_domain: Domain | None = None
) -> Edge:
    """Keep per-key state in the group table ``<group>-table``, encoded with ``codec``.

    With ``ttl``, a key not changed for ``ttl`` (by ``ttl_domain``'s clock: the partition's
    stream time or the wall clock, to be chosen explicitly) expires: it reads as None at once
    and is deleted with a tombstone in the group table (so views drop it too).
    """
    if ttl is None:
        if ttl_domain is not None:
            raise GraphError(f"persist edge: ttl_domain={ttl_domain!r} without a ttl")
        return PersistEdge("persist", "", codec)
    ttl_ms = _positive(ttl, "persist edge: ttl")
    if ttl_domain not in DOMAINS:
        raise GraphError(
            f"persist edge: a ttl needs ttl_domain='stream' (event time) or 'wall' (wall "
            f"clock), got {ttl_domain!r}"
        )
    return PersistEdge("persist", "", codec, None, ttl_ms, ttl_domain)


def timers(callback: Callback, codec: Codec[Any] | None = None, *, wall: bool = True) -> Edge:
    """Let callbacks schedule durable timers (``ctx.schedule``); ``callback(ctx, timer)`` runs
    when one fires, with the full context of the timer's key. ``codec`` encodes the data a
    timer carries (default: JSON). With ``wall`` (the default) timers may follow the wall
    clock: a processor then ticks every partition (``<group>-ticks``), so they fire also on
    partitions that get no records; ``wall=False`` allows stream-time timers only."""
    return TimersEdge("timers", "", codec if codec is not None else JsonCodec(), callback, wall)


def window(
    name: str,
    spec: WindowSpec,
    codec: Codec[Any],
    *,
    grace: dt.timedelta | int = 0,
    retention: dt.timedelta | int = _DEFAULT_RETENTION,
    emit: Emit = "update",
    output: str | None = None,
    late: Late = "drop",
    merge: Callable[[Any, Any], Any] | None = None,
) -> Edge:
    """Declare a windowed table ``name``: callbacks aggregate into the windows of their
    record's event time with ``ctx.window(name)``.

    Args:
        name: the table's name; its changelog is ``<group>-window-<name>``.
        spec: :class:`~goka.windows.Tumbling`, :class:`~goka.windows.Hopping`,
            :class:`~goka.windows.Session` or :class:`~goka.windows.Calendar`.
        codec: encodes a window's value.
        grace: how long after its end a window still takes records (by stream time); then
            it is closed.
        retention: how long a closed window stays readable (views, ``ctx.window``) before it
            is deleted.
        emit: ``"update"`` (every change goes to ``output``, if given) or ``"final"`` (one
            result per window, when it closes, exactly once also across crashes).
        output: the output edge results go to (key: the record key; value: the window's
            value in that edge's codec; headers ``goka-window``, ``goka-window-start``,
            ``goka-window-end``).
        late: a record behind a closed window is ``"drop"``-ped (counted), sent to the
            ``"dead-letter"`` topic, or passed to ``late(ctx, msg, window)``.
        merge: for session windows, ``merge(a, b)`` of two sessions' values that a record
            joins into one (required for sessions; not allowed otherwise).
    """
    where = f"window edge {name!r}"
    if not isinstance(name, str) or not _NAME.match(name):
        raise GraphError(f"{where}: name must be 1-100 characters of A-Z a-z 0-9 . _ -")
    if not isinstance(spec, WindowSpec):
        raise GraphError(f"{where}: spec must be Tumbling, Hopping, Session or Calendar, "
                         f"got {spec!r}")  # fmt: skip
    grace_ms = _at_least_zero(grace, f"{where}: grace")
    retention_ms = _at_least_zero(retention, f"{where}: retention")
    if emit not in ("update", "final"):
        raise GraphError(f"{where}: emit must be 'update' or 'final', got {emit!r}")
    if emit == "final" and output is None:
        raise GraphError(f"{where}: emit='final' needs output=<an output edge's topic>")
    if isinstance(late, str):
        late = spelled(late, "late")  # type: ignore[assignment]
    if late not in ("drop", "dead-letter") and not callable(late):
        raise GraphError(f"{where}: late must be 'drop', 'dead-letter' or a callable, "
                         f"got {late!r}")  # fmt: skip
    if callable(late):
        check_callback(f"{where}: late", late, ("ctx", "msg", "window"))
    if isinstance(spec, Session) and merge is None:
        raise GraphError(f"{where}: session windows need merge=callable(a, b) for sessions "
                         "that a record joins")  # fmt: skip
    if merge is not None and not isinstance(spec, Session):
        raise GraphError(f"{where}: merge is for session windows only")
    if merge is not None:
        check_callback(f"{where}: merge", merge, ("a", "b"))
    return WindowEdge("window", "", codec, None, name, spec, grace_ms, retention_ms, emit,
                      output, late, merge)  # fmt: skip


def check_callback(where: str, callback: object, names: tuple[str, ...] = ("ctx", "msg"), *,
                   awaitable: bool = False) -> None:  # fmt: skip
    """Fail unless ``callback`` is a callable accepting the positionals ``names`` (a plain
    one, or, if ``awaitable``, also an ``async def``)."""
    if not callable(callback):
        raise GraphError(f"{where}: callback must be callable, got {callback!r}")
    if awaited(callback) and not awaitable:
        raise GraphError(f"{where}: callback {callable_name(callback)} is async; use a def")
    try:
        inspect.signature(callback).bind(*([None] * len(names)))
    except TypeError:
        raise GraphError(
            f"{where}: callback {callable_name(callback)} must accept ({', '.join(names)})"
        ) from None
    except ValueError:  # builtins without signatures: accept, they fail loudly when called
        pass


def awaited(callback: object) -> bool:
    """Is ``callback`` an ``async def`` (or an object whose ``__call__`` is)?"""
    if inspect.iscoroutinefunction(callback):
        return True
    return inspect.iscoroutinefunction(inspect.getattr_static(type(callback), "__call__", None))


def callable_name(callback: object) -> str:
    """A callable's qualified name, for messages."""
    return str(getattr(callback, "__qualname__", None) or getattr(callback, "__name__", callback))


def _codec_name(codec: object) -> str:
    return str(getattr(codec, "name", type(codec).__name__))


def _positive(value: dt.timedelta | int, what: str) -> int:
    ms = _duration(value, what)
    if ms <= 0:
        raise GraphError(f"{what} must be positive, got {ms} ms")
    return ms


def _at_least_zero(value: dt.timedelta | int, what: str) -> int:
    ms = _duration(value, what)
    if ms < 0:
        raise GraphError(f"{what} must not be negative, got {ms} ms")
    return ms


def _duration(value: dt.timedelta | int, what: str) -> int:
    try:
        return duration_ms(value, what)
    except ConfigurationError as exc:
        raise GraphError(str(exc)) from None
