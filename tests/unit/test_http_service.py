"""The HTTP port every service has: /healthz, /readyz, /metrics, routes, and its bind host."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path

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
    # The same port held on 127.0.0.1 by this test: a service that bound every address could
    # not start (and a refused connection would prove nothing where other tests listen too)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with HttpService("127.0.0.2", port) as http:
            assert http.port == port
            assert _get(f"http://127.0.0.2:{port}/healthz")[0] == 200
            probe = socket.create_connection(("127.0.0.1", port), timeout=2)
            accepted, _ = held.accept()  # 127.0.0.1 is still this test's socket
            accepted.close()
            probe.close()


def test_https_and_mutual_tls(tmp_path: Path) -> None:
    import ssl

    from ..integration.certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "ca")
    cert, key = ca.issue("localhost", server=True)
    trust = ssl.create_default_context(cafile=str(ca.cert_file))
    with HttpService(tls=(str(cert), str(key), None)) as http:
        assert http.url.startswith("https://127.0.0.1:")
        url = f"https://localhost:{http.port}/healthz"
        with urllib.request.urlopen(url, timeout=5, context=trust) as answer:
            assert answer.status == 200
        with pytest.raises(urllib.error.URLError):  # not trusted without the CA
            urllib.request.urlopen(url, timeout=5)
    client_cert, client_key = ca.issue("client", server=False)
    with HttpService(tls=(str(cert), str(key), str(ca.cert_file))) as http:
        url = f"https://localhost:{http.port}/healthz"
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            urllib.request.urlopen(url, timeout=5, context=trust)  # no client certificate
        mutual = ssl.create_default_context(cafile=str(ca.cert_file))
        mutual.load_cert_chain(str(client_cert), str(client_key))
        with urllib.request.urlopen(url, timeout=5, context=mutual) as answer:
            assert answer.status == 200


def test_unreadable_tls_files_are_a_configuration_error(tmp_path: Path) -> None:
    from goka.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="HTTPS: cannot use"):
        HttpService(tls=(str(tmp_path / "no.pem"), str(tmp_path / "no.key"), None))
