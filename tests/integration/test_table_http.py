"""HTTP/JSON table reads over a real socket: every key a Go service may write, every status."""

from __future__ import annotations

import base64
import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from goka import JsonCodec, key_bytes
from goka.view import View
from goka.web import TableReads
from goka.web.http import HttpService

from .go_keys import GO_KEYS, written_as_go_does

pytestmark = pytest.mark.kafka


@pytest.fixture
def served(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> Iterator[tuple[str, str]]:
    table = new_topic("http-reads", table=True)
    values = [(k, json.dumps({"n": i}).encode()) for i, k in enumerate(GO_KEYS)]
    written_as_go_does(brokers, table, [*values, (b"bad", b"{not json")])
    view = View(brokers, table, JsonCodec(), path=tmp_path / "view").start()
    idle = View(brokers, "http-idle-table", JsonCodec())  # never started: not recovered
    view.wait_recovered(60)
    reads = TableReads({table: view, "http-idle-table": idle}, max_limit=50)
    server = HttpService("127.0.0.1", 0, routes=[reads.handle])
    try:
        yield server.url, table
    finally:
        server.close()
        view.close()
        idle.close()


def get(url: str) -> tuple[int, dict[str, Any]]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=10)
    try:
        connection.request("GET", f"{parts.path}?{parts.query}" if parts.query else parts.path)
        answer = connection.getresponse()
        assert answer.headers["Content-Type"] == "application/json"
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


def test_every_key_a_go_service_wrote_is_read_by_its_bytes(served: tuple[str, str]) -> None:
    base, table = served
    for i, key in enumerate(GO_KEYS):
        status, body = get(f"{base}/tables/{table}/keys/{quote(key, safe='')}")
        assert status == 200, body
        assert body["value"] == {"n": i} and body["codec"] == "json"
        assert base64.b64decode(body["key_base64"]) == key
        assert body["key"] == (
            key.decode() if key in (b"user-1", b"a\x00b", b"\xf0\x9f\x98\x80") else None
        )


def test_scans_page_through_every_key_in_byte_order(served: tuple[str, str]) -> None:
    base, table = served
    seen: list[bytes] = []
    url = f"{base}/tables/{table}?limit=3"
    while True:
        status, body = get(url)
        assert status == 200, body
        assert len(body["entries"]) <= 3
        seen += [base64.b64decode(e["key_base64"]) for e in body["entries"]]
        for entry in body["entries"]:  # a value the codec cannot read does not end the scan
            assert ("error" in entry) == (entry["key"] == "bad")
        if body["next"] is None:
            break
        url = f"{base}/tables/{table}?limit=3&start={body['next']}"
    assert seen == sorted([*GO_KEYS, b"bad"])
    status, body = get(f"{base}/tables/{table}?prefix={quote(b'a' + bytes([0]))}")
    assert [base64.b64decode(e["key_base64"]) for e in body["entries"]] == [b"a\x00b"]


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/tables/nope/keys/k", 404, "table 'nope' is not served here"),
        ("/tables/{table}/keys/nobody", 404, "key 'nobody' not found"),
        ("/tables/{table}/keys/%FFnobody", 404, "key '%FFnobody' not found"),
        ("/tables/{table}?limit=0", 400, "limit must be between 1 and 50"),
        ("/tables/{table}?limit=51", 400, "limit must be between 1 and 50"),
        ("/tables/{table}?limit=ten", 400, "limit must be a number"),
        ("/tables/{table}?stop=x", 400, "unknown parameters ['stop']"),
        ("/tables/http-idle-table/keys/k", 503, "has not recovered yet"),
        ("/tables/http-idle-table", 503, "has not recovered yet"),
        ("/tables/{table}/keys/bad", 500, "json codec: invalid JSON"),
    ],
)
def test_statuses(served: tuple[str, str], path: str, status: int, says: str) -> None:
    base, table = served
    code, body = get(base + path.format(table=table))
    assert (code, body["status"]) == (status, status)
    assert says in body["error"]


def test_other_paths_are_left_to_the_server(served: tuple[str, str]) -> None:
    base, _ = served
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{base}/nothing-here", timeout=10)
    assert info.value.code == 404
    info.value.close()
    with urllib.request.urlopen(f"{base}/healthz", timeout=10) as answer:
        assert json.loads(answer.read()) == {"status": "ok"}
    assert key_bytes("\udcff") == b"\xff"  # the form the server maps %FF to


def test_a_window_table_s_keys_come_with_their_record_key_and_window(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    from goka.web.browser import shown_key

    table = new_topic("http-windows", table=True)
    key = "user-1@001792879200000-001792969200000"  # a calendar day: 2026-10-25 in Berlin
    written_as_go_does(brokers, table, [(key.encode(), b"7"), (b"plain@1-2", b"1")])
    with View(brokers, table, JsonCodec(), path=tmp_path / "view") as view:
        view.start().wait_recovered(60)
        server = HttpService("127.0.0.1", 0, routes=[TableReads({table: view}).handle])
        try:
            status, page = get(f"{server.url}/tables/{table}")
        finally:
            server.close()
    assert status == 200
    entries = {e["key"]: e for e in page["entries"]}
    assert entries[key]["window"] == {"key": "user-1", "start": "2026-10-24T22:00:00+00:00",
                                      "end": "2026-10-25T23:00:00+00:00"}  # fmt: skip
    assert "window" not in entries["plain@1-2"]
    assert shown_key(key) == "user-1 [2026-10-24T22:00:00+00:00, 2026-10-25T23:00:00+00:00)"
