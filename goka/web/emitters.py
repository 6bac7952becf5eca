"""The status of a web app's emitters, as JSON or a small page, for Flask and ASGI apps.

    app.register_blueprint(flask_blueprint([clicks_emitter]))      # /goka/emitters(.json)
    app = mount(app, asgi_app([clicks_emitter]))                    # or an ASGI sub-app

The figures come from :meth:`goka.Emitter.status` (delivered, failed, queued, latency).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from goka.web.pages import html_page, json_response, table
from goka.web.tables import Response

__all__ = ["asgi_app", "emitter_status", "flask_blueprint"]

_COLUMNS = ("topic", "delivered", "failed", "queued", "latency_p50_seconds",
            "latency_p99_seconds", "closed")  # fmt: skip


def emitter_status(emitters: Sequence[Any]) -> dict[str, Any]:
    """``{"emitters": [status, ...]}`` of ``emitters`` (see Emitter.status)."""
    return {"emitters": [emitter.status() for emitter in emitters]}


def _page(emitters: Sequence[Any]) -> Response:
    rows = [[status[c] for c in _COLUMNS] for status in emitter_status(emitters)["emitters"]]
    return html_page("goka emitters", table(list(_COLUMNS), rows, ident="emitters",
                                            numeric=(1, 2, 3, 4, 5)))  # fmt: skip


def _answer(emitters: Sequence[Any], path: str) -> Response | None:
    if path.endswith("/emitters.json"):
        return json_response(emitter_status(emitters))
    if path.endswith("/emitters"):
        return _page(emitters)
    return None


def flask_blueprint(emitters: Sequence[Any], *, url_prefix: str = "/goka") -> Any:
    """A Flask blueprint serving ``<prefix>/emitters`` (page) and ``<prefix>/emitters.json``."""
    from flask import Blueprint

    blueprint = Blueprint("goka_emitters", __name__, url_prefix=url_prefix)

    def serve(path: str) -> tuple[bytes, int, dict[str, str]]:
        answer = _answer(emitters, path)
        assert answer is not None
        return answer.body, answer.status, {"Content-Type": answer.content_type}

    blueprint.add_url_rule("/emitters", "page", lambda: serve("/emitters"))
    blueprint.add_url_rule("/emitters.json", "json", lambda: serve("/emitters.json"))
    return blueprint


Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def asgi_app(emitters: Sequence[Any]) -> Callable[[dict[str, Any], Receive, Send],
                                                  Awaitable[None]]:  # fmt: skip
    """An ASGI app answering ``.../emitters`` and ``.../emitters.json`` (mount it under a
    prefix of your app, e.g. Starlette's ``Mount("/goka", app)``); 404 for other paths."""

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        answer = _answer(emitters, scope.get("path", "")) or Response(
            404, "text/plain", b"not found")  # fmt: skip
        await send({"type": "http.response.start", "status": answer.status,
                    "headers": [(b"content-type", answer.content_type.encode())]})  # fmt: skip
        await send({"type": "http.response.body", "body": answer.body})

    return app
