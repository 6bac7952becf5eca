"""A Kafka source for Spark Structured Streaming, written with the Python Data Source API.

``spark.readStream.format("goka-kafka")`` reads co-partitioned topics. Offsets are
``{topic: {partition: next offset}}``, checkpointed by Spark. Each micro-batch has one input
partition per partition *number*, covering that partition of every topic, so one Spark task sees
all of a Goka partition (inputs, loop, joined tables). After the records of each topic, a task
gets one *range row* per topic (``range_end`` not null, ``offset`` = range start), so it knows the
exact ranges even where they hold no records.

Options:
    brokers: bootstrap servers (required).
    topics: comma-separated, co-partitioned topics (required).
    startingOffsets: ``earliest`` (default), ``latest``, JSON ``{"topic": {"0": 42}}``, or
        ``group``: the offsets committed to the consumer group named by the ``group`` option
        (by an earlier run, or by Go Goka: how a group moves to goka-py), ``earliest`` where
        the group committed none.
    group: the consumer group of ``startingOffsets=group``.
    maxOffsetsPerTrigger: most records per micro-batch, shared over the partitions.
    payload: ``records`` (default), ``ranges``: only the range rows, for a consumer of the
        DataFrame that reads the records itself in the same task, or ``process``: the task
        runs a processor's partition processors on its ranges (the ``task`` option, see
        :func:`goka.spark.task.encode_config`) and the rows are their summaries (schema
        :data:`goka.processing.summary.SUMMARY_DDL`). The processor reads with ``process``: a
        task then costs one Python worker, and no record moves through the JVM. ``sink``:
        the task writes its range to a sink (the ``task`` option, see
        :func:`goka.connect.task.encode_task`); one summary row per task
        (:data:`goka.connect.task.SINK_DDL`).
    kafka.<setting>: librdkafka settings, e.g. ``kafka.security.protocol``.
    epochs: a consumer group: plan *epochs* instead of ranges (continuous processing, see
        :func:`goka.processing.epoch.run_epoch`). Each micro-batch
        then has an input partition for every partition number, whose range is empty and
        starts where the group's committed offsets are (or where the previous epoch was
        planned to start, if that is further): its task reads on from there for the epoch.
        The offsets carry an epoch counter under ``"~epoch"``, so that a new epoch is planned
        even when no offset moved; Spark's checkpoint lags the tasks' commits by an epoch.
    epochSeconds: how long an epoch lasts (default 30): its tasks all end at the deadline
        planned with it, however late each started.
    epochTasks: how many tasks an epoch has (default: one per partition); each runs some
        partition numbers. Every task of an epoch runs at once, so at most the job's task slots.
    epochClaims: ``true``: every task of the job runs on one machine (a local session); an
        epoch has ``epochTasks`` tasks even if some get no partitions, and each claims the
        share of the partitions its Python worker holds (:mod:`goka.processing.claims`).

Trigger.AvailableNow is supported: the query stops at the ends seen when it started.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from goka.errors import BrokerError, ConfigurationError, TopicError, TopicRewoundError
from goka.spark.plan import (
    EPOCH,
    EpochPartition,
    KafkaPartition,
    Offsets,
    limit,
    planned_as_epoch,
)
from goka.spark.rows import SCHEMA, range_rows, record_rows

if TYPE_CHECKING:
    import pyarrow as pa

    from goka.kafka.offsets import EndOffsets
    from goka.kafka.ranges import RangeReader

# Spark unpickles the source in a planning process that only asks its name and schema, and
# the processor's driver only names it: Arrow, Kafka clients and stores are imported where
# they are used (about 40 MB less in each of those processes).

__all__ = ["EPOCH", "GokaKafkaSource", "GokaStreamReader", "kafka_options"]

CHUNK = 50_000
log = logging.getLogger(__name__)

#: How long planning waits for the group's committed offsets. Offsets an open transaction sent
#: are held back until it ends: a killed exactly-once processor's until its successor's task
#: fences it (or its timeout, 60 s), so waiting for them would hold that task back. Planning
#: without them is safe: a task begins where the group committed, asked after its fence.
PLAN_SECONDS = 2.0


def kafka_options(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.``-prefixed options, without the prefix."""
    return {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}


class GokaKafkaSource(DataSource):
    """``format("goka-kafka")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "goka-kafka"

    def schema(self) -> str:
        from goka.processing.summary import SUMMARY_DDL

        payload = self.options.get("payload")
        if payload == "sink":
            from goka.connect.task import SINK_DDL

            return SINK_DDL
        return SUMMARY_DDL if payload == "process" else SCHEMA

    def streamReader(self, schema: Any) -> GokaStreamReader:
        return GokaStreamReader(dict(self.options))


class GokaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches on the driver and reads them in tasks."""

    def __init__(self, options: dict[str, str]) -> None:
        try:
            self.brokers = options["brokers"]
            self.topics = [t for t in options["topics"].split(",") if t]
        except KeyError as exc:
            raise ConfigurationError(f"goka-kafka source needs the option {exc}") from None
        self.kafka = kafka_options(options)
        self.starting = options.get("startingOffsets", options.get("startingoffsets", "earliest"))
        self.group = options.get("group", "")
        if self.starting == "group" and not self.group:
            raise ConfigurationError("startingOffsets=group needs the option group")
        limit = options.get("maxOffsetsPerTrigger", options.get("maxoffsetspertrigger"))
        self.max_rows = int(limit) if limit else None
        self.timeout = float(options.get("timeout", "60"))
        self.payload = options.get("payload", "records")
        if self.payload not in ("records", "ranges", "process", "sink"):
            raise ConfigurationError(
                f"payload must be records, ranges, process or sink, got {self.payload!r}"
            )
        self.task = options.get("task", "")
        if self.payload in ("process", "sink") and not self.task:
            raise ConfigurationError(f"payload={self.payload} needs the option task")
        self.epochs = options.get("epochs") or None
        self.epoch_tasks = int(options.get("epochTasks", options.get("epochtasks", "0"))) or None
        self.epoch_seconds = float(options.get("epochSeconds", options.get("epochseconds", "30")))
        self.epoch_claims = options.get("epochClaims", options.get("epochclaims")) == "true"
        self._target: Offsets | None = None
        self._end_offsets: EndOffsets | None = None
        self._committed: RangeReader | None = None
        counts = self._ends.partition_counts(self.topics)
        if len(set(counts.values())) > 1:
            listing = ", ".join(f"{t!r}: {n}" for t, n in counts.items())
            raise TopicError(f"topics are not co-partitioned (partition counts differ): {listing}")
        self.partitions_count = next(iter(counts.values()))

    @property
    def _ends(self) -> EndOffsets:
        """The driver's offset consumer, created on first use (never pickled to tasks)."""
        if self._end_offsets is None:
            from goka.kafka.offsets import EndOffsets

            self._end_offsets = EndOffsets(self.brokers, self.kafka)
        return self._end_offsets

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_end_offsets"] = state["_committed"] = None
        return state

    def _all(self) -> list[tuple[str, int]]:
        return [(t, p) for t in self.topics for p in range(self.partitions_count)]

    def _as_offsets(self, found: Mapping[tuple[str, int], int]) -> Offsets:
        return {
            t: {str(p): found[(t, p)] for p in range(self.partitions_count)} for t in self.topics
        }

    def initialOffset(self) -> Offsets:
        if self.starting == "earliest":
            return self._as_offsets(self._ends.low(self._all()))
        if self.starting == "group":
            return self._group_offsets()
        if self.starting == "latest":
            return self._as_offsets(self._ends.high(self._all()))
        try:
            given = json.loads(self.starting)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f"startingOffsets must be earliest, latest or JSON, got {self.starting!r}"
            ) from exc
        low = self._ends.low(self._all())
        return {
            t: {
                str(p): int(given.get(t, {}).get(str(p), low[(t, p)]))
                for p in range(self.partitions_count)
            }
            for t in self.topics
        }

    def _group_offsets(self) -> Offsets:
        """Where the group committed, else the earliest offset."""
        from goka.kafka.ranges import RangeReader

        found = dict(self._ends.low(self._all()))
        reader = RangeReader(self.brokers, self.kafka)
        try:
            for p in range(self.partitions_count):
                try:
                    committed = reader.committed(self.group, p, self.topics, timeout=PLAN_SECONDS)
                except BrokerError as exc:  # the tasks begin where the group committed anyway
                    log.warning("%s: partition %d starts from its earliest offsets, the group's "
                                "are not known: %s", self.group, p, exc)  # fmt: skip
                    continue
                found.update(((t, p), offset) for t, (offset, _) in committed.items())
        finally:
            reader.close()
        log.info("%s: starting from the group's committed offsets %s", self.group, found)
        return self._as_offsets(found)

    @property
    def _who(self) -> str:
        return f"group {self.group!r}" if self.group else "the query's checkpoint"

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._as_offsets(self._ends.high(self._all()))

    def latestOffset(self, start: Offsets, read_limit: ReadLimit) -> Offsets:
        _check_checkpoint(start, self.topics)
        if self.epochs is not None:
            return self._next_epoch(start)
        marks = self._ends.watermarks(self._all())
        for (topic, p), (low, high) in marks.items():  # never plan past a topic that went back
            TopicRewoundError.check(topic, p, start[topic][str(p)], low, high, reader=self._who)
        ends = self._target or self._as_offsets({tp: high for tp, (_, high) in marks.items()})
        end = {t: {p: max(start[t][p], ends[t][p]) for p in ends[t]} for t in self.topics}
        if isinstance(read_limit, ReadMaxRows):
            end = limit(start, end, read_limit.max_rows)
        return end

    def reportLatestOffset(self) -> Offsets | None:
        """For progress reports only: a broker that does not answer in time does not stop the
        query (None: not known this time)."""
        try:
            return self._as_offsets(self._ends.high(self._all()))
        except BrokerError as exc:
            log.warning("latest offsets not reported: %s", exc)
            return None

    def _next_epoch(self, start: Offsets) -> Offsets:
        """Where the next epoch starts: the group's commits, or ``start`` where it is ahead."""
        assert self.epochs is not None
        if self._committed is None:
            from goka.kafka.ranges import RangeReader

            self._committed = RangeReader(self.brokers, self.kafka)
        end: dict[str, Any] = {t: dict(start[t]) for t in self.topics}
        try:
            for p in range(self.partitions_count):
                found = self._committed.committed(self.epochs, p, self.topics,
                                                  timeout=PLAN_SECONDS)  # fmt: skip
                for topic, (offset, _) in found.items():
                    end[topic][str(p)] = max(end[topic][str(p)], offset)
        except BrokerError as exc:  # the tasks begin where the group committed anyway
            log.warning("epoch planned from the previous one's offsets: %s", exc)
        end[EPOCH] = {"n": int(start.get(EPOCH, {}).get("n", 0)) + 1}
        return end

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        if self.epochs is not None and planned_as_epoch(end):  # every partition, from the
            # epoch's start (``end``: the group's commits) onwards; a micro-batch run's plan
            # replayed after a crash is processed below, as the batch it was planned as
            tasks = self.epoch_tasks or self.partitions_count  # (claims: a task per slot, some
            if not self.epoch_claims:  # with no partitions, so that every worker has one)
                tasks = min(self.partitions_count, tasks)
            deadline_ms = int((time.time() + self.epoch_seconds) * 1000)  # one end for all
            shares = [
                {
                    p: {t: end[t][str(p)] for t in self.topics}
                    for p in range(i, self.partitions_count, tasks)
                }
                for i in range(tasks)
            ]
            return [EpochPartition(i, shares[i], deadline_ms,
                                   shares if self.epoch_claims else None)
                    for i in range(tasks)]  # fmt: skip
        planned: list[InputPartition] = []
        for p in range(self.partitions_count):
            ranges = {t: (start[t][str(p)], end[t][str(p)]) for t in self.topics}
            if any(e > s for s, e in ranges.values()):
                planned.append(KafkaPartition(p, ranges))
        return planned

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if self.payload == "sink":
            from goka.connect import task as sink  # tasks only

            assert isinstance(partition, KafkaPartition)
            yield sink.sink_ranges(sink.decode_task(self.task), partition.partition,
                                   partition.ranges)  # fmt: skip
            return
        if self.payload == "process":
            from goka.spark import task  # tasks only

            config = task.decode_config(self.task)
            if isinstance(partition, EpochPartition):
                yield task.process_epoch(config, partition.starts, partition.deadline_ms,
                                         partition.index, partition.shares)  # fmt: skip
            else:
                assert isinstance(partition, KafkaPartition)
                yield task.process_ranges(config, {partition.partition: partition.ranges})
            return
        if isinstance(partition, EpochPartition):
            for number, starts in partition.starts.items():
                ranges = {t: (o, o) for t, o in starts.items()}
                yield range_rows(number, ranges, partition.deadline_ms)
            return
        assert isinstance(partition, KafkaPartition)
        if self.payload == "records":
            from goka.kafka.ranges import RangeReader
            from goka.processing.worker import Worker, frozen

            reader = Worker.current().client(
                ("source-reader", self.brokers, frozen(self.kafka)),
                lambda: RangeReader(self.brokers, self.kafka),
                lambda reader: reader.close(),
            )
            for rows in reader.read(partition.partition, partition.ranges, self.timeout, CHUNK):
                yield record_rows(partition.partition, rows)
        yield range_rows(partition.partition, partition.ranges)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: offsets live in Spark's checkpoint and in the partition stores."""

    def stop(self) -> None:
        if self._end_offsets is not None:
            self._end_offsets.close()
        if self._committed is not None:
            self._committed.close()


def _check_checkpoint(start: Offsets, topics: list[str]) -> None:
    """Spark's checkpoint gave offsets of other topics than the query reads: it is another
    query's (two processors, or a processor and a sink, given one checkpoint directory)."""
    if set(topics) - set(start):
        raise ConfigurationError(
            f"the query's checkpoint holds offsets of {sorted(start)}, not of {sorted(topics)} "
            "that it reads: it is another query's checkpoint; give each processor (and each "
            "sink) a checkpoint directory of its own"
        )
