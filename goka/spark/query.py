"""The streaming query of a processor: the Kafka source (:mod:`goka.spark.source`) read with
the task's configuration as an option, each micro-batch's rows handed to the driver's
callback, and the trigger of the mode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from goka.spark.config import ProcessorConfig
from goka.spark.source import GokaKafkaSource

__all__ = ["start_query"]


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
