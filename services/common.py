"""What every service shares: settings from flags or environment, JSON logs, and one HTTP port
serving ``/metrics`` (Prometheus), ``/healthz`` and what the service adds (table reads)."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from goka.web import Response

__all__ = ["env", "json_logging", "serve_http"]


def env(name: str, default: str | None = None) -> str | None:
    """The value of ``$GOKA_<NAME>``, or ``default``."""
    return os.environ.get(f"GOKA_{name}", default)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def json_logging(level: str | None = None) -> None:
    """Log one JSON object per line to stderr."""
    handler = logging.StreamHandler()
    handler.setFormatter(_JsonFormatter())
    logging.basicConfig(level=level or env("LOG_LEVEL", "INFO"), handlers=[handler], force=True)
    logging.getLogger("py4j").setLevel(logging.WARNING)


def serve_http(
    port: int,
    healthy: Callable[[], bool],
    *,
    routes: Sequence[Callable[[str], Response | None]] = (),
    host: str = "0.0.0.0",  # all interfaces: probed remotely
) -> ThreadingHTTPServer:
    """Serve ``/metrics``, ``/healthz`` (200 when ``healthy()``, else 503) and whatever one
    of ``routes`` answers (each gets the request target; None: not its path) on a thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            routed = next((r for r in (route(self.path) for route in routes) if r), None)
            if routed is not None:
                status, kind, body = routed
            elif self.path.startswith("/metrics"):
                body, status, kind = generate_latest(), 200, CONTENT_TYPE_LATEST
            elif self.path.startswith("/healthz"):
                ok = healthy()
                body = json.dumps({"status": "ok" if ok else "unavailable"}).encode()
                status, kind = (200 if ok else 503), "application/json"
            else:
                body, status, kind = b"not found", 404, "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # probes every few seconds would flood the log

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="goka-http", daemon=True).start()
    return server
