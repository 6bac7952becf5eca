"""What partition processors are built from: their configuration, the builders of their
collaborators (storage, producer, record reader, snapshot store, lookup tables; Go Goka keeps
these in ``options.go``) and the clients a worker process keeps for them.

Builders travel with the task to the executors, so they are picklable module-level functions or
classes; tests swap them for in-memory fakes or for ones that inject faults.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from goka.codec import BytesCodec
from goka.engine import ErrorPolicy
from goka.errors import ConfigurationError
from goka.graph import GroupGraph
from goka.kafka.config import producer_config
from goka.kafka.producer import Producer, ProducerBuilder, kafka_producer
from goka.kafka.ranges import RangeReader, RecordReader
from goka.storage import LevelDBStorage, MemoryStorage, Storage, StorageBuilder
from goka.storage.snapshots import SnapshotStore
from goka.view import View
from goka.worker import Worker, frozen

__all__ = [
    "Builders",
    "Clients",
    "LookupTable",
    "PartitionBoard",
    "StopSignal",
    "TaskConfig",
    "leveldb_store",
    "lookup_view",
]


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
    worker may hold many stores open)."""
    return LevelDBStorage(path, table, cache_mb=32, max_open_files=256)


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
            end early (see :class:`StopSignal`).
        board_url: a directory (path or fsspec URL) where tasks say what their partitions
            are doing while they recover (see :class:`PartitionBoard`); None: nowhere.
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


class Clients:
    """The clients of one group's partition processors, kept by the worker process (built on
    first use, reused by later tasks, closed when the worker closes)."""

    def __init__(self, config: TaskConfig, worker: Worker) -> None:
        self.config, self.worker = config, worker

    # -- clients -------------------------------------------------------------------------------
    def reader(self) -> RecordReader:
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
        builder = self.config.builders.producer
        key, settings = self._producer_settings()
        return self.worker.client(
            key,
            lambda: builder(settings),
            lambda producer: producer.flush(self.config.flush_timeout),
        )

    def discard_producer(self) -> None:
        """Build a new producer for the next task: this one failed to deliver (an idempotent
        producer whose broker was replaced, say, never delivers again)."""
        self.worker.discard(self._producer_settings()[0])

    def snapshots(self) -> SnapshotStore | None:
        config = self.config
        if config.snapshot_url is None or config.snapshot_interval <= 0:
            return None
        builder = config.builders.snapshots
        return self.worker.client(
            (
                "snapshots",
                builder,
                config.snapshot_url,
                config.snapshots_kept,
                frozen(config.snapshot_options),
            ),
            lambda: builder(
                config.snapshot_url,
                keep=config.snapshots_kept,
                storage_options=config.snapshot_options,
            ),
            lambda store: None,
        )

    def lookups(self) -> dict[str, Callable[[str], bytes | None]]:
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
            view.wait_recovered(self.config.read_timeout)
            readers[table] = view.get_raw
        return readers


class StopSignal:
    """A run's request to stop: a file at a path or fsspec URL (shared by the executors, like
    the checkpoint) that the driver creates and the tasks of an epoch look for, at most every
    ``every`` seconds.

    Raises:
        ConfigurationError: the URL's protocol is unknown or its package is not installed.
    """

    def __init__(self, url: str, every: float = 0.2) -> None:
        self.url, self.every = url, every
        self._next = 0.0
        self._set = False
        if "://" in url and not url.startswith("file://"):
            import fsspec.core  # only runs whose checkpoint is remote need it

            try:
                self._fs, self._path = fsspec.core.url_to_fs(url)
            except (ImportError, ValueError) as exc:
                raise ConfigurationError(f"cannot use {url!r} for the stop signal: {exc}") from exc
        else:
            self._fs, self._path = None, url.removeprefix("file://")

    def __call__(self) -> bool:
        """Whether the stop was asked for (checked at most every ``every`` seconds)."""
        now = time.monotonic()
        if not self._set and now >= self._next:
            self._next = now + self.every
            self._set = self._exists()
        return self._set

    def _exists(self) -> bool:
        if self._fs is None:
            return os.path.exists(self._path)
        return bool(self._fs.exists(self._path))

    def set(self) -> None:
        """Ask the tasks to stop."""
        if self._fs is None:
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            Path(self._path).touch()
        else:
            self._fs.pipe(self._path, b"stop")

    def clear(self) -> None:
        """Withdraw the request (a new run starts)."""
        with contextlib.suppress(FileNotFoundError):
            if self._fs is None:
                os.unlink(self._path)
            elif self._fs.exists(self._path):
                self._fs.rm(self._path)


class PartitionBoard:
    """Where tasks say what their partitions are doing (``restoring`` or ``rebuilding`` a store,
    how many of how many records, then ``running``) and the driver's monitor reads it: one
    small JSON file per partition in a directory (path or fsspec URL, beside the checkpoint,
    so the executors of a cluster and the driver share it). Progress is written at most every
    ``every`` seconds; a change of state at once. Failures to write are ignored: the board
    only informs."""

    def __init__(self, url: str, every: float = 1.0) -> None:
        self.url, self.every = url.rstrip("/"), every
        self._written: dict[int, tuple[str, float]] = {}
        if "://" in url and not url.startswith("file://"):
            import fsspec.core

            self._fs, self._path = fsspec.core.url_to_fs(self.url)
        else:
            self._fs, self._path = None, self.url.removeprefix("file://")

    def report(self, partition: int, state: str, records: int = 0, of: int = 0) -> None:
        """Say that ``partition`` is in ``state`` (``records`` of ``of`` read so far)."""
        now = time.monotonic()
        last = self._written.get(partition)
        if last is not None and last[0] == state and now - last[1] < self.every:
            return
        self._written[partition] = (state, now)
        entry = json.dumps({"state": state, "records": records, "of": of, "at": time.time()})
        path = f"{self._path}/{partition}.json"
        try:
            if self._fs is None:
                Path(self._path).mkdir(parents=True, exist_ok=True)
                Path(f"{path}.tmp").write_text(entry)
                os.replace(f"{path}.tmp", path)
            else:
                self._fs.pipe(path, entry.encode())
        except OSError:
            pass

    def read(self) -> dict[int, dict[str, Any]]:
        """``{partition: {"state", "records", "of", "at"}}`` as the tasks last said."""
        found: dict[int, dict[str, Any]] = {}
        try:
            if self._fs is None:
                names = [n for n in os.listdir(self._path) if n.endswith(".json")]
                texts = {n: Path(self._path, n).read_text() for n in names}
            else:
                names = [p.rsplit("/", 1)[-1] for p in self._fs.ls(self._path, detail=False)]
                texts = {n: self._fs.cat(f"{self._path}/{n}").decode() for n in names
                         if n.endswith(".json")}  # fmt: skip
        except (OSError, FileNotFoundError):
            return found
        for name, text in texts.items():
            try:
                found[int(name.removesuffix(".json"))] = json.loads(text)
            except ValueError:  # being replaced: the next read has it
                continue
        return found
