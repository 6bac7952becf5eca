"""What one Spark task of a processor runs: the partition processors of its partition numbers.

The source (:mod:`goka.spark.source`, payload ``process``) plans one input partition per
partition number (per group of them for an epoch) and, in the task's Python worker, hands its
offset ranges to :func:`process_ranges` (a micro-batch: :class:`~goka.partition_processor.
PartitionProcessor`) or its starts to :func:`process_epoch` (:func:`~goka.partition_epoch.
run_epoch`), which return the partitions' summaries, one row each. The task's configuration
travels as a source option (:func:`encode_config`): the reading worker is the processing
worker, so a task costs one Python worker process and no record crosses the JVM.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark import cloudpickle

from goka.options import StopSignal, TaskConfig
from goka.spark.columns import record_batch

if TYPE_CHECKING:
    import pyarrow as pa

    from goka.partition_summary import PartitionSummary
    from goka.worker import Worker

log = logging.getLogger(__name__)

# the driver imports this module for encode_config: what only tasks run is imported there

__all__ = [
    "WARM_UP_DDL",
    "decode_config",
    "encode_config",
    "process_epoch",
    "process_ranges",
    "warm_up",
]


def encode_config(config: TaskConfig) -> str:
    """``config`` as a source option (pickled with the graph's callbacks and codecs)."""
    pickled: bytes = cloudpickle.dumps(config)  # type: ignore[no-untyped-call]
    return base64.b64encode(pickled).decode("ascii")


def decode_config(text: str) -> TaskConfig:
    config = cloudpickle.loads(base64.b64decode(text))
    assert isinstance(config, TaskConfig), type(config)
    return config


def process_ranges(
    config: TaskConfig, ranges: Mapping[int, Mapping[str, tuple[int, int]]]
) -> pa.RecordBatch:
    """Process ``{partition: {topic: (start, end)}}`` (a micro-batch); one summary row per
    partition."""
    from goka.partition_processor import PartitionProcessor
    from goka.worker import Worker

    worker = Worker.current()
    worker.end_bridge()  # an epoch's, if the group ran continuously here: the clients are shared
    return _rows([PartitionProcessor(config, p, worker).process(r) for p, r in ranges.items()])


def process_epoch(
    config: TaskConfig, starts: Mapping[int, Mapping[str, int]], deadline_ms: int
) -> pa.RecordBatch:
    """Process ``{partition: {topic: start}}`` continuously until ``deadline_ms`` (unix ms; at
    most ``config.epoch`` seconds: clocks may differ), and on in the background until the
    process's next task (a bridge over the gap between epochs, see
    :mod:`goka.partition_epoch`); one summary row per partition."""
    from goka.partition_epoch import run_epoch
    from goka.worker import Worker

    stop = StopSignal(config.stop_url) if config.stop_url else lambda: False
    seconds = min(config.epoch, max(0.0, deadline_ms / 1000 - time.time()))
    return _rows(run_epoch(config, Worker.current(), starts, seconds, stop, bridge=True))


#: The rows of :func:`warm_up`.
WARM_UP_DDL = "pid int"


def warm_up(config: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A ``mapInArrow`` function that readies its Python worker for a processor's tasks and
    yields its process id (schema :data:`WARM_UP_DDL`): it imports what they run, the graph's
    modules through ``config`` (encoded, as the source's ``task`` option), and starts the
    worker's resources. Spark lends the same workers to the source's reads, so the first
    tasks begin at once."""
    import os

    import pyarrow as pa

    from goka import partition_epoch, partition_processor  # noqa: F401
    from goka.kafka import producer, ranges  # noqa: F401 (confluent-kafka)
    from goka.storage import leveldb  # noqa: F401 (plyvel)
    from goka.worker import Worker

    for _ in batches:
        pass
    _connect(decode_config(config), Worker.current())
    _rows([])
    yield record_batch([[os.getpid()]], pa.schema([("pid", pa.int32())]))


#: How long a warm-up waits for the broker to say where outputs go: it holds task slots the
#: first epoch needs, and a task finds out anyway.
_CONNECT_SECONDS = 5.0


def _connect(config: TaskConfig, worker: Worker) -> None:
    """Build the worker's clients for ``config`` and have the producer learn where its
    outputs go (its first flush waited ~0.4 s for a connection and metadata otherwise). A
    broker that does not answer costs only this wait: the tasks report it."""
    from goka.errors import GokaError
    from goka.options import Clients

    clients = Clients(config, worker)
    clients.reader()
    producer = clients.producer()
    graph = config.graph
    try:
        for topic in [*graph.outputs, *([graph.table] if graph.persist else [])]:
            producer.partition_count(topic, min(config.read_timeout, _CONNECT_SECONDS))
    except GokaError as exc:
        log.debug("warm-up: the producer did not learn where %s writes: %s", graph.group, exc)


def _rows(summaries: Sequence[PartitionSummary]) -> pa.RecordBatch:
    from goka.partition_summary import summary_schema

    schema = summary_schema()
    return record_batch([[getattr(s, name) for s in summaries] for name in schema.names], schema)
