"""Group graphs: a processor group declared as edges, like Go Goka's ``DefineGroup``.

Example::

    def count(ctx, msg):
        ctx.set_value((ctx.value() or 0) + 1)

    graph = define_group("clicks", input("user-clicks", StringCodec(), count),
                         persist(Int64Codec()))
    graph.table  # "clicks-table"
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from goka.codec import Codec
from goka.errors import ConfigurationError, GraphError

if TYPE_CHECKING:
    from goka.context import Context

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
]

#: ``callback(ctx, msg)``: processes one message; its return value is ignored.
Callback = Callable[["Context[Any]", Any], object]

#: What a group does with messages that have no value; see :func:`define_group`.
NilHandling = Literal["ignore", "process", "decode"]
NIL_HANDLING = ("ignore", "process", "decode")

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}\Z")


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


@dataclass(frozen=True)
class Edge:
    """One edge of a group graph; build them with the functions of this module."""

    kind: str
    topic: str
    codec: Codec[Any]
    callback: Callback | None = field(default=None, compare=False)

    def describe(self) -> str:
        """One line: ``input user-clicks (string) -> count``."""
        target = f" -> {_callable_name(self.callback)}" if self.callback else ""
        return f"{self.kind:<7} {self.topic or '<group>'} ({_codec_name(self.codec)}){target}"


def input(topic: str, codec: Codec[Any], callback: Callback) -> Edge:
    """Consume stream ``topic``, decoding values with ``codec``, calling ``callback(ctx, msg)``."""
    return Edge("input", Stream(topic), codec, callback)


def inputs(topics: Iterable[str], codec: Codec[Any], callback: Callback) -> tuple[Edge, ...]:
    """Consume several streams with one codec and one callback."""
    return tuple(input(topic, codec, callback) for topic in topics)


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


def persist(codec: Codec[Any]) -> Edge:
    """Keep per-key state in the group table ``<group>-table``, encoded with ``codec``."""
    return Edge("persist", "", codec)


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

    @property
    def table(self) -> Table:
        """The group table topic, ``<group>-table``."""
        return self.group.table

    @property
    def loop_topic(self) -> Stream:
        """The loop topic, ``<group>-loop``."""
        return self.group.loop

    def input_topics(self) -> list[str]:
        """Topics processed by callbacks: the inputs, then the loop topic if declared."""
        return [*self.inputs, *([self.loop_topic] if self.loop else [])]

    def copartitioned_topics(self) -> list[str]:
        """Topics that must have the same partition count: inputs, loop, joins, group table."""
        table = [self.table] if self.persist else []
        return [*self.input_topics(), *self.joins, *table]

    def edges(self) -> list[Edge]:
        """Every edge, in a stable order."""
        single = [e for e in (self.loop, self.persist) if e is not None]
        return [*self.inputs.values(), *single, *self.joins.values(), *self.lookups.values(),
                *self.outputs.values()]  # fmt: skip

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
    group: str, *edges: Edge | Iterable[Edge], nil_handling: NilHandling = "ignore"
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
    8. Callbacks are plain callables accepting ``(ctx, msg)``, not coroutine functions.
    9. Topic names use only ``A-Z a-z 0-9 . _ -`` and are at most 249 characters.
    10. ``nil_handling`` is one of ``ignore``, ``process``, ``decode``.

    Raises:
        GraphError: if a rule is violated.
    """
    name = _check_group(group)
    if nil_handling not in NIL_HANDLING:
        raise GraphError(
            f"group {group!r}: nil_handling must be one of {NIL_HANDLING}, got {nil_handling!r}"
        )
    flat = _flatten(edges)
    for edge in flat:
        _check_edge(name, edge)
    _check_counts(name, flat)
    _check_topics(name, flat)
    by_kind: dict[str, dict[str, Edge]] = {"input": {}, "output": {}, "join": {}, "lookup": {}}
    single: dict[str, Edge] = {}
    for edge in flat:
        if edge.kind in by_kind:
            by_kind[edge.kind][edge.topic] = edge
        else:
            single[edge.kind] = edge
    return GroupGraph(
        name, by_kind["input"], by_kind["output"], by_kind["join"], by_kind["lookup"],
        single.get("loop"), single.get("persist"), nil_handling,
    )  # fmt: skip


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
    if not isinstance(group, str) or not group or not _TOPIC.match(f"{group}-table"):
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
    if edge.kind in ("input", "output", "join", "lookup") and not _TOPIC.match(edge.topic or ""):
        raise GraphError(
            f"{where}: topic name {edge.topic!r} is invalid: use 1-249 characters of "
            "A-Z a-z 0-9 . _ -"
        )
    codec = edge.codec
    if codec is None or not (callable(getattr(codec, "encode", None))
                             and callable(getattr(codec, "decode", None))):  # fmt: skip
        raise GraphError(f"{where}: needs a codec with encode() and decode(), got {codec!r}")
    if edge.kind in ("input", "loop"):
        _check_callback(where, edge.callback)


def _check_callback(where: str, callback: object) -> None:
    if not callable(callback):
        raise GraphError(f"{where}: callback must be callable, got {callback!r}")
    if inspect.iscoroutinefunction(callback):
        raise GraphError(f"{where}: callback {_callable_name(callback)} is async; use a def")
    try:
        inspect.signature(callback).bind(None, None)
    except TypeError:
        raise GraphError(
            f"{where}: callback {_callable_name(callback)} must accept (ctx, msg)"
        ) from None
    except ValueError:  # builtins without signatures: accept, they fail loudly when called
        pass


def _check_counts(group: Group, edges: list[Edge]) -> None:
    kinds = [edge.kind for edge in edges]
    if "input" not in kinds:
        raise GraphError(f"group {group!r}: needs at least one input edge")
    for kind in ("persist", "loop"):
        if kinds.count(kind) > 1:
            raise GraphError(f"group {group!r}: {kinds.count(kind)} {kind} edges, at most one")


def _check_topics(group: Group, edges: list[Edge]) -> None:
    own = {group.table: "persist", group.loop: "loop"}
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


def _callable_name(callback: object) -> str:
    return str(getattr(callback, "__qualname__", None) or getattr(callback, "__name__", callback))


def _codec_name(codec: object) -> str:
    return str(getattr(codec, "name", type(codec).__name__))
