"""Prometheus metrics of gRPC requests: counts by method and status, latency by method."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from prometheus_client import Counter, Gauge, Histogram

__all__ = ["MetricsInterceptor", "active_streams"]

_LOCK = threading.Lock()
_FAMILIES: dict[str, Any] = {}


def _families() -> dict[str, Any]:
    with _LOCK:
        if not _FAMILIES:
            _FAMILIES["requests"] = Counter(
                "goka_grpc_requests", "gRPC requests handled", ["method", "code"]
            )
            _FAMILIES["latency"] = Histogram(
                "goka_grpc_request_duration_seconds", "Time to handle a gRPC request", ["method"],
                buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                         0.25, 0.5, 1.0, 2.5),
            )  # fmt: skip
            _FAMILIES["streams"] = Gauge(
                "goka_grpc_active_streams", "Scans streaming now (see ViewServer max_streams)"
            )
    return _FAMILIES


def active_streams() -> Gauge:
    """The gauge of scans streaming now."""
    return _families()["streams"]  # type: ignore[no-any-return]


def _code(context: grpc.ServicerContext, default: str) -> str:
    code = context.code()  # type: ignore[attr-defined]  # grpcio has it; the stubs lack it
    return code.name if isinstance(code, grpc.StatusCode) else default


class MetricsInterceptor(grpc.ServerInterceptor):
    """Counts every request by method and status code and times it."""

    def __init__(self) -> None:
        families = _families()
        self._requests, self._latency = families["requests"], families["latency"]

    def _record(self, method: str, code: str, started: float) -> None:
        self._requests.labels(method, code).inc()
        self._latency.labels(method).observe(time.perf_counter() - started)

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        method = details.method.rsplit("/", 1)[-1]
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(method, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    def _unary(self, method: str, inner: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def handle(request: Any, context: grpc.ServicerContext) -> Any:
            started, code = time.perf_counter(), "OK"
            try:
                return inner(request, context)
            except Exception:
                code = _code(context, "UNKNOWN")
                raise
            finally:
                self._record(method, code if code != "OK" else _code(context, "OK"), started)

        return handle

    def _stream(
        self, method: str, inner: Callable[[Any, Any], Iterator[Any]]
    ) -> Callable[[Any, Any], Iterator[Any]]:
        def handle(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            started, code = time.perf_counter(), "OK"
            try:
                yield from inner(request, context)
                if not context.is_active():
                    code = "CANCELLED"
            except Exception:
                code = _code(context, "UNKNOWN")
                raise
            except GeneratorExit:  # the client went away mid-stream
                code = "CANCELLED"
                raise
            finally:
                self._record(method, code if code != "OK" else _code(context, "OK"), started)

        return handle
