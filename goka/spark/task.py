"""The partition processor: what one Spark task does with one Goka partition of a micro-batch.

Run by ``mapInArrow`` on the source's rows of one partition number:

1. open the (group, partition) LevelDB store; if it is missing or behind the batch's start
   offsets (first run, a new machine, a lost disk), rebuild it from ``<group>-table``, leaving
   out records that a failed attempt of this or a later batch wrote;
2. bring joined tables' stores up to the batch's end (their records are in the batch);
3. run the engine core over the input and loop messages (skipping any below the stored offsets:
   a replay whose outputs were already acknowledged);
4. produce table updates (to the same partition of ``<group>-table``, with headers naming the
   source topic/partition/offset), emits, loopbacks and dead letters with one producer; flush
   and check every delivery;
5. only then commit the state changes together with the batch's end offsets in one write.

State is exactly-once; outputs are at-least-once (a crash between 4 and 5 repeats them).
"""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from goka.context import EMIT, LOOP, TABLE
from goka.engine import BatchResult, Engine, ErrorPolicy, Message
from goka.errors import DeliveryError
from goka.graph import GroupGraph
from goka.kafka.config import producer_config
from goka.kafka.producer import KafkaProducer, ProduceError
from goka.kafka.ranges import EndOffsets, RangeReader
from goka.storage import LevelDBStorage, MemoryStorage, WriteBatch
from goka.view import View

__all__ = ["SUMMARY_SCHEMA", "PartitionTask", "TaskConfig"]

log = logging.getLogger(__name__)

SRC_TOPIC, SRC_PARTITION, SRC_OFFSET = "goka-src-topic", "goka-src-partition", "goka-src-offset"
SUMMARY = pa.schema(
    [
        ("partition", pa.int32()),
        ("processed", pa.int64()),
        ("failed", pa.int64()),
        ("table_updates", pa.int64()),
        ("emits", pa.int64()),
        ("loopbacks", pa.int64()),
        ("dead_letters", pa.int64()),
        ("replayed", pa.int64()),
        ("rebuilt", pa.bool_()),
        ("seconds", pa.float64()),
        ("ends", pa.string()),
        ("errors", pa.string()),
    ]
)
SUMMARY_SCHEMA = (
    "partition int, processed long, failed long, table_updates long, emits long, loopbacks long, "
    "dead_letters long, replayed long, rebuilt boolean, seconds double, ends string, errors string"
)

#: Test hook: ``GOKA_TEST_CRASH_AT=processing|after_flush|after_commit`` with
#: ``GOKA_TEST_CRASH_FILE=path`` kills the whole process group (the processor) once, the first
#: time a task reaches that point, and creates the file so a restart does not crash again.
CRASH_AT, CRASH_FILE = "GOKA_TEST_CRASH_AT", "GOKA_TEST_CRASH_FILE"
#: Process group of the processor's driver, set before Spark starts (workers inherit it).
PROCESSOR_PGID = "GOKA_PROCESSOR_PGID"


@dataclass(frozen=True)
class TaskConfig:
    """What every task needs; pickled with the task function."""

    graph: GroupGraph
    brokers: str
    state_dir: str
    on_error: ErrorPolicy = "fail"
    kafka_config: dict[str, Any] = field(default_factory=dict)
    producer_config: dict[str, Any] = field(default_factory=dict)
    flush_timeout: float = 120.0
    read_timeout: float = 120.0

    @property
    def dlq_topic(self) -> str:
        """Where dead letters go: ``<group>-dlq``."""
        return f"{self.graph.group}-dlq"


_PRODUCERS: dict[str, KafkaProducer] = {}
_LOOKUPS: dict[tuple[str, str], View[Any]] = {}
_SHARED_LOCK = threading.Lock()


class PartitionTask:
    """The ``mapInArrow`` function: processes one partition of a micro-batch (see module doc)."""

    def __init__(self, config: TaskConfig) -> None:
        self.config = config

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        started = time.monotonic()
        partition, messages, ranges = _collect(batches)
        if partition is None:
            return
        if not messages:  # payload=ranges: read the records here, in this task
            messages = _read_ranges(self.config, partition, ranges)
        run = _Run(self.config, partition, ranges)
        try:
            summary = run.execute(messages)
        finally:
            run.close()
        summary["seconds"] = time.monotonic() - started
        yield pa.RecordBatch.from_pylist([summary], schema=SUMMARY)


def _collect(
    batches: Iterator[pa.RecordBatch],
) -> tuple[int | None, dict[str, list[Message]], dict[str, tuple[int, int]]]:
    partition: int | None = None
    messages: dict[str, list[Message]] = {}
    ranges: dict[str, tuple[int, int]] = {}
    for batch in batches:
        if batch.num_rows == 0:
            continue
        columns = batch.to_pydict()
        partition = columns["partition"][0]
        rows = zip(
            columns["topic"],
            columns["offset"],
            columns["key"],
            columns["value"],
            columns["timestamp"],
            columns["headers"],
            columns["range_end"],
            strict=True,
        )
        for topic, offset, key, value, timestamp, headers, range_end in rows:
            if range_end is not None:
                ranges[topic] = (offset, range_end)
                continue
            pairs = None if not headers else [(h["key"], h["value"]) for h in headers]
            messages.setdefault(topic, []).append((topic, offset, key, value, timestamp, pairs))
    return partition, messages, ranges


def _read_ranges(
    config: TaskConfig, partition: int, ranges: dict[str, tuple[int, int]]
) -> dict[str, list[Message]]:
    messages: dict[str, list[Message]] = {}
    reader = RangeReader.shared(config.brokers, config.kafka_config)
    for rows in reader.read(partition, ranges, config.read_timeout, 50_000):
        for row in rows:
            messages.setdefault(row[0], []).append(row)
    return messages


class _Run:
    """One task's work on one partition."""

    def __init__(self, config: TaskConfig, partition: int, ranges: dict[str, tuple[int, int]]):
        self.config, self.graph, self.partition, self.ranges = (
            config,
            config.graph,
            partition,
            ranges,
        )
        root = Path(config.state_dir) / self.graph.group
        self.store = LevelDBStorage(root / f"partition-{partition}", self.graph.table)
        self.joined = {
            t: LevelDBStorage(root / f"join-{t}-{partition}", t) for t in self.graph.joins
        }
        self.summary: dict[str, Any] = {
            "partition": partition,
            "processed": 0,
            "failed": 0,
            "table_updates": 0,
            "emits": 0,
            "loopbacks": 0,
            "dead_letters": 0,
            "replayed": 0,
            "rebuilt": False,
            "ends": "",
            "errors": "",
        }

    def close(self) -> None:
        for storage in (self.store, *self.joined.values()):
            storage.close()

    def execute(self, messages: dict[str, list[Message]]) -> dict[str, Any]:
        inputs = [t for t in self.graph.input_topics() if t in self.ranges]
        starts = {t: self.ranges[t][0] for t in inputs}
        stored = {t: o for (t, p), o in self.store.offsets().items() if p == self.partition}
        if any(stored.get(t, -1) < start for t, start in starts.items()):
            self._rebuild(starts)
            stored = dict(starts)
        for table in self.graph.joins:
            self._catch_up_join(table, messages.get(table, []))
        todo = [[m for m in messages.get(t, []) if m[1] >= stored[t]] for t in inputs]
        self.summary["replayed"] = sum(len(messages.get(t, [])) for t in inputs) - sum(
            map(len, todo)
        )
        ordered = todo[0] if len(todo) == 1 else list(heapq.merge(*todo, key=lambda m: m[4]))
        engine = Engine(
            self.graph,
            self.partition,
            store=self.store.get,
            tables=self._readers(),
            on_error=self.config.on_error,
        )
        result = engine.process(ordered)
        self._produce(result)
        _maybe_crash("after_flush")
        self._commit(result, inputs)
        _maybe_crash("after_commit")
        return self.summary

    # -- state -----------------------------------------------------------------------------------
    def _rebuild(self, starts: Mapping[str, int]) -> None:
        """Rebuild the store from ``<group>-table``, without records of unfinished batches."""
        log.info(
            "group %s partition %d: rebuilding state from %s",
            self.graph.group,
            self.partition,
            self.graph.table,
        )
        self.store.clear()
        batch = WriteBatch()
        if self.graph.persist is not None:
            for _, _, key, value, _, headers in self._read_all(self.graph.table):
                if key is not None and not _from_unfinished_batch(headers, starts):
                    batch.values[key.decode()] = value
        for topic, start in starts.items():
            batch.set_offset(topic, self.partition, start)
        self.store.write(batch)
        self.summary["rebuilt"] = True

    def _read_all(self, topic: str, end: int | None = None) -> Iterator[Any]:
        ends = EndOffsets(self.config.brokers, self.config.kafka_config)
        try:
            tp = (topic, self.partition)
            low = ends.low([tp])[tp]
            high = ends.high([tp])[tp] if end is None else end
        finally:
            ends.close()
        reader = RangeReader.shared(self.config.brokers, self.config.kafka_config)
        for rows in reader.read(
            self.partition, {topic: (low, high)}, self.config.read_timeout, 50_000
        ):
            yield from rows

    def _catch_up_join(self, table: str, rows: list[Message]) -> None:
        store = self.joined[table]
        if table not in self.ranges:
            return
        start, end = self.ranges[table]
        stored = store.offsets().get((table, self.partition))
        batch = WriteBatch()
        if stored is None or stored < start:
            store.clear()
            rows = [*self._read_all(table, end=start), *rows]
            stored = 0
        for _, offset, key, value, _, _ in rows:
            if key is not None and offset >= stored:
                batch.values[key.decode()] = value
        batch.set_offset(table, self.partition, end)
        store.write(batch)

    def _readers(self) -> dict[str, Any]:
        readers: dict[str, Any] = {t: s.get for t, s in self.joined.items()}
        for table, edge in self.graph.lookups.items():
            readers[table] = _lookup_view(self.config, table, edge.codec).get_raw
        return readers

    def _commit(self, result: BatchResult, inputs: list[str]) -> None:
        batch = WriteBatch(values=result.changes())
        for topic in inputs:
            batch.set_offset(topic, self.partition, self.ranges[topic][1])
        self.store.write(batch)
        self.summary["ends"] = json.dumps({t: self.ranges[t][1] for t in inputs})

    # -- output ----------------------------------------------------------------------------------
    def _produce(self, result: BatchResult) -> None:
        producer = _producer(self.config)
        failures: list[str] = []

        def on_delivery(error: Any, message: Any) -> None:
            if error is not None:
                failures.append(f"{message.topic()}: {error.str()}")

        produce, partition = producer.produce, self.partition
        counts = {TABLE: 0, EMIT: 0, LOOP: 0}
        half = len(result.effects) // 2
        for index, (kind, topic, key, data, headers, source) in enumerate(result.effects):
            counts[kind] += 1
            if kind == TABLE:
                provenance = [
                    (SRC_TOPIC, source[0].encode()),
                    (SRC_PARTITION, b"%d" % partition),
                    (SRC_OFFSET, b"%d" % source[1]),
                ]
                _send(
                    producer,
                    produce,
                    topic,
                    data,
                    key,
                    on_delivery,
                    provenance,
                    source[4],
                    partition,
                )
            else:
                _send(producer, produce, topic, data, key, on_delivery, headers, source[4], -1)
            if index == half:
                _maybe_crash("processing")
        self._dead_letters(result, producer, on_delivery)
        remaining = producer.flush(self.config.flush_timeout)
        if remaining or failures:
            raise DeliveryError(
                self.graph.table,
                None,
                f"partition {self.partition}: {remaining} messages unacknowledged after "
                f"{self.config.flush_timeout:g}s, {len(failures)} failed: {failures[:3]}",
            )
        self.summary.update(
            table_updates=counts[TABLE],
            emits=counts[EMIT],
            loopbacks=counts[LOOP],
            processed=result.processed,
            failed=len(result.failed),
        )

    def _dead_letters(self, result: BatchResult, producer: KafkaProducer, on_delivery: Any) -> None:
        errors = [str(error) for error, _ in result.failed]
        self.summary["errors"] = json.dumps(errors[:20])
        for error, _ in result.failed:
            log.warning("%s: %s", self.config.on_error, error)
        if self.config.on_error != "dead_letter":
            return
        for error, (topic, offset, key, value, timestamp, headers) in result.failed:
            details = [
                ("goka-error", str(error).encode()),
                (SRC_TOPIC, topic.encode()),
                (SRC_PARTITION, b"%d" % self.partition),
                (SRC_OFFSET, b"%d" % offset),
            ]
            _send(
                producer,
                producer.produce,
                self.config.dlq_topic,
                value,
                key,
                on_delivery,
                [*(headers or []), *details],
                timestamp,
                -1,
            )
            self.summary["dead_letters"] += 1


def _send(
    producer: Any,
    produce: Any,
    topic: str,
    value: Any,
    key: Any,
    on_delivery: Any,
    headers: Any,
    timestamp: int,
    partition: int,
) -> None:
    while True:
        try:
            produce(
                topic,
                value,
                key,
                partition=partition,
                on_delivery=on_delivery,
                headers=headers,
                timestamp=timestamp,
            )
            return
        except BufferError:
            producer.poll(0.05)
        except ProduceError as exc:  # refused at once, e.g. larger than message.max.bytes
            raise DeliveryError(topic, key, f"refused by the producer: {exc}") from exc


def _from_unfinished_batch(
    headers: list[tuple[str, bytes]] | None, starts: Mapping[str, int]
) -> bool:
    found = dict(headers or ())
    topic = found.get(SRC_TOPIC)
    if topic is None:
        return False  # not written by a goka-py processor: applied as it is
    start = starts.get(topic.decode())
    return start is not None and int(found.get(SRC_OFFSET, b"-1")) >= start


def _producer(config: TaskConfig) -> KafkaProducer:
    overrides = {"linger.ms": 10, **config.kafka_config, **config.producer_config}
    key = json.dumps([config.brokers, sorted(overrides.items())], default=str)
    with _SHARED_LOCK:
        producer = _PRODUCERS.get(key)
        if producer is None:
            settings = producer_config(config.brokers, overrides)
            producer = _PRODUCERS[key] = KafkaProducer(settings)
        return producer


def _lookup_view(config: TaskConfig, table: str, codec: Any) -> View[Any]:
    """A view of a looked-up table shared by the tasks of this worker process (memory)."""
    with _SHARED_LOCK:
        view = _LOOKUPS.get((config.brokers, table))
        if view is None:
            view = View(
                config.brokers, table, codec, storage=MemoryStorage(table), **config.kafka_config
            ).start()
            _LOOKUPS[(config.brokers, table)] = view
    view.wait_recovered(config.read_timeout)
    return view


def _maybe_crash(point: str) -> None:
    if os.environ.get(CRASH_AT) != point:
        return
    marker = os.environ.get(CRASH_FILE)
    if marker is None or os.path.exists(marker):
        return
    Path(marker).write_text(point)
    log.error("test hook: killing the processor at %s", point)
    group = int(os.environ.get(PROCESSOR_PGID, os.getpgid(0)))
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)  # the driver, its JVM and the worker daemon
    os.kill(os.getpid(), signal.SIGKILL)  # this worker, if the daemon gave it its own group
