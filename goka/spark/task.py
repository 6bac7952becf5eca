"""The ``mapInArrow`` function of a processor: one Spark task runs one partition processor.

The source sends each task the offset ranges of one partition number (range rows, see
:mod:`goka.spark.source`); the task hands them to a :class:`~goka.partition_processor.
PartitionProcessor` in this worker process and returns its summary as one row. In continuous
mode (``TaskConfig.epoch``) the ranges only say where the epoch starts.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import pyarrow as pa

from goka.options import StopSignal, TaskConfig
from goka.partition_epoch import run_epoch
from goka.partition_processor import PartitionProcessor, PartitionSummary
from goka.worker import Worker

__all__ = ["SUMMARY_DDL", "SUMMARY_SCHEMA", "PartitionTask"]

_TYPES = {
    "int": (pa.int64(), "long"),
    "float": (pa.float64(), "double"),
    "str": (pa.string(), "string"),
}
_FIELDS = [(f.name, _TYPES[str(f.type)]) for f in dataclasses.fields(PartitionSummary)]
#: The Arrow schema of a task's result row (one per partition and micro-batch).
SUMMARY_SCHEMA = pa.schema([(name, arrow) for name, (arrow, _) in _FIELDS])
#: The same as Spark DDL.
SUMMARY_DDL = ", ".join(f"{name} {ddl}" for name, (_, ddl) in _FIELDS)


class PartitionTask:
    """The ``mapInArrow`` function: processes one partition of a micro-batch."""

    def __init__(self, config: TaskConfig) -> None:
        self.config = config

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ranges, deadline_ms = _ranges(batches)
        if not ranges:
            return
        worker = Worker.current()
        if self.config.epoch > 0:
            stop = StopSignal(self.config.stop_url) if self.config.stop_url else lambda: False
            starts = {p: {t: start for t, (start, _) in r.items()} for p, r in ranges.items()}
            seconds = self.config.epoch  # to the epoch's deadline (clamped: clocks may differ)
            if deadline_ms is not None:
                seconds = min(seconds, max(0.0, deadline_ms / 1000 - time.time()))
            summaries = run_epoch(self.config, worker, starts, seconds, stop)
        else:
            summaries = [PartitionProcessor(self.config, p, worker).process(r)
                         for p, r in ranges.items()]  # fmt: skip
        yield pa.RecordBatch.from_pylist(
            [dataclasses.asdict(s) for s in summaries], schema=SUMMARY_SCHEMA
        )


def _ranges(
    batches: Iterator[pa.RecordBatch],
) -> tuple[dict[int, dict[str, tuple[int, int]]], int | None]:
    """``{partition: {topic: (start, end)}}`` from the source's range rows, and an epoch's
    deadline (unix ms; None: a micro-batch)."""
    ranges: dict[int, dict[str, tuple[int, int]]] = {}
    deadline: int | None = None
    for batch in batches:
        columns = batch.select(
            ["partition", "topic", "offset", "timestamp", "range_end"]
        ).to_pydict()
        rows = zip(
            columns["partition"],
            columns["topic"],
            columns["offset"],
            columns["timestamp"],
            columns["range_end"],
            strict=True,
        )
        for number, topic, offset, timestamp, range_end in rows:
            if range_end is not None:
                ranges.setdefault(number, {})[topic] = (offset, range_end)
                deadline = timestamp if timestamp is not None else deadline
    return ranges, deadline
