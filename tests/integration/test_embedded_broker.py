from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from goka import StringCodec, TopicManager
from goka.dev import BINARY_ENV, EmbeddedBroker, find_broker_binary
from goka.emitter import Emitter
from goka.errors import BrokerNotFoundError
from goka.kafka.consumer import read_to_end

pytestmark = pytest.mark.kafka


def test_binary_override_must_be_executable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(BINARY_ENV, str(tmp_path / "tansu"))
    with pytest.raises(BrokerNotFoundError, match=f"\\${BINARY_ENV}=.* is not an executable file"):
        find_broker_binary()


def test_binary_override_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    real = find_broker_binary()
    monkeypatch.setenv(BINARY_ENV, str(real))
    assert find_broker_binary() == real


def test_broker_round_trip_stop_and_restart_on_the_same_port() -> None:
    with EmbeddedBroker() as broker:
        TopicManager(broker.bootstrap).ensure_stream_exists("t", 1)
        with Emitter(broker.bootstrap, "t", StringCodec()) as emitter:
            emitter.emit_sync("k", "v", timeout=10)
        assert [r.value for r in read_to_end(broker.bootstrap, "t")] == [b"v"]
        port = broker.port
        broker.restart()
        assert broker.running and broker.port == port
        assert not TopicManager(broker.bootstrap).exists("t")  # memory only: a restart is empty
    assert not broker.running
    broker.stop()  # idempotent


def test_cli_runs_a_broker_in_the_foreground() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "goka.cli", "broker"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as process:  # fmt: skip
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            bootstrap = line.rsplit(" ", 1)[-1].strip()
            assert line.startswith("embedded Kafka broker listening; bootstrap servers: 127.0.0.1:")
            assert TopicManager(bootstrap).ensure_stream_exists("cli-topic", 2) == 2
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 0
