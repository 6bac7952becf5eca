"""The SparkSession a processor runs in when none is given."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession

__all__ = ["LOG4J", "build_session", "ui_address"]

#: Spark's logging: warnings, without its start-up chatter (replace with $GOKA_SPARK_LOG4J).
LOG4J = str(Path(__file__).with_name("log4j2.properties"))


def build_session(group: str, master: str | None = None) -> SparkSession:
    """Build the session a processor runs in when none is given.

    Speculative execution stays off (two attempts of a task would contend for one store), the
    Python workers run this interpreter, and the UI is off unless ``GOKA_SPARK_UI`` is set.
    The driver JVM runs with the quick JIT tier only (``GOKA_SPARK_JAVA_OPTIONS`` replaces
    it): it moves only summaries, and starts seconds sooner. In local mode the driver and its
    block manager listen on 127.0.0.1 only (Spark's default is the host's address).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName(f"goka-{group}")
        .config("spark.speculation", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "true" if os.environ.get("GOKA_SPARK_UI") else "false")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        .config("spark.python.worker.reuse", "true")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")  # streaming queries cannot use it
        .config(
            "spark.driver.extraJavaOptions",
            os.environ.get("GOKA_SPARK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")
            + f" -Dlog4j2.configurationFile={os.environ.get('GOKA_SPARK_LOG4J', LOG4J)}",
        )
    )
    if not master and not os.environ.get("PYSPARK_GATEWAY_PORT"):  # spark-submit's --master rules
        master = os.environ.get("GOKA_SPARK_MASTER", "local[2]")
    if master:
        builder = builder.master(master)
    if not (master and master.startswith("local")):
        return builder.getOrCreate()
    # nothing but this machine needs to reach a local session: driver and block manager bind
    # to loopback, and so does the UI, which reads SPARK_LOCAL_IP from the JVM's environment
    builder = builder.config("spark.driver.bindAddress", "127.0.0.1")
    builder = builder.config("spark.driver.host", "127.0.0.1")
    with _environment(SPARK_LOCAL_IP=os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")):
        return builder.getOrCreate()


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set environment variables for the block (a JVM started in it inherits them)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def ui_address(spark: SparkSession) -> str:
    url = spark.sparkContext.uiWebUrl
    return f"; Spark UI at {url}" if url else ""
