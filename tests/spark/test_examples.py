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


def test_enrichment_example(
    spark: Any, tmp_path: Path, kafka_broker: EmbeddedBroker,
    make_broker: Callable[..., EmbeddedBroker],
) -> None:  # fmt: skip
    """Orders enriched through the HTTP service with 32 in flight: every user's count and
    country exact, each user's orders enriched in their order, and the service had more than
    one request in flight."""
    import json
    import urllib.request

    from examples.enrichment import service
    from examples.enrichment.group import ENRICHED, GROUP, ORDERS
    from examples.enrichment.run import run

    topics = (ORDERS, ENRICHED, f"{GROUP}-table")
    with (contextlib.nullcontext(without(kafka_broker, make_broker, *topics)) as broker,
          service.running() as url):  # fmt: skip
        table, enriched, sent = run(broker.bootstrap, tmp_path, url, spark)
        with urllib.request.urlopen(f"{url}/stats", timeout=10) as answer:
            most = json.load(answer)["most_in_flight"]
    assert table == {u: {"orders": n, "country": service.country_of(u)} for u, n in sent.items()}
    for user in sent:
        mine = [order for key, order in enriched if key == user]
        assert [o["nth"] for o in mine] == list(range(1, sent[user] + 1))
        assert [o["order"] for o in mine] == sorted(o["order"] for o in mine)
    assert most > 1
