"""The deployable services, as processes configured by environment variables."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from goka import Int64Codec, StringCodec
from goka.grpc import ViewClient
from goka.storage import LevelDBStorage
from goka.view import View

from ..helpers import free_port, http_status, produce, wait_for

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).resolve().parents[2]


def _service(module: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as stderr:
        return subprocess.Popen([sys.executable, "-m", module], cwd=ROOT, stderr=stderr,
                                stdout=subprocess.DEVNULL, env={**os.environ, **env,
                                "PYTHONPATH": str(ROOT)})  # fmt: skip


def test_view_service(brokers: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    table = new_topic(partitions=2, table=True)
    produce(brokers, table, Int64Codec(), [(f"k{i}", i) for i in range(100)])
    grpc_port, http_port = free_port(), free_port()
    process = _service("services.view", {
        "GOKA_TABLES": table, "GOKA_CODECS": "int64", "GOKA_BROKERS": brokers,
        "GOKA_PORT": str(grpc_port), "GOKA_HTTP_PORT": str(http_port),
        "GOKA_PATH": str(tmp_path / "views"), "GOKA_LOG_FORMAT": "json",
    }, tmp_path / "view.log")  # fmt: skip
    try:
        wait_for(lambda: http_status(f"http://127.0.0.1:{http_port}/readyz") == 200, what="ready")
        assert http_status(f"http://127.0.0.1:{http_port}/healthz") == 200
        with ViewClient(f"127.0.0.1:{grpc_port}") as client:
            assert client.get(table, "k42") == 42
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics") as answer:
            assert (
                f'goka_view_applied_records_total{{table="{table}"}} 100.0'
                in answer.read().decode()
            )
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    logs = [
        json.loads(line)
        for line in (tmp_path / "view.log").read_text().splitlines()
        if line.startswith("{")
    ]
    assert logs and all(entry["logger"].startswith(("goka", "py4j")) for entry in logs)
    assert all({"time", "level", "logger", "message"} <= entry.keys() for entry in logs)
    with LevelDBStorage(tmp_path / "views" / table, table) as storage:  # closed cleanly
        assert storage.get("k42") == b"42"


@pytest.mark.spark
@pytest.mark.slow
def test_processor_service(brokers: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = new_topic(partitions=2)
    group = f"{topic}-g"
    produce(brokers, topic, StringCodec(), [(f"user-{i % 5}", "/") for i in range(200)])
    http_port = free_port()
    process = _service("services.processor", {
        "GOKA_GRAPHS": "tests.spark.crash_graph:graph", "GOKA_BROKERS": brokers,
        "GOKA_LOG_FORMAT": "json",
        "GOKA_TEST_GROUP": group, "GOKA_TEST_TOPIC": topic, "GOKA_HTTP_PORT": str(http_port),
        "GOKA_STATE_DIR": str(tmp_path / "state"), "GOKA_MODE": "micro-batch",
        "GOKA_TRIGGER": "500 milliseconds",
    }, tmp_path / "processor.log")  # fmt: skip
    try:
        wait_for(lambda: http_status(f"http://127.0.0.1:{http_port}/readyz") == 200, timeout=120,
                 what="an active query")  # fmt: skip
        with View(brokers, f"{group}-table", Int64Codec()) as view:
            view.wait_recovered(60)
            wait_for(lambda: dict(view.items()) == {f"user-{i}": 40 for i in range(5)}, timeout=120,
                     what="all clicks counted")  # fmt: skip
        expected = f'goka_processor_messages_total{{group="{group}"}} 200.0'

        def counted() -> bool:  # the driver counts a batch after its tasks committed
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics") as answer:
                return expected in answer.read().decode()

        wait_for(counted, what="the processed messages in /metrics")
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=90) == 0, (tmp_path / "processor.log").read_text()[-3000:]
