"""The gRPC view service: serves the tables of one or more views to other services.

Errors map to status codes: an unknown table is NOT_FOUND; a malformed or oversized request is
INVALID_ARGUMENT; a view that has not recovered, is rebuilding or has failed is UNAVAILABLE (with
the trailing metadata ``goka-reason``, so clients tell it from a server they cannot reach); a scan
beyond ``max_streams`` is RESOURCE_EXHAUSTED. The standard gRPC health service reports each table
(service name ``table/<name>``) and the whole server (``""``) as SERVING once its views recovered;
server reflection lists the services.

Streams cannot take the service down: at most ``max_streams`` scans run at once, fewer than the
server's threads, so Get, Info and health always have threads left; a scan whose client reads
nothing for ``stream_idle_timeout`` seconds, or that runs longer than ``max_stream_seconds``, is
cancelled by the server (a stalled stream holds a thread and one message, never more).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from goka._optional import missing_extra

try:
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise missing_extra("grpcio-health-checking", "view", "the gRPC view server") from exc

from goka.errors import ConfigurationError, PortTakenError
from goka.grpc.client import REASON
from goka.grpc.metrics import MetricsInterceptor, active_streams
from goka.grpc.v1 import view_pb2, view_pb2_grpc
from goka.keys import key_bytes
from goka.view import View, ViewNotReadyError, ViewState

__all__ = ["TlsConfig", "ViewServer"]

log = logging.getLogger(__name__)
SERVICE = view_pb2.DESCRIPTOR.services_by_name["ViewService"].full_name
#: Most entries, and about the most bytes, in one message of a scan.
_SCAN_BATCH, _SCAN_BYTES = 500, 512 * 1024


@dataclass(frozen=True)
class TlsConfig:
    """Server TLS: PEM files of the certificate chain and its private key; with
    ``client_ca_file``, mutual TLS: only clients presenting a certificate signed by that CA
    are served (the others fail the handshake)."""

    cert_file: str | Path
    key_file: str | Path
    client_ca_file: str | Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        """Return the server credentials.

        Raises:
            ConfigurationError: a file cannot be read.
        """
        try:
            pair = (Path(self.key_file).read_bytes(), Path(self.cert_file).read_bytes())
            ca = None if self.client_ca_file is None else Path(self.client_ca_file).read_bytes()
        except OSError as exc:
            raise ConfigurationError(f"TLS: cannot read {exc.filename}: {exc.strerror}") from exc
        return grpc.ssl_server_credentials(
            [pair], root_certificates=ca, require_client_auth=ca is not None
        )


class _Streams:
    """The scans running now: admits at most ``limit``, cancels those that stall or last too
    long (a thread checks every second)."""

    def __init__(self, limit: int, idle: float, longest: float) -> None:
        self.limit, self.idle, self.longest = limit, idle, longest
        #: Scans building a message at the same time: the others wait without the GIL, so
        #: however many stream, a Get finds the interpreter free within a few milliseconds.
        self.building = threading.BoundedSemaphore(2)
        self._lock = threading.Lock()
        self._running: dict[int, tuple[grpc.ServicerContext, float, float]] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="goka-grpc-streams", daemon=True)

    def admit(self, context: grpc.ServicerContext) -> bool:
        with self._lock:
            if len(self._running) >= self.limit:
                return False
            now = time.monotonic()
            self._running[id(context)] = (context, now, now)
            active_streams().set(len(self._running))
            return True

    def progress(self, context: grpc.ServicerContext) -> None:
        """The client took the previous message."""
        with self._lock:
            found = self._running.get(id(context))
            if found is not None:
                self._running[id(context)] = (context, found[1], time.monotonic())

    def release(self, context: grpc.ServicerContext) -> None:
        with self._lock:
            self._running.pop(id(context), None)
            active_streams().set(len(self._running))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        while not self._stopped.wait(min(1.0, self.idle / 2)):
            now = time.monotonic()
            with self._lock:
                running = list(self._running.values())
            for context, started, touched in running:
                if now - touched > self.idle:
                    why = f"its client read nothing for {self.idle:g}s"
                elif now - started > self.longest:
                    why = f"it ran longer than {self.longest:g}s"
                else:
                    continue
                log.warning("scan from %s cancelled: %s", context.peer(), why)
                self.release(context)
                context.cancel()


class _Servicer(view_pb2_grpc.ViewServiceServicer):  # type: ignore[misc]  # generated, untyped
    def __init__(
        self, views: dict[str, View[Any]], max_request_bytes: int, max_keys: int, streams: _Streams
    ) -> None:
        self._views = views
        self._max_request_bytes = max_request_bytes
        self._max_keys = max_keys
        self._streams = streams

    def _view(self, request: Any, context: grpc.ServicerContext) -> View[Any]:
        size, limit = request.ByteSize(), self._max_request_bytes
        if size > limit:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"request of {size} bytes exceeds the limit of {limit}",
            )
        if not request.table:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "table is required")
        view = self._views.get(request.table)
        if view is None:
            served = ", ".join(sorted(self._views))
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"table {request.table!r} is not served here (served: {served})",
            )
        return view

    def Get(self, request: Any, context: grpc.ServicerContext) -> Any:  # gRPC's method names
        view = self._view(request, context)
        value = _read(context, view.get_raw, request.key)
        if value is None:
            return view_pb2.GetResponse(found=False, codec=view.codec.name)
        return view_pb2.GetResponse(found=True, value=value, codec=view.codec.name)

    def GetMany(self, request: Any, context: grpc.ServicerContext) -> Any:
        view = self._view(request, context)
        if len(request.keys) > self._max_keys:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{len(request.keys)} keys exceed the limit of {self._max_keys}",
            )
        entries = []
        for key in request.keys:
            value = _read(context, view.get_raw, key)
            entries.append(view_pb2.Entry(key=key, found=value is not None, value=value or b""))
        return view_pb2.GetManyResponse(entries=entries, codec=view.codec.name)

    def Scan(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        view = self._view(request, context)
        if not self._streams.admit(context):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self._streams.limit} scans are streaming already (the server's limit): "
                "try again later",
            )
        try:
            yield from self._scan(view, request, context)
        finally:
            self._streams.release(context)

    def _scan(self, view: View[Any], request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        items = _read(context, lambda: view.items_raw(
            prefix=request.prefix or None, start=request.start or None,
            stop=request.stop if request.HasField("stop") else None,
            reverse=request.reverse, limit=request.limit or None,
        ))  # fmt: skip
        rows = _checked(context, items)
        while context.is_active():  # else the client cancelled: stop reading LevelDB
            with self._streams.building:
                batch = _take(rows)
            if not batch:
                return
            yield view_pb2.ScanResponse(entries=batch, codec=view.codec.name)
            self._streams.progress(context)

    def Info(self, request: Any, context: grpc.ServicerContext) -> Any:
        views = [self._view(request, context)] if request.table else list(self._views.values())
        return view_pb2.InfoResponse(tables=[_table_info(v) for v in views])


def _read(context: grpc.ServicerContext, read: Callable[..., Any], *args: Any) -> Any:
    try:
        return read(*args)
    except ViewNotReadyError as exc:  # the view says so for damaged stores too
        _unavailable(context, exc)


def _take(rows: Iterator[tuple[str, bytes]]) -> list[Any]:
    """The entries of the next message of a scan: up to ``_SCAN_BATCH``, about
    ``_SCAN_BYTES``."""
    batch: list[Any] = []
    size = 0
    for key, value in rows:
        batch.append(view_pb2.Entry(key=key_bytes(key), found=True, value=value))
        size += len(key) + len(value)
        if len(batch) >= _SCAN_BATCH or size >= _SCAN_BYTES:
            break
    return batch


def _checked(context: grpc.ServicerContext, items: Iterator[Any]) -> Iterator[Any]:
    try:
        yield from items
    except ViewNotReadyError as exc:
        _unavailable(context, exc)


def _unavailable(context: grpc.ServicerContext, error: Exception) -> None:
    """A table that cannot answer now (not recovered, rebuilding, failed)."""
    context.set_trailing_metadata(((REASON, "not-ready"),))
    context.abort(grpc.StatusCode.UNAVAILABLE, str(error))


def _table_info(view: View[Any]) -> Any:
    stats = view.stats()
    partitions = [
        view_pb2.PartitionInfo(
            partition=p, offset=s.offset, high_watermark=s.high_watermark, lag=s.lag
        )
        for p, s in stats.partitions.items()
    ]
    return view_pb2.TableInfo(
        table=view.table,
        state=stats.state.value,
        recovered=stats.recovered,
        codec=view.codec.name,
        applied=stats.applied,
        partitions=partitions,
    )


class ViewServer:
    """Serves views over gRPC (with health and reflection). A context manager.

    The server does not start or close the views: start them before, close them after (the
    ``goka view serve`` command does both).

    Args:
        views: the views to serve, one per table.
        address: ``host:port`` to listen on; port 0 picks a free port (see :attr:`port`).
        max_request_bytes: larger requests are refused with INVALID_ARGUMENT.
        max_keys: most keys in one GetMany.
        tls: serve TLS (and with a client CA, mutual TLS) instead of plaintext.
        max_workers: threads handling requests.
        max_streams: most scans at once (fewer than ``max_workers``: the rest answer the
            other calls); more are refused with RESOURCE_EXHAUSTED.
        stream_idle_timeout: a scan whose client reads nothing for this long is cancelled.
        max_stream_seconds: a scan running longer is cancelled.

    Raises:
        ConfigurationError: two views of one table, or limits that do not fit.
        PortTakenError: the address cannot be bound (another process listens on it).
    """

    def __init__(
        self,
        views: Iterable[View[Any]],
        *,
        address: str = "127.0.0.1:0",
        max_request_bytes: int = 1 << 20,
        max_keys: int = 10_000,
        tls: TlsConfig | None = None,
        max_workers: int = 32,
        max_streams: int = 16,
        stream_idle_timeout: float = 10.0,
        max_stream_seconds: float = 600.0,
    ) -> None:
        if not 0 < max_streams < max_workers:
            raise ConfigurationError(
                f"max_streams must be at least 1 and below max_workers ({max_workers}), "
                f"got {max_streams}: threads must be left for Get and health checks"
            )
        if stream_idle_timeout <= 0 or max_stream_seconds <= 0:
            raise ConfigurationError("stream_idle_timeout and max_stream_seconds must be > 0")
        self._streams = _Streams(max_streams, stream_idle_timeout, max_stream_seconds)
        self.views: dict[str, View[Any]] = {}
        for view in views:
            if view.table in self.views:
                raise ConfigurationError(f"table {view.table!r} is served twice")
            self.views[view.table] = view
        # (without so_reuseport 0, a second server on a taken port would share it silently)
        options = [("grpc.max_receive_message_length", 4 * max_request_bytes + 1024),
                   ("grpc.so_reuseport", 0)]  # fmt: skip
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="goka-grpc"),
            interceptors=[MetricsInterceptor()], options=options,
        )  # fmt: skip
        view_pb2_grpc.add_ViewServiceServicer_to_server(
            _Servicer(self.views, max_request_bytes, max_keys, self._streams), self._server
        )
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        reflection.enable_server_reflection(
            (SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), self._server
        )
        try:
            if tls is None:
                self.port = self._server.add_insecure_port(address)
            else:
                self.port = self._server.add_secure_port(address, tls.credentials())
        except RuntimeError as exc:
            raise PortTakenError(f"gRPC port {address} cannot be listened on (taken by another "
                                 f"process?): {exc}", "grpc") from exc  # fmt: skip
        self.address = f"{address.rpartition(':')[0]}:{self.port}"
        self._stopped = threading.Event()
        for view in self.views.values():
            view.add_state_listener(self._on_state_change)
        self._update_health()

    def _on_state_change(self, old: ViewState, new: ViewState) -> None:
        self._update_health()

    def _update_health(self) -> None:
        serving = health_pb2.HealthCheckResponse.SERVING
        not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
        ready = True
        for table, view in self.views.items():
            ok = view.recovered and view.state in (ViewState.RUNNING, ViewState.RECONNECTING)
            ready &= ok
            self._health.set(f"table/{table}", serving if ok else not_serving)
        self._health.set("", serving if ready else not_serving)
        self._health.set(SERVICE, serving if ready else not_serving)

    def start(self) -> ViewServer:
        """Start serving; returns at once."""
        self._server.start()
        self._streams.start()
        log.info("view server on %s serving %s", self.address, ", ".join(self.views))
        return self

    def stop(self, grace: float = 5.0) -> None:
        """Refuse new requests, let running ones finish for ``grace`` seconds. Idempotent."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._health.enter_graceful_shutdown()
        self._server.stop(grace).wait()
        self._streams.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server stops; return False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._stopped.wait(0.5):
            if deadline is not None and time.monotonic() > deadline:
                return False
        return True

    def __enter__(self) -> ViewServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
