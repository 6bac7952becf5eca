"""Connectors over HTTP on a real socket: ``goka connect run`` of a watching file source serves
its monitor JSON, Kafka Connect's status and offsets verbs and Prometheus metrics while it
runs, notes its status for the monitor of the processors of its topics, and stops cleanly on
SIGTERM; a sink job's monitor shows each partition's lag against
the topic's end (0 when caught up, the records produced since otherwise)."""

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
from typing import Any

import pytest

from goka import JsonCodec
from goka.connect import PostgresSink
from goka.connect.status import ConnectorBoard, StatusPublisher
from goka.kafka.consumer import read_to_end
from goka.kafka.offsets import EndOffsets
from goka.spark.sink import SinkJob
from goka.web.connectors import ConnectorMonitor
from goka.web.monitor import ProcessorMonitor

from ..helpers import produce, wait_for

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]

SOURCE = """
from goka.connect import FileSource

source = FileSource({path!r}, {topic!r}, key="user", watch=True, poll_interval=0.2, settle=0)
"""


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        body = answer.read().decode()
    return json.loads(body) if answer.headers.get_content_type() == "application/json" else body


def test_goka_connect_run_serves_status_offsets_metrics_and_stops_on_sigterm(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    incoming = tmp_path / "in"
    incoming.mkdir()
    (tmp_path / "sources.py").write_text(SOURCE.format(path=str(incoming), topic=topic))
    command = [sys.executable, "-m", "goka", "connect", "run", "sources:source", "--brokers",
               brokers, "--http-port", "0"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    board = ConnectorBoard(brokers, {topic})
    with subprocess.Popen(command, env=env, cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as process:  # fmt: skip
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("http "), line
            url = line.split()[1]
            lines = "".join(json.dumps({"user": f"u{i % 5}", "n": i}) + "\n" for i in range(300))
            (incoming / ".a.jsonl").write_text(lines)
            (incoming / ".a.jsonl").rename(incoming / "a.jsonl")
            wait_for(lambda: len(list(read_to_end(brokers, topic))) == 300, what="records")
            assert get(f"{url}/connectors") == [topic]
            status = wait_for(lambda: (s := get(f"{url}/connectors/{topic}/status"))
                              ["connector"]["state"] == "RUNNING" and s, what="running")  # fmt: skip
            assert status["type"] == "source" and status["tasks"][0]["state"] == "RUNNING"
            described = get(f"{url}/connectors/{topic}")
            assert described["config"]["connector.class"] == "FileSource"
            monitor = wait_for(lambda: (m := get(f"{url}/api/monitor"))["connectors"][0][
                "counts"]["produced"] == 300 and m, what="the monitor's count")  # fmt: skip
            assert monitor["connectors"][0]["position"].startswith("file 'a.jsonl' row 299")
            metrics = get(f"{url}/metrics")
            assert f'goka_connector_records_total{{connector="{topic}",count="produced"}} 300.0' \
                in metrics  # fmt: skip
            assert f'goka_connector_state{{connector="{topic}",state="running"}} 1.0' in metrics
            page = get(f"{url}/")
            assert f"source {topic}" in page and "partitions-0" in page
            with pytest.raises(urllib.error.HTTPError, match="404"):
                get(f"{url}/connectors/nobody/status")
            # a processor of the topic sees the connector on its monitor page
            noted = wait_for(
                lambda: [c for c in board.connectors() if c["counts"]["produced"] == 300],
                what="its status",
            )
            assert noted[0]["state"] == "RUNNING" and noted[0]["url"] == url
            monitor = ProcessorMonitor([], connectors=board.connectors)
            assert monitor.sample()["connectors"][0][:3] == [topic, "source FileSource",
                                                              "RUNNING"]  # fmt: skip
            monitor.refresh()
            assert f"<td>{topic}</td>" in monitor.page()
            other = ConnectorBoard(brokers, {"another-topic"})
            assert other.connectors() == []
            other.close()
        finally:
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err[-3000:]
    assert [c["state"] for c in board.connectors()] == ["STOPPED"]  # noted as it ended
    board.close()
    again = subprocess.run([*command[:-2], "--until-caught-up"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert again.returncode == 0 and "300 produced before" in again.stdout, again.stderr[-2000:]
    assert "http " not in again.stdout  # no port for a bounded run unless asked


def test_a_connector_not_heard_of_while_running_is_shown_silent(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    """A connector killed (or stuck) notes nothing more: once its last note is older than
    ``silent_after``, a processor's monitor shows it SILENT, not RUNNING."""
    topic = new_topic(partitions=1)
    publisher = StatusPublisher(brokers, "host:1", "http://host:9300")
    publisher.publish([{"name": f"{topic}-c", "type": "sink", "kind": "PostgresSink",
                        "state": "RUNNING", "topics": [topic], "counts": {}}])  # fmt: skip
    publisher.close()
    board = ConnectorBoard(brokers, {topic}, silent_after=1.0)
    try:
        first = wait_for(board.connectors, what="the note")
        assert first[0]["state"] == "RUNNING" and first[0]["worker"] == "host:1"
        wait_for(lambda: board.connectors()[0]["state"] == "SILENT", what="silent")
    finally:
        board.close()


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.slow
def test_a_sink_jobs_monitor_shows_lag_against_the_topics_end(
    spark: Any, brokers: str, new_topic: Callable[..., str], dsn: str, tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    produce(brokers, topic, JsonCodec(), [(f"k{i}", {"n": i}) for i in range(100)])
    job = SinkJob(PostgresSink(topic, JsonCodec(), dsn, table="t"), brokers, spark=spark,
                  checkpoint_dir=tmp_path / "checkpoint")  # fmt: skip
    ends = EndOffsets(brokers, {})
    try:
        monitor = ConnectorMonitor([job], ends=ends.high)
        assert monitor.sample()["connectors"][0]["state"] == "UNASSIGNED"
        job.run_until_caught_up()
        first = monitor.sample()["connectors"][0]
        assert first["state"] == "STOPPED" and first["counts"]["records"] == 100
        assert sorted(r[3] for r in first["partitions"]) == [0, 0]
        produce(brokers, topic, JsonCodec(), [(f"k{i}", {"n": i}) for i in range(30)])
        behind = monitor.sample()["connectors"][0]
        assert sum(r[3] for r in behind["partitions"]) == 30
        offsets = monitor.handle(f"/connectors/{job.sink.name}/offsets")
        assert offsets is not None
        found = json.loads(offsets.body)["offsets"]
        assert sum(o["offset"]["kafka_offset"] for o in found) == 100
        assert {o["partition"]["kafka_topic"] for o in found} == {topic}
    finally:
        ends.close()
