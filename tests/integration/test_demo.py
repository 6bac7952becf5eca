"""The demo's whole flow as a test: processor (Spark), view service, web app, HTTP clicks, gRPC."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from examples.click_count import demo
from goka.dev import EmbeddedBroker
from goka.kafka.consumer import read_to_end

from .rewinds import without

pytestmark = [pytest.mark.cost(60), pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def demo_broker(
    kafka_broker: EmbeddedBroker, make_broker: Callable[..., EmbeddedBroker]
) -> EmbeddedBroker:
    """A broker without the demo's topics (it uses fixed names)."""
    return without(kafka_broker, make_broker, demo.TOPIC, demo.TABLE)


def test_clicks_over_http_are_counted_and_served_over_grpc(
    tmp_path: Path, record_property: Any, demo_broker: EmbeddedBroker,
    capfd: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    with contextlib.nullcontext(demo_broker) as broker:
        result = demo.run(broker.bootstrap, tmp_path, clicks=600, users=10)
    assert sum(result.sent.values()) == 600
    assert result.ok, (result.counts, dict(result.sent))
    record_property("first_count_seconds", result.first_count_seconds)
    said = capfd.readouterr()  # what the demo printed, and its services' logs
    logs = [p.read_text(errors="replace") for p in tmp_path.glob("*.log")]  # (not LevelDB's)
    assert len(logs) == 2, sorted(tmp_path.iterdir())  # (the processor's and the view's)
    printed = said.out + said.err + "".join(logs)
    assert "Coordinator load in progress" not in printed  # (a starting broker: at debug)


def test_killing_the_processor_midway_still_ends_exact(
    tmp_path: Path, record_property: Any, demo_broker: EmbeddedBroker
) -> None:
    with contextlib.nullcontext(demo_broker) as broker:
        result = demo.run(
            broker.bootstrap, tmp_path, clicks=800, users=10, kill_processor_midway=True
        )
        table_records = sum(1 for _ in read_to_end(broker.bootstrap, demo.TABLE))
    assert result.ok, (result.counts, dict(result.sent))
    duplicates = table_records - 800  # one table update per click, plus repeats after the kill
    record_property("duplicate_table_records", duplicates)
    print(f"\nprocessor SIGKILLed midway: {duplicates} duplicate table records")
    assert duplicates >= 0
