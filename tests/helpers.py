"""Small helpers shared by the tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

from goka import Emitter
from goka.codec import Codec


def wait_for(condition: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    """Return ``condition()`` once it is truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def produce(brokers: str, topic: str, codec: Codec[Any], items: Iterable[tuple[str, Any]]) -> int:
    """Write ``(key, value)`` pairs (None values are tombstones); return how many."""
    count = 0
    with Emitter(brokers, topic, codec) as emitter:
        for key, value in items:
            emitter.emit(key, value)
            count += 1
        assert emitter.flush(60) == 0
    return count


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (nothing listens on it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_status(url: str) -> int:
    """The status a GET of ``url`` answers with (0: nothing answered)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


class TrackedStores:
    """A storage builder (``leveldb_store`` unless given another) that knows which of its
    stores are open and how often each was flushed: tests see a worker keep, flush, hand over
    or close a store through the builder, the seam a processor takes its storage from."""

    def __init__(self, inner: Any = None) -> None:
        from goka.processing.builders import leveldb_store

        self.inner = inner or leveldb_store
        self.opened: dict[Any, int] = {}
        self.flushes: dict[Any, int] = {}

    def __call__(self, path: Any, table: str) -> Any:
        storage = self.inner(path, table)
        self.opened[path] = self.opened.get(path, 0) + 1
        return _Tracked(storage, path, self)

    def open(self) -> list[Any]:
        """The paths of the stores open now."""
        return sorted(p for p, n in self.opened.items() if n > 0)


class _Tracked:
    def __init__(self, inner: Any, path: Any, stores: TrackedStores) -> None:
        self.inner, self.path, self.stores, self._closed = inner, path, stores, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def flush(self) -> None:
        self.inner.flush()
        self.stores.flushes[self.path] = self.stores.flushes.get(self.path, 0) + 1

    def close(self) -> None:
        self.inner.close()
        if not self._closed:
            self._closed = True
            self.stores.opened[self.path] -= 1


#: The start of a script whose process is busy with gRPC (a server, three threads dialling it),
#: as a web app with a gRPC client is: a ``fork()`` from it crashed children now and then.
GRPC_BUSY = """
import sys, threading, time
from concurrent import futures
import grpc

server = grpc.server(futures.ThreadPoolExecutor(4))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
channel = grpc.insecure_channel(f"127.0.0.1:{port}")

def busy():
    while True:
        try:
            grpc.channel_ready_future(channel).result(timeout=1)
        except grpc.FutureTimeoutError:
            pass
        time.sleep(0.001)

for _ in range(3):
    threading.Thread(target=busy, daemon=True).start()
"""
