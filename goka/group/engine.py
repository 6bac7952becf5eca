"""The engine core: runs a group graph's callbacks over the messages of one partition.

Pure Python, no I/O. Drivers (the in-memory tester, the Spark partition processor) read messages,
hand them to :meth:`Engine.process` in partition/offset order, and then do what the returned
:class:`BatchResult` says: produce its effects in order and commit its state changes. Both
drivers share this code, so they cannot drift apart.
"""

from __future__ import annotations

import gc
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from time import time_ns
from typing import Any, Literal

from goka.errors import (
    Abort,
    ConfigurationError,
    ContextError,
    EventTimeError,
    ProcessingError,
    StorageError,
)
from goka.group.carried import Carrying
from goka.group.concurrent import Records, awaited_now, run_concurrently
from goka.group.context import Context
from goka.group.edges import awaited
from goka.group.effects import NOT_SAVED, BatchResult, Effect, Message, restore
from goka.group.firing import TimedProcessing
from goka.group.graph import Callback, Edge, GroupGraph
from goka.keys import decode_text, key_str
from goka.time.event_time import EventTimes
from goka.time.overlay import Section
from goka.time.partition import PartitionTime
from goka.time.window_cache import WINDOW_CACHE

__all__ = ["POLICIES", "Engine", "ErrorPolicy", "TableReader"]

#: Reads the raw value of a key in a table (state store, joined or looked-up table).
TableReader = Callable[[str], bytes | None]

#: What to do with a message that cannot be decoded or whose callback raises.
ErrorPolicy = Literal["fail", "skip", "dead-letter"]
POLICIES = ("fail", "skip", "dead-letter")


class Engine(TimedProcessing, Carrying):
    """Runs the callbacks of ``graph`` for one partition.

    Not thread-safe: one engine per (group, partition), used by one thread.

    Args:
        graph: the group graph.
        partition: the partition number (messages of other partitions must not be passed).
        store: reads the committed state of a key (the group table's content).
        tables: readers of the joined and looked-up tables, by topic.
        on_error: ``fail`` raises ProcessingError at the first bad message; ``skip`` and
            ``dead-letter`` roll back that message's effects, record it in
            :attr:`BatchResult.failed` and go on (the driver writes dead letters).
        pause_gc: disable Python's cyclic garbage collector while a batch is processed (it is
            process-wide; re-enabled afterwards). Every effect is a new container object, and
            the collector's passes over them measured 30% of a batch's time. Reference cycles
            made by callbacks are collected after the batch.
        max_message_bytes: a state, emit or loopback that encodes to more bytes raises
            :class:`MessageTooLargeError` in the callback (None: no limit).
        timers, windows: the committed timers section and window sections of the partition
            store (required for a timed group: windows, timers or a TTL).
        clock: the wall clock in ms (default: the system's).
        fire_budget: the most timers, window closes and expiries a call fires (None: no
            limit). A record that makes more due (a stream time jump over a million timers)
            stops the call after it: the rest is the :attr:`backlog`, fired first by the
            next call (attributed to that record), so the caller can commit in between and
            memory stays bounded, in the same order as without a budget. (Closes without
            effects, those of ``deferred_finals``, are not counted.)
        deferred_finals: a window emitting final results closes without an effect: the
            runtime produces its result from the store after the commit (and keeps the
            window until then: :mod:`goka.processing.finals`). False (the tester): the
            result is an effect of the close.
        window_cache: how many windows of each window table (of fixed windows) the engine
            keeps with their values until they close, to read them without the store
            (:mod:`goka.time.window_cache`; 0: none).
        whole_commits: the changelogs are replayed by whole commits (exactly-once): no
            changelog row carries the stream time (:class:`~goka.time.partition.PartitionTime`).

    Raises:
        ConfigurationError: unknown policy, a join/lookup table without a reader, or a timed
            group without its sections.
    """

    def __init__(
        self,
        graph: GroupGraph,
        partition: int,
        *,
        store: TableReader,
        tables: Mapping[str, TableReader] | None = None,
        on_error: ErrorPolicy = "fail",
        pause_gc: bool = True,
        max_message_bytes: int | None = None,
        timers: Section | None = None,
        windows: Mapping[str, Section] | None = None,
        clock: Callable[[], int] | None = None,
        fire_budget: int | None = None,
        deferred_finals: bool = False,
        window_cache: int = WINDOW_CACHE,
        whole_commits: bool = False,
        shuffle: random.Random | None = None,
    ) -> None:
        if on_error not in POLICIES:
            raise ConfigurationError(f"on_error must be one of {POLICIES}, got {on_error!r}")
        tables = tables or {}
        missing = [t for t in (*graph.joins, *graph.lookups) if t not in tables]
        if missing:
            raise ConfigurationError(f"group {graph.group!r}: no reader for tables {missing}")
        self.graph = graph
        self.partition = partition
        self.on_error = on_error
        self.shuffle = shuffle  # records in flight finish in its order (the tester's)
        self.pause_gc = pause_gc
        self.max_message_bytes = sys.maxsize if max_message_bytes is None else max_message_bytes
        if fire_budget is not None and fire_budget < 1:
            raise ConfigurationError(f"fire_budget must be at least 1, got {fire_budget}")
        self.fire_budget = fire_budget
        self.nil_handling = graph.nil_handling
        self._readers = {
            kind: {t: (tables[t], e.codec.decode) for t, e in edges.items()}
            for kind, edges in (("join", graph.joins), ("lookup", graph.lookups))
        }
        self._routes = {t: _route(e) for t, e in graph.inputs.items()}
        self._codecs = {t: e.codec for t, e in graph.inputs.items()}
        if graph.loop:
            self._routes[graph.loop_topic] = _route(graph.loop)
            self._codecs[graph.loop_topic] = graph.loop.codec
        self._carried = None  # records in flight across calls (goka.group.carried)
        #: records in flight together, or async callbacks (goka.group.concurrent)
        self._concurrent = (graph.concurrency > 1 or graph.retry is not None
                            or graph.timeout is not None
                            or any(awaited(c) for _, c in self._routes.values()))  # fmt: skip
        self.time: PartitionTime | None = None
        undo = on_error != "fail"
        if graph.timed:
            windows = windows or {}
            if timers is None or any(n not in windows for n in graph.windows):
                raise ConfigurationError(f"group {graph.group!r} keeps time: its engine needs "
                                         "the timers section and every window's")  # fmt: skip
            self.time = PartitionTime(graph, partition, timers=timers, windows=windows,
                                      clock=clock or _wall_ms, undo=undo,
                                      deferred_finals=deferred_finals,
                                      window_cache=window_cache,
                                      whole_commits=whole_commits)  # fmt: skip
        self._times = EventTimes(graph, self.time.clock if self.time else _wall_ms)
        persist = graph.persist
        self.context: Context[Any] = Context(
            graph.group, partition, table=graph.table, store_get=store,
            state=(persist.codec.decode, persist.codec.encode) if persist else None,
            outputs={t: e.codec.encode for t, e in graph.outputs.items()},
            loop=(graph.loop_topic, graph.loop.codec.encode) if graph.loop else None,
            read_table=_table_reader(graph.group, self._readers), max_bytes=self.max_message_bytes,
            undo=undo, time=self.time,
        )  # fmt: skip
        self._reset()

    def _reset(self) -> None:
        self.effects: list[Effect] = []
        self.cache: dict[str, Any] = {}
        if hasattr(self, "context"):
            self.context._bind(self.cache, self.effects)

    def process(self, messages: Sequence[Message], *, after: Message | None = None) -> BatchResult:
        """Run the callbacks over ``messages`` (in offset order) and return what they did.

        A timed group first fires what is due already: the :attr:`backlog`, or, given
        ``after`` (the record before ``messages``, to which it is attributed), what a store
        committed inside a backlog left.

        Raises:
            ProcessingError: under the ``fail`` policy, for the first message that cannot be
                decoded or whose callback raises; after ``ctx.fail()`` under any policy.
        """
        result = BatchResult(self.effects, processed=len(messages), consumed=len(messages))
        if self.time is not None:  # the sections as committed now (after the last batch)
            self.time.begin(self.effects)
        pause_gc = self.pause_gc and gc.isenabled() and not self._concurrent  # (it would pause
        # every thread's collection while records wait on the network)
        if pause_gc:
            gc.disable()
        try:
            if self.time is not None and self._concurrent:  # (records in flight, async
                # callbacks, retries or timeouts in a group that keeps time)
                run_concurrently(self._records(), self._timed_start(messages, result, after),
                                 result)  # fmt: skip
                self._timed_end(result)
            elif self.time is not None or (self._times.custom and not self._concurrent):
                self._process_timed(messages, result, after)
            elif self._concurrent:
                run_concurrently(self._records(), messages, result)
            elif self.on_error == "fail":
                self._process(messages, result)
            else:
                self._process_undoable(messages, result)
            if self.time is not None:
                result.windows = self.time.window_changes()
        except BaseException:
            if self.time is not None:
                self.time.abandon()
            raise
        finally:
            if pause_gc:
                gc.enable()
            if self.time is not None:
                self.time.wall_now = None  # (a call of records in flight read it once)
            self._reset()
        return result

    def _records(self) -> Records:
        """What :func:`run_concurrently` uses of this engine."""
        timed = self.time is not None
        return Records(self.graph.concurrency, self.context, self.cache, self.effects,
                       self._routes, self.nil_handling, self._failed, self._fatal,
                       self.graph.retry, self.graph.timeout, self.graph.group, self.shuffle,
                       self._times if self._times.custom or timed else None,
                       self._timed_flight if timed else None,
                       self._ticks if timed else None)  # fmt: skip

    @property
    def backlog(self) -> bool:
        """Is something left due by the last call (it hit the ``fire_budget``)? The next
        call fires it first (a call without messages fires only that)."""
        return self.time is not None and self.time.backlog is not None

    def committed(self) -> None:
        """The caller committed what the calls so far did: the time state reads what is
        due afresh from the committed sections (what it kept in memory goes)."""
        if self.time is not None:
            self.time.reread()

    def tick(self, *, stream_time: int | None = None) -> BatchResult:
        """Fire what is due without a record: wall timers due by the clock, and, if
        ``stream_time`` moves the partition's stream time forward, what that makes due
        (stream timers, window closes). Effects are attributed to the timers topic.

        Raises:
            ContextError: the group keeps no time.
            ProcessingError: as :meth:`process`.
        """
        time = self.time
        if time is None:
            raise ContextError(f"group {self.graph.group!r} keeps no time")
        result = BatchResult(self.effects)
        time.begin(self.effects)
        trigger: Message = (time.timers_topic, -1, None, None, time.clock(), None)
        try:
            before = time.stream_time
            if stream_time is not None and stream_time > before:
                time.stream_time = stream_time
            self._fire_due(trigger, result)
            if time.stream_time > before:
                time.raised(trigger, 0)
            time.finish()
        except BaseException:
            time.abandon()
            raise
        finally:
            self._reset()
        return result

    def _process(self, messages: Sequence[Message], result: BatchResult) -> None:
        """The hot loop: each line here costs on every message, so it stays minimal."""
        ctx, routes, nil, text = self.context, self._routes, self.nil_handling, decode_text
        for message in messages:
            raw_value = message[3]
            if raw_value is None and nil == "ignore":
                continue
            ctx._message = message
            try:
                raw_key = message[2]
                ctx.key = text(raw_key) if raw_key is not None else ""
                decode, callback = routes[message[0]]
                if raw_value is not None:
                    out = callback(ctx, decode(raw_value))
                else:
                    out = callback(ctx, None if nil == "process" else decode(b""))
                if out is not None:  # (a def that returned a coroutine: awaited)
                    awaited_now(out, None, (self.graph.group, self.partition, message,
                                            ctx.key, callback))  # fmt: skip
            except Exception as exc:
                self._failed(exc, message, 0, result)

    def _process_undoable(self, messages: Sequence[Message], result: BatchResult) -> None:
        """Like :meth:`_process`, remembering how to undo each message (skip, dead-letter)."""
        ctx, routes, effects = self.context, self._routes, self.effects
        nil, text = self.nil_handling, decode_text
        for message in messages:
            raw_value = message[3]
            if raw_value is None and nil == "ignore":
                continue
            ctx._message, ctx._saved, mark = message, NOT_SAVED, len(effects)
            try:
                raw_key = message[2]
                ctx.key = text(raw_key) if raw_key is not None else ""
                decode, callback = routes[message[0]]
                if raw_value is not None:
                    out = callback(ctx, decode(raw_value))
                else:
                    out = callback(ctx, None if nil == "process" else decode(b""))
                if out is not None:  # (a def that returned a coroutine: awaited)
                    awaited_now(out, None, (self.graph.group, self.partition, message,
                                            ctx.key, callback))  # fmt: skip
            except Exception as exc:
                self._failed(exc, message, mark, result)

    def _failed(
        self, exc: Exception, message: Message, mark: int, result: BatchResult,
        reason: str | None = None, *, context: Context[Any] | None = None,
    ) -> None:  # fmt: skip
        """Handle ``message``'s failure ``exc`` as the policy says (its effects from ``mark``
        on dropped, its key's state restored from ``context``, the engine's by default)."""
        if isinstance(exc, StorageError):  # the store failed, not the message: no policy
            raise exc
        ctx = self.context if context is None else context
        error = ProcessingError(
            reason or self._describe(exc, message),
            group=self.graph.group, topic=message[0], partition=self.partition,
            offset=message[1], key=None if message[2] is None else key_str(message[2]),
        )  # fmt: skip
        if self._fatal(exc):
            raise error from (exc.__cause__ if isinstance(exc, Abort) else exc)
        error.__cause__ = exc
        del self.effects[mark:]
        if ctx._saved is not NOT_SAVED:
            restore(self.cache, ctx.key, ctx._saved)
        result.failed.append((error, message))

    def _fatal(self, exc: Exception) -> bool:
        """Does ``exc`` end the call (``ctx.fail()``, a store's failure, the ``fail`` policy)
        rather than skip its record?"""
        return isinstance(exc, Abort | StorageError) or self.on_error == "fail"

    def _describe(self, exc: Exception, message: Message) -> str:
        """Say where ``message`` failed, replaying its (deterministic) decoding to find out."""
        topic, raw_value = message[0], message[3]
        if topic not in self._routes:
            return f"no input edge for topic {topic!r}"
        try:
            if raw_value is not None or self.nil_handling == "decode":
                self._codecs[topic].decode(raw_value or b"")
        except Exception as value_error:
            return f"cannot decode the value: {value_error}"
        if isinstance(exc, Abort):
            return f"ctx.fail(): {exc}"
        if isinstance(exc, EventTimeError):
            return f"no usable event time: {exc}"
        callback = self._routes[topic][1]
        name = getattr(callback, "__qualname__", repr(callback))
        return f"callback {name} raised {type(exc).__name__}: {exc}"


def _table_reader(
    group: str, readers: Mapping[str, Mapping[str, tuple[TableReader, Callable[[bytes], Any]]]]
) -> Callable[[str, str, str], Any]:
    """Reads and decodes a key of a joined or looked-up table, for the engine's
    :class:`Context` (a function, not a method of the engine: the two would make a reference
    cycle, and everything an engine holds, its time state's queues included, would wait for
    the cyclic garbage collector when it goes)."""

    def read_table(kind: str, table: str, key: str) -> Any:
        found = readers[kind].get(table)
        if found is None:
            declared = ", ".join(readers[kind]) or "none"
            raise ContextError(
                f"group {group!r}: {table!r} is not a {kind} table ({kind}s: {declared})"
            )
        reader, decode = found
        raw = reader(key)
        return None if raw is None else decode(raw)

    return read_table


def _wall_ms() -> int:
    return time_ns() // 1_000_000


def _route(edge: Edge) -> tuple[Callable[[bytes], Any], Callback]:
    assert edge.callback is not None  # define_group checked it
    return getattr(edge.codec, "fast_decode", edge.codec.decode), edge.callback
