"""Run group graphs in-process, without Kafka or Spark, for unit tests (like Go Goka's tester).

Example::

    tester = Tester(click_count.graph)
    tester.consume("user-clicks", "alice", "/home")
    assert tester.table_value("clicks-table", "alice") == 1

The tester runs the same engine core as the Spark processor. Values pass through the real codecs
(encoded when consumed, decoded by the callbacks, encoded again when emitted), so codec mistakes
show up in tests. Everything happens synchronously in :meth:`Tester.consume`: the message, then
every emit, loopback and table update it causes, across all registered groups, in order.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from goka.codec import BytesCodec, Codec, alike
from goka.errors import ConfigurationError, GokaError, ProcessingError
from goka.group.edges import spelled
from goka.group.effects import EMIT, FINAL, LOOP, TABLE, TIMER, WINDOW, BatchResult, Effect, Message
from goka.group.engine import POLICIES, Engine, ErrorPolicy
from goka.group.graph import GroupGraph
from goka.keys import key_bytes, key_str
from goka.partitioner import partition_for
from goka.processing.settings import GUARANTEES
from goka.storage.base import WriteBatch
from goka.storage.memory import MemoryStorage
from goka.tester.records import QueueTracker, Record
from goka.time.pending_rows import section_graces
from goka.time.rows import decode_composite, section_rows
from goka.time.specs import Window

__all__ = ["QueueTracker", "Record", "Tester"]


class Tester:
    """An in-memory Kafka for group graphs.

    Args:
        graphs: the groups to run; more can be added with :meth:`add`. Groups are connected
            through their topics: one group's output can be another's input, and a group can
            join or look up another group's table.
        partitions: partitions of every topic (keys are spread by FNV-1a, like Goka).
        max_messages: stop a :meth:`consume` that causes more messages than this (a loop).
        now: the tester's wall clock at the start, in ms since the epoch (default: the
            system's time then). It moves only with :meth:`advance_time`; messages consumed
            without a timestamp get it.
        guarantee: the processor's setting, checked and otherwise ignored: nothing crashes
            in the tester, so each message's effects happen once under either.
        completion_seed: the order in which records in flight together finish (a group with
            ``concurrency``, records given to :meth:`consume_many`): random, drawn from this
            seed, as the network would; a test that passes for a few seeds does not depend
            on the order in which different keys' records finish. (Async callbacks: plain
            ones above concurrency 1 run on threads, which finish as the system runs them.)
        on_error: the processor's policy for a record whose callback fails: ``fail`` (the
            default) raises from :meth:`consume`; ``skip`` and ``dead-letter`` undo the
            record's changes, go on, and keep it with its error in :attr:`failed`.

    Attributes:
        failed: the records the policy skipped, each ``(error, message)`` (and those late for
            a window whose ``late`` is ``dead-letter``): a processor's dead letters.
    """

    __test__ = False  # not a pytest test class, though its name starts with "Test"

    def __init__(
        self, *graphs: GroupGraph, partitions: int = 1, max_messages: int = 100_000,
        now: int | None = None, guarantee: str = "at-least-once", completion_seed: int = 0,
        on_error: ErrorPolicy = "fail",
    ) -> None:  # fmt: skip
        self.on_error: ErrorPolicy = spelled(on_error, "on_error")  # type: ignore[assignment]
        if guarantee not in GUARANTEES or self.on_error not in POLICIES:
            raise ConfigurationError(f"guarantee must be one of {GUARANTEES}, on_error one of "
                                     f"{POLICIES}; got {guarantee!r}, {on_error!r}")  # fmt: skip
        self.failed: list[tuple[ProcessingError, Message]] = []
        if partitions < 1:
            raise ConfigurationError(f"partitions must be at least 1, got {partitions}")
        self.partitions = partitions
        self.max_messages = max_messages
        self._graphs: dict[str, GroupGraph] = {}
        self._codecs: dict[str, Codec[Any]] = {}
        self._consumers: dict[str, list[GroupGraph]] = {}
        self._logs: dict[str, list[Record]] = {}
        self._offsets: dict[tuple[str, int], int] = {}
        self._tables: dict[str, dict[str, bytes]] = {}
        self._engines: dict[tuple[str, int], Engine] = {}
        self._pending: deque[tuple[GroupGraph, Record]] = deque()
        self._sections: dict[tuple[str, int], dict[str, MemoryStorage]] = {}
        self._graces: dict[str, dict[str, int | None]] = {}  # per group: see section_graces
        self.now = int(time.time() * 1000) if now is None else now
        self.completion_seed = completion_seed
        for graph in graphs:
            self.add(graph)

    def add(self, graph: GroupGraph) -> None:
        """Register a group graph.

        Raises:
            ConfigurationError: a group of that name is already registered, or a topic it
                declares was declared with another codec.
        """
        if graph.group in self._graphs:
            raise ConfigurationError(f"group {graph.group!r} is already registered")
        topics = [({"loop": graph.loop_topic, "persist": graph.table}.get(e.kind, e.topic), e)
                  for e in graph.edges() if e.kind != "timers"]  # fmt: skip
        for topic, edge in topics:  # (a BytesCodec gives way to one that reads values)
            known = self._codecs.get(topic, edge.codec)
            if not alike(known, edge.codec):
                raise ConfigurationError(f"group {graph.group!r}: {topic!r} with {edge.codec!r}"
                                         f", but an earlier group's with {known!r}")  # fmt: skip
        self._graphs[graph.group] = graph
        self._graces[graph.group] = section_graces(graph)
        for topic, edge in topics:
            if isinstance(self._codecs.setdefault(topic, edge.codec), BytesCodec):
                self._codecs[topic] = edge.codec
            if edge.kind in ("persist", "join", "lookup", "window"):
                self._tables.setdefault(topic, {})
        for topic in graph.input_topics():
            self._consumers.setdefault(topic, []).append(graph)

    # -- feeding and running ---------------------------------------------------------------------
    def consume(
        self,
        topic: str,
        key: str | bytes,
        value: Any,
        *,
        headers: Mapping[str, bytes] | None = None,
        timestamp: int | None = None,
    ) -> Record:
        """Write a message to ``topic`` (encoded with the topic's codec) and process everything
        it causes. Returns the stored record. ``key`` is text or any bytes (:mod:`goka.keys`);
        ``value=None`` writes a message without a value (see ``define_group(nil_handling=)``).

        Raises:
            ConfigurationError: no registered group declares ``topic``.
            CodecError: the topic's codec cannot encode ``value``.
            ProcessingError: a callback failed (the message's effects are not applied).
        """
        data = None if value is None else self.codec(topic).encode(value)
        return self.consume_raw(topic, key, data, headers=headers, timestamp=timestamp)

    def consume_raw(
        self,
        topic: str,
        key: str | bytes,
        data: bytes | None,
        *,
        headers: Mapping[str, bytes] | None = None,
        timestamp: int | None = None,
    ) -> Record:
        """Like :meth:`consume` with an already encoded value (e.g. to test bad input)."""
        when = self.now if timestamp is None else timestamp
        record = self._append(topic, key_str(key), data, tuple((headers or {}).items()), when)
        self._run()
        return record

    def consume_many(self, topic: str, items: Iterable[tuple[Any, ...]], *,
                     timestamp: int | None = None) -> list[Record]:  # fmt: skip
        """Write the messages ``(key, value)`` (or ``(key, value, timestamp)``: its timestamp
        in ms, by default ``timestamp``, else the tester's clock) to ``topic`` and process them
        together: each group's records of a partition in one batch, as a processor's task
        would get them (with ``concurrency``, several in flight, finishing in the order drawn
        from ``completion_seed``); then everything they cause, as :meth:`consume` does.
        Returns the stored records.

        Raises:
            as :meth:`consume`.
        """
        codec, when = self.codec(topic), self.now if timestamp is None else timestamp
        records = [self._append(topic, key_str(item[0]), None if item[1] is None else
                                codec.encode(item[1]), (), item[2] if len(item) > 2 else when)
                   for item in items]  # fmt: skip
        batches: dict[tuple[str, int], list[Record]] = {}
        for graph, record in self._pending:
            batches.setdefault((graph.group, record.partition), []).append(record)
        self._pending.clear()
        try:
            for (group, partition), batch in batches.items():
                graph, rest = self._graphs[group], [r.message() for r in batch]
                engine = self._engine(graph, partition)
                while True:  # (a call may end early: a group that keeps time goes on after)
                    result = engine.process(rest)
                    self._apply_all(graph, result, partition)
                    rest = rest[result.consumed :]
                    if not rest and not engine.backlog:
                        break
        except BaseException:
            self._pending.clear()  # (what the batches before caused)
            raise
        self._run()
        return records

    def _append(
        self, topic: str, key: str, data: bytes | None, headers: tuple[tuple[str, bytes], ...],
        timestamp: int, partition: int | None = None,
    ) -> Record:  # fmt: skip
        if partition is None or partition < 0:
            partition = partition_for(key_bytes(key), self.partitions)
        offset = self._offsets.get((topic, partition), 0)
        self._offsets[(topic, partition)] = offset + 1
        record = Record(topic, partition, offset, key, data, headers, timestamp)
        self._logs.setdefault(topic, []).append(record)
        for graph in self._consumers.get(topic, ()):
            self._pending.append((graph, record))
        return record

    def _run(self) -> None:
        steps = 0
        try:
            while self._pending:
                graph, record = self._pending.popleft()
                steps += 1
                if steps > self.max_messages:
                    raise GokaError(
                        f"one consume() caused more than {self.max_messages} messages; "
                        "do groups emit to each other in a loop?"
                    )
                self._process(graph, record)
        finally:
            self._pending.clear()

    def _process(self, graph: GroupGraph, record: Record) -> None:
        result = self._engine(graph, record.partition).process([record.message()])
        self._apply_all(graph, result, record.partition)

    def _apply_all(self, graph: GroupGraph, result: BatchResult, partition: int) -> None:
        self.failed += result.failed
        for effect in result.effects:
            self._apply(effect, partition, graph)

    def _engine(self, graph: GroupGraph, partition: int) -> Engine:
        engine = self._engines.get((graph.group, partition))
        if engine is None:
            readers = {
                t: self._tables.setdefault(t, {}).get for t in (*graph.joins, *graph.lookups)
            }
            store = self._tables.setdefault(graph.table, {}).get
            sections = self._sections.setdefault((graph.group, partition), {})
            if graph.timed:
                for topic in graph.changelogs()[1:]:
                    sections[topic] = MemoryStorage(topic)
            windows = {n: sections[graph.group.window(n)] for n in graph.windows}
            engine = Engine(
                graph, partition, store=store, tables=readers, pause_gc=False,
                timers=sections.get(graph.group.timers), windows=windows, on_error=self.on_error,
                clock=lambda: self.now,
                shuffle=random.Random(f"{self.completion_seed} {graph.group} {partition}"),
            )  # fmt: skip
            self._engines[(graph.group, partition)] = engine
        return engine

    def _apply(self, effect: Effect, partition: int, graph: GroupGraph) -> None:
        kind, topic, key, data, headers, source = effect
        if kind in (TIMER, WINDOW):
            section = self._sections[(graph.group, partition)][topic]
            rows = section_rows(section.get, key, data, grace=self._graces[graph.group][topic])
            section.write(WriteBatch(values=rows))
            if kind == WINDOW:
                self._set(self._tables.setdefault(topic, {}), key, data)
            self._append(topic, key, data, (), source[4], partition)
        elif kind == TABLE:
            self._set(self._tables.setdefault(topic, {}), key, data)
            self._append(topic, key, data, (), source[4], partition)
        elif kind in (EMIT, LOOP, FINAL):
            self._append(topic, key, data, tuple(headers or ()), source[4])

    @staticmethod
    def _set(table: dict[str, bytes], key: str, data: bytes | None) -> None:
        if data is None:
            table.pop(key, None)
        else:
            table[key] = data

    # -- time ------------------------------------------------------------------------------------
    def advance_time(self, delta: int | dt.timedelta) -> None:
        """Move the wall clock forward by ``delta`` (ms or a timedelta) and fire the wall
        timers due, in every group and partition, with everything they cause."""
        step = delta if isinstance(delta, int) else round(delta.total_seconds() * 1000)
        if step < 0:
            raise ConfigurationError(f"time only moves forward, not by {step} ms")
        self.now += step
        self._tick(None, None)

    def advance_stream_time(self, group: str, to: int | dt.datetime, *,
                            partition: int | None = None) -> None:  # fmt: skip
        """Move ``group``'s stream time (of ``partition``, default: every partition) forward
        to ``to`` without a record, and fire what that makes due (stream timers, windows
        that close, TTLs), with everything it causes."""
        if not self._graph(group).timed or partition not in (None, *range(self.partitions)):
            raise ConfigurationError(f"group {group!r} keeps no stream time (no window, timers "
                                     f"or ttl), or has no partition {partition}")  # fmt: skip
        at = to if isinstance(to, int) else round(to.timestamp() * 1000)
        self._tick(group, at, partition)

    def stream_time(self, group: str, partition: int = 0) -> int:
        """``group``'s stream time in ``partition`` (-1: no record yet)."""
        engine = self._engine(self._graph(group), partition)
        return -1 if engine.time is None else engine.time.stream_time

    def _tick(self, group: str | None, at: int | None, partition: int | None = None) -> None:
        for graph in self._graphs.values():
            if not graph.timed or (group is not None and graph.group != group):
                continue
            for number in range(self.partitions) if partition is None else [partition]:
                result = self._engine(graph, number).tick(stream_time=at)
                self._apply_all(graph, result, number)
        self._run()

    def windows(self, group: str, name: str, key: str | bytes) -> list[tuple[Window, Any]]:
        """The windows of ``key`` in ``group``'s window table ``name``, earliest first, with
        their decoded values."""
        graph = self._graph(group)
        edge = graph.windows.get(name)
        if edge is None:
            raise ConfigurationError(f"group {group!r} has no window {name!r}")
        key = key_str(key)
        found = []
        for row, data in self._table(edge.topic).items():
            owner, start, end = decode_composite(row)
            if owner == key:
                found.append((Window(start, end), edge.codec.decode(data)))
        return sorted(found)

    def _graph(self, group: str) -> GroupGraph:
        if group not in self._graphs:
            raise ConfigurationError(f"group {group!r} is not registered")
        return self._graphs[group]

    # -- tables ------------------------------------------------------------------------------------
    def table_value(self, table: str, key: str | bytes) -> Any:
        """Return the decoded value of ``key`` in ``table`` (a group table or a joined table)."""
        data = self._table(table).get(key_str(key))
        return None if data is None else self.codec(table).decode(data)

    def set_table_value(self, table: str, key: str | bytes, value: Any) -> None:
        """Seed ``table`` (a joined or looked-up one) with ``value`` for ``key`` (``None``
        deletes it). Nothing is processed: tables are read, not consumed."""
        target, key = self._table(table), key_str(key)
        if value is None:
            target.pop(key, None)
        else:
            target[key] = self.codec(table).encode(value)

    def table(self, table: str) -> dict[str, Any]:
        """Return a decoded copy of all of ``table``."""
        decode = self.codec(table).decode
        return {key: decode(data) for key, data in self._table(table).items()}

    def _table(self, table: str) -> dict[str, bytes]:
        if table not in self._tables:
            known = ", ".join(sorted(self._tables)) or "none"
            raise ConfigurationError(f"{table!r} is not a table of a registered group ({known})")
        return self._tables[table]

    # -- topics ------------------------------------------------------------------------------------
    def codec(self, topic: str) -> Codec[Any]:
        """Return the codec the registered groups declare for ``topic``.

        Raises:
            ConfigurationError: no registered group declares ``topic``.
        """
        codec = self._codecs.get(topic)
        if codec is None:
            known = ", ".join(sorted(self._codecs)) or "none"
            raise ConfigurationError(f"no registered group declares topic {topic!r} ({known})")
        return codec

    def messages(self, topic: str) -> list[Record]:
        """Every message written to ``topic`` so far, in the order written."""
        return list(self._logs.get(topic, ()))

    def queue_tracker(self, topic: str) -> QueueTracker:
        """Return a tracker of the messages written to ``topic`` from now on."""
        return QueueTracker(self, topic, self.codec(topic))

    def producer_builder(self, config: Mapping[str, Any]) -> Any:
        """Build a producer writing into this tester: ``Emitter(..., producer_builder=this)``.

        Emitted messages are processed at once, before ``emit`` returns.
        """
        from goka.tester.producer import TesterProducer

        return TesterProducer(self.write, self.codec, self.partitions)

    def write(
        self, topic: str, key: str, data: bytes | None, headers: tuple[tuple[str, bytes], ...],
        timestamp: int, partition: int | None = None,
    ) -> Record:  # fmt: skip
        """Append an encoded message to ``topic`` and process what it causes (for producers)."""
        record = self._append(topic, key, data, headers, timestamp, partition)
        self._run()
        return record
