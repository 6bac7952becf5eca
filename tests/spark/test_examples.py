"""The examples, run on Spark against their own embedded broker (they use fixed topic names)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goka.dev import EmbeddedBroker

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]


def test_user_status_example(
    spark: Any, tmp_path: Path, make_broker: Callable[..., EmbeddedBroker]
) -> None:
    from examples.user_status.run import run

    with make_broker() as broker:
        table, milestones = run(broker.bootstrap, tmp_path, spark)
    assert {u: s["clicks"] for u, s in table.items()} == {"ann": 20, "bob": 20, "cem": 20}
    assert {u: s["country"] for u, s in table.items()} == {"ann": "NO", "bob": "DE", "cem": "TR"}
    assert {s["last_device"] for s in table.values()} <= {"phone", "laptop"}
    assert sorted(m["clicks"] for m in milestones) == [10, 10, 10, 20, 20, 20]


def test_loopback_example(
    spark: Any, tmp_path: Path, make_broker: Callable[..., EmbeddedBroker]
) -> None:
    from examples.loopback.run import run

    with make_broker() as broker:
        counts, sent = run(broker.bootstrap, tmp_path, spark)
    assert counts == dict(sent)
