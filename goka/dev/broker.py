"""The development broker: Apache Kafka (one KRaft node, :mod:`goka.dev.kafka`) or Tansu (the
light one without a JVM, :mod:`goka.dev.tansu`), on 127.0.0.1, for demos and tests. Production
code points at a real cluster instead.
"""

from __future__ import annotations

import atexit
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Literal, get_args

from goka.dev.kafka import KAFKA_VERSION, KafkaNode, find_java, kafka_libs, scratch_folder
from goka.dev.process import BrokerProcess, free_port
from goka.dev.tansu import find_tansu_binary, tansu_command, tansu_version
from goka.errors import BrokerError, ConfigurationError
from goka.kafka.admin import KafkaAdmin, prime_group_coordinator

__all__ = ["KINDS", "BrokerKind", "EmbeddedBroker"]

#: The kinds of development broker: ``"kafka"`` (Apache Kafka) or ``"tansu"``.
BrokerKind = Literal["kafka", "tansu"]
KINDS: tuple[str, ...] = get_args(BrokerKind)

#: Seconds a stopping Apache Kafka broker is given after SIGTERM (it writes its clean-shutdown
#: marks, so a restart on the same data need not recover its logs) before SIGKILL.
KAFKA_GRACE = 15.0
#: How many times a broker whose ports were picked for it starts on newly picked ones when
#: another process took one of them first (the pick and the bind are apart: a busy machine)
PICKS = 3


class EmbeddedBroker:
    """A development broker process on 127.0.0.1.

    A context manager: ``with EmbeddedBroker() as broker: Emitter(broker.bootstrap, ...)``.
    Both keep their data in memory: Apache Kafka in a folder of its own on a memory file system
    (``/dev/shm``, where there is one: it syncs its metadata log to disk at every change, which
    a test suite that makes topics by the hundred waits for) until the broker is closed; Tansu
    in its process. The process is stopped by its own PID (Kafka: SIGTERM, then SIGKILL if it
    has not stopped within a grace period; Tansu: SIGKILL, as it needs) on :meth:`stop`, at
    interpreter exit, and when the parent process dies. Not thread-safe.

    Args:
        kind: ``"kafka"`` (Apache Kafka :data:`~goka.dev.kafka.KAFKA_VERSION`, needs Java 17;
            its jars are fetched with Maven the first time) or ``"tansu"`` (goka-py[broker]).
        port: TCP port for clients; a free one by default. :meth:`restart` reuses it.
        startup_timeout: seconds to wait until it answers metadata requests.
        advertised: ``host:port`` clients are told to connect to (default: its own address);
            e.g. a proxy in front of it, to simulate network outages in tests.
        settings: more broker settings (Apache Kafka's ``server.properties`` names).
        binary: the ``tansu`` executable (Tansu only).

    Raises:
        ConfigurationError: an unknown kind, or settings given to Tansu.
    """

    host = "127.0.0.1"

    def __init__(
        self,
        kind: BrokerKind = "kafka",
        *,
        port: int | None = None,
        startup_timeout: float = 60.0,
        advertised: str | None = None,
        settings: Mapping[str, str] | None = None,
        binary: Path | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ConfigurationError(f"unknown broker kind {kind!r}: expected one of {KINDS}")
        if kind == "tansu" and settings:
            raise ConfigurationError("Tansu takes no broker settings")
        self.kind: BrokerKind = kind
        self.port = port or free_port(self.host)
        #: the ports were picked here, and it never ran: a port another process took between
        #: the pick and the broker's bind is picked again (:data:`PICKS` times at most)
        self._picked = port is None and advertised is None
        self.startup_timeout = startup_timeout
        self.advertised = advertised
        self._settings = dict(settings or {})
        self._binary = binary
        self._workdir = scratch_folder(f"goka-{kind}-")
        self._node: KafkaNode | None = None
        self.name = f"Apache Kafka {KAFKA_VERSION}" if kind == "kafka" else "Tansu"
        self._process = BrokerProcess(
            f"{self.name} broker", self._workdir / "broker.log",
            grace=KAFKA_GRACE if kind == "kafka" else 0,
        )  # fmt: skip
        atexit.register(self.close)

    @property
    def bootstrap(self) -> str:
        """The ``bootstrap.servers`` value for this broker."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs."""
        return self._process.pid

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._process.running

    @property
    def log_path(self) -> Path:
        """The file the broker's output goes to (deleted by :meth:`close`)."""
        return self._process.log

    def start(self) -> EmbeddedBroker:
        """Start the broker and wait until it answers metadata requests.

        Raises:
            BrokerNotFoundError: Java, Maven (to fetch Kafka the first time) or Tansu is missing.
            BrokerError: it could not be fetched or formatted, it exited, or it did not answer
                within ``startup_timeout``; the message holds its last log lines.
        """
        if self.running:
            return self
        for pick in range(PICKS if self._picked else 1):
            if self.kind == "kafka":
                command = self._kafka_command()
            else:
                binary = self._binary or find_tansu_binary()
                self.name = tansu_version(binary)
                self._process.name = f"{self.name} broker"
                listen = self.bootstrap
                command = tansu_command(binary, listen, self.advertised or listen)
            self._process.start(command)
            retry = (f"its command: {' '.join(command)}\nis port {self.port} taken? retry on "
                     f"another: EmbeddedBroker({self.kind!r}, port=...), or goka broker --kind "
                     f"{self.kind} --port ...")  # fmt: skip
            try:
                self._process.wait_ready(self._answers, self.startup_timeout, retry)
                break
            except BrokerError as exc:
                taken = "ddress already in use" in str(exc) or "AddrInUse" in str(exc)
                if not (self._picked and taken) or pick + 1 == PICKS:
                    raise
                self._process.stop()  # (another process took a port picked for it: new ones)
                self.port = free_port(self.host)
                if self._node is not None:  # (its format names its controller's port)
                    shutil.rmtree(self._node.data.parent, ignore_errors=True)
                    self._node = None
        self._picked = False  # (a restart keeps its ports)
        if self.kind == "kafka" and self.advertised is None:  # (a proxy may not be up yet)
            prime_group_coordinator(self.bootstrap, self.startup_timeout)  # as a broker up a while
        return self

    def _kafka_command(self) -> list[str]:
        java, libs = find_java(), kafka_libs()
        if self._node is None:
            voters_port = free_port(self.host)
            self._node = KafkaNode(
                1, self.port, voters_port, f"1@{self.host}:{voters_port}",
                self._workdir / "node", advertised=self.advertised,
                settings=dict(self._settings),
            )  # fmt: skip
        self._node.prepare(libs, java)
        return self._node.command(libs, java)

    def _answers(self, seconds_left: float) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                pass
        except OSError:
            return False
        try:  # Kafka listens before its broker is registered: wait until metadata names it
            cluster = KafkaAdmin(self.bootstrap, timeout=min(2.0, seconds_left)).cluster()
        except BrokerError:
            return False
        return bool(cluster.brokers)

    def stop(self) -> None:
        """Stop the broker; its data stays for :meth:`restart`. Idempotent."""
        self._process.stop()

    def kill(self) -> None:
        """SIGKILL the broker at once, as a crash would. Idempotent."""
        self._process.kill()

    def restart(self, *, keep_data: bool = False) -> EmbeddedBroker:
        """Stop the broker and start it again on the same port: empty (a broker replaced
        without its data), or with the data it had (Apache Kafka only).

        Raises:
            ConfigurationError: ``keep_data`` on Tansu, which keeps nothing.
        """
        if keep_data and self.kind == "tansu":
            raise ConfigurationError("Tansu keeps its data in memory: it cannot restart with it")
        self.stop()
        if not keep_data and self._node is not None:
            shutil.rmtree(self._node.data, ignore_errors=True)
        return self.start()

    def close(self) -> None:
        """Stop the broker and delete its data and log. Idempotent."""
        self._process.stop(grace=0 if self.kind == "tansu" else 5.0)
        shutil.rmtree(self._workdir, ignore_errors=True)
        atexit.unregister(self.close)

    def log_tail(self, lines: int = 30) -> str:
        """Return the last ``lines`` lines the broker printed."""
        return self._process.log_tail(lines)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"EmbeddedBroker({self.name}, {self.bootstrap}, {state})"
