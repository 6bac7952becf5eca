"""Run a group graph as a Spark Structured Streaming job (the processor of Go Goka): the
query's lifecycle. Its settings are :class:`~goka.spark.config.ProcessorConfig`, its tasks
run :mod:`goka.spark.task`, the group's standing is read by :mod:`goka.spark.status`."""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from pathlib import Path
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from goka.errors import ConfigurationError, ProcessorFailed
from goka.group.graph import GroupGraph
from goka.kafka.config import Brokers, bootstrap_servers
from goka.kafka.transactions import check_transactions
from goka.processing.config import TaskConfig
from goka.processing.holders import release_held
from goka.processing.settings import settings as all_settings
from goka.processing.signals import PartitionBoard, StopSignal
from goka.processing.summary import PartitionSummary
from goka.spark.config import MODES, ProcessorConfig
from goka.spark.metrics import ProcessorMetrics
from goka.spark.query import start_query
from goka.spark.session import SessionSettings, build_session, ui_address
from goka.spark.status import PartitionStatus
from goka.spark.summary import BatchSummary, Totals, translate
from goka.spark.task import encode_config, start_python_workers
from goka.spark.ticker import Ticker, trigger_seconds
from goka.topic_manager import TopicManager, prepare_group

__all__ = ["MODES", "BatchSummary", "Processor", "ProcessorFailed", "Totals"]

log = logging.getLogger(__name__)


class Processor:
    """Runs ``graph`` over Kafka on Spark; each Spark task is one Goka partition processor.

    Args:
        graph: the group to run.
        brokers: bootstrap servers.
        spark: a session to use; by default one is built (as ``session`` and ``master`` say).
        master: Spark master URL for the session built here (``local[2]``, ``spark://...``).
        session: how the session built here is built (the UI, JVM options).
        settings: how it runs, keyword arguments: every setting of
            :class:`~goka.processing.settings.ProcessorSettings` (``mode``, ``epoch``,
            ``checkpoint_dir``, ``state_dir``, ``starting_offsets``, snapshots, ...; None: its
            default).

    Raises:
        ConfigurationError: an unknown or invalid setting (at construction, not mid-stream).
    """

    def __init__(
        self,
        graph: GroupGraph,
        brokers: Brokers,
        *,
        spark: SparkSession | None = None,
        master: str | None = None,
        session: SessionSettings | None = None,
        **settings: Any,
    ) -> None:
        names = [s.name for s in all_settings()]
        unknown = sorted(set(settings) - set(names))
        if unknown:
            raise ConfigurationError(
                f"unknown processor settings {unknown}; the settings are {', '.join(names)}"
            )
        given = session or SessionSettings()
        self.config = ProcessorConfig(
            graph, bootstrap_servers(brokers),
            session=given if master is None else dataclasses.replace(given, master=master),
            **{name: value for name, value in settings.items() if value is not None},
        )  # fmt: skip
        self.graph, self.mode = graph, self.config.mode
        self._spark = spark
        self._ready_workers = False  # start Python workers at the first start (a session we built)
        self._query: StreamingQuery | None = None
        self._stopping = threading.Event()
        self._epoch_ended = threading.Event()
        self._continuous = False  # the running query is continuous
        options = self.config.storage_options
        self._stop_signal = StopSignal(self.config.stop_url, storage_options=options)
        #: what the tasks say their partitions are doing while they recover (the monitor)
        self.board = PartitionBoard(self.config.board_url, storage_options=options)
        self.started_at = time.time()  # (what the board said before is another run's)
        self._partitions = 0
        self.failure: str | None = None  # why the query failed (see wait)
        self._status = PartitionStatus(graph, self.config.brokers, dict(self.config.kafka_config))
        self._lock = threading.Lock()
        #: what every micro-batch (epoch) of this processor did, summed; the last ones kept
        self.totals = Totals()
        self._run: Totals | None = None  # the run of run_until_caught_up, if one runs
        self.metrics = ProcessorMetrics(graph.group)

    # -- setup -----------------------------------------------------------------------------------
    def prepare_topics(self, *, create_outputs: bool = False) -> int:
        """Check the topics, then create the table, loop and DLQ topics (and the output
        topics, with the group's partition count, if ``create_outputs``): see
        :func:`goka.topic_manager.prepare_group`.

        Returns:
            The partition count.

        Raises:
            TopicError: a topic is missing, or the topics are not co-partitioned.
        """
        config = self.config
        manager = TopicManager(config.brokers, config.topics, **config.kafka_config)
        self._partitions = prepare_group(manager, self.graph, create_outputs=create_outputs,
                                         dead_letters=config.on_error == "dead-letter")  # fmt: skip
        if config.guarantee == "exactly-once":
            check_transactions(self.graph.group, config.brokers, config.kafka_config)
        return self._partitions

    def create_topics(self) -> int:
        """Create every topic the group writes and that is missing: the group table, the loop
        and dead-letter topics, and the output topics, with the inputs' partition count.

        Returns:
            The partition count.

        Raises:
            TopicError: an input, join or lookup topic is missing, or the inputs are not
                co-partitioned.
        """
        return self.prepare_topics(create_outputs=True)

    def use_session(self, spark: SparkSession) -> None:
        """Run in ``spark`` (several processors may share one session, one query each)."""
        self._spark = spark

    def spark(self) -> SparkSession:
        """The session (built on first use)."""
        if self._spark is None:
            started = time.monotonic()
            settings = self.config.session
            log.info("group %s: starting Spark (%s)", self.graph.group,
                     settings.master or "local[2]")  # fmt: skip
            self._spark = build_session(self.graph.group, settings=settings)
            self._ready_workers = (self._spark.sparkContext.master or "").startswith("local")
            log.info("group %s: Spark ready in %.1f s%s", self.graph.group,
                     time.monotonic() - started, ui_address(self._spark))  # fmt: skip
        return self._spark

    def task_config(self, *, continuous: bool = False) -> TaskConfig:
        """What the tasks of this processor are given (for epochs if ``continuous``)."""
        return self.config.task_config(continuous=continuous)

    def _start(self, available_now: bool) -> StreamingQuery:
        self.prepare_topics()
        config = self.config
        continuous = config.mode == "continuous" and not available_now
        self._stop_signal.clear()
        spark = self.spark()
        task = encode_config(config.task_config(continuous=continuous))
        slots = config.epoch_tasks or spark.sparkContext.defaultParallelism
        if self._ready_workers:
            self._ready_workers = False
            start_python_workers(spark, task, min(slots, spark.sparkContext.defaultParallelism),
                                 self.graph.group)  # fmt: skip
        ticker = self._ticker(continuous)
        # local: one process and one state_dir (local-cluster's executors each have theirs)
        master = spark.sparkContext.master or ""
        local = master == "local" or master.startswith("local[")
        query = start_query(spark, config, task, self._on_batch, continuous=continuous,
                            available_now=available_now, slots=slots, claims=local)  # fmt: skip
        if ticker is not None and not available_now:
            ticker.start(lambda: bool(query.isActive) and not self._stopping.is_set())
        with self._lock:
            self._query, self._continuous = query, continuous
        how = f"epochs of {config.epoch:g} s" if continuous else f"every {config.trigger}"
        log.info("group %s: query started (%s)", self.graph.group,
                 "available now" if available_now else how)  # fmt: skip
        if continuous:  # Spark reports an epoch at its end: follow the tasks' commits meanwhile
            follow = functools.partial(self._status.follow, lambda: bool(query.isActive),
                                       self._partitions, self.metrics,
                                       config.progress_interval, self._stopping)  # fmt: skip
            threading.Thread(target=follow, name="goka-progress", daemon=True).start()
        if self._stopping.is_set():
            query.stop()
        return query

    def _on_batch(self, frame: DataFrame, batch_id: int) -> None:
        partitions = [PartitionSummary(**row.asDict()) for row in frame.collect()]
        summary = BatchSummary.of(batch_id, partitions)
        with self._lock:
            self.totals.add_batch(summary)
            if self._run is not None:
                self._run.add_batch(summary)
        self.metrics.batch(summary, self.config.on_error)
        with self._lock:
            progress = self._query.lastProgress if self._query is not None else None
        if self._continuous:  # Spark's offsets lag an epoch behind: take the group's commits
            update = functools.partial(self._status.update_lag, self._partitions, self.metrics)
            threading.Thread(target=update, name="goka-lag", daemon=True).start()
        elif progress:
            self.metrics.lag(progress)
        self._epoch_ended.set()
        log.info("group %s %s", self.graph.group, summary.describe())

    # -- running ---------------------------------------------------------------------------------
    def run(self, timeout: float | None = None) -> None:
        """Process until :meth:`stop` (or ``timeout`` seconds), in the processor's mode.
        Blocks.

        Raises:
            ProcessingError: a message failed under the ``fail`` policy (names group, topic,
                partition, offset, key and cause).
            ProcessorFailed: the query stopped with another error.
        """
        try:
            self._wait(self._start(available_now=self.mode == "available-now"), timeout)
        finally:
            self._release_stores()

    def start(self) -> None:
        """Start processing in the processor's mode and return at once (see :meth:`wait`);
        several processors may share one session this way."""
        self._start(available_now=self.mode == "available-now")

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the started query to end. Returns True once it
        ended (after :meth:`stop`, or an available-now run that caught up).

        Raises:
            ProcessingError, ProcessorFailed: as :meth:`run`.
        """
        with self._lock:
            query = self._query
        if query is None:
            return True
        try:
            ended = bool(query.awaitTermination(timeout))  # type: ignore[arg-type]  # takes floats
        except StreamingQueryException as exc:
            error = translate(exc)
            with self._lock:
                self._query, self.failure = None, str(error)
            self._ended()
            raise error from None
        if ended:
            with self._lock:
                self._query = None
            self._ended()
        return ended

    def run_until_caught_up(self, timeout: float | None = None) -> Totals:
        """Process everything present when called, then stop (Trigger.AvailableNow).

        A group with a loop edge runs again while a run looped messages back, so what the
        loop derives from the input is processed too.

        Returns:
            What the micro-batches of this run did, summed (with the last ones' summaries).
        """
        run = Totals()
        with self._lock:
            self._run = run
        try:
            while True:
                looped = run.loopbacks
                self._wait(self._start(available_now=True), timeout)
                if not self.graph.loop or run.loopbacks == looped or self._stopping.is_set():
                    return run
        finally:
            with self._lock:
                self._run = None
            self._release_stores()

    def _ticker(self, continuous: bool) -> Ticker | None:
        """A group with wall-clock timers: tick its partitions once now (a bounded run then
        fires what is due), and return the ticker to keep ticking (None: it does not tick)."""
        if not self.graph.ticking:
            return None
        config = self.config
        interval = config.tick_interval or (0.1 if continuous else trigger_seconds(config.trigger))
        ticker = Ticker(self.graph, config.brokers, config.kafka_config, self._partitions,
                        interval)  # fmt: skip
        ticker.tick(wait=True)
        return ticker

    def _wait(self, query: StreamingQuery, timeout: float | None) -> None:
        try:
            finished = query.awaitTermination(None if timeout is None else int(timeout) or 1)
            if timeout is not None and not finished:
                query.stop()
        except StreamingQueryException as exc:
            raise translate(exc) from None
        finally:
            with self._lock:
                self._query = None
            self._status.close()

    def _ended(self) -> None:
        """The query ended: close the status clients, release the stores."""
        self._status.close()
        self._release_stores()

    def _release_stores(self) -> None:
        """The query ended: ask the Python workers of this machine that hold the group's
        stores open (for a next task) to close them now, so that the state directory can be
        used, copied or deleted at once. Executors of a cluster close them when idle."""
        left = release_held(Path(self.config.state_dir) / self.graph.group)
        if left:
            log.debug("group %s: stores still held by Python workers: %s", self.graph.group,
                      ", ".join(map(str, left)))  # fmt: skip

    def stop(self, grace: float = 10.0) -> None:
        """Stop the query after the current micro-batch; in continuous mode, its tasks end
        the epoch within about ``StopSignal.every`` plus a commit, and the query is stopped
        once it ended (or after ``grace`` seconds: a task still running is then cancelled,
        which loses nothing committed). Idempotent; safe from signal handlers (the work is
        done on another thread)."""
        self._stopping.set()
        with self._lock:
            query, continuous = self._query, self._continuous
        if query is None:
            return

        def stop() -> None:
            if continuous:
                self._epoch_ended.clear()
                self._stop_signal.set()
                self._epoch_ended.wait(grace)
            query.stop()

        threading.Thread(target=stop, name="goka-processor-stop", daemon=True).start()

    @property
    def active(self) -> bool:
        """True while the query runs (one cheap call to the JVM)."""
        with self._lock:
            query = self._query
        return query is not None and bool(query.isActive)

    @property
    def prepared(self) -> bool:
        """True once the topics were checked (the partition count is known)."""
        return self._partitions > 0

    def status(self) -> dict[str, Any]:
        """The query's status and last progress, and goka's batch counts."""
        with self._lock:
            query = self._query
        return {
            "group": self.graph.group,
            "active": query is not None and query.isActive,
            "status": query.status if query is not None else None,
            "progress": query.lastProgress if query is not None else None,
            "batches": self.totals.batches,
            "processed": self.totals.processed,
            "skipped_applied": self.totals.skipped_applied,
            "partitions": self.partition_status() if self._partitions else [],
        }

    def partition_status(self) -> list[dict[str, Any]]:
        """Per partition and input topic: the group's committed offset, the lag behind the
        partition's end and when the offset was committed (see
        :meth:`goka.spark.status.PartitionStatus.read`).

        Raises:
            BrokerError: the brokers did not answer.
        """
        return self._status.read(self._partitions)
