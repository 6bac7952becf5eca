"""Processor groups on Spark Structured Streaming: the only package that imports pyspark."""

from goka.spark.processor import BatchSummary, Processor, ProcessorFailed, build_session
from goka.spark.source import GokaKafkaSource

__all__ = ["BatchSummary", "GokaKafkaSource", "Processor", "ProcessorFailed", "build_session"]
