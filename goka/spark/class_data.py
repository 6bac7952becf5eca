"""Write the driver JVM's class-data archive (AppCDS) for this pyspark install, so processors
start seconds sooner (``python -m goka.commands.class_data``: ``make`` and the Docker image run
it).

It runs a small group once, until caught up, on the light development broker (Tansu, the
``broker`` extra: the archive holds the Spark driver's classes, whatever the broker; an image
that runs this has neither Maven nor Kafka's jars),
with ``-XX:ArchiveClassesAtExit``: the JVM writes the classes it loaded when it exits (about
170 MB, 10-20 s). The archive goes where :func:`goka.spark.session.cds_archive` says, replacing
an older one only once complete. A JVM or classpath it does not fit is ignored silently.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from goka import Context, Int64Codec, StringCodec, TopicManager, define_group, input, persist

__all__ = ["graph", "prune", "write_archive"]

#: The topic of the run (on an embedded broker of its own).
TOPIC = "goka-class-data"


def _count(ctx: Context[int], page: str) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


#: The group the run runs (``goka processor run goka.spark.class_data:graph``).
graph = define_group(f"{TOPIC}-g", input(TOPIC, StringCodec(), _count), persist(Int64Codec()))


def write_archive(archive: Path, timeout: float = 300.0) -> float:
    """Run the group once with the archive being written at the JVM's exit; return seconds."""
    from goka.dev import EmbeddedBroker
    from goka.emitter import Emitter
    from goka.spark.session import CDS_QUIET, JAVA_OPTIONS

    archive.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with EmbeddedBroker("tansu") as broker, tempfile.TemporaryDirectory(prefix="goka-cds-") as work:
        TopicManager(broker.bootstrap).ensure_stream_exists(TOPIC, 2)
        with Emitter(broker.bootstrap, TOPIC, StringCodec()) as emitter:
            emitter.emit_sync("class-data", "/", timeout=30)
        partial = Path(work) / "archive.jsa"
        options = f"{JAVA_OPTIONS} -XX:ArchiveClassesAtExit={partial} {CDS_QUIET}"
        env = {**os.environ, "GOKA_SPARK_CDS": "off", "GOKA_LOG_LEVEL": "WARNING",
               "GOKA_SPARK_JAVA_OPTIONS": options}  # fmt: skip
        command = [sys.executable, "-m", "goka", "processor", "run", "goka.spark.class_data:graph",
                   "--brokers", broker.bootstrap, "--state-dir", str(Path(work) / "state"),
                   "--until-caught-up", "--http-port", "0"]  # fmt: skip
        subprocess.run(command, env=env, check=True, timeout=timeout, capture_output=True)
        deadline = time.monotonic() + timeout  # the JVM may still be writing after we return
        while not (partial.is_file() and not partial.stat().st_mode & 0o222):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the JVM wrote no class-data archive to {partial}")
            time.sleep(0.5)
        os.replace(partial, archive)  # the JVM makes it read-only once written
    prune(archive)
    return time.monotonic() - started


def prune(archive: Path) -> None:
    """Note which pyspark install ``archive`` is for, and delete the other archives of this
    install (for another classpath) and the archives and Spark homes
    (:func:`goka.spark.session.spark_home`) of installs that are gone (a virtualenv removed:
    each install has its own archive of about 170 MB)."""
    import pyspark

    install = str(Path(pyspark.__file__).parent)
    Path(f"{archive}.install").write_text(install)
    for other in archive.parent.glob("spark-*.jsa"):
        note = Path(f"{other}.install")
        if other == archive or not note.is_file():
            continue
        noted = note.read_text()
        if noted == install or not Path(noted).is_dir():  # replaced, or its install is gone
            other.unlink(missing_ok=True)
            note.unlink(missing_ok=True)
    for home in archive.parent.glob("spark-home-*"):
        if home.is_dir() and not (home / "jars").is_dir():  # its links lead nowhere now
            shutil.rmtree(home, ignore_errors=True)
