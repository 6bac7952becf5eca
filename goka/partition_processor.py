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

In continuous mode a task runs an *epoch* instead (:mod:`goka.partition_epoch`):
after step 1 it follows its inputs and joined tables from the stores' offsets for ``epoch``
seconds, runs the engine on each group of records as they arrive (joined tables' records are
applied in time order between them), produces at once, and every ``commit_interval`` does
steps 4 to 6 for what it processed since (changes not committed yet are read through an
overlay on the store); then step 7.

State is exactly-once; outputs are at-least-once (a crash between 4 and 5 repeats them: in an
epoch, at most one commit interval's). Every
collaborator comes from :class:`goka.options.Builders`, so tests run this without Spark or a
broker, and crash tests inject faults through them. Outputs are produced by
:mod:`goka.partition_output`; what was done is counted in :mod:`goka.partition_summary`.
"""

from __future__ import annotations

import heapq
import json
import logging
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goka.engine import BatchResult, Engine, Message
from goka.errors import StorageCorruptError
from goka.keys import key_str
from goka.options import Clients, PartitionBoard, TaskConfig
from goka.partition_applied import Applied, commit
from goka.partition_output import Output
from goka.partition_summary import Counts, PartitionSummary, store_bytes
from goka.partition_table import (
    CHUNK,
    StoreRecovery,
    checked_watermarks,
)
from goka.storage import Storage, WriteBatch
from goka.storage.snapshots import Manifest, StoreState, remove_abandoned, stage
from goka.worker import Lease, Worker

if TYPE_CHECKING:
    from goka.partition_epoch import Epoch

__all__ = ["Counts", "PartitionProcessor", "PartitionSummary"]

log = logging.getLogger(__name__)


class PartitionProcessor:
    """Processes one partition of micro-batches (see the module docstring). Not thread-safe.

    Args:
        config: the group's task configuration.
        partition: the partition number.
        worker: the process's shared resources (stores, clients, uploads).
    """

    def __init__(
        self, config: TaskConfig, partition: int, worker: Worker, *, ask_holders: bool = True
    ) -> None:
        self.config, self.graph, self.partition, self.worker = (
            config, config.graph, partition, worker,
        )  # fmt: skip
        self.ask_holders = ask_holders  # False: a store another process holds is not asked for
        self.root = Path(config.state_dir) / self.graph.group
        self.clients = Clients(config, worker)
        self._inputs = frozenset(self.graph.input_topics())
        self._manifests: list[Manifest] | None = None
        url = config.board_url
        self._board: PartitionBoard | None = None if url is None else worker.client(
            ("board", url), lambda: PartitionBoard(url), lambda board: None)  # fmt: skip

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
        joins = [t for t in self.graph.joins if t in ranges]
        with ExitStack() as stack:
            stores = {"partition": stack.enter_context(self._lease("partition", self.graph.table))}
            for table in self.graph.joins:
                stores[f"join-{table}"] = stack.enter_context(self._lease(f"join-{table}", table))
            self._recover(stores["partition"], self._begin_at(
                {t: ranges[t][0] for t in inputs}), summary)  # fmt: skip
            for table in joins:
                self._recover_join(table, stores[f"join-{table}"], ranges[table][0], summary)
            applied = self._applied(stores, inputs, joins)
            self._check_ahead(applied.offsets, {t: s for t, (s, _) in ranges.items()})
            summary.skipped_applied = self._skipped(applied, {t: ranges[t] for t in inputs})
            summary.ready_seconds = time.monotonic() - started
            messages = self._read(applied.todo({t: ranges[t] for t in (*inputs, *joins)}))
            for table in joins:
                self._apply_join(table, stores[f"join-{table}"], messages.get(table, []),
                                 applied.ends({table: ranges[table]})[table], summary)  # fmt: skip
            result = self._run(stores, messages, inputs)
            table_end = self._produce(result, summary, stores["partition"].storage)
            ends = applied.ends({t: ranges[t] for t in inputs})
            self._commit(stores["partition"].storage, result, ends, table_end)
            summary.ends = json.dumps(ends)
            summary.store_bytes = store_bytes(stores["partition"].storage)
            summary.commits = 1
            self._commit_to_group(ends, wait=True)
            self._maybe_snapshot(stores, summary)
        summary.uploads = json.dumps([asdict(r) for r in self.worker.reports()])
        summary.seconds = time.monotonic() - started
        return summary

    def _begin_at(self, starts: Mapping[str, int]) -> dict[str, int]:
        """Where processing of the inputs begins: ``starts`` as Spark planned them, or where
        the group committed if that is further (as Go Goka resumes a group). The group
        commits after the state, so the table holds the outputs of every record below its
        commits: Spark plans behind them after a crash, after a continuous run (its epochs'
        plans lag the tasks), on a new checkpoint. Never processing those records again also
        keeps the table free of a run's outputs behind those of a run that got further, which
        no replay of the table could order."""
        committed = self.clients.reader().committed(self.graph.group, self.partition, list(starts))
        return {t: max(s, committed[t][0]) if t in committed else s for t, s in starts.items()}

    def _applied(self, stores: Mapping[str, Lease], inputs: list[str], joins: list[str]) -> Applied:
        """What the group store has applied of ``inputs`` and the joined stores of ``joins``."""
        found = dict(Applied.of(stores["partition"].storage, self.partition, inputs).offsets)
        for table in joins:
            found.update(
                Applied.of(stores[f"join-{table}"].storage, self.partition, [table]).offsets
            )
        return Applied(self.partition, found)

    def _skipped(self, applied: Applied, ranges: Mapping[str, tuple[int, int]]) -> int:
        """Count (and log) the input records of ``ranges`` the store has applied already."""
        skipped = applied.skipped(ranges)
        if skipped:
            log.info("group %s partition %d: %d records already applied, skipped (store at %s, "
                     "ranges %s)", self.graph.group, self.partition, skipped,
                     {t: applied.offsets[t] for t in ranges}, dict(ranges))  # fmt: skip
        return skipped

    def process_epoch(
        self,
        starts: Mapping[str, int],
        seconds: float,
        stop: Callable[[], bool] = lambda: False,
    ) -> PartitionSummary:
        """Process this partition continuously for ``seconds``: :func:`run_epoch` of one."""
        from goka.partition_epoch import run_epoch  # the epoch module builds on this one

        (summary,) = run_epoch(self.config, self.worker, {self.partition: starts}, seconds, stop)
        return summary

    def _begin_epoch(self, stack: ExitStack, starts: Mapping[str, int]) -> Epoch:
        """Lease and recover this partition's stores for an epoch (released by ``stack``)."""
        summary = PartitionSummary(self.partition, started_at=time.time())
        inputs = [t for t in self.graph.input_topics() if t in starts]
        target = self._begin_at({t: starts[t] for t in inputs})
        stores = {"partition": stack.enter_context(self._lease("partition", self.graph.table))}
        for table in self.graph.joins:
            stores[f"join-{table}"] = stack.enter_context(self._lease(f"join-{table}", table))
        positions = self._recover(stores["partition"], target, summary)
        for topic in inputs:  # an epoch follows its inputs from here: they must still be there
            self._check(topic, positions[topic])
        # what the epoch skips: beyond where it begins (the group's commits, where further
        # than Spark's plan: Spark plans an epoch before the previous one and its bridge end)
        applied = Applied(self.partition, positions)
        summary.skipped_applied = self._skipped(applied, applied.behind(target, inputs))
        for table in self.graph.joins:  # current before any input, as Goka recovers them
            lease = stores[f"join-{table}"]
            recovery = self._recovery(lease, f"join-{table}", table)
            high = self._check(table, max(starts[table], recovery.positions({table: 0})[table]))
            summary.count(recovery.recover({table: high}, end=high), lease)
            positions.update(recovery.positions({table: high}))
        from goka.partition_epoch import Epoch

        return Epoch(self, stores, positions, summary)

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
            timeout=self.config.store_timeout, discard_corrupt=True, ask=self.ask_holders,
        )  # fmt: skip

    def _recover(
        self, lease: Lease, target: Mapping[str, int], summary: PartitionSummary
    ) -> dict[str, int]:
        """Make the group store current; return the input offsets it has applied."""
        topic = self.graph.table if self.graph.persist else None
        recovery = self._recovery(lease, "partition", topic)
        if self._board is not None:
            board, partition = self._board, self.partition
            recovery.report = lambda state, records, of: board.report(partition, state,
                                                                      records, of)  # fmt: skip
        done = recovery.recover(target, unfinished=True)
        if self._board is not None:
            self._board.report(self.partition, "running")
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

    def _recover_join(
        self, table: str, lease: Lease, start: int, summary: PartitionSummary
    ) -> None:
        """Bring a joined table's store to the batch's start (its records in the batch follow)."""
        recovery = self._recovery(lease, f"join-{table}", table)
        summary.count(recovery.recover({table: start}, end=start), lease)

    def _apply_join(
        self, table: str, lease: Lease, rows: list[Message], end: int, summary: PartitionSummary
    ) -> None:
        """Apply a joined table's records of the batch (those not applied yet) to its store."""
        batch = WriteBatch(values={key_str(r[2]): r[3] for r in rows if r[2] is not None})
        batch.set_offset(table, self.partition, end)
        commit(lease.storage, batch, who=self._store_name(f"join-{table}"))
        summary.table_records += len(rows)

    def _store_name(self, name: str) -> str:
        return f"group {self.graph.group!r} partition {self.partition} (store {name})"

    def _commit(
        self, store: Storage, result: BatchResult, ends: Mapping[str, int], table_end: int | None
    ) -> None:
        batch = WriteBatch(values=result.changes())
        for topic, offset in ends.items():
            batch.set_offset(topic, self.partition, offset)
        if table_end is not None:
            batch.set_offset(self.graph.table, self.partition, table_end)
        commit(store, batch, who=self._store_name("partition"))

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
        self, stores: Mapping[str, Lease], messages: Mapping[str, list[Message]], inputs: list[str]
    ) -> BatchResult:
        todo = [messages.get(t, []) for t in inputs]
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
        output = Output(self.clients.producer(), self.partition, self.config, store,
                        self.clients.discard_producer)  # fmt: skip
        output.send(result, summary)
        return output.flush()
