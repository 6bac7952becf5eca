"""What partition processors are built from: their configuration (:class:`TaskConfig`) and the
builders of their collaborators (:class:`Builders`: storage, producer, record reader, snapshot
store, lookup tables; Go Goka keeps these in ``builders.go`` and ``options.go``).

Builders travel with the task to the executors, so they are picklable module-level functions or
classes; tests swap them for in-memory fakes or for ones that inject faults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from goka.codec import BytesCodec
from goka.group.engine import ErrorPolicy
from goka.group.graph import GroupGraph
from goka.kafka.producer import ProducerBuilder, kafka_producer
from goka.kafka.ranges import RangeReader
from goka.kafka.reader import RecordReader
from goka.storage import LevelDBStorage, MemoryStorage, Storage, StorageBuilder
from goka.storage.snapshots import SnapshotStore
from goka.time.window_cache import WINDOW_CACHE
from goka.view import View

__all__ = ["Builders", "LookupTable", "TaskConfig", "leveldb_store", "lookup_view"]


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


def leveldb_store(path: Path, table: str) -> Storage:
    """The default storage builder of partition stores: LevelDB with a bounded footprint (a
    worker may hold many stores open), and a write buffer for the rate a processor writes
    (32 MB against LevelDB's 4: 1.5x the records per second of a continuous hopping-window
    group, 1.1x of a tumbling one, in ``bench.windows``' input; a store written little
    holds little of it)."""
    return LevelDBStorage(path, table, cache_mb=32, max_open_files=256, write_buffer_mb=32)


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
    """

    storage: StorageBuilder = leveldb_store
    producer: ProducerBuilder = kafka_producer
    reader: Callable[[str, Mapping[str, Any]], RecordReader] = RangeReader
    snapshots: Callable[..., SnapshotStore] = SnapshotStore
    lookup: Callable[[str, str, Mapping[str, Any]], LookupTable] = lookup_view


#: Bytes of a produced message's size kept for its key, headers and record framing.
MESSAGE_OVERHEAD = 8 * 1024

#: The most timers and expiries a partition fires between two commits, by default (see
#: :class:`goka.group.engine.Engine`'s ``fire_budget``): a stream time jump over a million timers
#: commits in slices instead of holding every effect in memory.
FIRE_BUDGET = 10_000


@dataclass(frozen=True)
class TaskConfig:
    """What every partition processor of a group needs; pickled with the task.

    Attributes:
        state_dir: partition stores live in ``<state_dir>/<group>/`` (each machine's own).
        snapshot_url: where snapshots go (``<checkpoint>/state``); None: no snapshots.
        snapshot_interval: seconds between snapshots of a partition (0: none).
        snapshots_kept: snapshots kept per partition.
        snapshot_options: fsspec storage options (credentials, endpoints).
        store_timeout: seconds to wait for a store another task or process holds.
        epoch: seconds each task of a continuous processor runs (0: micro-batches).
        commit_interval: seconds between the commits of a task in an epoch.
        stop_url: a file (path or fsspec URL) whose existence asks the tasks of an epoch to
            end early (see :class:`~goka.processing.signals.StopSignal`).
        board_url: a directory (path or fsspec URL) where tasks say what their partitions
            are doing while they recover (see :class:`~goka.processing.signals.
            PartitionBoard`); None: nowhere.
        fire_budget: the most timers and expiries a partition fires between two commits.
        window_cache: how many windows of each window table a partition keeps in memory
            with their values until they close (:mod:`goka.time.window_cache`; 0: none).
        log_level, log_format: how the Python workers that run the tasks log (as
            :func:`goka.logs.configure` takes them); None: they configure nothing (an
            application's own logging rules, or Python's default).
    """

    graph: GroupGraph
    brokers: str
    state_dir: str
    on_error: ErrorPolicy = "fail"
    kafka_config: dict[str, Any] = field(default_factory=dict)
    producer_config: dict[str, Any] = field(default_factory=dict)
    flush_timeout: float = 120.0
    read_timeout: float = 120.0
    snapshot_url: str | None = None
    snapshot_interval: float = 30.0
    snapshots_kept: int = 3
    snapshot_options: dict[str, Any] = field(default_factory=dict)
    store_timeout: float = 120.0
    epoch: float = 0.0
    commit_interval: float = 0.1
    stop_url: str | None = None
    board_url: str | None = None
    builders: Builders = field(default_factory=Builders)
    fire_budget: int = FIRE_BUDGET
    window_cache: int = WINDOW_CACHE
    log_level: str | None = None
    log_format: str = "text"

    @property
    def max_message_bytes(self) -> int:
        """The most bytes a produced value may have: the producer's ``message.max.bytes``
        (librdkafka's default 1,000,000) less room for the key, headers and framing (8 KiB,
        or a quarter of a smaller limit)."""
        settings = {**self.kafka_config, **self.producer_config}
        limit = int(settings.get("message.max.bytes", 1_000_000))
        return limit - min(MESSAGE_OVERHEAD, limit // 4)

    @property
    def dlq_topic(self) -> str:
        """Where dead letters go: ``<group>-dlq``."""
        return f"{self.graph.group}-dlq"
