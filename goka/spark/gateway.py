"""Spark's JVM started without running Python between fork and exec.

PySpark starts its JVM with ``Popen(..., preexec_fn=...)`` (to ignore SIGINT there), so
:mod:`subprocess` must ``fork()`` and run Python in the child before ``exec``. In a process
that has gRPC loaded (a web app with a gRPC client, a service that serves a view, a test
session), the child of such a ``fork()`` inherits gRPC's fork handlers and epoll descriptors
and dies now and then before ``exec`` (``epoll_wait error: Bad file descriptor``): PySpark
then fails with ``JAVA_GATEWAY_EXITED``. Seen in ``make test`` when the Go interop tests,
which serve views over gRPC, ran before the first SparkSession of their worker.

:func:`install` replaces the ``Popen`` PySpark calls with one that drops ``preexec_fn`` (so
CPython starts the child with ``vfork()``) and gives the child SIGINT ignored the way
``exec`` keeps it: ignored in the parent for the instant of the start (main thread only;
elsewhere Python's handlers are not touched and the JVM gets SIGINT as its parent's group
does). The JVM stays in its parent's process group and session.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from typing import Any

__all__ = ["install", "start_without_python_in_child"]


def start_without_python_in_child(command: Any, **kwargs: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen`` without ``preexec_fn``, SIGINT ignored in the child."""
    kwargs.pop("preexec_fn", None)
    if threading.current_thread() is not threading.main_thread():
        return subprocess.Popen(command, **kwargs)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return subprocess.Popen(command, **kwargs)
    finally:
        signal.signal(signal.SIGINT, previous)


def install() -> None:
    """Make PySpark start its JVM with :func:`start_without_python_in_child`."""
    from pyspark import java_gateway

    java_gateway.Popen = start_without_python_in_child  # type: ignore[assignment,attr-defined]
