"""A cluster of Apache Kafka nodes on loopback, for tests of what a real cluster does when a
broker dies: each node a KRaft broker and controller in a JVM of its own, the quorum made of
all of them, topics replicated to every node with ``min.insync.replicas=2``.
"""

from __future__ import annotations

import atexit
import shutil
import time
from collections.abc import Mapping
from types import TracebackType

from goka.dev.kafka import KAFKA_VERSION, KafkaNode, find_java, kafka_libs, scratch_folder
from goka.dev.process import BrokerProcess, free_port
from goka.errors import BrokerError, ConfigurationError
from goka.kafka.admin import KafkaAdmin

__all__ = ["KafkaCluster"]

_HOST = "127.0.0.1"


class KafkaCluster:
    """``size`` Apache Kafka nodes on 127.0.0.1 (node ids 1..size). A context manager.

    Every node is a voter of the controller quorum, so the cluster lives on while a majority
    does; internal topics and topics created without a replication factor are replicated to
    every node, and a write needs two in-sync replicas (``acks=all``, as goka-py's producers
    ask). Data lives in a folder on a memory file system (see
    :class:`~goka.dev.broker.EmbeddedBroker`) until :meth:`close`. Not thread-safe.

    Args:
        size: how many nodes (at least 3: a quorum that survives one loss).
        settings: more broker settings for every node.
        startup_timeout: seconds to wait for the whole cluster, or for a restarted node.

    Raises:
        ConfigurationError: fewer than 3 nodes.
    """

    def __init__(
        self, size: int = 3, *, settings: Mapping[str, str] | None = None,
        startup_timeout: float = 120.0,
    ) -> None:  # fmt: skip
        if size < 3:
            raise ConfigurationError(f"a cluster needs at least 3 nodes, got {size}")
        self.startup_timeout = startup_timeout
        self.name = f"Apache Kafka {KAFKA_VERSION}"
        self._workdir = scratch_folder("goka-kafka-cluster-")
        ports = [(free_port(_HOST), free_port(_HOST)) for _ in range(size)]
        voters = ",".join(f"{i + 1}@{_HOST}:{c}" for i, (_, c) in enumerate(ports))
        folder, extra = self._workdir, dict(settings or {})
        self.nodes = {
            n: KafkaNode(
                n, port, controller, voters, folder / f"node-{n}", replication=size, settings=extra
            )
            for n, (port, controller) in enumerate(ports, start=1)
        }
        self._processes = {
            n: BrokerProcess(f"{self.name} node {n}", self._workdir / f"node-{n}.log", grace=15)
            for n in self.nodes
        }
        atexit.register(self.close)

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` naming every node."""
        return ",".join(f"{_HOST}:{node.port}" for node in self.nodes.values())

    def pid(self, node: int) -> int | None:
        """Node ``node``'s process id while it runs."""
        return self._processes[node].pid

    def running(self, node: int) -> bool:
        """True while node ``node``'s process is alive."""
        return self._processes[node].running

    def start(self) -> KafkaCluster:
        """Start every node that is not running; wait until all are in the cluster's metadata.

        Raises:
            BrokerError: a node could not be formatted, exited, or the cluster was not whole
                within ``startup_timeout`` (the nodes' last log lines).
        """
        java, libs = find_java(), kafka_libs()
        for n, node in self.nodes.items():
            if not self.running(n):
                node.prepare(libs, java)
                self._processes[n].start(node.command(libs, java))
        self._wait_whole()
        return self

    def start_node(self, node: int) -> None:
        """Start node ``node`` again on its data (it must not run); wait until the cluster
        lists every node again."""
        java, libs = find_java(), kafka_libs()
        self._processes[node].start(self.nodes[node].command(libs, java))
        self._wait_whole()

    def kill(self, node: int) -> None:
        """SIGKILL node ``node``, as a crash would."""
        self._processes[node].kill()

    def stop_node(self, node: int) -> None:
        """Stop node ``node`` (SIGTERM: a controlled shutdown, leaders moved away first)."""
        self._processes[node].stop()

    def leader(self, topic: str, partition: int) -> int:
        """Return the node id leading ``topic``/``partition`` now (-1: none)."""
        return KafkaAdmin(self.bootstrap, timeout=10).leaders(topic)[partition]

    def _wait_whole(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        seen: dict[int, str] = {}
        while time.monotonic() < deadline:
            for n, process in self._processes.items():
                if not process.running:
                    raise BrokerError(f"the {self.name} cluster's node {n} exited:\n"
                                      f"{process.log_tail()}")  # fmt: skip
            try:
                seen = KafkaAdmin(self.bootstrap, timeout=2).cluster().brokers
            except BrokerError:
                seen = {}
            if set(seen) == set(self.nodes):
                return
            time.sleep(0.1)
        tails = "\n".join(f"--- node {n}:\n{p.log_tail(10)}"
                          for n, p in self._processes.items())  # fmt: skip
        within = f"{self.startup_timeout:g}s (live: {sorted(seen)})"
        raise BrokerError(f"the {self.name} cluster was not whole within {within}:\n{tails}")

    def log_tail(self, node: int, lines: int = 30) -> str:
        """Return the last ``lines`` lines node ``node`` printed."""
        return self._processes[node].log_tail(lines)

    def close(self) -> None:
        """Stop every node (SIGKILL: its data is deleted) and delete the data. Idempotent."""
        for process in self._processes.values():
            process.kill()
        shutil.rmtree(self._workdir, ignore_errors=True)
        atexit.unregister(self.close)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
