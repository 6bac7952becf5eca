"""The goka-kafka source's planning on the driver against the embedded broker, without Spark:
a broker that does not answer in time must not stop a query whose tasks can carry on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from goka import StringCodec
from goka.errors import BrokerError
from goka.spark.plan import EpochPartition, KafkaPartition
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


def test_a_micro_batch_plan_replayed_by_a_continuous_run_is_processed_as_that_batch(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    """A micro-batch run killed inside a batch leaves its plan in the checkpoint; a continuous
    run on that checkpoint replays it first. Run as an epoch, its tasks would end at their
    deadline, perhaps before the batch's end, and the next epoch, planned from that end, would
    begin past records nobody processed (seen: 599 records never processed, a writer-change
    sequence whose continuous run started its first tasks after their deadline). It is run as
    the batch it was planned as, to its end; the epochs after it are epochs."""
    topic = new_topic(partitions=2)
    source = reader(brokers, topic, epochs=f"{topic}-g")
    start = {topic: {"0": 5, "1": 7}}
    batch = {topic: {"0": 9, "1": 7}}  # (as the micro-batch run planned it: no epoch counter)
    planned = source.partitions(start, batch)
    assert all(isinstance(p, KafkaPartition) for p in planned)
    assert [(p.partition, p.ranges) for p in planned] == [(0, {topic: (5, 9)})]  # type: ignore[attr-defined]
    epoch = source.latestOffset(batch, source.getDefaultReadLimit())
    following = source.partitions(batch, epoch)
    assert following and all(isinstance(p, EpochPartition) for p in following)
    source.stop()
