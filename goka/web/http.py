"""The HTTP port of every goka service: ``/metrics`` (Prometheus), ``/healthz`` (the process is
alive and not failed), ``/readyz`` (recovered and serving: a load balancer may send traffic) and
whatever routes the service adds (table reads)."""

from __future__ import annotations

import errno
import json
import ssl
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from goka.errors import ConfigurationError, PortTakenError
from goka.web.tables import Response

__all__ = ["HttpService", "Route"]

#: A route gets the request target and answers, or returns None if the path is not its own.
Route = Callable[[str], Response | None]


def _status(ok: bool) -> Response:
    body = json.dumps({"status": "ok" if ok else "unavailable"}).encode()
    return Response(200 if ok else 503, "application/json", body)


class HttpService:
    """Serves the service's HTTP endpoints on a thread until :meth:`close`.

    Args:
        host: address to listen on (127.0.0.1 by default; 0.0.0.0 to be probed and scraped
            from other machines, as in a container).
        port: port (0: any free port; see :attr:`port`).
        alive: answers ``/healthz`` (200 if true, else 503).
        ready: answers ``/readyz`` likewise.
        routes: more endpoints, asked in order before the built-in ones.
        tls: ``(cert_file, key_file, client_ca_file or None)``: serve HTTPS with the service's
            certificate; with a client CA, only clients presenting a certificate it signed.

    Raises:
        ConfigurationError: a TLS file cannot be read or does not hold what it should.
        PortTakenError: another process listens on the port.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        alive: Callable[[], bool] = lambda: True,
        ready: Callable[[], bool] = lambda: True,
        routes: Sequence[Route] = (),
        tls: tuple[str, str, str | None] | None = None,
    ) -> None:
        builtin: dict[str, Callable[[], Response]] = {
            "/metrics": _metrics,
            "/healthz": lambda: _status(alive()),
            "/readyz": lambda: _status(ready()),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                routed = next((r for r in (route(self.path) for route in routes) if r), None)
                if routed is None:
                    answer = builtin.get(self.path.split("?", 1)[0])
                    routed = answer() if answer else Response(404, "text/plain", b"not found")
                self.send_response(routed.status)
                self.send_header("Content-Type", routed.content_type)
                self.send_header("Content-Length", str(len(routed.body)))
                self.end_headers()
                self.wfile.write(routed.body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # probes every few seconds would flood the log

        context = None if tls is None else _tls_context(*tls)  # fails before a port is taken
        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortTakenError(f"HTTP port {port} on {host} is taken: another process "
                                     f"listens on it", "http") from exc  # fmt: skip
            raise
        self._server.daemon_threads = True
        self.scheme = "http"
        if context is not None:
            self._server.socket = context.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )  # the handshake happens in the request's thread, not in the accepting one
            self.scheme = "https"
        self.host, self.port = host, int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="goka-http", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """``http://host:port`` (a wildcard host is shown as 127.0.0.1)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def close(self) -> None:
        """Stop serving. Idempotent."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HttpService:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _tls_context(cert: str, key: str, client_ca: str | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
        if client_ca:
            context.load_verify_locations(client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"HTTPS: cannot use {cert}, {key}: {exc}") from exc
    return context


def _metrics() -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return Response(200, CONTENT_TYPE_LATEST, generate_latest())
