"""The click-count web app: each request to ``POST /click/<user>`` emits a click.

One Emitter is shared by every request thread (the server is threaded); the response says where
the click was stored. Run it with ``python -m examples.click_count.web --brokers HOST:PORT``.
"""

from __future__ import annotations

import argparse
import logging
import threading

from flask import Flask, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.serving import BaseWSGIServer, make_server

from examples.click_count.group import TOPIC
from goka import Emitter, StringCodec
from goka.web.emitters import flask_blueprint


def create_app(emitter: Emitter[str]) -> Flask:
    """Build the app around a shared emitter."""
    app = Flask("click-count")

    @app.post("/click/<user>")
    def click(user: str) -> tuple[Response, int]:
        page = request.args.get("page", "/")
        delivery = emitter.emit_sync(user, page, timeout=10)
        return jsonify(user=user, partition=delivery.partition, offset=delivery.offset), 202

    @app.get("/healthz")
    def healthz() -> tuple[Response, int]:
        ok = not emitter.closed
        return jsonify(status="ok" if ok else "closed"), 200 if ok else 503

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(), mimetype=CONTENT_TYPE_LATEST)

    app.register_blueprint(flask_blueprint([emitter]))  # /goka/emitters and .json
    return app


class WebApp:
    """The app in a threaded WSGI server on a background thread. A context manager."""

    def __init__(self, brokers: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
        self.emitter: Emitter[str] = Emitter(brokers, TOPIC, StringCodec())
        self.server: BaseWSGIServer = make_server(
            host, port, create_app(self.emitter), threaded=True
        )
        self.url = f"http://{host}:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> WebApp:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.emitter.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    with WebApp(args.brokers, host=args.host, port=args.port) as app:
        print(f"click-count web app on {app.url}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
