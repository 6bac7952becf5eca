"""Time in one partition of a timed group: stream time, durable timers, windows and TTL.

The engine (:mod:`goka.group.engine`) owns one :class:`PartitionTime` per partition of a group
with windows, timers or a TTL: this module holds its stream time and what is due; its timers
(:mod:`goka.time.timers`), TTL (:mod:`goka.time.ttl`) and window tables
(:mod:`goka.time.window_tables`) are mixed in. Every change is an effect, like a table update:
``TIMER`` rows go to ``<group>-timers`` and ``WINDOW`` rows to ``<group>-window-<name>`` (and,
with their derived index rows, to the partition store: :func:`goka.time.rows.section_rows`),
so they commit with state and offsets and are replayed with the partition.

Order, the same in every runtime and the tester, whatever the batches: after each record, the
stream timers due by the stream time, the windows to close and expire, and the wall timers due
by the wall clock fire in time order (at equal times: windows close, then timers fire).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from goka.group.effects import TIMER, WINDOW
from goka.group.graph import GroupGraph
from goka.time.overlay import Journal, Overlay, Section, rollback
from goka.time.rows import (
    DIGITS,
    MAX_TIME,
    STREAM_TIME_HEADER,
    Due,
    decode_composite,
    decode_due,
    stream_time_key,
    timer_key,
)
from goka.time.specs import Session, remembered
from goka.time.timers import DueQueue, TimerMethods
from goka.time.ttl import TtlMethods
from goka.time.window_cache import WINDOW_CACHE, WrittenWindows, reader
from goka.time.window_tables import WindowTables
from goka.time.window_update import updater

__all__ = ["PartitionTime"]


class PartitionTime(TimerMethods, TtlMethods, WindowTables):
    """Stream time, timers and windows of one partition (see the module docstring).

    Args:
        graph: the group (timed).
        partition: the partition.
        timers: the committed timers section.
        windows: the committed section of each window table.
        clock: the wall clock, in ms.
        undo: keep a journal so a failed record's changes can be undone (:meth:`rollback`).
        deferred_finals: windows emitting final results close without effects; each is
            kept until its result was delivered (the delivered watermark, read at each
            commit: :mod:`goka.processing.finals`), then expires when due.
        whole_commits: a replay of the changelogs reads whole commits (exactly-once:
            ``read_committed`` readers of transactions): the stream time row that ends each
            call (:meth:`finish`) says it, and no row carries it in a header.
        window_cache: see :class:`goka.group.engine.Engine`.
    """

    def __init__(
        self, graph: GroupGraph, partition: int, *, timers: Section,
        windows: Mapping[str, Section], clock: Callable[[], int], undo: bool = False,
        deferred_finals: bool = False, window_cache: int = WINDOW_CACHE,
        whole_commits: bool = False,
    ) -> None:  # fmt: skip
        self.graph, self.clock, self.deferred_finals = graph, clock, deferred_finals
        self.whole_commits = whole_commits
        #: how many times a record's (or a fired timer's) time changes were undone: what
        #: :class:`~goka.time.timers.DueQueue`'s watchers are not told of
        self.rollbacks = 0
        self._stream_key = stream_time_key(partition)
        self.journal: Journal | None = [] if undo else None
        self.timers_topic = graph.group.timers
        self._timers, self._windows = timers, dict(windows)
        self._edges = dict(graph.windows)
        self._topics = {n: e.topic for n, e in graph.windows.items()}
        self._graces = {n: e.index_grace for n, e in graph.windows.items()}
        #: Of each window table of fixed windows (not sessions): its windows of a time, and
        #: its grace (what :func:`goka.time.open_windows.open_windows` asks, for a record's
        #: windows).
        self.fixed = {n: (remembered(e.spec), e.index_grace) for n, e in graph.windows.items()
                      if e.spec is not None and not isinstance(e.spec, Session)}  # fmt: skip
        self._written = {n: WrittenWindows(windows[n], limit=window_cache)
                         for n in self.fixed if window_cache > 0}  # fmt: skip
        self._decode_data = graph.timers.codec.decode if graph.timers else None
        self._encode_data = graph.timers.codec.encode if graph.timers else None
        stored = timers.get(self._stream_key)
        self.stream_time = -1 if stored is None else int(stored)
        #: the wall clock's reading for what is due, fixed for a call of records in flight
        #: (:mod:`goka.group.timed_flight`), else None: the clock
        self.wall_now: int | None = None
        self.effects: list[Any] = []
        self._stale = True
        self.backlog: Any = None  # the record whose firings the budget cut
        self.begin(self.effects)

    def begin(self, effects: list[Any]) -> None:
        """Start a batch: append effects to ``effects``; read the committed rows afresh (the
        queues of what is due are kept from batch to batch: they see every change this
        object makes, and building them reads and sorts every uncommitted row)."""
        self.effects, journal = effects, self.journal
        self.saved_stream_time = self._mark_stream_time = self.stream_time
        self.raised_by: Any = None  # the last record that moved the stream time
        self._closed: dict[str, Any] = {}  # window tables that closed windows: last row, by what
        self._stream_row = -1  # the stream time a row of this batch says already
        self.timer_rows = Overlay(self._timers, journal)
        self.window_rows = {n: Overlay(s, journal) for n, s in self._windows.items()}
        #: With whole commits: the windows the call changed, each with the last record that
        #: changed it (:meth:`window_effects`).
        self._sources: dict[str, dict[str, Any]] = {n: {} for n in self._windows}
        for written in self._written.values():
            written.closed(self.stream_time)
        self._readers = {n: reader(rows, self._written.get(n), self._graces[n], journal)
                         for n, rows in self.window_rows.items()}  # fmt: skip
        #: Of each table of fixed windows kept in memory that emits no updates: what updates
        #: its windows (the hot path: :mod:`goka.time.window_update`).
        self.updaters = {
            n: updater(self, n)
            for n in self._written
            if self._edges[n].emit != "update" or self._edges[n].output is None
        }
        if self._stale:
            self._queues = {
                d: DueQueue(self._timers, f"q{d[0]}", journal=journal) for d in ("stream", "wall")
            }
            self._closing = {
                n: DueQueue(s, "c", after=self._watermark(n), journal=journal)
                for n, s in self._windows.items() if self._edges[n].emit == "final"
            }  # fmt: skip
            self._expiring = {
                n: DueQueue(s, "c", journal=journal) for n, s in self._windows.items()
            }
            self._delivered = {  # final windows expire once their results are delivered
                n: (self._timers.get(f"d{n}") or b"").decode()
                for n in self._closing
                if self.deferred_finals
            }
            self._floor_stream = self._floor_wall = -1  # unknown: next_due computes them
            self._stale = False
        self.left, self.late_dropped = sys.maxsize, 0  # left: what may fire (fire budget)
        self.late_records: list[tuple[str, Any]] = []
        self.late_seen: set[str] = set()  # window tables the record was late for

    def abandon(self) -> None:
        """The batch failed: the next starts from the committed stream time and rows."""
        self.stream_time = self.saved_stream_time
        self._stale = True
        self.backlog = None
        for name, written in self._written.items():  # it wrote what the batch did
            written.forget(self._windows[name])

    def reread(self) -> None:
        """The batches so far are committed: the next one reads what is due afresh."""
        self._stale = True

    def mark(self) -> None:
        """A record begins: what :meth:`rollback` returns to."""
        self._mark_stream_time = self.stream_time
        self._mark_late = (self.late_dropped, len(self.late_records))
        self.late_seen.clear()
        if self.journal is not None:
            self.journal.clear()

    def rollback(self) -> None:
        """Undo the time changes of the record since :meth:`mark` (it failed)."""
        self.rollbacks += 1
        self.stream_time = self._mark_stream_time
        self.late_dropped, kept = self._mark_late
        del self.late_records[kept:]
        if self.journal is not None:
            rollback(self.journal)

    def raised(self, source: Any, first: int) -> None:
        """The record ``source`` moved the stream time (its effects begin at ``first``): a
        replay may cut a batch anywhere (other runs planned other batches), so the first of
        its changelog rows names the new stream time in a header, or the stream time row is
        written for it. :meth:`finish`'s row is attributed to the last such record, never to
        a tick (a replay keeping the tick, not the records before it, would overshoot)."""
        self.raised_by = source
        if self.whole_commits:  # (a replay never stops inside a commit: finish() says it)
            return
        effects = self.effects
        for index in range(first, len(effects)):
            effect = effects[index]
            if effect[0] == TIMER or effect[0] == WINDOW:
                header = [(STREAM_TIME_HEADER, b"%d" % self.stream_time)]
                effects[index] = (effect[0], effect[1], effect[2], effect[3], header, effect[5])
                return
        self._row(self._stream_key, str(self.stream_time).encode(), source)
        self._stream_row = self.stream_time

    def finish(self) -> None:
        """End a batch: record the stream time if it moved and no row says it yet (with
        whole commits, after the windows' changelog rows: :meth:`window_effects`)."""
        if self.whole_commits:
            self.window_effects()
        if self.stream_time != self.saved_stream_time and self.stream_time != self._stream_row:
            self._row(self._stream_key, str(self.stream_time).encode(), self.raised_by)

    def _watermark(self, name: str) -> str | None:
        found = self._timers.get(f"c{name}")
        return None if found is None else found.decode()

    # -- what is due -------------------------------------------------------------------------------
    def quiet(self) -> bool:
        """Is nothing due now? True only while both clocks are below the lower bounds of what
        is queued (:meth:`next_due` keeps them): the engine's check after each record, which
        then skips the firing (a hot path)."""
        floor_wall = self._floor_wall
        return self.stream_time < self._floor_stream and (
            floor_wall > MAX_TIME
            or (self.clock() if self.wall_now is None else self.wall_now) < floor_wall  # (inlined)
        )

    def next_due(self, *, wall: bool = True) -> Due | None:
        """The earliest thing due now (stream time, and, if ``wall``, wall clock), or None.

        Called after every record, so it first compares the clocks with lower bounds of what
        is queued (kept as rows are added; recomputed after something was due)."""
        stream = self.stream_time
        if stream < self._floor_stream and (
            not wall or self._floor_wall > MAX_TIME or self.wall_clock() < self._floor_wall
        ):
            return None
        found: list[Due] = []
        floor_stream, floor_wall = MAX_TIME + 1, MAX_TIME + 1
        for name, queue in self._closing.items():
            row = queue.first()
            if row is not None:
                at = int(row[0][1 : 1 + DIGITS])
                floor_stream = min(floor_stream, at)
                if at <= stream:
                    found.append(Due(at, 0, "close", name, row[0][1 + DIGITS :], b"", row[0]))
        for name, queue in self._expiring.items():
            row = queue.first()
            if row is not None and row[0] <= self._delivered.get(name, row[0]):
                at = int(row[0][1 : 1 + DIGITS]) + self._edges[name].retention
                floor_stream = min(floor_stream, at)
                if at <= stream:
                    found.append(Due(at, 1, "expire", name, row[0][1 + DIGITS :], b"", row[0]))
        for domain in ("stream", "wall") if wall else ("stream",):
            row = self._queues[domain].first()
            if row is None:
                continue
            at, timer, key = decode_due(row[0])
            if domain == "stream":
                floor_stream = min(floor_stream, at)
            else:
                floor_wall = at
            if at <= (stream if domain == "stream" else self.wall_clock()):
                found.append(Due(at, 2, "timer", timer, key, row[1], row[0]))
        if found:
            self._floor_stream = self._floor_wall = -1  # recomputed after the firing
            return min(found)
        if wall:
            self._floor_stream, self._floor_wall = floor_stream, floor_wall
        return None

    def wall_clock(self) -> int:
        """The wall clock what is due is measured by: :attr:`wall_now` if set (records in
        flight: one reading for a call), else the clock."""
        return self.clock() if self.wall_now is None else self.wall_now

    def due_queue(self, domain: str) -> DueQueue:
        """The queue of timers (TTLs' too) of ``domain`` (the call's: :meth:`begin` may make
        new ones)."""
        return self._queues[domain]

    def first_timer_due(self, domain: str = "stream") -> int:
        """When the earliest timer (a TTL's too) of ``domain`` is due (past ``MAX_TIME``: none
        queued)."""
        row = self._queues[domain].first()
        return MAX_TIME + 1 if row is None else decode_due(row[0])[0]

    def fired(self, due: Due, source: Any) -> None:
        """Remove what ``due`` was (a fired timer, a closed or expired window)."""
        if due.kind == "timer":
            self._queues["stream" if due.row[1] == "s" else "wall"].remove(due.row)
            self._row(timer_key(due.name, due.key), None, source)
        elif due.kind == "close":  # the watermark row: once per trigger (closed_all)
            self._closing[due.name].remove(due.row)
            self.timer_rows.put(f"c{due.name}", due.row.encode())
            self._closed[due.name] = (due.row.encode(), source)
        else:
            self._expiring[due.name].remove(due.row)
            self.write_window_row(due.name, due.key, None, source, decode_composite(due.key)[2])
