"""The SparkSession a processor runs in when none is given, and how it is built
(:class:`SessionSettings`; the command line takes them from flags and ``GOKA_SPARK_*``).

Spark's own environment is respected as Spark defines it (``SPARK_HOME``, ``PYSPARK_PYTHON``,
``PYSPARK_DRIVER_PYTHON``, ``SPARK_LOCAL_IP``, and spark-submit's ``PYSPARK_GATEWAY_PORT``):
it is how Spark is launched, not a goka setting."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from goka.processing.values import check_master
from goka.spark.gateway import install

install()  # the JVM started without Python between fork and exec (goka.spark.gateway)

__all__ = [
    "CDS_QUIET",
    "JAVA_OPTIONS",
    "LOG4J",
    "NO_DATA_SOURCE_LOOKUP",
    "SessionSettings",
    "build_session",
    "cds_archive",
    "java_options",
    "spark_home",
    "ui_address",
]

#: Spark's logging: warnings, without its start-up chatter.
LOG4J = str(Path(__file__).with_name("log4j2.properties"))
#: JVM options that keep the class-data archive's own messages quiet (an archive that does not
#: fit this JVM or classpath is then ignored silently, and classes load as usual).
CDS_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: The driver JVM's options unless settings replace them: the quick JIT
#: tier only (it starts seconds sooner), and the serial collector from a 32 MB heap (G1's own
#: structures and a heap started at 1/64 of the machine's memory made it ~55 MB larger; it
#: moves only summaries: its collections are short).
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xms32m"
#: ``PYSPARK_DRIVER_PYTHON`` in a local session's JVM unless the user set one: a command that
#: does not exist, so that Spark skips its search of the installed packages for Python data
#: sources (``pyspark_*`` entry points; a processor registers its own): the search starts a
#: Python daemon and worker of its own (~70 MB) on the way to the first epoch. Spark's JVM
#: reads that variable for nothing else when driven from Python.
NO_DATA_SOURCE_LOOKUP = "goka-skips-the-python-data-source-lookup"


def _cache() -> Path:
    return Path.home() / ".cache" / "goka-py"


def _install() -> str:
    """This pyspark install: its version and a digest of its path."""
    digest = hashlib.sha1(str(Path(pyspark.__file__).parent).encode()).hexdigest()[:10]
    return f"{pyspark.__version__}-{digest}"


def spark_home() -> Path:
    """The ``SPARK_HOME`` a local session's JVM runs with: ``$SPARK_HOME`` where set, else a
    copy of the pyspark install's layout made of links (``~/.cache/goka-py/spark-home-*``)
    without its ``python`` folder, else the pyspark install itself.

    Why: Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on its Python processes'
    path, and Python compiles every module it imports from a zip again in every process (it
    writes no bytecode there): each of the seven interpreters a processor starts with took
    about 0.6 s to import pyspark. Without the zip they import the interpreter's own pyspark,
    whose bytecode is cached (a processor starts about 2.5 s sooner here). A local session's
    Python processes run this interpreter (``PYSPARK_PYTHON``), which has pyspark.
    """
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    install = Path(pyspark.__file__).parent
    home = _cache() / f"spark-home-{_install()}"
    if (home / "jars").is_dir():
        return home
    try:  # built beside it, then renamed: another process may be building it too
        home.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f"{home.name}.", dir=home.parent))
        for entry in install.iterdir():
            if entry.name != "python":
                (building / entry.name).symlink_to(entry)
        try:
            building.rename(home)
        except OSError:  # built meanwhile by another process
            shutil.rmtree(building, ignore_errors=True)
    except OSError:
        return install
    return home if (home / "jars").is_dir() else install


@dataclass(frozen=True)
class SessionSettings:
    """How goka builds a session (the command line: ``--master``, ``--spark-ui`` and the
    ``GOKA_SPARK_*`` variables).

    Attributes:
        master: the master; None: ``local[2]``, or spark-submit's where it launched this.
        ui: turn the Spark UI on.
        java_options: the driver JVM's options (default :data:`JAVA_OPTIONS`).
        class_data: the driver JVM's class-data archive: ``""`` (default) the one for this
            install and classpath (:func:`cds_archive`), a path, or None: none.
        log4j: Spark's log4j2 configuration file.
    """

    master: str | None = None
    ui: bool = False
    java_options: str = JAVA_OPTIONS
    class_data: str | None = ""
    log4j: str = LOG4J

    def __post_init__(self) -> None:
        check_master(self.master)


def cds_archive(home: Path | None = None, setting: str | None = "") -> Path | None:
    """Where the driver JVM's class-data archive (AppCDS) is for this pyspark install: the
    path ``setting`` names, else ``~/.cache/goka-py/spark-<version>-<install>-<home>.jsa`` (an
    archive fits one classpath: ``home``'s, by default a local session's, :func:`spark_home`);
    None when ``setting`` is None. ``python -m goka.commands.class_data`` writes it; a driver
    JVM that finds it maps Spark's classes instead of loading them (start-up seconds
    shorter)."""
    if setting is None:
        return None
    if setting:
        return Path(setting)
    digest = hashlib.sha1(str(home or spark_home()).encode()).hexdigest()[:6]
    return _cache() / f"spark-{_install()}-{digest}.jsa"


def java_options(home: Path | None = None, settings: SessionSettings | None = None) -> str:
    """The driver JVM's options: the settings' options, the class-data archive for ``home``
    if there is one (and the options do not write one), and the log4j configuration."""
    settings = settings or SessionSettings()
    options = settings.java_options
    archive = cds_archive(home, settings.class_data)
    if archive is not None and archive.is_file() and "Archive" not in options:
        options += f" -XX:SharedArchiveFile={archive} {CDS_QUIET}"
    return f"{options} -Dlog4j2.configurationFile={settings.log4j}"


def build_session(
    group: str, master: str | None = None, *, settings: SessionSettings | None = None
) -> SparkSession:
    """Build the session a processor runs in when none is given (``master`` overrides the
    settings' master).

    Speculative execution stays off (two attempts of a task would contend for one store), the
    Python workers run this interpreter, and the UI is off unless the settings turn it on.
    The driver JVM runs with :data:`JAVA_OPTIONS` unless the settings say otherwise: it moves
    only summaries, and starts seconds sooner; it maps Spark's classes from the class-data
    archive where ``python -m goka.commands.class_data`` wrote one (:func:`cds_archive`).
    In local mode the driver and its block manager listen on 127.0.0.1 only (Spark's default
    is the host's address), the JVM's ``SPARK_HOME`` is :func:`spark_home`, and Spark does not
    search the installed packages for Python data sources (:data:`NO_DATA_SOURCE_LOOKUP`).
    """
    settings = settings or SessionSettings()
    master = master or settings.master
    check_master(master)
    if not master and not os.environ.get("PYSPARK_GATEWAY_PORT"):  # spark-submit's --master rules
        master = "local[2]"
    local = bool(master and master.startswith("local"))
    home = spark_home() if local else Path(os.environ.get("SPARK_HOME") or pyspark.__path__[0])
    builder = (
        SparkSession.builder.appName(f"goka-{group}")
        .config("spark.speculation", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "true" if settings.ui else "false")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        .config("spark.python.worker.reuse", "true")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")  # streaming queries cannot use it
        .config("spark.driver.extraJavaOptions", java_options(home, settings))
    )
    if master:
        builder = builder.master(master)
    # the Python workers run this interpreter (pyspark reads it once, as the context starts)
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    if not local:
        with _environment(PYSPARK_PYTHON=python):
            return builder.getOrCreate()
    # nothing but this machine needs to reach a local session: driver and block manager bind
    # to loopback, and so does the UI, which reads SPARK_LOCAL_IP from the JVM's environment
    builder = builder.config("spark.driver.bindAddress", "127.0.0.1")
    builder = builder.config("spark.driver.host", "127.0.0.1")
    local_ip = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
    driver_python = os.environ.get("PYSPARK_DRIVER_PYTHON", NO_DATA_SOURCE_LOOKUP)
    with _environment(SPARK_LOCAL_IP=local_ip, SPARK_HOME=str(home), PYSPARK_PYTHON=python,
                      PYSPARK_DRIVER_PYTHON=driver_python):  # fmt: skip
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
