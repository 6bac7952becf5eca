"""A micro-batch: what one task does with one Goka partition's offset ranges.

1. lease the partition's stores and make them current for where the batch begins (see
   :class:`~goka.processing.stores.PartitionStores`);
2. read the records the stores have not applied yet; apply the joined tables' records first
   (they precede the input messages they serve);
3. run the engine core over the input and loop messages;
4. produce table updates, emits, loopbacks and dead letters with one producer, flush and check
   every delivery (:mod:`goka.processing.output`);
5. only then commit the state changes, the batch's end offsets and the group table's end in one
   write, then the group's offsets;
6. at most every ``snapshot_interval`` seconds, stage a snapshot for upload.
"""

from __future__ import annotations

import heapq
import json
import logging
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import asdict
from typing import Any

from goka.errors import StorageCorruptError, TransactionError
from goka.group.effects import Message
from goka.group.engine import Engine
from goka.kafka.transactions import TRANSACTION_SECONDS
from goka.processing.applied import record_before
from goka.processing.config import TaskConfig
from goka.processing.exactly_once import retrying
from goka.processing.recovery import CHUNK
from goka.processing.stores import PartitionStores
from goka.processing.summary import PartitionSummary, store_bytes
from goka.processing.worker import Worker

__all__ = ["PartitionProcessor"]

log = logging.getLogger(__name__)


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

    def process(self, ranges: Mapping[str, tuple[int, int]]) -> PartitionSummary:
        """Process ``{topic: (start, end)}`` of this partition; return what was done.

        A store found damaged while in use (a checksum failed) was moved aside by its lease:
        the batch runs once more on a store rebuilt from the snapshot and the table's tail
        (nothing was committed; outputs already produced are produced again). A transaction
        that failed (:class:`~goka.errors.TransactionError`) leaves the store at the batch's
        last commit: the batch runs again from there (:func:`~goka.processing.exactly_once.
        retrying`).

        Raises:
            ProcessingError: a message failed under the ``fail`` policy.
            DeliveryError: an output was refused or not acknowledged (nothing is committed).
            StorageError, BrokerError: a store or the broker failed (nothing is committed).
        """
        corrupt, failures = 0, list[float]()
        while True:
            try:
                summary = self._process(ranges)
                summary.corrupt_stores += corrupt
                return summary
            except StorageCorruptError as exc:
                if corrupt:
                    raise
                corrupt += 1
                log.warning("group %s partition %d: batch run again on a rebuilt store: %s",
                            self.graph.group, self.partition, exc)  # fmt: skip
            except TransactionError as exc:
                pause = retrying(failures, exc, lambda: False)
                log.warning("group %s partition %d: batch run again from its last commit: %s",
                            self.graph.group, self.partition, exc)  # fmt: skip
                time.sleep(pause)  # (what failed may take a moment to settle)

    def _process(self, ranges: Mapping[str, tuple[int, int]]) -> PartitionSummary:
        started = time.monotonic()
        summary = PartitionSummary(self.partition, started_at=time.time())
        inputs = [t for t in self.graph.input_topics() if t in ranges]
        joins = [t for t in self.graph.joins if t in ranges]
        with ExitStack() as stack:
            stores = PartitionStores(self.config, self.partition, self.worker, stack)
            stores.begin({t: ranges[t][0] for t in inputs}, summary)
            for table in joins:  # up to the batch's start: its records in the batch follow
                stores.recover_join(table, ranges[table][0], summary)
            planned = {t: ranges[t] for t in (*inputs, *joins)}
            applied = stores.applied([*inputs, *joins])
            stores.skip(applied, planned, summary)
            summary.ready_seconds = time.monotonic() - started
            messages = self._read(stores, applied.todo(planned))
            ends = applied.ends(planned)
            for table in joins:
                stores.apply_join(table, messages.get(table, []), ends[table], summary)
            pending = stores.pending_rows()
            engine = self._engine(stores, stores.engine_sections(pending))
            output = stores.output()
            rest = self._ordered(messages, inputs)
            at = {t: r[0] for t, r in applied.todo(planned).items() if t in inputs}
            after = record_before(at)
            sliced = _Slices(self.config.guarantee == "exactly-once")
            while True:
                began = time.monotonic()  # (a slice's time: processing, producing, commit)
                result, after = engine.process(sliced.next(rest), after=after), None
                stores.take(result, output, summary, pending)
                done, rest = rest[: result.consumed], rest[result.consumed :]
                if not rest and not engine.backlog:
                    break
                for message in done:  # what fired hit the budget, or a transaction's slice
                    # is done: commit, then go on
                    at[message[0]] = message[1] + 1
                stores.commit(output, result.changes(), at, summary,
                              sections=None if pending is None else pending.rows)  # fmt: skip
                if pending is not None:
                    pending.clear()
                engine.committed()
                sliced.took(time.monotonic() - began, result.consumed)
            positions = {t: ends[t] for t in inputs}
            stores.commit(output, result.changes(), positions, summary, wait=True,
                          sections=None if pending is None else pending.rows)  # fmt: skip
            summary.ends = json.dumps(positions)
            summary.store_bytes = store_bytes(stores.store)
            stores.snapshot(summary)
        summary.uploads = json.dumps([asdict(r) for r in self.worker.reports()])
        summary.seconds = time.monotonic() - started
        return summary

    def _read(
        self, stores: PartitionStores, ranges: Mapping[str, tuple[int, int]]
    ) -> dict[str, list[Message]]:
        messages: dict[str, list[Message]] = {}
        for rows in stores.clients.reader().read(
            self.partition, ranges, self.config.broker_timeout, CHUNK
        ):
            for row in rows:
                messages.setdefault(row[0], []).append(row)
        return messages

    def _ordered(self, messages: Mapping[str, list[Message]], inputs: list[str]) -> list[Message]:
        """The inputs' records in time order (each topic's in offset order)."""
        todo = [messages.get(t, []) for t in inputs]
        return todo[0] if len(todo) == 1 else list(heapq.merge(*todo, key=lambda m: m[4]))

    def _engine(self, stores: PartitionStores, sections: Mapping[str, Any]) -> Engine:
        tables = {t: stores.leases[f"join-{t}"].storage.get for t in self.graph.joins}
        return Engine(
            self.graph, self.partition, store=stores.store.get,
            tables={**tables, **stores.clients.lookups()}, on_error=self.config.on_error,
            max_message_bytes=self.config.max_message_bytes, fire_budget=self.config.fire_budget,
            deferred_finals=True, window_cache=self.config.window_cache,
            whole_commits=self.config.guarantee == "exactly-once", **sections,
        )  # fmt: skip


#: Under exactly-once a micro-batch commits what it did (one transaction) about every
#: ``TRANSACTION_SECONDS`` (processing, producing and committing a slice): a backlog is not
#: one transaction, which the broker aborts once it has been open for
#: ``transaction.timeout.ms`` (60 s, :mod:`goka.kafka.transactions`), and whose outputs a
#: crash would all repeat. Its first slice has :data:`FIRST_SLICE` records, the next ones
#: as many as the time allows at the speed seen (a slow commit, large outputs or a slow
#: broker, makes slices small).
FIRST_SLICE = 1_000


class _Slices:
    """The records a micro-batch processes before its next commit: all of them, or, under
    exactly-once (``sliced``), slices of about :data:`TRANSACTION_SECONDS`."""

    def __init__(self, sliced: bool) -> None:
        self.sliced, self.size = sliced, FIRST_SLICE

    def next(self, rest: list[Message]) -> list[Message]:
        return rest[: self.size] if self.sliced and len(rest) > self.size else rest

    def took(self, seconds: float, records: int) -> None:
        if self.sliced and records:
            per_record = max(1e-7, seconds / records)
            self.size = int(max(FIRST_SLICE, TRANSACTION_SECONDS / per_record))
