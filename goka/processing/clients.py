"""The clients of one group's partition processors: built from the task's builders on first
use, kept by the worker process for the next tasks, closed when it closes."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Hashable
from typing import Any

from goka.kafka.config import producer_config
from goka.kafka.producer import KafkaProducer, Producer, ready_in
from goka.kafka.reader import RecordReader
from goka.kafka.transactions import Transactions
from goka.processing.config import TaskConfig
from goka.processing.worker import Worker, frozen
from goka.storage.snapshots import SnapshotStore

__all__ = ["Clients"]


class Clients:
    """The clients of ``config``'s group in ``worker``'s process. Not thread-safe: the tasks of
    a process run one at a time (a bridge ends before the next task begins)."""

    def __init__(self, config: TaskConfig, worker: Worker) -> None:
        self.config, self.worker = config, worker

    def reader(self) -> RecordReader:
        """The record reader (ranges, tails, watermarks, the group's offsets)."""
        builder, brokers, settings = (
            self.config.builders.reader,
            self.config.brokers,
            self.config.kafka_config,
        )
        return self.worker.client(
            ("reader", builder, brokers, frozen(settings)),
            lambda: builder(brokers, settings),
            lambda reader: reader.close(),
        )

    def _producer_settings(self) -> tuple[Hashable, dict[str, Any]]:
        """The worker's key of this group's producer, and the settings it is built with."""
        overrides = {"linger.ms": 10, **self.config.kafka_config, **self.config.producer_config}
        key = ("producer", self.config.builders.producer, self.config.brokers, frozen(overrides))
        return key, producer_config(self.config.brokers, overrides)

    def producer(self) -> Producer:
        """The producer of table updates, emits, loopbacks and dead letters."""
        builder, table = self.config.builders.producer, self.config.graph.table
        key, settings = self._producer_settings()

        def build() -> Producer:
            producer = builder(settings)
            if isinstance(producer, KafkaProducer) and producer.idempotent:
                producer.connect(table)  # its producer ID at once, not half a second later
            return producer

        return self.worker.client(
            key, build, lambda producer: producer.flush(self.config.flush_timeout)
        )

    def _transactions_key(self, partition: int) -> tuple[Hashable, dict[str, Any]]:
        key, settings = self._producer_settings()
        builder = self.config.builders.transactions
        return ("transactions", builder, key, self.config.graph.group, partition), settings

    def transactions(self, partition: int, latest: str | None) -> Transactions:
        """The transactional producer of ``partition`` under exactly-once, kept for the next
        tasks of the partition in this process while it is the ``latest`` to have started
        (its :attr:`~goka.kafka.transactions.Transactions.token`); else a new one, which
        fences every other.

        Raises:
            FencedError, BrokerError: as :class:`~goka.kafka.transactions.Transactions`.
        """
        key, settings = self._transactions_key(partition)
        build, group, made = self.config.builders.transactions, self.config.graph.group, []

        def start() -> Transactions:
            made.append(build(settings, group, partition, self.config.broker_timeout))
            return made[-1]

        found = self.worker.client(key, start, lambda transactions: transactions.close())
        fresh = self._fresh()
        if not made and found.token != latest and found.token not in fresh:  # another writer
            self.worker.discard(key)  # started since this one
            found = self.worker.client(key, start, lambda transactions: transactions.close())
        fresh.discard(found.token)
        return found

    def start_transactions(self, partition: int, latest: str | None) -> bool:
        """Start the transactional producer of ``partition`` now, unless this process has
        the ``latest``, for the task about to lease its stores (:meth:`transactions` takes it
        as the latest): its start fences the writer that holds them (a bridge in another
        process), which processes on meanwhile and fails at its next commit, instead of the
        task waiting for the start with the stores held. Return whether one started (and
        fenced every other writer of the partition)."""
        found = self.transactions(partition, latest)
        if found.token == latest:
            return False
        self._fresh().add(found.token)
        return True

    def kept_transactions(self, partition: int, latest: str | None) -> Transactions | None:
        """The transactional producer of ``partition`` this process keeps, if it is the
        ``latest`` to have started (None: it has none, or a newer one fenced it)."""
        key, _ = self._transactions_key(partition)
        found: Transactions | None = self.worker.kept(key)
        return found if found is not None and found.token == latest else None

    def _fresh(self) -> set[str]:
        """The tokens of producers started for a task that has not taken them yet."""
        return self.worker.client(("fresh transactions",), set, lambda tokens: None)

    def discard_transactions(self, partition: int) -> None:
        """Let ``partition``'s transactional producer go (fenced, or it failed to deliver):
        the next task makes a new one."""
        self.worker.discard(self._transactions_key(partition)[0])

    def warm_up(self, stop: Callable[[], bool]) -> None:
        """Build the producer if there is none yet, and wait until it delivers at once
        (:func:`goka.kafka.producer.ready_in`; or until ``stop()``): a task that will take the
        stores over from a bridge in another process lets the bridge process on meanwhile,
        instead of holding its first records back for the producer's start."""
        producer = self.producer()
        while (left := ready_in(producer)) > 0 and not stop():
            time.sleep(min(left, 0.05))  # librdkafka's timer: nothing to wait on

    def discard_producer(self) -> None:
        """Build a new producer for the next task: this one failed to deliver (an idempotent
        producer whose broker was replaced, say, never delivers again)."""
        self.worker.discard(self._producer_settings()[0])

    def snapshots(self) -> SnapshotStore | None:
        """The snapshot store (None: snapshots are off), its client ready when it is built
        (at a lease or the worker's readying, not at the first upload beside the loop)."""
        config = self.config
        if not config.snapshot_dir or config.snapshot_interval <= 0:
            return None
        builder = config.builders.snapshots
        return self.worker.client(
            (
                "snapshots",
                builder,
                config.snapshot_dir,
                config.snapshots_kept,
                frozen(config.snapshot_options),
            ),
            lambda: _warmed(
                builder(
                    config.snapshot_dir,
                    keep=config.snapshots_kept,
                    storage_options=config.snapshot_options,
                ),
                config.graph.group,
            ),
            lambda store: None,
        )

    def lookups(self) -> dict[str, Callable[[str], bytes | None]]:
        """Readers of the looked-up tables, each caught up with its table."""
        readers: dict[str, Callable[[str], bytes | None]] = {}
        builder, brokers, settings = (
            self.config.builders.lookup,
            self.config.brokers,
            self.config.kafka_config,
        )
        for table in self.config.graph.lookups:
            view = self.worker.client(
                ("lookup", builder, brokers, table, frozen(settings)),
                functools.partial(builder, brokers, table, settings),
                lambda view: view.close(),
            )
            view.wait_recovered(self.config.broker_timeout)
            readers[table] = view.get_raw
        return readers


def _warmed(store: SnapshotStore, group: str) -> SnapshotStore:
    warm = getattr(store, "warm", None)  # (a builder of the user's may give another kind)
    if warm is not None:
        warm(group)
    return store
