"""Windows' final results, produced exactly once, also across crashes and replays.

Emits are at-least-once (a crash between producing and committing repeats them); a window's
final result must not be. So a final result is not produced with its batch: the runtime's
engine closes windows without effects (``Engine(deferred_finals=True)``), and the commit of a
batch that closed windows only moves the table's close watermark (``c<window>`` in the timers
section: the close index key of the last window closed). Between the *delivered* watermark
(``d<window>``: the last window whose result was acknowledged) and the close watermark lie the
results still to produce; each one is the window's stored value, read back from the store.

After the commit, and once the group has committed the batch's offsets (a store rebuilt on
another machine begins there: it must not process the batch again), the results are produced
in close order (with header :data:`FINAL_ID`) and flushed; only once every result is
acknowledged does the delivered watermark move (a row in ``<group>-timers``, then the store).
A closed window is kept until its result is delivered: its expiry waits for it, and the
windows whose expiry is due by then are deleted with the watermark's move.

A crash between producing and moving the watermark leaves results that may be in their output
partitions already: the next task reads each output partition from where it stood (below any
result not yet acknowledged: :mod:`goka.processing.outbox`) and produces only what it does not
find there. A batch that did not commit moved no watermark (a rebuild leaves out its changelog
rows), and its replay closes the windows again.

Under exactly-once (``transaction``) a delivery is transactions of the partition's producer:
the results, the watermarks' rows and the expired windows' deletions, with the group's offsets;
the store is written after each one commits. A window boundary may close millions of windows:
a transaction holds about ``TRANSACTION_SECONDS`` of results (:mod:`goka.kafka.transactions`),
and its watermarks stand at the last window whose result it holds. Readers see all of a
transaction or none, so nothing is read back and no output position is kept (those an
at-least-once run left are read back once, then deleted); a crash after a commit leaves the
store behind the timers changelog, which the next task replays (``catch_up_tail``).
Deliveries are then produced at once in every mode, between two commits of the loop.

At-least-once, a continuous epoch does not stop for them: their results are produced a few
per turn of its loop (:class:`Delivery`), records processed and commits written meanwhile;
the windows those commits close wait for the next delivery, which begins once this one's
watermark moved. A micro-batch, and a task's beginning, produce them at once. No per-result
row is written: a result costs one output record.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

from goka.errors import DeliveryError
from goka.group.edges import WindowEdge
from goka.group.graph import GroupGraph
from goka.kafka.producer import ProduceError, Producer
from goka.kafka.reader import RecordReader
from goka.kafka.transactions import TRANSACTION_SECONDS
from goka.keys import key_bytes
from goka.processing.outbox import FINAL_ID, POSITION, position_key, produced, standing
from goka.processing.output import send_checked
from goka.storage import Storage, WriteBatch
from goka.time.rows import (
    DIGITS,
    WINDOW_END,
    WINDOW_NAME,
    WINDOW_START,
    section_rows,
    stream_time_key,
)

__all__ = ["FINAL_ID", "Delivery", "Finals", "Written", "delivered_key"]

log = logging.getLogger(__name__)


#: Section rows by changelog topic (None: deleted), as a write wrote them.
Written = Mapping[str, Mapping[str, bytes | None]]


T = TypeVar("T")

#: Under exactly-once: results a delivery produces between two looks at the clock.
SLICE_CHECK = 10_000


class Transaction(Protocol):
    """The partition's transactions under exactly-once
    (:class:`~goka.processing.exactly_once.ExactlyOnce`)."""

    def begin(self) -> None: ...

    def commit(self, positions: Mapping[str, int], acknowledged: Callable[[], T]) -> T: ...


def delivered_key(name: str) -> str:
    """The timers row of window table ``name``'s delivered watermark."""
    return f"d{name}"


class Finals:
    """The final results of one partition (see the module docstring).

    Args:
        graph: the group (with windows emitting final results).
        partition: whose results.
        producer, reader: the task's clients.
        flush_timeout, read_timeout: seconds to wait for deliveries, and for a read.
        transaction: exactly-once: each delivery is one of its transactions (``producer`` is
            its transactional one).
    """

    def __init__(
        self, graph: GroupGraph, partition: int, producer: Producer, reader: RecordReader,
        *, flush_timeout: float, read_timeout: float, transaction: Transaction | None = None,
    ) -> None:  # fmt: skip
        self.group, self.partition, self.timers = graph.group, partition, graph.group.timers
        self.graph = graph
        self.edges: dict[str, WindowEdge] = {
            n: e for n, e in graph.windows.items() if e.emit == "final"
        }
        self.producer, self.reader = producer, reader
        self.flush_timeout, self.read_timeout = flush_timeout, read_timeout
        self.transaction = transaction
        self._counts: dict[str, int] = {}
        self.delivered = 0

    # -- where results may stand -----------------------------------------------------------------
    def prepare(self, store: Storage) -> None:
        """Before any result is produced: record where each output partition stands, if the
        store does not say yet (once in a partition's life; kept in the changelog).

        Raises:
            DeliveryError: the rows were not acknowledged (nothing is written).
        """
        outputs = {e.output for e in self.edges.values() if e.output is not None}
        rows = standing(store.section(self.timers), outputs, self._count, self.reader)
        if rows:
            self._write(store, rows, {})

    def pending(self, store: Storage) -> bool:
        """Are closed windows waiting for their results?"""
        section = store.section(self.timers)
        return any(
            (section.get(f"c{name}") or b"") > (section.get(delivered_key(name)) or b"")
            for name in self.edges
        )

    # -- producing ---------------------------------------------------------------------------------
    def deliver(self, store: Storage, *, check: bool) -> int:
        """Produce the results of the windows closed and not delivered, then move the
        delivered watermarks; return how many were produced. With ``check`` (a task begins:
        an earlier one may have produced some before it stopped), results found in their
        output partition are not produced again.

        Raises:
            DeliveryError: a result or a watermark row was not acknowledged (the watermark
                stays).
        """
        delivery = self.begin(store, check=check)
        return 0 if delivery is None else delivery.finish()

    def begin(self, store: Storage, *, check: bool, written: Written | None = None,
              at: Mapping[str, int] | None = None) -> Delivery | None:  # fmt: skip
        """The delivery of the results of the windows closed and not delivered (None: none):
        :meth:`Delivery.step` produces them a few at a time, :meth:`Delivery.finish` moves
        the watermarks (see :meth:`deliver`). ``written``: section rows (by changelog topic)
        the last write wrote, read from there rather than from the store; ``at``: the
        group's offsets the store has (committed with the results under exactly-once)."""
        section = store.section(self.timers)
        marks = {}
        for name in self.edges:
            closed, done = section.get(f"c{name}"), section.get(delivered_key(name))
            if closed is not None and closed > (done or b""):
                marks[name] = (None if done is None else done.decode(), closed.decode())
        if not marks:
            return None
        prefix = f"{self.group}/{self.partition}/"
        found = produced(section, self.reader, prefix, self.read_timeout) if check else set()
        if self.transaction is not None:
            self.transaction.begin()
        return Delivery(self, store, marks, found, written or {}, dict(at or {}))

    def _table(self, store: Storage, name: str,
               written: Written) -> tuple[int, Any, Any, str, Any]:  # fmt: skip
        """What the hot loop of :meth:`deliver` needs of window table ``name``: its
        retention, a reader of its rows (``written``'s first: a closed window does not change
        before its result is delivered), what turns a stored value into a result's (None:
        the value as stored: the output's codec is the window's), the output topic and the
        header naming the table."""
        edge = self.edges[name]
        read: Callable[[str], bytes | None] = store.section(edge.topic).get
        rows = written.get(edge.topic)
        if rows:
            stored = read
            read = lambda row: rows[row] if row in rows else stored(row)  # noqa: E731
        assert edge.output is not None  # (window() requires one for final results)
        out = self.graph.outputs[edge.output].codec
        recode = None
        if out is not edge.codec and out != edge.codec:  # (decode(encode(v)) == v: no change)
            decode, encode = edge.codec.decode, out.encode
            recode = lambda raw: encode(decode(raw))  # noqa: E731
        return edge.retention, read, recode, edge.output, (WINDOW_NAME, name.encode())

    def _closed(
        self, store: Storage, marks: dict[str, tuple[str | None, str]]
    ) -> Iterator[tuple[str, str]]:
        """``(window table, close index row)`` of the windows closed and not delivered, in
        close order."""

        def rows(name: str, done: str | None, closed: str) -> Iterator[tuple[str, str]]:
            section = store.section(self.edges[name].topic)
            start = "c" if done is None else done + "\x00"
            for index, _ in section.items(prefix="c", start=start, stop=closed + "\x00"):
                yield name, index

        if len(marks) == 1:  # (the usual case: one table of final results)
            ((name, (done, closed)),) = marks.items()
            return rows(name, done, closed)
        merged = heapq.merge(*(((i, n) for n, i in rows(n, *m)) for n, m in marks.items()))
        return ((name, index) for index, name in merged)

    def _write(self, store: Storage, rows: dict[str, bytes | None], expired: dict[str, list[str]],
               at: Mapping[str, int] | None = None) -> None:  # fmt: skip
        """Produce ``rows`` of the timers changelog and the deletions of the ``expired``
        windows (by table), then (exactly-once: once the transaction committed, with the
        group's offsets ``at``) write them to the store with the changelogs' ends."""
        failures: list[str] = []
        ends: dict[str, int] = {}

        def written(error: Any, message: Any) -> None:
            if error is not None:
                failures.append(f"{message.topic()}: {error.str()}")
            else:
                ends[message.topic()] = max(ends.get(message.topic(), 0), message.offset() + 1)

        batch = WriteBatch()
        for name, windows in expired.items():
            topic, grace = self.edges[name].topic, self.edges[name].index_grace
            section = store.section(topic)
            changes = batch.section(topic)
            for row in windows:
                send_checked(self.producer, topic, None, row.encode("utf-8", "surrogateescape"),
                             written, None, 0, self.partition)  # fmt: skip
                changes.update(section_rows(section.get, row, None, grace=grace))
        for key, value in rows.items():
            send_checked(self.producer, self.timers, value, key.encode("utf-8", "surrogateescape"),
                         written, None, 0, self.partition)  # fmt: skip
        batch.section(self.timers).update(rows)
        flush = functools.partial(self._flush, failures, "final results' watermarks")
        if self.transaction is None:
            flush()
        else:  # (the group's offsets go while the outputs are acknowledged)
            self.transaction.commit(at or {}, flush)
        for topic, end in ends.items():
            batch.set_offset(topic, self.partition, end)
        store.write(batch)

    def _flush(self, failures: list[str], what: str) -> None:
        try:
            remaining = self.producer.flush(self.flush_timeout)
        except (ProduceError, SystemError) as exc:  # fatal: a fenced transactional producer
            raise DeliveryError(self.timers, None, f"partition {self.partition}: {what}: the "
                                f"producer failed: {exc}") from exc  # fmt: skip
        if remaining or failures:
            raise DeliveryError(self.timers, None, f"partition {self.partition}: {what}: "
                                f"{remaining} unacknowledged, failed: {failures[:3]}")  # fmt: skip

    def _count(self, topic: str) -> int:
        if topic not in self._counts:
            self._counts[topic] = self.producer.partition_count(topic, self.read_timeout)
        return self._counts[topic]


class Delivery:
    """The results of the windows closed up to the close watermarks ``marks`` (by table:
    ``(delivered, closed)``), being produced (:meth:`Finals.begin`). The store may be written
    meanwhile (later commits: their windows wait for the next delivery); the windows read
    are closed, and none expires before its result is delivered."""

    def __init__(self, finals: Finals, store: Storage, marks: dict[str, tuple[str | None, str]],
                 found: set[str], written: Written, at: dict[str, int]) -> None:  # fmt: skip
        self.finals, self.store, self.marks, self.found = finals, store, marks, found
        self.at = at
        self.failures: list[str] = []
        self.ends: dict[tuple[str, int], int] = {}
        self.outstanding = self.produced = self.total = 0
        self.expired: dict[str, list[str]] = {}
        self.last: dict[str, str] = {}  # by table: the close index row of the last result
        section = store.section(finals.timers)
        self.stream_time = int(section.get(stream_time_key(finals.partition)) or b"-1")
        self.tables = {name: finals._table(store, name, written) for name in marks}
        self._rows: Iterator[tuple[str, str]] | None = finals._closed(store, marks)

    def _delivered(self, error: Any, message: Any) -> None:
        self.outstanding -= 1
        if error is not None:
            self.failures.append(f"{message.topic()}: {error.str()}")
        else:
            where = (message.topic(), message.partition())
            self.ends[where] = max(self.ends.get(where, 0), message.offset() + 1)

    @property
    def acknowledged(self) -> bool:
        """Is every result produced and acknowledged (or failed)?"""
        return self._rows is None and self.outstanding == 0

    def step(self, budget: int | None = None) -> bool:
        """Go through up to ``budget`` more closed windows (None: all of them), producing
        their results; return whether all are produced."""
        rows = self._rows
        if rows is None:
            return True
        produce, poll = self.finals.producer.produce, self.finals.producer.poll
        prefix = f"{self.finals.group}/{self.finals.partition}/"
        found, tables = self.found, self.tables
        stream_time, delivered, tail = self.stream_time, self._delivered, 2 * DIGITS + 2
        last, taken = self.last, 0
        for name, index in rows if budget is None else itertools.islice(rows, budget):
            taken += 1  # (the hot loop: a row per result)
            last[name] = index
            retention, read, recode, topic, named = tables[name]
            row = index[1 + DIGITS :]
            raw = read("w" + row)
            if raw is None:
                continue
            close_at = int(index[1 : 1 + DIGITS])
            if close_at + retention <= stream_time:
                self.expired.setdefault(name, []).append(row)
            self.total += 1
            ident = f"{prefix}{name}/{row}"
            if ident in found:
                continue
            start, end = int(row[1 - tail : -DIGITS - 1]), int(row[-DIGITS:])
            sent = [named, (WINDOW_START, b"%d" % start), (WINDOW_END, b"%d" % end),
                    (FINAL_ID, ident.encode())]  # fmt: skip
            value, key = raw if recode is None else recode(raw), key_bytes(row[:-tail])
            try:
                produce(topic, value, key, on_delivery=delivered, headers=sent,
                        timestamp=close_at)  # fmt: skip
            except (BufferError, ProduceError):  # a full queue waits; a refusal raises
                send_checked(self.finals.producer, topic, value, key, delivered, sent,
                             close_at, -1)  # fmt: skip
            self.outstanding += 1
            self.produced += 1
            if self.produced % 10_000 == 0:
                poll(0)
        if budget is not None and taken == budget:
            return False  # (perhaps more)
        self._rows = None
        return True

    def finish(self) -> int:
        """Produce what is left, wait until every result is acknowledged, then move the
        delivered watermarks (and delete the windows due to expire); return how many
        results were produced.

        Raises:
            DeliveryError: a result or a watermark row was not acknowledged (the watermark
                stays).
        """
        finals = self.finals
        if finals.transaction is not None:  # transactions of about TRANSACTION_SECONDS
            while not self._slice():
                self._move(dict(self.last), last=False)
                finals.transaction.begin()
        self.step()
        self._move({n: closed for n, (_, closed) in self.marks.items()}, last=True)
        produced, total = self.produced, self.total
        if self.found and produced < total:
            log.info("group %s partition %d: %d final results were produced before a stop, "
                     "%d produced now", finals.group, finals.partition, total - produced,
                     produced)  # fmt: skip
        finals.delivered += produced
        return produced

    def _slice(self) -> bool:
        """Produce results for about ``TRANSACTION_SECONDS``; return whether all are."""
        began = time.monotonic()
        while not self.step(SLICE_CHECK):
            if time.monotonic() - began >= TRANSACTION_SECONDS:
                return False
        return True

    def _move(self, marks: Mapping[str, str], *, last: bool) -> None:
        """Once every result produced is acknowledged, move the delivered watermarks to
        ``marks`` (by table) and delete the windows due to expire (exactly-once: commit; the
        ``last`` commit deletes the output positions an at-least-once run left)."""
        finals = self.finals
        finals._flush(self.failures, "final results")  # the watermarks move only once they are in
        rows: dict[str, bytes | None] = {delivered_key(n): c.encode() for n, c in marks.items()}
        if finals.transaction is None:
            for (topic, partition), end in self.ends.items():
                rows[position_key(topic, partition)] = b"%d" % end
        elif last:  # (no positions: those an at-least-once run left go)
            section = self.store.section(finals.timers)
            rows.update((key, None) for key, _ in section.items(prefix=POSITION))
        finals._write(self.store, rows, self.expired, self.at)
        self.expired = {}
