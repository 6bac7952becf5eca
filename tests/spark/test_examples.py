"""The examples, run on Spark (they use fixed topic names: on a broker without them)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goka.dev import EmbeddedBroker

from ..integration.rewinds import without

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]


def test_user_status_example(
    spark: Any, tmp_path: Path, kafka_broker: EmbeddedBroker,
    make_broker: Callable[..., EmbeddedBroker],
) -> None:  # fmt: skip
    from examples.user_status.group import CLICKS, DEVICES, MILESTONES, PROFILES, graph
    from examples.user_status.run import run

    topics = (CLICKS, PROFILES, DEVICES, MILESTONES, graph.table)
    with contextlib.nullcontext(without(kafka_broker, make_broker, *topics)) as broker:
        table, milestones = run(broker.bootstrap, tmp_path, spark)
    assert {u: s["clicks"] for u, s in table.items()} == {"ann": 20, "bob": 20, "cem": 20}
    assert {u: s["country"] for u, s in table.items()} == {"ann": "NO", "bob": "DE", "cem": "TR"}
    assert {s["last_device"] for s in table.values()} <= {"phone", "laptop"}
    assert sorted(m["clicks"] for m in milestones) == [10, 10, 10, 20, 20, 20]


def test_loopback_example(
    spark: Any, tmp_path: Path, kafka_broker: EmbeddedBroker,
    make_broker: Callable[..., EmbeddedBroker],
) -> None:  # fmt: skip
    from examples.loopback.group import CLICKS, graph
    from examples.loopback.run import run

    topics = (CLICKS, graph.table, graph.loop_topic)
    with contextlib.nullcontext(without(kafka_broker, make_broker, *topics)) as broker:
        counts, sent = run(broker.bootstrap, tmp_path, spark)
    assert counts == dict(sent)
