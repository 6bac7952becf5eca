"""The SparkSession a processor runs in when none is given."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

__all__ = ["CDS_QUIET", "LOG4J", "build_session", "cds_archive", "java_options", "ui_address"]

#: Spark's logging: warnings, without its start-up chatter (replace with $GOKA_SPARK_LOG4J).
LOG4J = str(Path(__file__).with_name("log4j2.properties"))
#: JVM options that keep the class-data archive's own messages quiet (an archive that does not
#: fit this JVM or classpath is then ignored silently, and classes load as usual).
CDS_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def cds_archive() -> Path | None:
    """Where the driver JVM's class-data archive (AppCDS) is for this pyspark install:
    ``$GOKA_SPARK_CDS``, else ``~/.cache/goka-py/spark-<version>-<install>.jsa``; None when
    ``GOKA_SPARK_CDS=off``. ``python -m goka.spark.warmup`` writes it; a driver JVM that finds
    it maps Spark's classes instead of loading them (start-up about 4.5 s shorter here)."""
    setting = os.environ.get("GOKA_SPARK_CDS", "")
    if setting == "off":
        return None
    if setting:
        return Path(setting)
    install = hashlib.sha1(str(Path(pyspark.__file__).parent).encode()).hexdigest()[:10]
    return Path.home() / ".cache" / "goka-py" / f"spark-{pyspark.__version__}-{install}.jsa"


def java_options() -> str:
    """The driver JVM's options: ``$GOKA_SPARK_JAVA_OPTIONS`` (default: the quick JIT tier
    only), the class-data archive if there is one, and goka's log4j configuration."""
    options = os.environ.get("GOKA_SPARK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")
    archive = cds_archive()
    if archive is not None and archive.is_file() and "Archive" not in options:
        options += f" -XX:SharedArchiveFile={archive} {CDS_QUIET}"
    return f"{options} -Dlog4j2.configurationFile={os.environ.get('GOKA_SPARK_LOG4J', LOG4J)}"


def build_session(group: str, master: str | None = None) -> SparkSession:
    """Build the session a processor runs in when none is given.

    Speculative execution stays off (two attempts of a task would contend for one store), the
    Python workers run this interpreter, and the UI is off unless ``GOKA_SPARK_UI`` is set.
    The driver JVM runs with the quick JIT tier only (``GOKA_SPARK_JAVA_OPTIONS`` replaces
    it): it moves only summaries, and starts seconds sooner; it maps Spark's classes from the
    class-data archive where ``python -m goka.spark.warmup`` wrote one (:func:`cds_archive`).
    In local mode the driver and its block manager listen on 127.0.0.1 only (Spark's default
    is the host's address).
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
        .config("spark.driver.extraJavaOptions", java_options())
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
