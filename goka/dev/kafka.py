"""Apache Kafka for development and tests: its jars fetched once from Maven Central, a KRaft
node's settings, its storage formatted, its command line.

The jars come from Maven Central (``org.apache.kafka:kafka_2.13`` and its dependencies, plus
log4j's binding for the slf4j API Kafka logs through), resolved by ``mvn
dependency:copy-dependencies`` from a pom written here into a cache outside the project
(``$XDG_CACHE_HOME/goka-py`` or ``~/.cache/goka-py``), once per version: later runs need
neither Maven nor the network. A node is one JVM running the broker and the controller roles
(KRaft) on loopback, storage in a folder of its own, formatted before its first start.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from goka.errors import BrokerError, BrokerNotFoundError

__all__ = [
    "DEV_CLUSTER_ID", "KAFKA_VERSION", "KafkaNode", "cache_root", "fill_cache", "find_java",
    "kafka_libs", "maven_jars", "scratch_folder",
]  # fmt: skip

#: The Apache Kafka release the development broker runs: the newest 4.x whose whole dependency
#: tree resolved from Maven Central when pinned.
KAFKA_VERSION = "4.4.0"

#: The cluster id of every development cluster (16 bytes, base64 without padding, as Kafka's):
#: their storage is formatted once and copied.
DEV_CLUSTER_ID = base64.urlsafe_b64encode(b"goka-py dev node").decode().rstrip("=")

#: log4j's binding for the slf4j 1.7 API that Kafka logs through, of the log4j release the
#: Kafka release above depends on (without a binding Kafka's log would be lost).
LOG4J_VERSION = "2.25.5"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.goka</groupId>
  <artifactId>kafka-broker-libs</artifactId>
  <version>{kafka}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""

#: The broker's log: Kafka's INFO lines (what a failing test's reader needs), without the
#: settings dumps and the per-request chatter.
_LOG4J2 = """status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.config.name = org.apache.kafka.common.config
logger.config.level = warn
logger.utils.name = org.apache.kafka.common.utils.AppInfoParser
logger.utils.level = warn
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.changes.name = state.change.logger
logger.changes.level = warn
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = warn
"""

_INSTALL_JAVA = "install a Java 17 runtime (Debian: apt-get install openjdk-17-jre-headless)"
_INSTALL_MAVEN = "install Maven (Debian: apt-get install maven)"
_OR_TANSU = "or use the light broker without a JVM: EmbeddedBroker(kind='tansu')"


def cache_root() -> Path:
    """Return the folder goka-py keeps downloads in (``$XDG_CACHE_HOME/goka-py``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "goka-py"


def scratch_folder(prefix: str) -> Path:
    """Return a new folder for a broker's data: on ``/dev/shm`` (memory) where it can be
    written, else in the system's temporary folder."""
    memory = Path("/dev/shm")
    where = str(memory) if memory.is_dir() and os.access(memory, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=where))


def find_java() -> str:
    """Return the ``java`` to run (``$JAVA_HOME/bin/java``, else the one on ``PATH``).

    Raises:
        BrokerNotFoundError: no Java runtime was found.
    """
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise BrokerNotFoundError(f"Apache Kafka needs Java, and no java was found: "
                                  f"{_INSTALL_JAVA}, {_OR_TANSU}")  # fmt: skip
    return found


def kafka_libs(version: str = KAFKA_VERSION, *, cache: Path | None = None) -> Path:
    """Return the folder of Apache Kafka ``version``'s jars, fetching them the first time.

    Fetched by Maven into a new folder that is then renamed into place (:func:`fill_cache`).

    Raises:
        BrokerNotFoundError: the jars are not there and Maven is not installed.
        BrokerError: Maven could not resolve them (its last lines and the command to retry).
    """
    libs = (cache or cache_root()) / f"kafka-{version}" / "libs"
    pom = _POM.format(kafka=version, log4j=LOG4J_VERSION)
    return maven_jars(f"Apache Kafka {version}", libs, pom, hint=_OR_TANSU)


def maven_jars(what: str, libs: Path, pom: str, *, hint: str = "") -> Path:
    """Return ``libs``, filled the first time with the runtime jars of the dependencies ``pom``
    names (Maven's ``dependency:copy-dependencies`` into a new folder renamed into place by
    :func:`fill_cache`). ``what`` names them in errors; ``hint``: another way out.

    Raises:
        BrokerNotFoundError: the jars are not there and Maven is not installed.
        BrokerError: Maven could not resolve them (its last lines and the command to retry).
    """
    if libs.is_dir():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerNotFoundError(f"{what}'s jars are not in {libs.parent} and Maven is needed "
                                  f"to fetch them: {_INSTALL_MAVEN}"
                                  + (f", {hint}" if hint else ""))  # fmt: skip

    def fetch(work: Path) -> None:
        (work / "pom.xml").write_text(pom)
        command = [mvn, "-q", "-B", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
                   f"-DoutputDirectory={work / 'libs'}", "-DincludeScope=runtime"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-25:])
            raise BrokerError(f"Maven could not fetch {what} (exit code {done.returncode}):"
                              f"\n{tail}\nretry with: {' '.join(command)}")  # fmt: skip

    return fill_cache(libs, fetch, "libs")


def fill_cache(target: Path, make: Callable[[Path], None], part: str = "") -> Path:
    """Return ``target``, made first if missing: ``make(work)`` fills a new folder beside it,
    whose ``part`` (or the whole folder) is then renamed into place, so a make that fails or
    is killed leaves nothing half-written, and two at once both end with the whole of it."""
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fill-", dir=target.parent))
    try:
        make(work)
        try:
            (work / part).rename(target)
        except OSError:  # another process put it there meanwhile
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


@dataclass(frozen=True)
class KafkaNode:
    """One KRaft node (broker and controller in one JVM) on 127.0.0.1.

    Attributes:
        node_id: its ``node.id``.
        port: the clients' listener; controller_port: the controller quorum's.
        voters: ``controller.quorum.voters`` of the whole cluster (``1@127.0.0.1:9093,...``).
        workdir: its folder: settings, log4j's settings, ``data/``.
        advertised: the ``host:port`` clients are told (default: its own listener).
        replication: the cluster's size, for internal topics and default replication.
        settings: more broker settings (they win over the ones made here).
        heap: the JVM's maximum heap (``-Xmx``).
    """

    node_id: int
    port: int
    controller_port: int
    voters: str
    workdir: Path
    advertised: str | None = None
    replication: int = 1
    settings: Mapping[str, str] = field(default_factory=dict)
    heap: str = "1g"

    @property
    def data(self) -> Path:
        return self.workdir / "data"

    def properties(self) -> dict[str, str]:
        """Return the node's ``server.properties``."""
        r = self.replication
        isr = str(min(2, r))
        return {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.advertised or f'127.0.0.1:{self.port}'}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data),
            "default.replication.factor": str(r),
            "min.insync.replicas": isr,
            "offsets.topic.replication.factor": str(r),
            "offsets.topic.num.partitions": "10",  # 50 by default: made at the first group use
            "transaction.state.log.replication.factor": str(r),
            "transaction.state.log.min.isr": isr,
            "transaction.state.log.num.partitions": "10",
            "share.coordinator.state.topic.replication.factor": str(r),
            "share.coordinator.state.topic.min.isr": isr,
            "group.initial.rebalance.delay.ms": "0",  # no wait for more members to join
            # no deletion by age (a topic's own retention.ms still applies): Kafka deletes a
            # segment, the active one too, once its newest record time is older than 7 days,
            # at a check every 5 minutes; tests and demos replay fixed past event times
            "log.retention.ms": "-1",
            "controller.quorum.append.linger.ms": "1",  # a change (a topic) waits for no batch
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.recovery.threads.per.data.dir": "2",
            # broker.session.timeout.ms stays 9 s: with 2 s a node whose heartbeats waited on a
            # busy machine (Spark, clients, the JIT) was fenced, its partitions without a leader
            **self.settings,
        }

    def prepare(self, libs: Path, java: str) -> None:
        """Write the settings and give the node empty formatted storage, unless it has some
        (a formatted node keeps its data). Storage is formatted once per node id, into the
        cache beside ``libs``, and copied from there (formatting starts a JVM: a second).

        Raises:
            BrokerError: the storage could not be formatted (the tool's output).
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "server.properties").write_text(_lines(self.properties()))
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        if (self.data / "meta.properties").exists():
            return
        formatted = libs.parent / "formatted" / f"node-{self.node_id}"
        if not (formatted / "meta.properties").exists():
            self._format(formatted, libs, java)
        shutil.copytree(formatted, self.data)

    def _format(self, into: Path, libs: Path, java: str) -> None:
        into.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="format-", dir=into.parent))
        settings = work / "server.properties"
        settings.write_text(_lines({**self.properties(), "log.dirs": str(work / "data")}))
        command = [*self._java(libs, java, "256m"), "kafka.tools.StorageTool", "format",
                   f"--cluster-id={DEV_CLUSTER_ID}", "--config", str(settings)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:  # its settings stay, for the command to retry
            shutil.rmtree(work / "data", ignore_errors=True)
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise BrokerError(f"could not format Kafka storage in {work / 'data'}:\n{tail}\n"
                              f"retry with: {' '.join(command)}")  # fmt: skip
        with contextlib.suppress(OSError):  # another process put it there meanwhile
            (work / "data").rename(into)
        shutil.rmtree(work, ignore_errors=True)

    def command(self, libs: Path, java: str) -> list[str]:
        """Return the command that runs the node."""
        return [*self._java(libs, java, self.heap), "kafka.Kafka",
                str(self.workdir / "server.properties")]  # fmt: skip

    def _java(self, libs: Path, java: str, heap: str) -> list[str]:
        return [
            java, f"-Xmx{heap}", "-Xms128m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp", f"{libs}/*",
        ]  # fmt: skip


def _lines(properties: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in properties.items())
