"""Where a partition processor's collaborators come from (:class:`Builders`: storage,
producer, record reader, snapshot store, lookup tables; Go Goka keeps these in
``builders.go``).

Builders travel with the task to the executors, so they are picklable module-level functions or
classes; tests swap them for in-memory fakes or for ones that inject faults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from goka.codec import BytesCodec
from goka.kafka.producer import ProducerBuilder, kafka_producer
from goka.kafka.ranges import RangeReader
from goka.kafka.reader import RecordReader
from goka.kafka.transactions import Transactions
from goka.storage import LevelDBStorage, MemoryStorage, Storage, StorageBuilder
from goka.storage.snapshots import SnapshotStore
from goka.view import View

__all__ = ["Builders", "LookupTable", "leveldb_store", "lookup_view"]


class LookupTable(Protocol):
    """A followed copy of a looked-up table (what ``ctx.lookup`` reads)."""

    def get_raw(self, key: str) -> bytes | None:
        """The raw value of ``key``, or None."""
        ...

    def wait_recovered(self, timeout: float | None = None) -> None:
        """Block until the copy has caught up with the table."""
        ...

    def close(self) -> None:
        """Stop following the table."""
        ...


#: The memory a partition store keeps recent values in (see :func:`leveldb_store`).
RECENT_MB = 8


def leveldb_store(path: Path, table: str) -> Storage:
    """The default storage builder of partition stores: LevelDB with a bounded footprint (a
    worker may hold many stores open), and a write buffer for the rate a processor writes
    (32 MB against LevelDB's 4: 1.5x the records per second of a continuous hopping-window
    group, 1.1x of a tumbling one, in ``bench.windows``' input; a store written little
    holds little of it), and the values of the keys read or written last kept in memory (up
    to 8 MB, about 55,000 small entries: :mod:`goka.storage.recent`)."""
    return LevelDBStorage(path, table, cache_mb=32, max_open_files=256, write_buffer_mb=32,
                          recent_mb=RECENT_MB)  # fmt: skip


def lookup_view(brokers: str, table: str, kafka_config: Mapping[str, Any]) -> LookupTable:
    """The default lookup builder: a view of ``table`` in memory, started."""
    storage = MemoryStorage(table)
    return View(brokers, table, BytesCodec(), storage=storage, **kafka_config).start()


@dataclass(frozen=True)
class Builders:
    """Where a partition processor's collaborators come from. Picklable: they travel with the
    task to the executors, so use module-level functions and classes.

    Attributes:
        storage: opens a partition store ``(path, table)``.
        producer: builds the producer from librdkafka settings.
        reader: builds the record reader ``(brokers, kafka settings)``.
        snapshots: builds the snapshot store ``(url, keep=, storage_options=)``.
        lookup: builds a followed copy of a looked-up table ``(brokers, table, settings)``.
        transactions: builds a partition's transactional producer under exactly-once
            ``(settings, group, partition, timeout)``.
    """

    storage: StorageBuilder = leveldb_store
    producer: ProducerBuilder = kafka_producer
    reader: Callable[[str, Mapping[str, Any]], RecordReader] = RangeReader
    snapshots: Callable[..., SnapshotStore] = SnapshotStore
    lookup: Callable[[str, str, Mapping[str, Any]], LookupTable] = lookup_view
    transactions: Callable[[Mapping[str, Any], str, int, float], Transactions] = Transactions
