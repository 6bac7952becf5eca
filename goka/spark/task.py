"""What one Spark task of a processor runs: the partition processors of its partition numbers.

The source (:mod:`goka.spark.source`, payload ``process``) plans one input partition per
partition number (per group of them for an epoch) and calls :func:`run_partitions` in the
task's Python worker with the offset ranges, which hands them to
:class:`~goka.partition_processor.PartitionProcessor` (or :func:`~goka.partition_epoch.run_epoch`)
and returns their summaries, one row each. In continuous mode (``TaskConfig.epoch``) the
ranges only say where the epoch starts. The task's configuration travels as a source option
(:func:`encode_config`): the reading worker is the processing worker, so a task costs one
Python worker process and no record crosses the JVM.
"""

from __future__ import annotations

import base64
import dataclasses
import time
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING

from pyspark import cloudpickle

from goka.options import StopSignal, TaskConfig

if TYPE_CHECKING:
    import pyarrow as pa

# the driver imports this module for encode_config: what only tasks run is imported there

__all__ = ["decode_config", "encode_config", "run_partitions", "summary_schema"]


@cache
def summary_schema() -> pa.Schema:
    """The Arrow schema of a task's result row (one per partition and micro-batch)."""
    import pyarrow as pa

    from goka.partition_summary import PartitionSummary

    types = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}
    return pa.schema([(f.name, types[str(f.type)]) for f in dataclasses.fields(PartitionSummary)])


def encode_config(config: TaskConfig) -> str:
    """``config`` as a source option (pickled with the graph's callbacks and codecs)."""
    pickled: bytes = cloudpickle.dumps(config)  # type: ignore[no-untyped-call]
    return base64.b64encode(pickled).decode("ascii")


def decode_config(text: str) -> TaskConfig:
    config = cloudpickle.loads(base64.b64decode(text))
    assert isinstance(config, TaskConfig), type(config)
    return config


def run_partitions(
    config: TaskConfig,
    ranges: Mapping[int, Mapping[str, tuple[int, int]]],
    deadline_ms: int | None = None,
) -> pa.RecordBatch:
    """Process ``{partition: {topic: (start, end)}}`` (for an epoch: from each start until
    ``deadline_ms``, unix ms) and return one summary row per partition."""
    import pyarrow as pa

    from goka.partition_epoch import run_epoch
    from goka.partition_processor import PartitionProcessor
    from goka.worker import Worker

    worker = Worker.current()
    if config.epoch > 0:
        stop = StopSignal(config.stop_url) if config.stop_url else lambda: False
        starts = {p: {t: start for t, (start, _) in r.items()} for p, r in ranges.items()}
        seconds = config.epoch  # to the epoch's deadline (clamped: clocks may differ)
        if deadline_ms is not None:
            seconds = min(seconds, max(0.0, deadline_ms / 1000 - time.time()))
        summaries = run_epoch(config, worker, starts, seconds, stop)
    else:
        summaries = [PartitionProcessor(config, p, worker).process(r)
                     for p, r in ranges.items()]  # fmt: skip
    return pa.RecordBatch.from_pylist(
        [dataclasses.asdict(s) for s in summaries], schema=summary_schema()
    )
