"""Run views of one or more tables behind a gRPC view server and the HTTP port until stopped
(``goka view serve``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goka.codec import Codec
from goka.errors import GokaError
from goka.grpc.server import TlsConfig, ViewServer
from goka.kafka.config import Brokers
from goka.view import View, ViewState
from goka.web.browser import TableBrowser
from goka.web.http import HttpService
from goka.web.monitor import ViewMonitor
from goka.web.tables import TableReads

__all__ = ["ServeConfig", "serve"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeConfig:
    """What ``goka view serve`` runs."""

    brokers: Brokers
    tables: Sequence[tuple[str, Codec[Any]]]
    path: Path | None = None
    address: str = "127.0.0.1:0"
    http_host: str = "127.0.0.1"
    http_port: int | None = None  # None: no HTTP port
    tls: TlsConfig | None = None
    allow_stale_reads: bool = False
    max_request_bytes: int = 1 << 20
    max_streams: int = 16
    stream_idle_timeout: float = 10.0
    grace: float = 5.0
    kafka_config: dict[str, Any] = field(default_factory=dict)


def serve(config: ServeConfig, stop: threading.Event) -> int:
    """Serve until ``stop`` is set, then shut down gracefully. Returns an exit code.

    Views start first; gRPC health says NOT_SERVING and ``/readyz`` 503 until every view
    recovered (and again while one rebuilds or reconnects). ``/healthz`` is 503 once a view
    failed, and the command then exits with 1. At ``stop`` the server takes no new requests,
    gives running ones ``grace`` seconds, then the views close their stores cleanly.

    Raises:
        GokaError: why a view failed (``BrokerError``: no broker answered), or a port taken.
    """
    views = [
        View(config.brokers, table, codec, allow_stale_reads=config.allow_stale_reads,
             path=None if config.path is None else config.path / table, **config.kafka_config)
        for table, codec in config.tables
    ]  # fmt: skip
    server = ViewServer(views, address=config.address, tls=config.tls,
                        max_request_bytes=config.max_request_bytes,
                        max_streams=config.max_streams,
                        stream_idle_timeout=config.stream_idle_timeout)  # fmt: skip
    http: HttpService | None = None
    monitor = ViewMonitor(lambda: views)
    try:
        if config.http_port is not None:
            by_table = {v.table: v for v in views}
            browser = TableBrowser(lambda: by_table, monitor.links())
            http = HttpService(
                config.http_host, config.http_port,
                alive=lambda: all(v.state is not ViewState.FAILED for v in views),
                ready=lambda: all(v.recovered and v.state is ViewState.RUNNING for v in views),
                routes=[TableReads(by_table).handle, browser.handle, monitor.handle],
                tls=None if config.tls is None else (
                    str(config.tls.cert_file), str(config.tls.key_file),
                    None if config.tls.client_ca_file is None else str(config.tls.client_ca_file)),
            )  # fmt: skip
        for view in views:
            view.start()
        server.start()
        monitor.start()
        print(f"view server listening on {server.address}", flush=True)
        if http is not None:
            print(f"http {http.url} (monitor /, table browser /browse, /tables, /metrics, "
                  "/healthz, /readyz)", flush=True)  # fmt: skip
        while not stop.wait(0.5):
            failed = [v for v in views if v.state is ViewState.FAILED]
            if failed:  # (the command says why in one line, as any error of its own)
                log.error("views failed: %s", ", ".join(v.table for v in failed))
                if isinstance(failed[0].error, GokaError):
                    raise failed[0].error
                return 1
        log.info("stopping: %.0f s for running requests", config.grace)
        return 0
    finally:
        monitor.close()
        server.stop(grace=config.grace)
        for view in views:
            view.close()
        if http is not None:
            http.close()
