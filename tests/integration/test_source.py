"""The goka-kafka source's planning on the driver against the embedded broker, without Spark:
a broker that does not answer in time must not stop a query whose tasks can carry on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from goka import StringCodec
from goka.errors import BrokerError
from goka.spark.source import EPOCH, GokaStreamReader

from ..helpers import produce

pytestmark = pytest.mark.kafka


class Silent:
    """A broker client whose every question times out."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise BrokerError(f"no answer to {name} within 30s")

        return fail


def reader(brokers: str, topic: str, **options: str) -> GokaStreamReader:
    return GokaStreamReader({"brokers": brokers, "topics": topic, "payload": "ranges", **options})


def test_latest_offsets_are_reported_and_none_while_the_broker_does_not_answer(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)
    produce(brokers, topic, StringCodec(), [("a", "1"), ("b", "2"), ("c", "3")])
    source = reader(brokers, topic)
    reported = source.reportLatestOffset()
    assert reported is not None and sum(reported[topic].values()) == 3
    source._end_offsets = Silent()  # type: ignore[assignment]
    assert source.reportLatestOffset() is None


def test_an_epoch_is_planned_from_the_previous_one_while_commits_cannot_be_read(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)
    source = reader(brokers, topic, epochs=f"{topic}-g")
    start = {topic: {"0": 5, "1": 7}, EPOCH: {"n": 3}}
    assert source.latestOffset(start, source.getDefaultReadLimit()) == {**start, EPOCH: {"n": 4}}
    real, source._committed = source._committed, Silent()  # type: ignore[assignment]
    assert source.latestOffset(start, source.getDefaultReadLimit()) == {**start, EPOCH: {"n": 4}}
    source._committed = real
    source.stop()
