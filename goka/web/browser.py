"""The table browser of the view service (``/browse``): look a key up, scan a prefix page by
page, values decoded with the table's codec. Keys and values are written by whoever can write to
the topic, so every one of them is escaped."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from goka.errors import CodecError, GokaError, ViewNotReadyError
from goka.keys import ERRORS, key_bytes
from goka.partitioner import partition_for
from goka.web.pages import e, html_page
from goka.web.tables import Response, _jsonable
from goka.windows import window_key

__all__ = ["TableBrowser"]

#: Entries on one page of a scan.
PAGE = 20
#: How far back a lookup searches its partition of the table topic for the record its value
#: came from (the view stores values, not their offsets).
SEARCH = 100_000
_CHUNK = 10_000


def locate(view: Any, key: str, partition: int, end: int) -> int | None:
    """The offset of the last record of ``key`` before ``end`` in ``partition`` of the view's
    table topic, searching back at most :data:`SEARCH` records (None: not found there)."""
    from goka.kafka.ranges import RangeReader

    wanted = key_bytes(key)
    reader = RangeReader(view.brokers, view.kafka_config)
    try:
        low = max(reader.watermarks(view.table, partition)[0], end - SEARCH)
        stop = end
        while stop > low:
            start, found = max(low, stop - _CHUNK), None
            for rows in reader.read(partition, {view.table: (start, stop)}, 10.0, _CHUNK):
                found = next((r[1] for r in reversed(rows) if r[2] == wanted), found)
            if found is not None:
                return found
            stop = start
        return None
    finally:
        reader.close()


def shown_key(key: str) -> str:
    """A key as text, or as hex where its bytes are not UTF-8; a window table's key as its
    record key and its window, ``user-1 [2026-10-25 00:00:00+02:00, ...)`` in UTC."""
    data = key_bytes(key)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return "0x" + data.hex()
    found = window_key(text)
    if found is None:
        return text
    owner, window = found
    return f"{owner} [{window.start_time.isoformat()}, {window.end_time.isoformat()})"


def shown_value(codec: str, value: Any) -> str:
    """JSON for structured codecs, the number for int64, the text for string, hex for bytes."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex(" ") if codec == "bytes" else "0x" + bytes(value).hex()
    if isinstance(value, str) and codec == "string":
        return value.encode("utf-8", ERRORS).decode("utf-8", "replace")
    return json.dumps(_jsonable(value), indent=2, ensure_ascii=False, default=str)


class TableBrowser:
    """Answers ``/browse`` with the views of ``views()`` (``{table: view}``)."""

    def __init__(self, views: Callable[[], Mapping[str, Any]], links: list[tuple[str, str]]):
        self.views, self.links = views, links

    def handle(self, target: str) -> Response | None:
        url = urlsplit(target)
        if url.path != "/browse":
            return None
        query = dict(parse_qsl(url.query, errors=ERRORS))
        views = self.views()
        name = query.get("table") or next(iter(sorted(views)), "")
        view = views.get(name)
        body = self._form(sorted(views), name, query)
        if view is None:
            body += f"<p class='err'>table {e(name)} is not served here</p>" if name else ""
        else:
            try:
                body += self._lookup(view, query["key"]) if query.get("key") else \
                    self._scan(view, query.get("prefix", ""), query.get("start", ""))  # fmt: skip
            except ViewNotReadyError as exc:
                body += f"<p class='err' id='not-ready'>{e(exc)}</p>"
        return html_page(f"goka table browser: {name}", body, links=self.links)

    def _form(self, tables: list[str], chosen: str, query: Mapping[str, str]) -> str:
        options = "".join(
            f"<option{' selected' if t == chosen else ''} value='{e(t)}'>{e(t)}</option>"
            for t in tables
        )
        return (
            "<form method='get' action='/browse' id='lookup'>"
            f"<select name='table' id='table'>{options}</select>"
            f"<input name='key' id='key' placeholder='key' value='{e(query.get('key', ''))}'>"
            "<button type='submit' id='get'>get</button></form>"
            "<form method='get' action='/browse' id='scan'>"
            f"<input type='hidden' name='table' value='{e(chosen)}'>"
            f"<input name='prefix' id='prefix' placeholder='key prefix' "
            f"value='{e(query.get('prefix', ''))}'>"
            "<button type='submit' id='scan-button'>scan</button></form>"
        )

    def _lookup(self, view: Any, key: str) -> str:
        raw = view.get_raw(key)
        partitions = view.stats().partitions
        partition = partition_for(key_bytes(key), len(partitions)) if partitions else None
        where = "" if partition is None else (
            f"partition {partition}, view at offset {partitions[partition].offset}")  # fmt: skip
        if raw is not None and partition is not None:
            try:
                found = locate(view, key, partition, partitions[partition].offset)
                where = f"partition {partition}, offset {found}" if found is not None else (
                    f"{where}; the record is not among its last {SEARCH:,}")  # fmt: skip
            except GokaError as exc:  # the brokers: the value is still shown
                where = f"{where}; the record's offset is unknown: {exc}"
        if raw is None:
            return (f"<p id='result'>key <code>{e(shown_key(key))}</code> not found in "
                    f"{e(view.table)} ({e(where)})</p>")  # fmt: skip
        try:
            value = shown_value(view.codec.name, view.codec.decode(raw))
        except CodecError as exc:
            value = f"cannot decode {len(raw)} bytes: {exc}"
        return (
            "<table id='result'><tbody>"
            f"<tr><th>key</th><td id='result-key'><code>{e(shown_key(key))}</code></td></tr>"
            f"<tr><th>value ({e(view.codec.name)})</th><td><pre id='result-value'>{e(value)}"
            f"</pre></td></tr><tr><th>from</th><td id='result-from'>{e(where)}</td></tr>"
            "</tbody></table>"
        )

    def _scan(self, view: Any, prefix: str, start: str) -> str:
        items = list(view.items_raw(prefix=prefix or None, start=start or None, limit=PAGE + 1))
        rows = []
        for key, raw in items[:PAGE]:
            try:
                value = shown_value(view.codec.name, view.codec.decode(raw))
            except CodecError as exc:
                value = f"cannot decode: {exc}"
            link = "/browse?" + urlencode({"table": view.table, "key": key}, errors=ERRORS)
            rows.append(f"<tr><td><a href='{e(link)}'><code>{e(shown_key(key))}</code></a></td>"
                        f"<td><pre>{e(value)}</pre></td></tr>")  # fmt: skip
        more = ""
        if len(items) > PAGE:
            nxt = urlencode({"table": view.table, "prefix": prefix, "start": items[PAGE][0]},
                            errors=ERRORS)  # fmt: skip
            more = f"<p><a id='next' href='/browse?{e(nxt)}'>next page</a></p>"
        shown = f" with prefix <code>{e(prefix)}</code>" if prefix else ""
        return (f"<h2>keys{shown}</h2><table id='entries'><thead><tr><th>key</th>"
                f"<th>value ({e(view.codec.name)})</th></tr></thead><tbody>{''.join(rows)}"
                f"</tbody></table>{more}")  # fmt: skip
