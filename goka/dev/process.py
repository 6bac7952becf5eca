"""A broker's process: started without running Python between fork and exec, awaited until it
answers, stopped by its own PID, its output kept in a log file.

Why no ``preexec_fn``: with one, :mod:`subprocess` must ``fork()`` and run Python in the child
before ``exec``. A process that has gRPC loaded (a web app with a gRPC client, a test session
that served a view) has fork handlers and threads of gRPC's; the child of such a ``fork()``
crashes now and then before it reaches ``exec`` (SIGSEGV or SIGABRT, its log holding only
gRPC's ``epoll_wait error: Bad file descriptor``). Without ``preexec_fn`` CPython starts the
child with ``vfork()``, which runs no fork handlers. The broker still dies with its parent:
``setpriv --pdeathsig KILL`` (util-linux) sets that for it, where setpriv is found.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from goka.errors import BrokerError

__all__ = ["BrokerProcess", "Started", "free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port nothing listens on now (the OS's choice)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class Started:
    """A development server as a context manager: ``with Server() as s`` starts it (its
    ``start()`` returns it) and stops it (its ``stop()``)."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _dies_with_parent(command: Sequence[str]) -> list[str]:
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *command] if setpriv else list(command)


class BrokerProcess:
    """One broker process writing to ``log``. Not thread-safe.

    Args:
        name: what it is, for errors (``"Apache Kafka 4.4.0 broker"``).
        log: the file its standard output and error go to (appended to).
        grace: seconds :meth:`stop` waits after SIGTERM before SIGKILL (0: SIGKILL at once).
    """

    def __init__(self, name: str, log: Path, *, grace: float) -> None:
        self.name, self.log, self.grace = name, log, grace
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The process's id while it runs."""
        return self._process.pid if self.running and self._process is not None else None

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        """Start ``command`` (it must not run yet)."""
        with self.log.open("ab") as out:
            self._process = subprocess.Popen(
                _dies_with_parent(command), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=None if env is None else dict(env),
                start_new_session=True,  # Ctrl-C in a terminal reaches the parent, not the broker
            )  # fmt: skip

    def wait_ready(self, ready: Callable[[float], bool], timeout: float, retry: str) -> None:
        """Call ``ready(seconds_left)`` until it returns True.

        Raises:
            BrokerError: the process exited, or was not ready within ``timeout`` seconds (it is
                stopped then); the message holds its last log lines and ``retry``.
        """
        deadline = time.monotonic() + timeout
        while True:
            process = self._process
            if process is None or process.poll() is not None:
                code = None if process is None else process.returncode
                raise BrokerError(f"the {self.name} exited with code {code} at start:\n"
                                  f"{self.log_tail()}\n{retry}")  # fmt: skip
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise BrokerError(f"the {self.name} was not ready within {timeout:g}s:\n"
                                  f"{self.log_tail()}\n{retry}")  # fmt: skip
            if ready(left):
                return
            time.sleep(0.05)

    def stop(self, *, grace: float | None = None) -> None:
        """Stop the process: SIGTERM, then SIGKILL after ``grace`` seconds (default: the one
        given when made). Idempotent."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        grace = self.grace if grace is None else grace
        if grace > 0:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(grace)
                return
            except subprocess.TimeoutExpired:
                pass
        process.kill()
        process.wait()

    def kill(self) -> None:
        """SIGKILL the process at once, as a crash would. Idempotent."""
        self.stop(grace=0)

    def log_tail(self, lines: int = 30) -> str:
        """Return the last ``lines`` lines of its log."""
        try:
            with self.log.open("rb") as f:
                f.seek(max(0, os.path.getsize(self.log) - 256 * lines))
                text = f.read().decode(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
