"""What one Spark task of a processor runs: the partition processors of its partition numbers.

The source (:mod:`goka.spark.source`, payload ``process``) plans one input partition per
partition number (per group of them for an epoch) and, in the task's Python worker, hands its
offset ranges to :func:`process_ranges` (a micro-batch: :class:`~goka.processing.batch.
PartitionProcessor`) or its starts to :func:`process_epoch` (:func:`~goka.processing.epoch.
run_epoch`), which return the partitions' summaries, one row each. The task's configuration
travels as a source option (:func:`encode_config`): the reading worker is the processing
worker, so a task costs one Python worker process and no record crosses the JVM.
"""

from __future__ import annotations

import base64
import functools
import gc
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark import cloudpickle

from goka.processing.config import TaskConfig
from goka.spark.columns import record_batch

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from goka.processing.summary import PartitionSummary
    from goka.processing.worker import Worker

log = logging.getLogger(__name__)

# the driver imports this module for encode_config: what only tasks run is imported there

__all__ = [
    "READY_DDL",
    "decode_config",
    "decode_payload",
    "encode_config",
    "encode_payload",
    "process_epoch",
    "process_ranges",
    "ready_worker",
    "start_python_workers",
]


def encode_config(config: TaskConfig) -> str:
    """``config`` as a source option (pickled with the graph's callbacks and codecs)."""
    return encode_payload(config)


def encode_payload(payload: object) -> str:
    """Any task payload (a sink's, say) as a source option, pickled like a configuration."""
    pickled: bytes = cloudpickle.dumps(payload)  # type: ignore[no-untyped-call]
    return base64.b64encode(pickled).decode("ascii")


def decode_payload(text: str) -> object:
    """What :func:`encode_payload` encoded."""
    return cloudpickle.loads(base64.b64decode(text))


def decode_config(text: str) -> TaskConfig:
    config = decode_payload(text)
    assert isinstance(config, TaskConfig), type(config)
    return config


def process_ranges(
    config: TaskConfig, ranges: Mapping[int, Mapping[str, tuple[int, int]]]
) -> pa.RecordBatch:
    """Process ``{partition: {topic: (start, end)}}`` (a micro-batch); one summary row per
    partition."""
    from goka.processing.batch import PartitionProcessor

    worker = _worker(config)
    worker.end_bridge()  # an epoch's, if the group ran continuously here: the clients are shared
    return _rows([PartitionProcessor(config, p, worker).process(r) for p, r in ranges.items()])


def process_epoch(
    config: TaskConfig,
    starts: Mapping[int, Mapping[str, int]],
    deadline_ms: int,
    index: int = 0,
    shares: Sequence[Mapping[int, Mapping[str, int]]] | None = None,
) -> pa.RecordBatch:
    """Process ``{partition: {topic: start}}`` continuously until ``deadline_ms`` (unix ms; at
    most ``config.epoch`` seconds: clocks may differ), and on in the background until the
    process's next task (a bridge over the gap between epochs, see
    :mod:`goka.processing.epoch`); one summary row per partition. Given every task's
    ``shares``, task ``index`` claims one instead (:mod:`goka.processing.claims`): a share
    with no partitions ends at once (a bridge of this worker goes on)."""
    from goka.processing.claims import claim_share
    from goka.processing.epoch import run_epoch
    from goka.processing.signals import StopSignal

    worker = _worker(config)
    if shares is not None:
        worker.stores.staying = True  # (what a task leaves here, a task here takes next)
        holder = worker.stores.holder
        claims = Path(config.state_dir, config.graph.group, "epoch-claims")
        share = claim_share(claims, deadline_ms, index, [list(s) for s in shares],
                            lambda p: holder(config.store_path("partition", p)))  # fmt: skip
        starts = shares[share]
        if share != index:
            log.debug("group %s: task %d runs task %d's share, partitions %s",
                      config.graph.group, index, share, sorted(starts))  # fmt: skip
        if not starts:
            return _rows([])
    stop = StopSignal(config.stop_url, storage_options=config.storage_options) \
        if config.stop_url else lambda: False  # fmt: skip
    seconds = min(config.epoch, max(0.0, deadline_ms / 1000 - time.time()))
    return _rows(run_epoch(config, worker, starts, seconds, stop, bridge=True))


def _worker(config: TaskConfig) -> Worker:
    """This process's worker; its logging is set up as the task says, the first time."""
    from goka.logs import configure
    from goka.processing.worker import Worker

    if config.log_level and not logging.getLogger().handlers:
        configure(config.log_level, config.log_format)  # log as `goka processor run` does
    worker = Worker.current()
    global _frozen
    if not _frozen:  # PySpark's daemon collects all garbage after each task, holding the GIL
        gc.collect()  # for a pass over every object (a bridge between epochs waits meanwhile,
        gc.freeze()  # goka.processing.epoch): what lives at the first task (modules, mostly)
        _frozen = True  # lives as long as the process, and is left out of those passes
    return worker


_frozen = False  # (see _worker)


#: The rows of :func:`ready_worker`.
READY_DDL = "pid int"


def ready_worker(config: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A ``mapInArrow`` function that readies its Python worker for a processor's tasks and
    yields its process id (schema :data:`READY_DDL`): it imports what they run, the graph's
    modules through ``config`` (encoded, as the source's ``task`` option), and builds the
    worker's clients. Spark lends the same workers to the source's reads, so the first tasks
    begin at once."""
    import os

    import pyarrow as pa

    from goka.kafka import producer, ranges  # noqa: F401 (confluent-kafka)
    from goka.processing import batch, epoch  # noqa: F401
    from goka.storage import leveldb  # noqa: F401 (plyvel)

    for _ in batches:
        pass
    task = decode_config(config)
    _prime_clients(task, _worker(task))
    _rows([])
    yield record_batch([[os.getpid()]], pa.schema([("pid", pa.int32())]))


def start_python_workers(spark: SparkSession, task: str, workers: int, group: str) -> None:
    """Start the Python workers the first tasks will reuse, in the background while the
    query is planned: a job of ``workers`` tasks that only ready their worker (see
    :func:`ready_worker`; their process ids are logged). For a local session that goka built:
    a cluster has many executors, and a session of the caller's is theirs to use. A job that
    fails costs only its time: tasks then start their workers as usual."""

    def start() -> None:
        started = time.monotonic()
        try:
            frame = spark.range(0, workers, 1, workers)
            rows = frame.mapInArrow(functools.partial(ready_worker, task), READY_DDL).collect()
        except Exception as exc:  # only time is at stake
            log.debug("group %s: starting Python workers failed: %s", group, exc)
        else:
            pids = ", ".join(str(row.pid) for row in rows)
            log.info("group %s: Python workers %s ready for the first tasks in %.1f s", group,
                     pids, time.monotonic() - started)  # fmt: skip

    threading.Thread(target=start, name="goka-python-workers", daemon=True).start()


#: How long readying a worker waits for the broker to say where outputs go: it holds task slots
#: the first epoch needs, and a task finds out anyway.
_CONNECT_SECONDS = 5.0


def _prime_clients(config: TaskConfig, worker: Worker) -> None:
    """Build the worker's clients for ``config`` and have the producer learn where its
    outputs go (its first flush waited ~0.4 s for a connection and metadata otherwise), and
    the snapshot store's client its first request. A broker that does not answer costs only
    this wait: the tasks report it."""
    from goka.errors import GokaError
    from goka.processing.clients import Clients

    clients = Clients(config, worker)
    clients.reader()
    producer = clients.producer()
    graph = config.graph
    clients.snapshots()
    try:
        for topic in [*graph.outputs, *([graph.table] if graph.persist else [])]:
            producer.partition_count(topic, min(config.broker_timeout, _CONNECT_SECONDS))
    except GokaError as exc:
        log.debug("readying a worker: the producer did not learn where %s writes: %s",
                  graph.group, exc)  # fmt: skip


def _rows(summaries: Sequence[PartitionSummary]) -> pa.RecordBatch:
    from goka.processing.summary import summary_schema

    schema = summary_schema()
    return record_batch([[getattr(s, name) for s in summaries] for name in schema.names], schema)
