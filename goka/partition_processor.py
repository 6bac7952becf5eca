"""The partition processor: what one task does with one Goka partition of a micro-batch.

1. lease the (group, partition) store and the joined tables' stores from the worker (they stay
   open between batches) and make each current for the batch's start offsets: reuse it, or
   restore a snapshot and/or replay the tail of its topic, or rebuild it
   (:mod:`goka.partition_table`);
2. read the batch's records; bring joined stores to the batch's end (their records precede the
   input messages they serve);
3. run the engine core over the input and loop messages, skipping any below the stored offsets
   (a replay of a batch whose state was committed but whose completion Spark did not record);
4. produce table updates (to the same partition of ``<group>-table``, with headers naming the
   source topic/partition/offset), emits, loopbacks and dead letters with one producer; flush
   and check every delivery;
5. only then commit the state changes, the batch's end offsets and the group table's end offset
   in one write;
6. tell Kafka the group's new offsets (asynchronously: lag tools, and where epochs start);
7. at most every ``snapshot_interval`` seconds, stage a snapshot of the stores (a hard-link
   copy) for the worker to upload in the background.

In continuous mode a task runs an *epoch* instead (:meth:`PartitionProcessor.process_epoch`):
after step 1 it follows its inputs and joined tables from the stores' offsets for ``epoch``
seconds, runs the engine on each group of records as they arrive (joined tables' records are
applied in time order between them), produces at once, and every ``commit_interval`` does
steps 4 to 6 for what it processed since (changes not committed yet are read through an
overlay on the store); then step 7.

State is exactly-once; outputs are at-least-once (a crash between 4 and 5 repeats them: in an
epoch, at most one commit interval's). Every
collaborator comes from :class:`goka.options.Builders`, so tests run this without Spark or a
broker, and crash tests inject faults through them.
"""

from __future__ import annotations

import heapq
import json
import logging
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from goka.context import EMIT, LOOP, TABLE
from goka.engine import BatchResult, Engine, Message
from goka.errors import DeliveryError, StorageCorruptError, TopicRewoundError
from goka.kafka.producer import ProduceError, Producer
from goka.keys import key_bytes, key_str
from goka.options import Clients, TaskConfig
from goka.partition_table import (
    CHUNK,
    SRC_OFFSET,
    SRC_PARTITION,
    SRC_TOPIC,
    Recovery,
    StoreRecovery,
    checked_watermarks,
)
from goka.storage import Storage, WriteBatch
from goka.storage.snapshots import Manifest, StoreState, remove_abandoned, stage
from goka.worker import Lease, Worker

__all__ = ["Counts", "PartitionProcessor", "PartitionSummary", "run_epoch"]

log = logging.getLogger(__name__)

#: How long an epoch waits for records before it checks the clock and the stop signal.
_POLL_SECONDS = 0.05


@dataclass(kw_only=True)
class Counts:
    """What processing did, per partition or summed over a micro-batch's partitions.

    Attributes:
        replayed: input records already in the store (skipped).
        table_records: records read from table topics to make stores current.
        restored_bytes, restore_seconds: snapshot files fetched to restore stores.
        corrupt_stores: stores found corrupt on disk, deleted and rebuilt.
        commits: state commits (one per micro-batch; one per commit interval in an epoch).
    """

    processed: int = 0
    failed: int = 0
    table_updates: int = 0
    emits: int = 0
    loopbacks: int = 0
    dead_letters: int = 0
    replayed: int = 0
    table_records: int = 0
    restored_bytes: int = 0
    restore_seconds: float = 0.0
    corrupt_stores: int = 0
    commits: int = 0

    def add(self, other: Counts) -> None:
        """Add ``other``'s counts to these."""
        for item in fields(Counts):
            setattr(self, item.name, getattr(self, item.name) + getattr(other, item.name))


@dataclass
class PartitionSummary(Counts):
    """What one partition processor did in one micro-batch (one row of the batch's result).

    ``store`` says how the group store was made current: reused, opened, caught_up, restored,
    rebuilt or created (see :mod:`goka.partition_table`). ``started_at`` is when the task began
    (unix seconds), ``ready_seconds`` how long it took to lease and recover its stores.
    ``uploads`` lists the snapshot uploads this worker finished since its previous summary, of
    any partition (JSON).
    """

    partition: int
    store: str = ""
    snapshot_seconds: float = 0.0
    seconds: float = 0.0
    started_at: float = 0.0
    ready_seconds: float = 0.0
    ends: str = ""
    errors: str = ""
    uploads: str = ""

    def count(self, recovery: Recovery, lease: Lease) -> None:
        """Add what recovering a store did."""
        self.corrupt_stores += lease.fresh and lease.discarded is not None
        self.table_records += recovery.records
        self.restored_bytes += recovery.restored_bytes
        self.restore_seconds += recovery.restore_seconds


class PartitionProcessor:
    """Processes one partition of micro-batches (see the module docstring). Not thread-safe.

    Args:
        config: the group's task configuration.
        partition: the partition number.
        worker: the process's shared resources (stores, clients, uploads).
    """

    def __init__(self, config: TaskConfig, partition: int, worker: Worker) -> None:
        self.config, self.graph, self.partition, self.worker = (
            config, config.graph, partition, worker,
        )  # fmt: skip
        self.root = Path(config.state_dir) / self.graph.group
        self.clients = Clients(config, worker)
        self._inputs = frozenset(self.graph.input_topics())
        self._manifests: list[Manifest] | None = None

    def process(self, ranges: Mapping[str, tuple[int, int]]) -> PartitionSummary:
        """Process ``{topic: (start, end)}`` of this partition; return what was done.

        A store found damaged while in use (a checksum failed) was moved aside by its lease:
        the batch runs once more on a store rebuilt from the snapshot and the table's tail
        (nothing was committed; outputs already produced are produced again).

        Raises:
            ProcessingError: a message failed under the ``fail`` policy.
            DeliveryError: an output was refused or not acknowledged (nothing is committed).
            StorageError, BrokerError: a store or the broker failed (nothing is committed).
        """
        try:
            return self._process(ranges)
        except StorageCorruptError as exc:
            log.warning("group %s partition %d: batch run again on a rebuilt store: %s",
                        self.graph.group, self.partition, exc)  # fmt: skip
            summary = self._process(ranges)
            summary.corrupt_stores += 1
            return summary

    def _process(self, ranges: Mapping[str, tuple[int, int]]) -> PartitionSummary:
        started = time.monotonic()
        summary = PartitionSummary(self.partition, started_at=time.time())
        inputs = [t for t in self.graph.input_topics() if t in ranges]
        with ExitStack() as stack:
            stores = {"partition": stack.enter_context(self._lease("partition", self.graph.table))}
            for table in self.graph.joins:
                stores[f"join-{table}"] = stack.enter_context(self._lease(f"join-{table}", table))
            stored = self._recover(stores["partition"], {t: ranges[t][0] for t in inputs}, summary)
            self._check_ahead(stored, {t: ranges[t][0] for t in inputs})
            summary.ready_seconds = time.monotonic() - started
            messages = self._read(
                {t: r for t, r in ranges.items() if t in (*inputs, *self.graph.joins)}
            )
            for table in self.graph.joins:
                self._catch_up_join(
                    table, stores[f"join-{table}"], ranges.get(table), messages, summary
                )
            result = self._run(stores, messages, inputs, stored, summary)
            table_end = self._produce(result, summary, stores["partition"].storage)
            self._commit(
                stores["partition"].storage, result, {t: ranges[t][1] for t in inputs}, table_end
            )
            summary.ends = json.dumps({t: ranges[t][1] for t in inputs})
            summary.commits = 1
            self._commit_to_group({t: ranges[t][1] for t in ranges}, wait=True)
            self._maybe_snapshot(stores, summary)
        summary.uploads = json.dumps([asdict(r) for r in self.worker.reports()])
        summary.seconds = time.monotonic() - started
        return summary

    def process_epoch(
        self,
        starts: Mapping[str, int],
        seconds: float,
        stop: Callable[[], bool] = lambda: False,
    ) -> PartitionSummary:
        """Process this partition continuously for ``seconds``: :func:`run_epoch` of one."""
        (summary,) = run_epoch(self.config, self.worker, {self.partition: starts}, seconds, stop)
        return summary

    def _begin_epoch(self, stack: ExitStack, starts: Mapping[str, int]) -> _Epoch:
        """Lease and recover this partition's stores for an epoch (released by ``stack``)."""
        summary = PartitionSummary(self.partition, started_at=time.time())
        inputs = [t for t in self.graph.input_topics() if t in starts]
        # Spark runs an epoch planned before a crash again with its old starts: begin where
        # the group committed if that is further (it commits after the state, never before)
        committed = self.clients.reader().committed(self.graph.group, self.partition, inputs)
        starts = {**starts, **{t: max(starts[t], committed[t][0]) for t in committed}}
        stores = {"partition": stack.enter_context(self._lease("partition", self.graph.table))}
        for table in self.graph.joins:
            stores[f"join-{table}"] = stack.enter_context(self._lease(f"join-{table}", table))
        positions = self._recover(stores["partition"], {t: starts[t] for t in inputs}, summary)
        for topic in inputs:  # an epoch follows its inputs from here: they must still be there
            self._check(topic, positions[topic])
        for table in self.graph.joins:  # current before any input, as Goka recovers them
            lease = stores[f"join-{table}"]
            recovery = self._recovery(lease, f"join-{table}", table)
            high = self._check(table, max(starts[table], recovery.positions({table: 0})[table]))
            summary.count(recovery.recover({table: high}, end=high), lease)
            positions.update(recovery.positions({table: high}))
        return _Epoch(self, stores, positions, summary)

    def _check(self, topic: str, position: int) -> int:
        """Fail unless ``topic`` still holds ``position`` of this partition; return its high
        watermark.

        Raises:
            TopicRewoundError: the topic ends before ``position`` or starts after it.
        """
        return checked_watermarks(self.clients.reader(), topic, self.partition, position,
                                  self._who)[1]  # fmt: skip

    def _check_ahead(self, stored: Mapping[str, int], starts: Mapping[str, int]) -> None:
        """Where a store is ahead of a batch's start (a batch run again, or a new checkpoint),
        make sure the topic still reaches the store's offset before skipping to it."""
        for topic, offset in stored.items():
            if offset > starts[topic]:
                self._check(topic, offset)

    @property
    def _who(self) -> str:
        return f"group {self.graph.group!r} (partition store)"

    def _commit_to_group(self, positions: Mapping[str, int], *, wait: bool = False) -> None:
        """Tell Kafka how far the group got in its inputs and loop (asynchronously, as Go Goka
        does; not in joined tables, which no group consumes): for lag tools, for epochs, which
        start from there, and for a Go processor taking the group over. At the end of a
        batch or epoch, ``wait`` for the broker: a stopped processor has left its offsets."""
        note = json.dumps({"time": round(time.time(), 3)})
        inputs = {t: o for t, o in positions.items() if t in self._inputs}
        self.clients.reader().commit(self.graph.group, self.partition, inputs, note, wait=wait)

    # -- stores --------------------------------------------------------------------------------
    def _lease(self, name: str, table: str) -> Any:
        return self.worker.lease(
            self.config.builders.storage, self.root / f"{name}-{self.partition}", table,
            timeout=self.config.store_timeout, discard_corrupt=True,
        )  # fmt: skip

    def _recover(
        self, lease: Lease, target: dict[str, int], summary: PartitionSummary
    ) -> dict[str, int]:
        """Make the group store current; return the input offsets it has applied."""
        topic = self.graph.table if self.graph.persist else None
        recovery = self._recovery(lease, "partition", topic)
        done = recovery.recover(target, unfinished=True)
        summary.count(done, lease)
        summary.store = done.origin
        return recovery.positions(target)

    def _recovery(self, lease: Lease, name: str, topic: str | None) -> StoreRecovery:
        return StoreRecovery(
            lease, name, group=self.graph.group, partition=self.partition, topic=topic,
            reader=self.clients.reader(), manifests=self._list_manifests,
            snapshots=self.clients.snapshots(), scratch=self.root / ".restore",
            read_timeout=self.config.read_timeout,
        )  # fmt: skip

    def _list_manifests(self) -> list[Manifest]:
        if self._manifests is None:
            store = self.clients.snapshots()
            self._manifests = (
                [] if store is None else store.manifests(self.graph.group, self.partition)
            )
        return self._manifests

    def _catch_up_join(
        self,
        table: str,
        lease: Lease,
        batch_range: tuple[int, int] | None,
        messages: Mapping[str, list[Message]],
        summary: PartitionSummary,
    ) -> None:
        """Bring a joined table's store to the batch's end (its records are in the batch)."""
        if batch_range is None:
            return
        start, end = batch_range
        recovery = self._recovery(lease, f"join-{table}", table)
        summary.count(recovery.recover({table: start}, end=start), lease)
        stored = recovery.positions({table: start})[table]
        self._check_ahead({table: stored}, {table: start})
        values = {key_str(key): value for _, offset, key, value, _, _ in messages.get(table, [])
                  if key is not None and offset >= stored}  # fmt: skip
        batch = WriteBatch(values=values)
        batch.set_offset(table, self.partition, end)
        lease.storage.write(batch)

    def _commit(
        self, store: Storage, result: BatchResult, ends: Mapping[str, int], table_end: int | None
    ) -> None:
        batch = WriteBatch(values=result.changes())
        for topic, offset in ends.items():
            batch.set_offset(topic, self.partition, offset)
        if table_end is not None:
            batch.set_offset(self.graph.table, self.partition, table_end)
        store.write(batch)

    def _maybe_snapshot(self, stores: Mapping[str, Lease], summary: PartitionSummary) -> None:
        snapshots = self.clients.snapshots()
        if snapshots is None or not (self.graph.persist or self.graph.joins):
            return
        main = stores["partition"]
        if time.time() - StoreState.read(main.path).staged_at < self.config.snapshot_interval:
            return
        started = time.monotonic()
        staging = self.root / ".staging"
        remove_abandoned(staging)
        staged = stage(
            self.graph.group, self.partition,
            {name: (lease.storage, lease.path) for name, lease in stores.items()}, staging,
        )  # fmt: skip
        self.worker.upload(snapshots, staged)
        summary.snapshot_seconds += time.monotonic() - started

    # -- processing ----------------------------------------------------------------------------
    def _read(self, ranges: Mapping[str, tuple[int, int]]) -> dict[str, list[Message]]:
        messages: dict[str, list[Message]] = {}
        for rows in self.clients.reader().read(
            self.partition, ranges, self.config.read_timeout, CHUNK
        ):
            for row in rows:
                messages.setdefault(row[0], []).append(row)
        return messages

    def _run(
        self,
        stores: Mapping[str, Lease],
        messages: Mapping[str, list[Message]],
        inputs: list[str],
        stored: Mapping[str, int],
        summary: PartitionSummary,
    ) -> BatchResult:
        todo = [[m for m in messages.get(t, []) if m[1] >= stored[t]] for t in inputs]
        summary.replayed = sum(len(messages.get(t, [])) for t in inputs) - sum(map(len, todo))
        ordered = todo[0] if len(todo) == 1 else list(heapq.merge(*todo, key=lambda m: m[4]))
        tables = {t: stores[f"join-{t}"].storage.get for t in self.graph.joins}
        engine = Engine(
            self.graph, self.partition, store=stores["partition"].storage.get,
            tables={**tables, **self.clients.lookups()}, on_error=self.config.on_error,
            max_message_bytes=self.config.max_message_bytes,
        )  # fmt: skip
        return engine.process(ordered)

    # -- output --------------------------------------------------------------------------------
    def _produce(
        self, result: BatchResult, summary: PartitionSummary, store: Storage
    ) -> int | None:
        """Produce the batch's effects and dead letters, flush, check every delivery.

        Returns:
            The group table's end offset after the batch's last table update (None: none).

        Raises:
            DeliveryError: a message was refused, failed, or not acknowledged in time.
            TopicRewoundError: the group table went back.
        """
        output = _Output(self.clients.producer(), self.partition, self.config, store)
        output.send(result, summary)
        return output.flush()


def run_epoch(
    config: TaskConfig,
    worker: Worker,
    starts: Mapping[int, Mapping[str, int]],
    seconds: float,
    stop: Callable[[], bool] = lambda: False,
) -> list[PartitionSummary]:
    """Process partitions continuously (see :func:`_run_epoch`); a store found damaged in use
    was moved aside by its lease, and the epoch goes on for the time left on rebuilt stores
    (from what was committed)."""
    until = time.monotonic() + seconds
    try:
        return _run_epoch(config, worker, starts, seconds, stop)
    except StorageCorruptError as exc:
        log.warning("group %s: epoch goes on with a rebuilt store: %s", config.graph.group, exc)
        summaries = _run_epoch(config, worker, starts, max(0.0, until - time.monotonic()), stop)
        summaries[0].corrupt_stores += 1
        return summaries


def _run_epoch(
    config: TaskConfig,
    worker: Worker,
    starts: Mapping[int, Mapping[str, int]],
    seconds: float,
    stop: Callable[[], bool] = lambda: False,
) -> list[PartitionSummary]:
    """Process partitions continuously for ``seconds`` (an epoch; see the module docstring),
    each from ``starts[partition]`` ``{topic: offset}`` of its inputs and joined tables, or from
    where its stores are if they are ahead; end early once ``stop()`` is true.

    One task may run several partitions (a Spark job with fewer task slots than partitions):
    one consumer follows them all, one producer serves them, and every ``commit_interval``
    one flush precedes the commit of each.

    Raises:
        ProcessingError: a message failed under the ``fail`` policy.
        DeliveryError: an output was refused or not acknowledged (what was committed before
            stays; the rest is processed again by the next epoch).
        StorageError, BrokerError: a store or the broker failed (likewise).
    """
    started = time.monotonic()
    until, interval = started + seconds, config.commit_interval
    with ExitStack() as stack:
        epochs = {
            p: PartitionProcessor(config, p, worker)._begin_epoch(stack, offsets)
            for p, offsets in sorted(starts.items())
        }
        reader = Clients(config, worker).reader()
        tail = reader.tail({p: epoch.positions for p, epoch in epochs.items()})
        for epoch in epochs.values():
            epoch.summary.ready_seconds = time.monotonic() - started
        next_commit = time.monotonic() + interval
        try:
            while True:
                now = time.monotonic()
                if now >= until or stop():
                    break
                wait = max(0.0, min(_POLL_SECONDS, until - now, next_commit - now))
                for partition, rows in tail.poll(CHUNK, wait).items():
                    epochs[partition].apply(rows)
                if time.monotonic() >= next_commit:
                    for epoch in epochs.values():
                        epoch.commit()
                    next_commit = time.monotonic() + interval
        finally:
            tail.close()
        for epoch in epochs.values():
            epoch.commit()
        return [epoch.finish(started) for epoch in epochs.values()]


class _Epoch:
    """One partition in an epoch (see :func:`run_epoch`): its stores, its position, what it
    has not committed yet."""

    def __init__(
        self,
        processor: PartitionProcessor,
        stores: Mapping[str, Lease],
        positions: dict[str, int],
        summary: PartitionSummary,
    ) -> None:
        self.processor, self.config, self.graph = processor, processor.config, processor.graph
        self.partition, self.clients = processor.partition, processor.clients
        self.stores, self.positions, self.summary = stores, positions, summary
        self.store = stores["partition"].storage
        self.inputs = [t for t in self.graph.input_topics() if t in positions]
        self.joins = {t: stores[f"join-{t}"].storage for t in self.graph.joins}
        self.pending: dict[str, bytes | None] = {}  # state changes not committed yet
        get, pending = self.store.get, self.pending

        def read(key: str) -> bytes | None:
            return pending[key] if key in pending else get(key)

        self.engine = Engine(
            self.graph, self.partition, store=read,
            tables={**{t: s.get for t, s in self.joins.items()}, **self.clients.lookups()},
            on_error=self.config.on_error, max_message_bytes=self.config.max_message_bytes,
        )  # fmt: skip
        self.output = _Output(self.clients.producer(), self.partition, self.config, self.store)
        self.committed = dict(positions)

    def finish(self, started: float) -> PartitionSummary:
        """Snapshot the stores if due; return the epoch's summary."""
        summary = self.summary
        summary.ends = json.dumps({t: self.positions[t] for t in self.inputs})
        self.processor._commit_to_group(self.committed, wait=True)
        self.processor._maybe_snapshot(self.stores, summary)
        summary.uploads = json.dumps([asdict(r) for r in self.processor.worker.reports()])
        summary.seconds = time.monotonic() - started
        return summary

    def apply(self, rows: list[Message]) -> None:
        by_topic: dict[str, list[Message]] = {}
        for row in rows:
            by_topic.setdefault(row[0], []).append(row)
        for topic, found in by_topic.items():
            self.positions[topic] = found[-1][1] + 1
        if len(by_topic) > 1:  # records of several topics: in time order, each topic in order
            rows = list(heapq.merge(*by_topic.values(), key=lambda m: m[4]))
        if not self.joins:
            self._process(rows)
            return
        run: list[Message] = []
        for row in rows:  # a join sees the table updates that precede an input record in time
            if run and (row[0] in self.joins) != (run[0][0] in self.joins):
                self._join(run) if run[0][0] in self.joins else self._process(run)
                run = []
            run.append(row)
        self._join(run) if run[0][0] in self.joins else self._process(run)

    def _process(self, messages: list[Message]) -> None:
        result = self.engine.process(messages)
        self.output.send(result, self.summary)
        self.pending.update(result.changes())

    def _join(self, records: list[Message]) -> None:
        batch = WriteBatch(values={key_str(r[2]): r[3] for r in records if r[2] is not None})
        batch.set_offset(records[0][0], self.partition, records[-1][1] + 1)
        self.joins[records[0][0]].write(batch)
        self.summary.table_records += len(records)

    def commit(self) -> None:
        """Wait for every output so far, then write the state changes with the offsets."""
        if self.positions == self.committed and not self.pending:
            return
        table_end = self.output.flush()
        batch = WriteBatch(values=dict(self.pending))
        for topic in self.inputs:
            batch.set_offset(topic, self.partition, self.positions[topic])
        if table_end is not None:
            batch.set_offset(self.graph.table, self.partition, table_end)
        self.store.write(batch)
        self.pending.clear()
        self.committed = dict(self.positions)
        self.summary.commits += 1
        self.processor._commit_to_group(self.committed)
        self.processor._maybe_snapshot(self.stores, self.summary)  # if due: a long epoch too


class _Output:
    """Produces a partition's effects and dead letters and checks that each was delivered,
    and that table updates land after what ``store`` has of the group table."""

    def __init__(
        self, producer: Producer, partition: int, config: TaskConfig, store: Storage
    ) -> None:
        self.producer, self.partition, self.config = producer, partition, config
        self.failures: list[str] = []
        self.table_end: int | None = None
        self.table_offset = store.offsets().get((config.graph.table, partition))
        self.errors: list[str] = []

    def _on_delivery(self, error: Any, message: Any) -> None:
        if error is not None:
            self.failures.append(f"{message.topic()}: {error.str()}")

    def _on_last_table_update(self, error: Any, message: Any) -> None:
        self._on_delivery(error, message)
        if error is None:  # one partition, in order: the last one ends the batch's updates
            self.table_end = message.offset() + 1

    def send(self, result: BatchResult, summary: PartitionSummary) -> None:
        """Produce ``result``'s effects (and its dead letters) and count them in ``summary``."""
        counts = _send_effects(
            self.producer, result, self.partition, self._on_delivery, self._on_last_table_update
        )
        summary.table_updates += counts[0]
        summary.emits += counts[1]
        summary.loopbacks += counts[2]
        summary.processed += result.processed
        summary.failed += len(result.failed)
        self.errors += [str(error) for error, _ in result.failed[: 20 - len(self.errors)]]
        summary.errors = json.dumps(self.errors)
        for error, _ in result.failed:
            log.warning("%s: %s", self.config.on_error, error)
        if self.config.on_error == "dead_letter":
            summary.dead_letters += _send_dead_letters(
                self.producer, result, self.partition, self.config, self._on_delivery
            )

    def flush(self) -> int | None:
        """Wait for every delivery; return the group table's end after the last table update
        since the previous flush (None: none).

        Raises:
            DeliveryError: a message was refused, failed, or not acknowledged in time.
            TopicRewoundError: the updates landed at or before the store's table offset: the
                group table was truncated or recreated (nothing may be committed: the table
                is the truth).
        """
        remaining = self.producer.flush(self.config.flush_timeout)
        if remaining or self.failures:
            raise DeliveryError(
                self.config.graph.table,
                None,
                f"partition {self.partition}: {remaining} messages unacknowledged after "
                f"{self.config.flush_timeout:g}s, {len(self.failures)} failed: "
                f"{self.failures[:3]}",
            )
        table_end, self.table_end = self.table_end, None
        if table_end is not None:
            stored, self.table_offset = self.table_offset, table_end
            if stored is not None and table_end <= stored:
                who = f"group {self.config.graph.group!r} (partition store)"
                raise TopicRewoundError(
                    self.config.graph.table, self.partition, stored, 0, table_end, reader=who
                )
        return table_end


def _send_effects(
    producer: Producer,
    result: BatchResult,
    partition: int,
    on_delivery: Callable[[Any, Any], None],
    on_last_table_update: Callable[[Any, Any], None],
) -> tuple[int, int, int]:
    """Produce the effects in order; return the counts of table updates, emits, loopbacks."""
    counts = {TABLE: 0, EMIT: 0, LOOP: 0}
    last = max((i for i, e in enumerate(result.effects) if e[0] == TABLE), default=-1)
    for index, (kind, topic, key, data, headers, source) in enumerate(result.effects):
        counts[kind] += 1
        if kind == TABLE:
            provenance = [(SRC_TOPIC, source[0].encode()), (SRC_PARTITION, b"%d" % partition),
                          (SRC_OFFSET, b"%d" % source[1])]  # fmt: skip
            callback = on_last_table_update if index == last else on_delivery
            _send(producer, topic, data, key, callback, provenance, source[4], partition)
        else:
            _send(producer, topic, data, key, on_delivery, headers, source[4], -1)
    return counts[TABLE], counts[EMIT], counts[LOOP]


#: Headers of a dead letter whose value was cut to fit under the producer's limit.
TRUNCATED, ORIGINAL_SIZE = "goka-truncated", "goka-original-size"


def _send_dead_letters(
    producer: Producer,
    result: BatchResult,
    partition: int,
    config: TaskConfig,
    on_delivery: Callable[[Any, Any], None],
) -> int:
    """Write each failed message's raw record to the dead-letter topic; return how many.

    A record too large for the producer keeps its key and headers and as much of its value
    as fits, with the headers :data:`TRUNCATED` and :data:`ORIGINAL_SIZE`: the policy meant
    to keep the group running must not stop it on a refused dead letter."""
    for error, (source, offset, key, value, timestamp, headers) in result.failed:
        details = [("goka-error", str(error).encode()[:4096]), (SRC_TOPIC, source.encode()),
                   (SRC_PARTITION, b"%d" % partition), (SRC_OFFSET, b"%d" % offset)]  # fmt: skip
        found = [*(headers or []), *details]
        room = config.max_message_bytes - len(key or b"") - sum(len(k) + len(v) for k, v in found)
        if value is not None and len(value) > room:
            log.warning("dead letter of %s partition %d offset %d cut from %d to %d bytes",
                        source, partition, offset, len(value), max(room, 0))  # fmt: skip
            found += [(TRUNCATED, b"true"), (ORIGINAL_SIZE, b"%d" % len(value))]
            value = value[: max(room, 0)]
        _send(producer, config.dlq_topic, value, key, on_delivery, found, timestamp, -1)
    return len(result.failed)


def _send(
    producer: Producer,
    topic: str,
    value: bytes | None,
    key: str | bytes | None,
    on_delivery: Callable[[Any, Any], None],
    headers: Any,
    timestamp: int,
    partition: int,
) -> None:
    while True:
        try:
            producer.produce(
                topic, value, key, partition=partition, on_delivery=on_delivery,
                headers=headers, timestamp=timestamp,
            )  # fmt: skip
            return
        except BufferError:
            producer.poll(0.05)
        except UnicodeEncodeError:  # a key with bytes that are not UTF-8 (surrogate escapes)
            key = key_bytes(key) if isinstance(key, str) else key
        except ProduceError as exc:  # refused at once, e.g. larger than message.max.bytes
            raise DeliveryError(topic, key, f"refused by the producer: {exc}") from exc
