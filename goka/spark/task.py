"""The ``mapInArrow`` function of a processor: one Spark task runs one partition processor.

The source sends each task the offset ranges of one partition number (range rows, see
:mod:`goka.spark.source`); the task hands them to a :class:`~goka.partition_processor.
PartitionProcessor` in this worker process and returns its summary as one row. In continuous
mode (``TaskConfig.epoch``) the ranges only say where the epoch starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pyarrow as pa

from goka.options import StopSignal, TaskConfig
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
        partition, ranges = _ranges(batches)
        if partition is None:
            return
        processor = PartitionProcessor(self.config, partition, Worker.current())
        if self.config.epoch > 0:
            stop = StopSignal(self.config.stop_url) if self.config.stop_url else lambda: False
            starts = {topic: start for topic, (start, _) in ranges.items()}
            summary = processor.process_epoch(starts, self.config.epoch, stop)
        else:
            summary = processor.process(ranges)
        yield pa.RecordBatch.from_pylist([dataclasses.asdict(summary)], schema=SUMMARY_SCHEMA)


def _ranges(batches: Iterator[pa.RecordBatch]) -> tuple[int | None, dict[str, tuple[int, int]]]:
    """The partition number and ``{topic: (start, end)}`` from the source's range rows."""
    partition: int | None = None
    ranges: dict[str, tuple[int, int]] = {}
    for batch in batches:
        columns = batch.select(["partition", "topic", "offset", "range_end"]).to_pydict()
        rows = zip(
            columns["partition"],
            columns["topic"],
            columns["offset"],
            columns["range_end"],
            strict=True,
        )
        for number, topic, offset, range_end in rows:
            partition = number
            if range_end is not None:
                ranges[topic] = (offset, range_end)
    return partition, ranges
