"""The HTTP port every service has: /healthz, /readyz, /metrics, routes, and its bind host."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest

from goka.web.http import HttpService
from goka.web.tables import Response


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status), answer.read()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read()


def test_health_readiness_metrics_and_routes() -> None:
    state = {"alive": True, "ready": False}
    route = lambda target: Response(200, "text/plain", b"mine") if target == "/mine" else None  # noqa: E731
    with HttpService(alive=lambda: state["alive"], ready=lambda: state["ready"],
                     routes=[route]) as http:  # fmt: skip
        assert http.host == "127.0.0.1" and http.port > 0
        assert _get(f"{http.url}/healthz") == (200, b'{"status": "ok"}')
        assert _get(f"{http.url}/readyz") == (503, b'{"status": "unavailable"}')
        state["ready"] = True
        assert _get(f"{http.url}/readyz")[0] == 200
        state["alive"] = False
        assert _get(f"{http.url}/healthz")[0] == 503
        status, body = _get(f"{http.url}/metrics")
        assert status == 200 and b"python_info" in body
        assert _get(f"{http.url}/mine") == (200, b"mine")
        assert _get(f"{http.url}/nothing")[0] == 404


def test_listens_only_on_its_host() -> None:
    with HttpService("127.0.0.2", 0) as http:
        assert _get(f"http://127.0.0.2:{http.port}/healthz")[0] == 200
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", http.port), timeout=2).close()
