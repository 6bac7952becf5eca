"""A sink as a Spark Structured Streaming job: the goka Kafka source (one task per partition)
with payload ``sink``, each task writing its partition's range through the sink
(:mod:`goka.connect.task`), the driver summing the tasks' rows.

Where a job begins: Spark's checkpoint if it has one, else the target's offsets (a
PostgreSQL sink's offsets table, a Parquet sink's manifest: a lost or new checkpoint resumes
where the target says). A checkpoint behind the target (a crash after the target committed
and before Spark did) replays records the writer leaves out, so nothing is written twice
either way.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goka.connect.sink import ParquetSink, PostgresSink, Sink
from goka.connect.status import ConnectorStatus, Lifecycle
from goka.connect.task import COUNTS, SinkTask, Writer, encode_task, open_writer
from goka.errors import ConfigurationError
from goka.kafka.config import check_settings
from goka.processing.values import check_master, trigger_seconds
from goka.storage.urls import check_location

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["SinkJob", "SinkTotals"]

log = logging.getLogger(__name__)


@dataclass
class SinkTotals:
    """What a job's batches wrote, summed (see :data:`goka.connect.task.SINK_DDL`)."""

    batches: int = 0
    records: int = 0
    upserted: int = 0
    deleted: int = 0
    appended: int = 0
    already: int = 0
    skipped: int = 0
    filtered: int = 0
    dead_lettered: int = 0
    writes: int = 0
    files: int = 0
    last_batch_at: float = 0.0
    ends: dict[int, int] = field(default_factory=dict)

    def add(self, rows: list[Any]) -> None:
        """Add a batch's rows (one per task)."""
        self.batches += 1
        for row in rows:
            for name in COUNTS:
                setattr(self, name, getattr(self, name) + int(row[name]))
            self.ends[int(row["partition"])] = int(row["end_offset"])
        self.last_batch_at = time.time()

    def describe(self) -> str:
        """One line."""
        return (f"{self.records} records in {self.batches} batches ({self.writes} "
                f"transactions): {self.upserted} upserted, {self.deleted} deleted, "
                f"{self.appended} appended, {self.already} written before, {self.skipped} "
                f"skipped, {self.filtered} filtered out, {self.dead_lettered} dead-lettered"
                + (f", {self.files} files" if self.files else ""))  # fmt: skip


class SinkJob:
    """Runs a sink on Spark (see the module docstring).

    Args:
        sink: the sink (its topic is read).
        brokers: bootstrap servers.
        checkpoint_dir: Spark's checkpoint.
        spark: a session to run in (default: one built like a processor's).
        master: the session's master when one is built (default ``local[2]``).
        trigger: the micro-batch interval.
        max_offsets_per_trigger: most records per micro-batch.
        chunk: most records per write (a PostgreSQL transaction, a Parquet commit; default
            50,000 and 250,000).
        kafka_config: librdkafka settings.
        writer: builds each task's writer (default: the sink's, :func:`~goka.connect.task.
            open_writer`; tests inject faults through it).

    Raises:
        ConfigurationError: invalid settings.
    """

    def __init__(
        self, sink: Sink, brokers: str, *, checkpoint_dir: str | Path,
        spark: SparkSession | None = None, master: str | None = None,
        trigger: str = "1 second", max_offsets_per_trigger: int | None = None,
        chunk: int | None = None, kafka_config: dict[str, Any] | None = None,
        writer: Callable[[Any], Writer] = open_writer,
    ) -> None:  # fmt: skip
        if not isinstance(sink, (PostgresSink, ParquetSink)):
            raise ConfigurationError(f"sink must be a PostgresSink or a ParquetSink, got {sink!r}")
        if max_offsets_per_trigger is not None and max_offsets_per_trigger < 1:
            raise ConfigurationError("max_offsets_per_trigger must be at least 1")
        if chunk is None:
            chunk = 250_000 if isinstance(sink, ParquetSink) else 50_000
        if chunk < 1:
            raise ConfigurationError(f"chunk must be at least 1, got {chunk}")
        self.sink, self.brokers = sink, brokers
        self.checkpoint_dir = str(checkpoint_dir)
        self.trigger, self.max_offsets = trigger, max_offsets_per_trigger
        self.kafka_config = dict(kafka_config or {})
        check_master(master)
        if trigger != "available-now":
            trigger_seconds(trigger)
        check_settings(self.kafka_config)
        if isinstance(sink, ParquetSink):  # (reached now, not from inside a task)
            check_location(sink.path, sink.storage_options, what=f"Parquet sink {sink.name!r}")
        self.task = SinkTask(sink, brokers, self.kafka_config, chunk=chunk, writer=writer)
        self._spark, self._master = spark, master
        self._query: StreamingQuery | None = None
        self._lock = threading.Lock()
        self.totals = SinkTotals()
        self._run: SinkTotals | None = None  # the run of run_until_caught_up, if one runs
        self.lifecycle = Lifecycle()

    def status(self) -> ConnectorStatus:
        """What the job says of itself (see :class:`~goka.connect.status.ConnectorStatus`)."""
        with self._lock:
            totals = self.totals
            counts = {name: int(getattr(totals, name)) for name in (*COUNTS, "batches")}
            positions = {f"{self.sink.topic}/{p}": str(o) for p, o in sorted(totals.ends.items())}
        life = self.lifecycle
        return ConnectorStatus(
            self.sink.name, "sink", type(self.sink).__name__, life.state, self.sink.describe(),
            [self.sink.topic], counts, positions, last_commit=life.last_commit,
            errors=[life.failure] if life.failure else [], failure=life.failure,
        )  # fmt: skip

    # -- the target's side -----------------------------------------------------------------------
    def offsets(self) -> dict[int, int]:
        """Each partition's next offset, as the sink's target says (the database, the
        manifest)."""
        with open_writer(self.sink) as writer:
            return dict(writer.offsets())

    def reset(self) -> None:
        """Start over: forget the target's offsets and remove the checkpoint (upserts take
        only newer offsets than a row holds: truncate the table to rewrite it; Parquet files
        stay: delete them to rewrite)."""
        with open_writer(self.sink) as writer:
            writer.reset()
        shutil.rmtree(self.checkpoint_dir, ignore_errors=True)

    # -- running ---------------------------------------------------------------------------------
    def spark(self) -> SparkSession:
        """The session (built on first use)."""
        if self._spark is None:
            from goka.spark.session import build_session

            self._spark = build_session(f"sink-{self.sink.name}", self._master)
        return self._spark

    def run_until_caught_up(self, timeout: float | None = None) -> SinkTotals:
        """Write what the topic holds now, then stop; return what this run wrote.

        Raises:
            SinkError, ProcessorFailed: a task failed (nothing of its transaction is stored).
        """
        run = self._run = SinkTotals()
        try:
            self._wait(self._start(available_now=True), timeout)
        finally:
            self._run = None
        return run

    def run(self, timeout: float | None = None) -> None:
        """Write as records arrive until :meth:`stop` (or ``timeout``). Blocks."""
        self._wait(self._start(available_now=False), timeout)

    def stop(self) -> None:
        """Stop the query (the current batch ends first)."""
        with self._lock:
            query = self._query
        if query is not None:
            query.stop()

    def _start(self, available_now: bool) -> StreamingQuery:
        from goka.spark.source import GokaKafkaSource

        spark = self.spark()
        spark.dataSource.register(GokaKafkaSource)
        starting = self._starting_offsets()
        reader = (
            spark.readStream.format("goka-kafka")
            .option("brokers", self.brokers)
            .option("topics", self.sink.topic)
            .option("startingOffsets", starting)
            .option("payload", "sink")
            .option("task", encode_task(self.task))
        )
        if self.max_offsets:
            reader = reader.option("maxOffsetsPerTrigger", str(self.max_offsets))
        for key, value in self.kafka_config.items():
            reader = reader.option(f"kafka.{key}", str(value))
        writer = (
            reader.load().writeStream.foreachBatch(self._on_batch)
            .option("checkpointLocation", self.checkpoint_dir)
            .queryName(f"goka-sink-{self.sink.name}")
        )  # fmt: skip
        writer = (writer.trigger(availableNow=True) if available_now
                  else writer.trigger(processingTime=self.trigger))  # fmt: skip
        query = writer.start()
        with self._lock:
            self._query = query
        self.lifecycle.running()
        log.info("sink %s: %s -> %s started (%s)", self.sink.name, self.sink.topic,
                 self.sink.describe(), starting)  # fmt: skip
        return query

    def _starting_offsets(self) -> str:
        """Where a new checkpoint begins: the target's offsets (earliest elsewhere)."""
        found = self.offsets()
        if not found:
            return "earliest"
        return json.dumps({self.sink.topic: {str(p): o for p, o in found.items()}})

    def _on_batch(self, frame: DataFrame, batch_id: int) -> None:
        rows = frame.collect()
        with self._lock:
            self.totals.add(rows)
            if self._run is not None:
                self._run.add(rows)
        self.lifecycle.committed()
        records, writes = sum(int(r["records"]) for r in rows), sum(int(r["writes"]) for r in rows)
        log.info("sink %s batch %d: %d records in %d transactions", self.sink.name, batch_id,
                 records, writes)  # fmt: skip

    def _wait(self, query: StreamingQuery, timeout: float | None) -> None:
        from pyspark.errors import StreamingQueryException

        from goka.spark.summary import translate

        error: BaseException | None = None
        try:
            query.awaitTermination(timeout)  # type: ignore[arg-type]  # takes floats
        except StreamingQueryException as exc:
            error = translate(exc)
            raise error from None
        finally:
            if query.isActive:
                query.stop()
            self.lifecycle.ended(error)
            with self._lock:
                self._query = None
