"""Run views of one or more tables behind a gRPC view server until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import start_http_server

from goka.codec import Codec
from goka.grpc.server import TlsConfig, ViewServer
from goka.kafka.config import Brokers
from goka.view import View

__all__ = ["ServeConfig", "serve"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeConfig:
    """What ``goka view serve`` runs."""

    brokers: Brokers
    tables: Sequence[tuple[str, Codec[Any]]]
    path: Path | None = None
    address: str = "127.0.0.1:0"
    metrics_port: int | None = None
    tls: TlsConfig | None = None
    allow_stale_reads: bool = False
    max_request_bytes: int = 1 << 20
    max_streams: int = 16
    stream_idle_timeout: float = 10.0
    kafka_config: dict[str, Any] = field(default_factory=dict)


def serve(
    config: ServeConfig,
    *,
    ready: threading.Event | None = None,
    views_out: list[View[Any]] | None = None,
) -> int:
    """Serve until SIGTERM or SIGINT, then shut down gracefully. Returns an exit code.

    Views start first; the server reports NOT_SERVING in its health service until they recover.
    ``ready`` is set once serving; ``views_out`` receives the views (for health checks).
    On a signal the server stops taking requests, lets running ones finish, then the views close
    their LevelDB storage cleanly.
    """
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    views = [
        View(config.brokers, table, codec, allow_stale_reads=config.allow_stale_reads,
             path=None if config.path is None else config.path / table, **config.kafka_config)
        for table, codec in config.tables
    ]  # fmt: skip
    if views_out is not None:
        views_out.extend(views)
    server = ViewServer(views, address=config.address, tls=config.tls,
                        max_request_bytes=config.max_request_bytes,
                        max_streams=config.max_streams,
                        stream_idle_timeout=config.stream_idle_timeout)  # fmt: skip
    try:
        if config.metrics_port is not None:
            start_http_server(
                config.metrics_port, addr="0.0.0.0"
            )  # all interfaces: scraped remotely
        for view in views:
            view.start()
        server.start()
        print(f"view server listening on {server.address}", flush=True)
        if ready is not None:
            ready.set()
        while not stop.wait(0.5):
            failed = [v for v in views if v.state.value == "failed"]
            if failed:
                log.error("views failed: %s", ", ".join(v.table for v in failed))
                return 1
        log.info("signal received: shutting down")
        return 0
    finally:
        server.stop(grace=5.0)
        for view in views:
            view.close()
