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
6. at most every ``snapshot_interval`` seconds, stage a snapshot of the stores (a hard-link
   copy) for the worker to upload in the background.

State is exactly-once; outputs are at-least-once (a crash between 4 and 5 repeats them). Every
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
from goka.errors import DeliveryError
from goka.kafka.producer import ProduceError, Producer
from goka.options import Clients, TaskConfig
from goka.partition_table import SRC_OFFSET, SRC_PARTITION, SRC_TOPIC, Recovery, StoreRecovery
from goka.storage import Storage, WriteBatch
from goka.storage.snapshots import Manifest, StoreState, remove_abandoned, stage
from goka.worker import Lease, Worker

__all__ = ["Counts", "PartitionProcessor", "PartitionSummary"]

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class Counts:
    """What processing did, per partition or summed over a micro-batch's partitions.

    Attributes:
        replayed: input records already in the store (skipped).
        table_records: records read from table topics to make stores current.
        restored_bytes, restore_seconds: snapshot files fetched to restore stores.
        corrupt_stores: stores found corrupt on disk, deleted and rebuilt.
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

    def add(self, other: Counts) -> None:
        """Add ``other``'s counts to these."""
        for item in fields(Counts):
            setattr(self, item.name, getattr(self, item.name) + getattr(other, item.name))


@dataclass
class PartitionSummary(Counts):
    """What one partition processor did in one micro-batch (one row of the batch's result).

    ``store`` says how the group store was made current: reused, opened, caught_up, restored,
    rebuilt or created (see :mod:`goka.partition_table`). ``uploads`` lists the snapshot uploads
    this worker finished since its previous summary, of any partition (JSON).
    """

    partition: int
    store: str = ""
    snapshot_seconds: float = 0.0
    seconds: float = 0.0
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
        self._manifests: list[Manifest] | None = None

    def process(self, ranges: Mapping[str, tuple[int, int]]) -> PartitionSummary:
        """Process ``{topic: (start, end)}`` of this partition; return what was done.

        Raises:
            ProcessingError: a message failed under the ``fail`` policy.
            DeliveryError: an output was refused or not acknowledged (nothing is committed).
            StorageError, BrokerError: a store or the broker failed (nothing is committed).
        """
        started = time.monotonic()
        summary = PartitionSummary(self.partition)
        inputs = [t for t in self.graph.input_topics() if t in ranges]
        with ExitStack() as stack:
            stores = {"partition": stack.enter_context(self._lease("partition", self.graph.table))}
            for table in self.graph.joins:
                stores[f"join-{table}"] = stack.enter_context(self._lease(f"join-{table}", table))
            stored = self._recover(stores["partition"], {t: ranges[t][0] for t in inputs}, summary)
            messages = self._read(
                {t: r for t, r in ranges.items() if t in (*inputs, *self.graph.joins)}
            )
            for table in self.graph.joins:
                self._catch_up_join(
                    table, stores[f"join-{table}"], ranges.get(table), messages, summary
                )
            result = self._run(stores, messages, inputs, stored, summary)
            table_end = self._produce(result, summary)
            self._commit(
                stores["partition"].storage, result, {t: ranges[t][1] for t in inputs}, table_end
            )
            summary.ends = json.dumps({t: ranges[t][1] for t in inputs})
            self._maybe_snapshot(stores, summary)
        summary.uploads = json.dumps([asdict(r) for r in self.worker.reports()])
        summary.seconds = time.monotonic() - started
        return summary

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
        values = {key.decode(): value for _, offset, key, value, _, _ in messages.get(table, [])
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
        summary.snapshot_seconds = time.monotonic() - started

    # -- processing ----------------------------------------------------------------------------
    def _read(self, ranges: Mapping[str, tuple[int, int]]) -> dict[str, list[Message]]:
        messages: dict[str, list[Message]] = {}
        for rows in self.clients.reader().read(
            self.partition, ranges, self.config.read_timeout, 50_000
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
        )  # fmt: skip
        result = engine.process(ordered)
        summary.processed, summary.failed = result.processed, len(result.failed)
        return result

    # -- output --------------------------------------------------------------------------------
    def _produce(self, result: BatchResult, summary: PartitionSummary) -> int | None:
        """Produce the batch's effects and dead letters, flush, check every delivery.

        Returns:
            The group table's end offset after the batch's last table update (None: none).

        Raises:
            DeliveryError: a message was refused, failed, or not acknowledged in time.
        """
        producer = self.clients.producer()
        failures: list[str] = []
        table_end: list[int] = []

        def on_delivery(error: Any, message: Any) -> None:
            if error is not None:
                failures.append(f"{message.topic()}: {error.str()}")

        def on_last_table_update(error: Any, message: Any) -> None:
            on_delivery(error, message)
            if error is None:  # one partition, in order: the last one ends the batch's updates
                table_end.append(message.offset() + 1)

        counts = _send_effects(producer, result, self.partition, on_delivery, on_last_table_update)
        summary.table_updates, summary.emits, summary.loopbacks = counts
        summary.errors = json.dumps([str(error) for error, _ in result.failed[:20]])
        for error, _ in result.failed:
            log.warning("%s: %s", self.config.on_error, error)
        if self.config.on_error == "dead_letter":
            summary.dead_letters = _send_dead_letters(
                producer, result, self.partition, self.config.dlq_topic, on_delivery
            )
        remaining = producer.flush(self.config.flush_timeout)
        if remaining or failures:
            raise DeliveryError(
                self.graph.table,
                None,
                f"partition {self.partition}: {remaining} messages unacknowledged after "
                f"{self.config.flush_timeout:g}s, {len(failures)} failed: {failures[:3]}",
            )
        return table_end[-1] if table_end else None


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


def _send_dead_letters(
    producer: Producer,
    result: BatchResult,
    partition: int,
    topic: str,
    on_delivery: Callable[[Any, Any], None],
) -> int:
    """Write each failed message's raw record to the dead-letter topic; return how many."""
    for error, (source, offset, key, value, timestamp, headers) in result.failed:
        details = [("goka-error", str(error).encode()), (SRC_TOPIC, source.encode()),
                   (SRC_PARTITION, b"%d" % partition), (SRC_OFFSET, b"%d" % offset)]  # fmt: skip
        _send(producer, topic, value, key, on_delivery, [*(headers or []), *details], timestamp, -1)
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
        except ProduceError as exc:  # refused at once, e.g. larger than message.max.bytes
            raise DeliveryError(topic, key, f"refused by the producer: {exc}") from exc
