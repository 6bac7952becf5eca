"""The streaming query of a processor: the Kafka source (:mod:`goka.spark.source`) read with
the task's configuration as an option, each micro-batch's rows handed to the driver's
callback, and the trigger of the mode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from goka.errors import ConfigurationError
from goka.spark.config import ProcessorConfig
from goka.spark.source import GokaKafkaSource

__all__ = ["check_checkpoint_scheme", "start_query"]


def start_query(
    spark: SparkSession,
    config: ProcessorConfig,
    task: str,
    on_batch: Callable[[DataFrame, int], Any],
    *,
    continuous: bool,
    available_now: bool,
    slots: int,
    claims: bool = False,
) -> StreamingQuery:
    """Start ``config``'s query in ``spark``: ``task`` is the encoded task configuration
    (:func:`goka.spark.task.encode_config`); ``on_batch(frame, batch_id)`` gets each
    micro-batch's (epoch's) summary rows; in continuous mode an epoch has ``slots`` tasks
    (``claims``: all on one machine, see :mod:`goka.processing.claims`)."""
    graph = config.graph
    check_checkpoint_scheme(spark, config.checkpoint_dir)
    spark.dataSource.register(GokaKafkaSource)
    reader = (
        spark.readStream.format("goka-kafka")
        .option("brokers", config.brokers)
        .option("topics", ",".join([*graph.input_topics(), *graph.joins]))
        .option("startingOffsets", config.starting_offsets)
        .option("group", graph.group)
        .option("payload", "process")  # tasks read and process their partitions
        .option("task", task)
    )
    if config.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
    for key, value in config.kafka_config.items():
        reader = reader.option(f"kafka.{key}", str(value))
    if continuous:
        reader = (
            reader.option("epochs", graph.group)
            .option("epochTasks", str(slots))
            .option("epochSeconds", str(config.epoch))
            .option("epochClaims", str(claims).lower())
        )
    writer = (
        reader.load()
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", config.checkpoint_dir)
        .queryName(f"goka-{graph.group}")
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:  # epochs follow each other at once
        writer = writer.trigger(processingTime="0 seconds" if continuous else config.trigger)
    return writer.start()


def check_checkpoint_scheme(spark: SparkSession, checkpoint_dir: str) -> None:
    """Refuse, with one error naming it, a checkpoint URL whose scheme Spark's JVM has no
    Hadoop file system for (``s3a://`` without hadoop-aws and the AWS SDK on its classpath),
    before the query starts and fails deep inside Spark.

    Raises:
        ConfigurationError: no Hadoop file system for the scheme.
    """
    scheme = checkpoint_dir.split("://", 1)[0] if "://" in checkpoint_dir else ""
    if scheme in ("", "file"):
        return
    jvm: Any = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    try:
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, conf)
    except Exception as exc:  # (py4j's error of the JVM's UnsupportedFileSystemException)
        raise ConfigurationError(
            f"checkpoint_dir {checkpoint_dir}: Spark has no Hadoop file system for {scheme}:// "
            f"on its classpath ({str(exc).splitlines()[0][:200]}). Put it there (for s3a://: "
            "org.apache.hadoop:hadoop-aws of Spark's Hadoop version and the AWS SDK), or keep "
            "the checkpoint on the container's disk with snapshots on object storage "
            '(docs/operations.md, "State in object storage")'
        ) from None
