"""Group graphs: a processor group declared as edges, like Go Goka's ``DefineGroup``.

Example::

    def count(ctx, msg):
        ctx.set_value((ctx.value() or 0) + 1)

    graph = define_group("clicks", input("user-clicks", StringCodec(), count),
                         persist(Int64Codec()))
    graph.table  # "clicks-table"
"""

from __future__ import annotations

import datetime as dt
import importlib
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from goka.errors import ConfigurationError, GraphError
from goka.group.edges import (
    TOPIC,
    Callback,
    Edge,
    Group,
    PersistEdge,
    Stream,
    Table,
    TimersEdge,
    WindowEdge,
    check_callback,
    input,
    inputs,
    join,
    lookup,
    loop,
    output,
    persist,
    timers,
    window,
)
from goka.group.retries import Retry, check_awaited, check_concurrency, check_retry, check_timeout
from goka.time.specs import duration_ms

__all__ = [
    "Callback",
    "Edge",
    "Group",
    "GroupGraph",
    "NilHandling",
    "Stream",
    "Table",
    "define_group",
    "input",
    "inputs",
    "join",
    "load_graph",
    "lookup",
    "loop",
    "output",
    "persist",
    "timers",
    "window",
]

#: What a group does with messages that have no value; see :func:`define_group`.
NilHandling = Literal["ignore", "process", "decode"]
NIL_HANDLING = ("ignore", "process", "decode")

#: How far ahead of the wall clock a record's event time may be by default (one day).
DEFAULT_MAX_FUTURE = 86_400_000


@dataclass(frozen=True)
class GroupGraph:
    """A validated processor group: who it consumes, what it keeps and where it writes.

    Build it with :func:`define_group`. Immutable and safe to share (and to pickle when its
    callbacks and codecs are module-level objects, as Spark needs).
    """

    group: Group
    inputs: Mapping[str, Edge]
    outputs: Mapping[str, Edge]
    joins: Mapping[str, Edge]
    lookups: Mapping[str, Edge]
    loop: Edge | None
    persist: Edge | None
    nil_handling: NilHandling = "ignore"
    windows: Mapping[str, WindowEdge] = field(default_factory=dict)
    timers: Edge | None = None
    max_future: int | None = DEFAULT_MAX_FUTURE
    concurrency: int = 1
    retry: Retry | None = None
    timeout: float | None = None  # a callback try's longest, in seconds

    @property
    def ttl(self) -> tuple[int, str] | None:
        """The group table's ``(ttl ms, domain)``, or None."""
        edge = self.persist
        if isinstance(edge, PersistEdge) and edge.ttl is not None and edge.ttl_domain:
            return edge.ttl, edge.ttl_domain
        return None

    @property
    def ticking(self) -> bool:
        """Do wall-clock timers need ticks (a timers edge allowing them, or a wall TTL)?
        Then ``<group>-ticks`` is one more input."""
        edge = self.timers
        wall_timers = isinstance(edge, TimersEdge) and edge.wall
        return wall_timers or (self.ttl is not None and self.ttl[1] == "wall")

    @property
    def timed(self) -> bool:
        """Does the group keep time state (windows, timers, a TTL)? Then it has a
        ``<group>-timers`` changelog."""
        return bool(self.windows or self.timers or self.ttl)

    @property
    def table(self) -> Table:
        """The group table topic, ``<group>-table``."""
        return self.group.table

    @property
    def loop_topic(self) -> Stream:
        """The loop topic, ``<group>-loop``."""
        return self.group.loop

    def input_topics(self) -> list[str]:
        """Topics a processor consumes: the inputs, then the loop topic if declared, then the
        ticks topic if the group ticks (see :attr:`ticking`)."""
        ticks = [self.group.ticks] if self.ticking else []
        return [*self.inputs, *([self.loop_topic] if self.loop else []), *ticks]

    def changelogs(self) -> list[str]:
        """The group's own compacted topics: its table, timers and window tables."""
        table = [self.table] if self.persist else []
        timed = [self.group.timers] if self.timed else []
        return [*table, *timed, *(self.group.window(n) for n in self.windows)]

    def copartitioned_topics(self) -> list[str]:
        """Topics that must have the same partition count: inputs, loop, joins, the group's
        table, timers and window tables."""
        return [*self.input_topics(), *self.joins, *self.changelogs()]

    def edges(self) -> list[Edge]:
        """Every edge, in a stable order."""
        single = [e for e in (self.loop, self.persist, self.timers) if e is not None]
        return [*self.inputs.values(), *single, *self.windows.values(), *self.joins.values(),
                *self.lookups.values(), *self.outputs.values()]  # fmt: skip

    def describe(self) -> str:
        """A readable, multi-line description of the graph."""
        lines = [f"group {self.group}"]
        for edge in self.edges():
            line = edge.describe()
            if edge.kind == "loop":
                line = line.replace("<group>", self.loop_topic)
            elif edge.kind == "persist":
                line = line.replace("<group>", self.table)
            lines.append(f"  {line}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"GroupGraph({self.group!r}, {len(self.inputs)} inputs, table={bool(self.persist)})"


def define_group(
    group: str,
    *edges: Edge | Iterable[Edge],
    nil_handling: NilHandling = "ignore",
    max_future: dt.timedelta | int | None = DEFAULT_MAX_FUTURE,
    concurrency: int = 1,
    retry: Retry | None = None,
    timeout: float | dt.timedelta | None = None,
) -> GroupGraph:
    """Declare and validate a processor group.

    ``nil_handling`` says what happens to input and loop messages without a value (a null
    value, Go's ``nil``), as Go Goka's ``WithNilHandling`` does, with Goka's default:

    - ``"ignore"`` (Goka's ``NilIgnore``): drop them; the callback is not called (their offsets
      still count as processed).
    - ``"process"`` (``NilProcess``): call the callback with ``msg=None``.
    - ``"decode"`` (``NilDecode``): pass them through the edge's codec as empty bytes (as Go
      decodes a nil slice), and call the callback with what it returns.

    Rules (each violation raises :class:`GraphError` naming the offending edge):

    1. The group name is a valid topic name prefix.
    2. At least one ``input`` edge.
    3. At most one ``persist`` and at most one ``loop`` edge.
    4. No topic is declared twice (inputs, outputs, joins, lookups, and the group's own
       table and loop topics).
    5. Outputs may not target the group table or the loop topic (write them with
       ``set_value`` and ``loopback``).
    6. Join and lookup tables differ from the group's own table (read it with ``value``).
    7. Every edge has a codec with ``encode`` and ``decode``.
    8. Callbacks are callables accepting ``(ctx, msg)``: input and loop callbacks may be
       ``async def`` (rule 14), the others (timers, a window's ``late`` and ``merge``) are
       plain.
    9. Topic names use only ``A-Z a-z 0-9 . _ -`` and are at most 249 characters.
    10. ``nil_handling`` is one of ``ignore``, ``process``, ``decode``.
    11. At most one ``timers`` edge; window names are unique; windows, timers and a TTL need
        a ``persist`` edge (their state lives in the group's partition stores).
    12. A window's ``output`` is a declared output edge; ``late="dead-letter"`` is allowed
        (where the dead letters go is the processor's setting).
    13. ``max_future`` (a record's event time may be at most this far ahead of the wall
        clock; None: no bound) is not negative.
    14. ``concurrency`` (the most records of a partition in flight at once, records of a key
        one after another; see :mod:`goka.group.concurrent`) is a whole number of at least
        1. Input and loop callbacks may be ``async def`` (awaited on an event loop) at any
        concurrency; above 1, plain ones run on a pool of that many threads. A group that
        keeps time (windows, timers, a TTL) keeps it per record as one at a time would
        (:mod:`goka.group.timed_flight`); with records in flight (concurrency above 1, an
        async callback, ``retry`` or ``timeout``) its session windows' ``retention`` is at
        least their gap (:func:`~goka.group.retries.check_awaited`).
    15. ``retry`` is None or a :class:`~goka.group.concurrent.Retry` (at least one attempt,
        backoffs not negative, a multiplier of at least 1, ``on`` Exception classes): a
        record whose callback fails is tried again, holding back only its key. ``timeout``
        (None, or positive seconds or a timedelta) cuts a callback's try that takes longer
        (an async one is cancelled; a plain one runs on a thread of its own, left to end,
        what it does after the cut discarded) with :class:`~goka.errors.CallbackTimeout`;
        an ``async def`` timers callback is cut by it too (not retried).

    A record whose event time cannot be had (its extractor raises or returns something else
    than a datetime or milliseconds, it is negative, or beyond ``max_future``) fails like a
    callback would, under the processor's ``on_error`` policy.

    Raises:
        GraphError: if a rule is violated.
    """
    name = _check_group(group)
    if nil_handling not in NIL_HANDLING:
        raise GraphError(
            f"group {group!r}: nil_handling must be one of {NIL_HANDLING}, got {nil_handling!r}"
        )
    flat = _name_windows(name, _flatten(edges))
    for edge in flat:
        _check_edge(name, edge)
    _check_counts(name, flat)
    _check_topics(name, flat)
    by_kind: dict[str, dict[str, Edge]] = {"input": {}, "output": {}, "join": {}, "lookup": {}}
    single: dict[str, Edge] = {}
    windows: dict[str, WindowEdge] = {}
    for edge in flat:
        if isinstance(edge, WindowEdge):
            windows[edge.name] = edge
        elif edge.kind in by_kind:
            by_kind[edge.kind][edge.topic] = edge
        else:
            single[edge.kind] = edge
    _check_time(name, windows, single, by_kind["output"])
    future = None if max_future is None else duration_ms(max_future, "max_future")
    if future is not None and future < 0:
        raise GraphError(f"group {group!r}: max_future must not be negative, got {future} ms")
    graph = GroupGraph(
        name, by_kind["input"], by_kind["output"], by_kind["join"], by_kind["lookup"],
        single.get("loop"), single.get("persist"), nil_handling, windows, single.get("timers"),
        future, check_concurrency(name, concurrency), check_retry(name, retry),
        check_timeout(name, timeout),
    )  # fmt: skip
    check_awaited(graph)
    return graph


def load_graph(spec: str) -> GroupGraph:
    """Import the group graph named ``module:attribute`` (how commands and services get one).

    Raises:
        ConfigurationError: the spec is malformed, the module is missing, or the attribute is
            not a group graph.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"expected module:attribute, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r} for {spec!r}: {exc}") from exc
    graph = getattr(module, attribute, None)
    if not isinstance(graph, GroupGraph):
        raise ConfigurationError(f"{spec} is not a group graph (define_group(...)), got {graph!r}")
    return graph


def _check_group(group: str) -> Group:
    if not isinstance(group, str) or not group or not TOPIC.match(f"{group}-table"):
        raise GraphError(
            f"group name {group!r} is invalid: use 1-243 characters of A-Z a-z 0-9 . _ -"
        )
    return Group(group)


def _flatten(edges: Iterable[Edge | Iterable[Edge]]) -> list[Edge]:
    flat: list[Edge] = []
    for edge in edges:
        if isinstance(edge, Edge):
            flat.append(edge)
        elif isinstance(edge, Iterable) and not isinstance(edge, str | bytes):
            flat.extend(_flatten(edge))
        else:
            raise GraphError(f"expected an edge (input, output, join, ...), got {edge!r}")
    return flat


def _check_edge(group: Group, edge: Edge) -> None:
    where = f"group {group!r}: {edge.kind} edge {edge.topic or ''}".rstrip()
    if edge.kind in ("input", "output", "join", "lookup", "window") and not TOPIC.match(
        edge.topic or ""
    ):
        raise GraphError(
            f"{where}: topic name {edge.topic!r} is invalid: use 1-249 characters of "
            "A-Z a-z 0-9 . _ -"
        )
    codec = edge.codec
    if isinstance(codec, type) and not isinstance(inspect.getattr_static(codec, "encode", None),
                                                  staticmethod):  # fmt: skip
        raise GraphError(f"{where}: got the codec class {codec.__name__}, not a codec: did you "
                         f"mean {codec.__name__}()?")  # fmt: skip
    if codec is None or not (callable(getattr(codec, "encode", None))
                             and callable(getattr(codec, "decode", None))):  # fmt: skip
        raise GraphError(f"{where}: needs a codec with encode() and decode(), got {codec!r}")
    if edge.kind in ("input", "loop"):
        check_callback(where, edge.callback, awaitable=True)
    if edge.kind == "timers":
        check_callback(where, edge.callback, ("ctx", "timer"), awaitable=True)


def _name_windows(group: Group, edges: list[Edge]) -> list[Edge]:
    """Give each window edge its changelog topic, ``<group>-window-<name>``."""
    return [
        WindowEdge(**{**e.__dict__, "topic": group.window(e.name)})
        if isinstance(e, WindowEdge) else e
        for e in edges
    ]  # fmt: skip


def _check_time(
    group: Group, windows: Mapping[str, WindowEdge], single: Mapping[str, Edge],
    outputs: Mapping[str, Edge],
) -> None:  # fmt: skip
    persist = single.get("persist")
    needs = [*(f"window edge {n!r}" for n in windows), *(["timers edge"] if "timers" in single
                                                          else [])]  # fmt: skip
    if needs and persist is None:
        raise GraphError(
            f"group {group!r}: {needs[0]} needs a persist edge (time state lives in the "
            "group's partition stores)"
        )
    for edge in windows.values():
        if edge.output is not None and edge.output not in outputs:
            raise GraphError(
                f"group {group!r}: window edge {edge.name!r} writes to {edge.output!r}, which "
                f"is not an output edge; declare output({edge.output!r}, codec)"
            )


def _check_counts(group: Group, edges: list[Edge]) -> None:
    kinds = [edge.kind for edge in edges]
    if "input" not in kinds:
        raise GraphError(f"group {group!r}: needs at least one input edge")
    for kind in ("persist", "loop", "timers"):
        if kinds.count(kind) > 1:
            raise GraphError(f"group {group!r}: {kinds.count(kind)} {kind} edges, at most one")


def _check_topics(group: Group, edges: list[Edge]) -> None:
    own = {group.table: "persist", group.loop: "loop", group.timers: "timers",
           group.ticks: "timers"}  # fmt: skip
    declared = {own[t]: t for t in own if own[t] in {e.kind for e in edges}}
    seen: dict[str, Edge] = {}
    for edge in edges:
        topic = edge.topic
        if not topic:
            continue
        if edge.kind == "output" and topic in own:
            raise GraphError(
                f"group {group!r}: output edge {topic} writes the group's {own[topic]} topic; "
                f"use ctx.{'set_value' if own[topic] == 'persist' else 'loopback'} instead"
            )
        if edge.kind in ("join", "lookup") and topic == group.table:
            raise GraphError(
                f"group {group!r}: {edge.kind} edge {topic} is the group's own table; "
                "read it with ctx.value()"
            )
        if topic in declared.values():
            kind = next(k for k, t in declared.items() if t == topic)
            raise GraphError(
                f"group {group!r}: {edge.kind} edge {topic} is already the group's {kind} topic"
            )
        if topic in seen:
            raise GraphError(
                f"group {group!r}: topic {topic} declared twice ({seen[topic].kind} and "
                f"{edge.kind} edges)"
            )
        seen[topic] = edge
