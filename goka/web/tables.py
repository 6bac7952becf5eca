"""HTTP/JSON reads of views, for clients that do not speak gRPC.

``GET /tables/{table}/keys/{key}`` returns one value; ``GET /tables/{table}?prefix=&start=&limit=``
a page of a scan in key order. Keys in paths and queries are percent-encoded bytes
(``/keys/caf%E9`` is the key ``b"caf\\xe9"``), so any key a Go or Python service wrote can be asked
for. Status codes mean what the gRPC service's do: 404 unknown table or key, 400 malformed request,
503 the view has not recovered (or failed).

Every answer is JSON. An entry is ``{"key": text or null, "key_base64": ..., "value": ...}``:
``key`` is null where the key's bytes are not UTF-8 text, ``value`` is decoded with the table's
codec (a JSON document for JSON/Avro/protobuf, a number for int64, text for string, base64 for
bytes).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from goka.errors import CodecError
from goka.keys import ERRORS, key_bytes
from goka.view import View, ViewNotReadyError
from goka.windows import window_key

__all__ = ["MAX_LIMIT", "Response", "TableReads"]

#: The most entries one scan page returns by default (a page without ``limit`` has 100).
MAX_LIMIT = 1000
_ONE = re.compile(r"/tables/([^/]+)/keys/(.+)")
_SCAN = re.compile(r"/tables/([^/]+)/?")


class Response(NamedTuple):
    """What to answer: status, content type, body."""

    status: int
    content_type: str
    body: bytes


class TableReads:
    """Answers the table reads of an HTTP server (any server: see :meth:`handle`).

    Thread-safe: views may be read from many request threads.

    Args:
        views: the served views by table, or a callable that returns them (views that are
            built after the HTTP port is up).
        max_limit: the most entries of one scan page.
    """

    def __init__(
        self,
        views: Mapping[str, View[Any]] | Callable[[], Mapping[str, View[Any]]],
        *,
        max_limit: int = MAX_LIMIT,
    ) -> None:
        self._views = views if callable(views) else (lambda: views)
        self.max_limit = max_limit

    def handle(self, target: str) -> Response | None:
        """Answer the request target (path and query) of a GET, or None if it is not a table
        read (another handler's path)."""
        url = urlsplit(target)
        one, scan = _ONE.fullmatch(url.path), _SCAN.fullmatch(url.path)
        if one is None and scan is None:
            return None
        match = one or scan
        assert match is not None
        table = unquote(match.group(1))
        view = self._views().get(table)
        if view is None:
            served = ", ".join(sorted(self._views())) or "none"
            return _error(404, f"table {table!r} is not served here (served: {served})")
        try:
            if one is not None:
                return self._get(view, unquote(one.group(2), errors=ERRORS))
            return self._scan(view, dict(parse_qsl(url.query, errors=ERRORS)))
        except ViewNotReadyError as exc:
            return _error(503, str(exc))

    def _get(self, view: View[Any], key: str) -> Response:
        raw = view.get_raw(key)
        if raw is None:
            return _error(404, f"key {quote(key_bytes(key))!r} not found in {view.table!r}")
        entry = _entry(view, key, raw)
        if "error" in entry:
            return _error(500, f"table {view.table!r}: {entry['error']}")
        return _json(200, {"table": view.table, "codec": view.codec.name, **entry})

    def _scan(self, view: View[Any], query: dict[str, str]) -> Response:
        unknown = set(query) - {"prefix", "start", "limit"}
        if unknown:
            return _error(400, f"unknown parameters {sorted(unknown)}: use prefix, start, limit")
        try:
            limit = int(query.get("limit", min(100, self.max_limit)))
        except ValueError:
            return _error(400, f"limit must be a number, got {query['limit']!r}")
        if not 1 <= limit <= self.max_limit:
            return _error(400, f"limit must be between 1 and {self.max_limit}, got {limit}")
        items = list(view.items_raw(prefix=query.get("prefix") or None,
                                    start=query.get("start") or None, limit=limit + 1))  # fmt: skip
        more = items[limit][0] if len(items) > limit else None
        return _json(200, {
            "table": view.table, "codec": view.codec.name,
            "entries": [_entry(view, k, v) for k, v in items[:limit]],
            "next": None if more is None else quote(key_bytes(more), safe=""),
        })  # fmt: skip


def _entry(view: View[Any], key: str, raw: bytes) -> dict[str, Any]:
    data = key_bytes(key)
    try:
        text: str | None = data.decode()
    except UnicodeDecodeError:
        text = None
    entry: dict[str, Any] = {"key": text, "key_base64": base64.b64encode(data).decode()}
    found = None if text is None else window_key(text)
    if found is not None:  # a window table's key: its record key and window, readable
        owner, window = found
        entry["window"] = {"key": owner, "start": window.start_time.isoformat(),
                           "end": window.end_time.isoformat()}  # fmt: skip
    try:
        entry["value"] = _jsonable(view.codec.decode(raw))
    except CodecError as exc:  # one unreadable value does not hide the rest of a scan
        entry.update(value=None, error=str(exc))
    return entry


def _jsonable(value: Any) -> Any:
    """A value as JSON can carry it (bytes as base64, protobuf messages as their JSON form)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if hasattr(value, "DESCRIPTOR") and hasattr(value, "SerializeToString"):
        from google.protobuf.json_format import MessageToDict

        return MessageToDict(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, str):
        return value.encode("utf-8", ERRORS).decode("utf-8", "replace")  # valid JSON text
    return value


def _json(status: int, document: dict[str, Any]) -> Response:
    body = json.dumps(document, default=str).encode()
    return Response(status, "application/json", body)


def _error(status: int, message: str) -> Response:
    return _json(status, {"error": message, "status": status})
