"""Processor groups on Spark Structured Streaming: the only package that imports pyspark."""

from typing import TYPE_CHECKING

from goka._lazy import lazy_exports
from goka._optional import missing_extra

try:
    import pyspark  # noqa: F401  # checked here: the pieces below import it at their top
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise missing_extra("pyspark", "spark", "processors on Spark") from exc

if TYPE_CHECKING:  # imported where first used (goka._lazy): Spark's Python processes import
    # goka.spark.source alone
    from goka.spark.config import ProcessorConfig
    from goka.spark.processor import Processor
    from goka.spark.session import SessionSettings, build_session
    from goka.spark.source import GokaKafkaSource
    from goka.spark.summary import BatchSummary, ProcessorFailed, Totals

__all__ = [
    "BatchSummary",
    "GokaKafkaSource",
    "Processor",
    "ProcessorConfig",
    "ProcessorFailed",
    "SessionSettings",
    "Totals",
    "build_session",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "goka.spark.config": ("ProcessorConfig",),
        "goka.spark.processor": ("Processor",),
        "goka.spark.session": ("SessionSettings", "build_session"),
        "goka.spark.source": ("GokaKafkaSource",),
        "goka.spark.summary": ("BatchSummary", "ProcessorFailed", "Totals"),
    },
)
