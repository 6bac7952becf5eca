"""What one Spark task of a sink job runs: its partition's offset range, read and written in
transactions of at most ``chunk`` records (each one moves the database's offset), one summary
row back. The sink travels as a source option (:func:`encode_task`), like a processor's task
configuration; the worker keeps one reader and one writer (a database connection, a
filesystem) per sink."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from goka.connect.dead_letters import DeadLetters
from goka.connect.sink import ParquetSink, PostgresSink, Sink

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "SINK_DDL",
    "SinkTask",
    "Writer",
    "decode_task",
    "encode_task",
    "open_writer",
    "sink_ranges",
]

#: The rows a sink job's tasks return, one per partition and batch.
SINK_DDL = (
    "partition int, records long, upserted long, deleted long, appended long, already long, "
    "skipped long, filtered long, dead_lettered long, writes long, files long, "
    "end_offset long, seconds double"
)
#: The counts of a task's row (summed over writes, and by the driver over tasks).
COUNTS = ("records", "upserted", "deleted", "appended", "already", "skipped", "filtered",
          "dead_lettered", "writes", "files")  # fmt: skip

#: A sink's writer: ``write(partition, records, end) -> WriteSummary``, ``offsets()``,
#: ``reset()``, ``close()`` (:class:`~goka.connect.postgres.PostgresWriter`,
#: :class:`~goka.connect.parquet.ParquetWriter`).
Writer = Any


def open_writer(sink: Sink) -> Writer:
    """The writer of ``sink``."""
    if isinstance(sink, ParquetSink):
        from goka.connect.parquet import ParquetWriter

        return ParquetWriter(sink)
    assert isinstance(sink, PostgresSink), sink
    from goka.connect.postgres import PostgresWriter

    return PostgresWriter(sink)


@dataclass(frozen=True)
class SinkTask:
    """What a sink job's tasks are given (``writer`` builds a task's writer: tests inject
    faults through it)."""

    sink: Sink
    brokers: str
    kafka_config: dict[str, Any] = field(default_factory=dict)
    read_timeout: float = 120.0
    chunk: int = 50_000
    writer: Callable[[Any], Writer] = open_writer


def encode_task(task: SinkTask) -> str:
    """``task`` as a source option (pickled with the sink's codec and mapper)."""
    from goka.spark.task import encode_payload

    return encode_payload(task)


def decode_task(text: str) -> SinkTask:
    from goka.spark.task import decode_payload

    task = decode_payload(text)
    assert isinstance(task, SinkTask), type(task)
    return task


def sink_ranges(task: SinkTask, partition: int,
                ranges: Mapping[str, tuple[int, int]]) -> pa.RecordBatch:  # fmt: skip
    """Write ``partition``'s records in ``ranges`` (one topic: the sink's); one summary row."""
    from goka.kafka.ranges import RangeReader
    from goka.processing.worker import Worker, frozen

    started = time.monotonic()
    worker = Worker.current()
    reader = worker.client(("sink-reader", task.brokers, frozen(task.kafka_config)),
                           lambda: RangeReader(task.brokers, task.kafka_config),
                           lambda r: r.close())  # fmt: skip
    sink = task.sink
    writer = worker.client(("sink-writer", sink.identity, task.writer),
                           lambda: task.writer(sink), lambda w: w.close())  # fmt: skip
    start, end = ranges[task.sink.topic]
    totals = dict.fromkeys(COUNTS, 0)
    position = start
    letters = (DeadLetters(sink, task.brokers, task.kafka_config)
               if sink.on_error == "dead-letter" else None)  # fmt: skip

    def send(of: int, refused: Sequence[tuple[Any, str]]) -> int:
        assert letters is not None
        sent = letters.send(of, refused)
        totals["dead_lettered"] += sent
        return sent

    extra = {} if letters is None else {"dead_letters": send}
    try:
        for rows in reader.read(partition, {task.sink.topic: (start, end)}, task.read_timeout,
                                task.chunk):  # fmt: skip
            if not rows:
                continue
            position = rows[-1][1] + 1
            done = writer.write(partition, rows, position, **extra)
            totals["records"] += len(rows)
            for name in ("upserted", "deleted", "appended", "already", "files", "filtered"):
                totals[name] += getattr(done, name)
            totals["skipped"] += len(done.skipped)
            totals["writes"] += 1
        if position < end:  # the range ends in offsets without records (compacted, aborted)
            writer.write(partition, [], end)
            totals["writes"] += 1
    finally:
        if letters is not None:
            letters.close()
    return _row({"partition": partition, **totals, "end_offset": end,
                 "seconds": time.monotonic() - started})  # fmt: skip


def _row(values: dict[str, Any]) -> pa.RecordBatch:
    import pyarrow as pa

    from goka.spark.columns import record_batch

    types = {"partition": pa.int32(), "seconds": pa.float64()}
    names = [c.split()[0] for c in SINK_DDL.split(", ")]
    schema = pa.schema([(n, types.get(n, pa.int64())) for n in names])
    return record_batch([[values[n]] for n in names], schema)
