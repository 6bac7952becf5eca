"""Processor groups on Spark Structured Streaming: the only package that imports pyspark."""

from goka._optional import missing_extra

try:
    import pyspark  # noqa: F401  # checked here: the pieces below import it at their top
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise missing_extra("pyspark", "spark", "processors on Spark") from exc

from goka.spark.processor import Processor
from goka.spark.session import build_session
from goka.spark.source import GokaKafkaSource
from goka.spark.summary import BatchSummary, ProcessorFailed

__all__ = ["BatchSummary", "GokaKafkaSource", "Processor", "ProcessorFailed", "build_session"]
