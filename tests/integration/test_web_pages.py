"""The view service's pages in headless Chromium: the monitor, the table browser (lookup,
paging through a prefix scan, keys that are HTML), and the emitter status helpers."""

from __future__ import annotations

import asyncio
import functools
import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from goka import Emitter, Int64Codec, StringCodec
from goka.web.emitters import asgi_app, emitter_status, flask_blueprint

from ..browser import chromium, rows, texts
from ..helpers import produce, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
XSS = "<script>window.pwned=1</script><img src=x onerror='window.pwned=2'>"


LAST: dict[str, Any] = {}  # where the served table's latest user-07 record is


@pytest.fixture
def served(brokers: str, new_topic: Callable[..., str]) -> Iterator[tuple[str, str]]:
    table = new_topic(partitions=3, table=True)
    produce(brokers, table, Int64Codec(), [(f"user-{i:02d}", i) for i in range(45)])
    produce(brokers, table, Int64Codec(), [(XSS, 666), ("other", 1)])
    with Emitter(brokers, table, Int64Codec()) as emitter:  # user-07 again, its offset known
        LAST["user-07"] = emitter.emit_sync("user-07", 7, timeout=10)
    command = [sys.executable, "-m", "goka", "view", "serve", "--table", table, "--codec",
               "int64", "--brokers", brokers, "--port", "0", "--http-port", "0"]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT) as process:
        try:
            assert process.stdout is not None
            process.stdout.readline()
            url = process.stdout.readline().split()[1]
            wait_for(lambda: _json(f"{url}/api/monitor")["tables"][0]["state"] == "running",
                     what="the view running")  # fmt: skip
            yield url, table
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)


def _json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.loads(answer.read())


def test_view_monitor_shows_state_and_offsets(served: tuple[str, str], tmp_path: Path) -> None:
    url, table = served
    with chromium() as driver:
        driver.get(f"{url}/")
        assert table in driver.title or table in driver.page_source
        wait_for(lambda: texts(driver, "#state-0") == ["running"], what="state on the page")
        found = rows(driver, "partitions-0")
        assert [int(r[0]) for r in found] == [0, 1, 2]
        offsets = sum(int(r[1]) for r in found)
        assert offsets == 48  # every record applied: offsets sum to the records written
        assert all(r[3] == "0" for r in found)  # no lag
        driver.save_screenshot(str(tmp_path / "view-monitor.png"))
    assert (tmp_path / "view-monitor.png").stat().st_size > 10_000


def test_table_browser_finds_keys_pages_scans_and_shows_html_as_text(
    served: tuple[str, str], tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    url, table = served
    with chromium() as driver:
        driver.get(f"{url}/browse?table={table}")
        driver.find_element(By.ID, "key").send_keys("user-07")
        driver.find_element(By.ID, "get").click()
        wait_for(lambda: texts(driver, "#result-value") == ["7"], what="the value of user-07")
        delivery = LAST["user-07"]
        assert texts(driver, "#result-from") == [
            f"partition {delivery.partition}, offset {delivery.offset}"
        ]
        driver.save_screenshot(str(tmp_path / "table-browser-get.png"))

        driver.get(f"{url}/browse?table={table}")
        driver.find_element(By.ID, "prefix").send_keys("user-")
        driver.find_element(By.ID, "scan-button").click()
        pages: list[list[str]] = []
        while True:  # each page is rendered by a script: await it, then its next button
            pages.append(wait_for(functools.partial(new_page, driver, pages[-1] if pages else [],
                                                    "user-"),
                                  what="the next page of the scan"))  # fmt: skip
            if not click_next(driver):
                break
        assert [len(p) for p in pages] == [20, 20, 5]
        assert [key for page in pages for key in page] == [f"user-{i:02d}" for i in range(45)]
        driver.save_screenshot(str(tmp_path / "table-browser-scan.png"))

        driver.get(f"{url}/browse?table={table}")
        driver.find_element(By.ID, "key").send_keys(XSS)
        driver.find_element(By.ID, "get").click()
        wait_for(lambda: texts(driver, "#result-key") == [XSS], what="the key shown as text")
        assert texts(driver, "#result-value") == ["666"]
        assert driver.execute_script("return window.pwned") is None  # nothing ran
        driver.get(f"{url}/browse?table={table}&prefix=%3C")  # the scan lists it too
        assert texts(driver, "#entries tbody tr td:first-child") == [XSS]
        assert driver.execute_script("return window.pwned") is None
        driver.save_screenshot(str(tmp_path / "table-browser-html-key.png"))


def test_emitter_status_for_flask_and_asgi(brokers: str, new_topic: Callable[..., str]) -> None:
    from flask import Flask
    from werkzeug.serving import make_server

    topic = new_topic(partitions=2)
    with Emitter(brokers, topic, StringCodec()) as emitter:
        for i in range(10):
            emitter.emit_sync(f"k{i}", "v", timeout=10)
        # librdkafka's queue also counts its own requests for a moment after the deliveries
        status = wait_for(lambda: [s for s in emitter_status([emitter])["emitters"]
                                   if s["queued"] == 0], what="an empty queue")[0]  # fmt: skip
        assert status["topic"] == topic and status["delivered"] >= 10 and status["failed"] == 0
        assert status["latency_p99_seconds"] is not None
        app = Flask("status")
        app.register_blueprint(flask_blueprint([emitter]))
        server = make_server("127.0.0.1", 0, app, threaded=True)
        import threading

        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            base = f"http://127.0.0.1:{server.server_port}/goka"
            assert _json(f"{base}/emitters.json")["emitters"][0]["delivered"] >= 10
            with urllib.request.urlopen(f"{base}/emitters", timeout=5) as answer:
                assert topic in answer.read().decode()
        finally:
            server.shutdown()

        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        async def receive() -> dict[str, Any]:
            return {"type": "http.request"}

        app_asgi = asgi_app([emitter])
        asyncio.run(app_asgi({"type": "http", "path": "/goka/emitters.json"}, receive, send))
        assert sent[0]["status"] == 200
        assert json.loads(sent[1]["body"])["emitters"][0]["topic"] == topic
        sent.clear()
        asyncio.run(app_asgi({"type": "http", "path": "/elsewhere"}, receive, send))
        assert sent[0]["status"] == 404
    started = time.monotonic()
    assert emitter.status()["closed"] and time.monotonic() - started < 1


def new_page(driver: Any, shown: list[str], prefix: str) -> list[str]:
    """The keys of the scan's page, once they are not ``shown`` and all start with ``prefix``
    (empty: not yet; the page may still show what it showed before the scan)."""
    keys = [row[0] for row in rows(driver, "entries")]
    fresh = keys != shown and all(k.startswith(prefix) for k in keys)
    return keys if fresh else []


def click_next(driver: Any) -> bool:
    """Click the scan's next button; False if there is none. The tables are redrawn every two
    seconds: a button replaced between finding and clicking it is found again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    for _ in range(5):
        found = driver.find_elements(By.ID, "next")
        if not found:
            return False
        try:
            found[0].click()
            return True
        except StaleElementReferenceException:
            continue
    raise AssertionError("the next button was replaced five times in a row")
