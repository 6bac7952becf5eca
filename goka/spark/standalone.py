"""A Spark standalone cluster on 127.0.0.1, started from the pyspark install (development,
tests and benchmarks; not for production).

The pyspark wheel carries the Spark distribution, so a master and workers can run locally to try
what a real cluster changes: executors in their own processes with their own disks, tasks of a
partition landing on any of them.

    with StandaloneCluster(workers=2) as cluster:
        spark = cluster.session("my-app")        # or: spark-submit --master cluster.master
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import pyspark
from pyspark.sql import SparkSession

from goka.errors import ConfigurationError

__all__ = ["StandaloneCluster"]

SPARK_HOME = Path(pyspark.__file__).parent
_SPARK_CLASS = str(SPARK_HOME / "bin" / "spark-class")


class StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores each, on 127.0.0.1.

    Args:
        workers: how many workers (each runs one executor per application).
        cores: cores per worker.
        memory: memory per worker and application (Spark syntax, ``1g``).
        applications: how many applications may hold executors at once (each worker offers
            ``cores`` and ``memory`` that many times; an application takes ``cores`` and
            ``memory`` of each worker).
        directory: logs and the workers' work directories (each executor's own disk).
        python_path: added to the executors' ``PYTHONPATH`` (where your graphs live).
        start_timeout: seconds to wait for the workers to register.
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        cores: int = 1,
        memory: str = "1g",
        applications: int = 1,
        directory: str | Path | None = None,
        python_path: str | Path | None = None,
        start_timeout: float = 120.0,
    ) -> None:
        self.workers, self.cores, self.memory = workers, cores, memory
        if applications < 1:
            raise ConfigurationError(f"applications={applications}: at least 1")
        self.applications = applications
        _times(memory, applications)  # (a memory Spark cannot read fails here)
        self.directory = Path(directory or tempfile.mkdtemp(prefix="goka-spark-cluster-"))
        self.python_path = str(python_path or Path.cwd())
        self.start_timeout = start_timeout
        self.master = ""
        self._ui = 0
        self._processes: list[subprocess.Popen[bytes]] = []
        self._workers: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def env(self) -> dict[str, str]:
        """The environment the cluster and ``spark-submit`` run with."""
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
               "PYSPARK_PYTHON": sys.executable}  # fmt: skip
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        return env

    def spark_submit(self, *args: str) -> list[str]:
        """A ``spark-submit`` command line for this cluster (one core per executor)."""
        return [
            str(SPARK_HOME / "bin" / "spark-submit"), "--master", self.master,
            "--total-executor-cores", str(self.workers * self.cores),
            "--executor-cores", str(self.cores), "--executor-memory", self.memory,
            *(item for key, value in self.conf().items() for item in ("--conf", f"{key}={value}")),
            *args,
        ]  # fmt: skip

    def conf(self) -> dict[str, str]:
        """Spark settings an application on this cluster needs."""
        return {
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            "spark.executorEnv.PYTHONPATH": self.python_path,
            "spark.ui.enabled": "false",
        }

    def session_conf(self) -> dict[str, str]:
        """Settings of a session on the cluster (``spark.master`` included): one executor of
        ``cores`` cores per worker."""
        return {**self.conf(), "spark.master": self.master, "spark.executor.cores": str(self.cores),
                "spark.cores.max": str(self.workers * self.cores),
                "spark.executor.memory": self.memory, "spark.speculation": "false",
                "spark.python.worker.reuse": "true"}  # fmt: skip

    def session(self, app: str, **conf: Any) -> SparkSession:
        """A session of this process on the cluster (see :meth:`session_conf`)."""
        builder = SparkSession.builder.appName(app)
        for key, value in {**self.session_conf(), **conf}.items():
            builder = builder.config(key, str(value))
        return builder.getOrCreate()

    def start(self) -> StandaloneCluster:
        """Start the master and the workers; wait until every worker has registered.

        Raises:
            ConfigurationError: the workers did not register in time (see the logs in
                ``directory``).
        """
        port, self._ui = _free_port(), _free_port()
        self.master = f"spark://127.0.0.1:{port}"
        self._spawn("master", [
            _SPARK_CLASS, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(port), "--webui-port", str(self._ui),
        ])  # fmt: skip
        for n in range(1, self.workers + 1):
            self._spawn_worker(n)
        self._await_workers(self.workers)
        return self

    def kill_worker(self, number: int) -> None:
        """SIGKILL worker ``number`` (from 1) with its executors and their Python workers, as
        when its machine is lost; the master learns it at once (its connection drops)."""
        process = self._workers.pop(number)
        _kill(process)
        self._processes.remove(process)
        self._await_workers(len(self._workers))

    def start_worker(self, number: int) -> None:
        """Start worker ``number`` again, its work directory as it was left (its machine back):
        wait until it registered.

        Raises:
            ConfigurationError: it still runs, or did not register in time.
        """
        if number in self._workers:
            raise ConfigurationError(f"worker {number} still runs: kill_worker({number}) first")
        self._spawn_worker(number)
        self._await_workers(len(self._workers))

    def _spawn_worker(self, number: int) -> None:
        self._workers[number] = self._spawn(f"worker-{number}", [
            _SPARK_CLASS, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
            "--cores", str(self.cores * self.applications),
            "--memory", _times(self.memory, self.applications),
            "--webui-port", str(_free_port()),
            "--work-dir", str(self.directory / f"worker-{number}"), self.master,
        ])  # fmt: skip

    def _await_workers(self, count: int) -> None:
        """Wait until the master counts ``count`` workers alive."""
        deadline = time.monotonic() + self.start_timeout
        while self.alive_workers() != count:
            if time.monotonic() > deadline:
                self.stop()
                raise ConfigurationError(
                    f"Spark workers did not register within {self.start_timeout:g}s; "
                    f"logs in {self.directory}"
                )
            time.sleep(0.2)

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        with (self.directory / f"{name}.log").open("a") as log:
            process = subprocess.Popen(
                command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self._processes.append(process)
        return process

    def alive_workers(self) -> int:
        """Workers registered with the master (0 while it starts)."""
        try:
            url = f"http://127.0.0.1:{self._ui}/json/"
            with urllib.request.urlopen(url, timeout=2) as answer:
                return int(json.load(answer).get("aliveworkers", 0))
        except (OSError, ValueError):  # not up yet, or the UI answered before it was ready
            return 0

    def stop(self) -> None:
        """Kill the master and workers (and their executors). Idempotent."""
        for process in self._processes:
            _kill(process)
        self._processes, self._workers = [], {}

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``process`` and its process group (what it started); wait until it exited."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _times(memory: str, times: int) -> str:
    """``times`` as much ``memory`` (Spark syntax: ``512m`` twice is ``1024m``).

    Raises:
        ConfigurationError: ``memory`` is not a whole number with a unit.
    """
    found = re.fullmatch(r"(\d+)([kmgt]b?)?", memory.strip().lower())
    if found is None:
        raise ConfigurationError(f"worker memory {memory!r}: expected a whole number and a "
                                 f"unit, such as 1g or 512m")  # fmt: skip
    return f"{int(found.group(1)) * times}{found.group(2) or ''}"
