"""Topics that go back under a reader, on the embedded broker: the source refuses to plan past
them and a tail following one fails (the embedded broker answers a fetch beyond the end with
nothing, where Kafka answers OFFSET_OUT_OF_RANGE: both must fail, not skip).

A topic comes back shorter here the way the issue saw it happen: the broker is replaced (the
embedded broker restarted empty) and the topic created and written again. Deleting a topic
instead crashes librdkafka 2.16 clients that have it in their metadata cache on this broker.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from goka import StringCodec
from goka.dev.broker import EmbeddedBroker
from goka.errors import TopicRewoundError
from goka.kafka.offsets import EndOffsets
from goka.kafka.ranges import RangeReader
from goka.kafka.reader import Tail
from goka.kafka.tail import KafkaTail

from ..helpers import produce
from .rewinds import write

pytestmark = pytest.mark.kafka


@pytest.fixture
def clicks(request: pytest.FixtureRequest) -> str:
    """A topic name of this test's own."""
    return f"clicks-{request.node.name[:60]}"


def follow(tail: Tail, seconds: float) -> None:
    """Poll ``tail`` for ``seconds``; no record may come."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not tail.poll(100, 0.1), "records of the new topic were read as new"


@pytest.mark.smoke
def test_watermarks_are_the_first_offset_and_the_fetched_end(
    broker: EmbeddedBroker, clicks: str
) -> None:
    write(broker, clicks, 25)
    ends = EndOffsets(broker.bootstrap)
    try:
        assert ends.watermarks([(clicks, 0)]) == {(clicks, 0): (0, 25)}
    finally:
        ends.close()


def test_the_source_does_not_plan_past_an_input_that_came_back_shorter(
    broker: EmbeddedBroker, clicks: str
) -> None:
    from goka.spark.source import GokaStreamReader

    write(broker, clicks, 30)
    source = GokaStreamReader({"brokers": broker.bootstrap, "topics": clicks, "group": "gb"})
    try:
        start = source.latestOffset(source.initialOffset(), source.getDefaultReadLimit())
        assert start == {clicks: {"0": 30}}
        write(broker, clicks, 12, replace=True)
        with pytest.raises(TopicRewoundError, match=f"topic '{clicks}' partition 0 ends at offset "
                           "12, but group 'gb' has read it up to offset 30"):  # fmt: skip
            source.latestOffset(start, source.getDefaultReadLimit())
    finally:
        source.stop()


@pytest.mark.smoke
def test_a_tail_following_a_topic_that_came_back_shorter_fails(
    broker: EmbeddedBroker, clicks: str
) -> None:
    write(broker, clicks, 20)
    reader = RangeReader(broker.bootstrap)
    tail = reader.tail({0: {clicks: 0}})
    try:
        read = 0
        while read < 20:
            read += sum(len(rows) for rows in tail.poll(100, 0.5).values())
        write(broker, clicks, 5, replace=True)
        with pytest.raises(TopicRewoundError) as failed:
            follow(tail, 30)
        assert (failed.value.topic, failed.value.position, failed.value.high) == (clicks, 20, 5)
    finally:
        tail.close()
        reader.close()


@pytest.mark.smoke
def test_a_tail_starting_past_what_its_consumer_last_fetched_does_not_fail(
    broker: EmbeddedBroker, clicks: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer keeps a partition's last fetched end across assignments: one that followed
    it up to 10, while another process read on to 15, begins a new tail at 15 with 10 in its
    cache until a fetch answers (a new epoch's task met it and failed, the topic intact). The
    tail asks the broker before it calls the topic rewound."""
    monkeypatch.setattr(KafkaTail, "CHECK_SECONDS", 0.0)  # checked at every poll
    write(broker, clicks, 10)
    reader = RangeReader(broker.bootstrap)
    try:
        tail = reader.tail({0: {clicks: 0}})
        read = 0
        while read < 10:
            read += sum(len(rows) for rows in tail.poll(100, 0.5).values())
        tail.close()
        cached = reader._consumer.get_watermark_offsets(TopicPartition(clicks, 0), cached=True)
        assert cached[1] == 10
        produce(broker.bootstrap, clicks, StringCodec(), [(f"k{i}", "v") for i in range(5)])
        tail = reader.tail({0: {clicks: 15}})  # (as where another process's reading ended)
        assert not tail.poll(100, 0)  # the cache says 10 still: the broker is asked
        produce(broker.bootstrap, clicks, StringCodec(), [("k15", "v")])
        deadline = time.monotonic() + 30
        rows: list[Any] = []
        while not rows and time.monotonic() < deadline:
            rows = tail.poll(100, 0.5).get(0, [])
        assert [(row[1], row[2]) for row in rows] == [(15, b"k15")]
        tail.close()
    finally:
        reader.close()
