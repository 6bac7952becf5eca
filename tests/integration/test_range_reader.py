"""The partition processors' reader on the embedded broker: what an epoch's start asks for is
asked at once (``prefetch``) or known from the reads before it (``tell``, ``Tail.watermarks``)
and answered from there once, then afresh."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import confluent_kafka
import pytest

from goka.kafka.config import producer_config
from goka.kafka.ranges import RangeReader

pytestmark = pytest.mark.kafka


def write(brokers: str, topic: str, partition: int, count: int) -> None:
    producer = confluent_kafka.Producer(producer_config(brokers))
    for i in range(count):
        producer.produce(topic, b"v", b"k%d" % i, partition=partition)
    assert producer.flush(30) == 0


@contextmanager
def reading(
    brokers: str, new_topic: Callable[..., str], counts: tuple[int, int]
) -> Iterator[tuple[str, RangeReader]]:
    """A new topic of two partitions holding ``counts`` records, and a reader (closed after)."""
    topic = new_topic(partitions=2)
    for partition, count in enumerate(counts):
        write(brokers, topic, partition, count)
    reader = RangeReader(brokers)
    try:
        yield topic, reader
    finally:
        reader.close()


def test_prefetched_watermarks_and_offsets_answer_once_then_afresh(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    with reading(brokers, new_topic, (10, 5)) as (topic, reader):
        assert reader.commit("g", 0, {topic: 7}, "first", wait=True)
        reader.prefetch([(topic, 0), (topic, 1)], "g")
        write(brokers, topic, 0, 3)  # after the prefetch
        assert reader.commit("g", 0, {topic: 9}, "second", wait=True)
        assert reader.watermarks(topic, 0) == (0, 10)  # as prefetched
        assert reader.watermarks(topic, 0) == (0, 13)  # asked again: afresh
        assert reader.watermarks(topic, 1) == (0, 5)
        # (the embedded broker keeps no commit metadata: the offsets are compared)
        assert reader.committed("g", 0, [topic])[topic][0] == 7  # as prefetched
        assert reader.committed("g", 0, [topic])[topic][0] == 9
        assert reader.committed("g", 1, [topic]) == {}  # none committed, prefetched or not

        reader.prefetch([(topic, 0)], "g")
        reader.prefetch([])  # forgets what the first call fetched
        write(brokers, topic, 0, 2)
        assert reader.watermarks(topic, 0) == (0, 15)


def test_a_tail_knows_the_watermarks_of_what_it_read_and_the_reader_is_told_them(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    with reading(brokers, new_topic, (10, 4)) as (topic, reader):
        tail = reader.tail({0: {topic: 3}, 1: {topic: 0}})
        read: dict[int, int] = {0: 0, 1: 0}
        deadline = time.monotonic() + 30
        while read != {0: 7, 1: 4}:
            assert time.monotonic() < deadline, f"read {read}"
            for partition, rows in tail.poll(100, 0.5).items():
                read[partition] += len(rows)
        marks = tail.watermarks()
        tail.close()
        assert marks == {(topic, 0): (0, 10), (topic, 1): (0, 4)}
        write(brokers, topic, 0, 2)  # after the reads: a told answer is what they said
        reader.tell({(topic, 0): marks[(topic, 0)]}, {("g", topic, 0): (10, "")})
        assert reader.watermarks(topic, 0) == (0, 10)  # as told, once
        assert reader.watermarks(topic, 0) == (0, 12)
        assert reader.committed("g", 0, [topic]) == {topic: (10, "")}  # as told, once
        assert reader.committed("g", 0, [topic]) == {}  # asked: none committed


def test_an_idle_reader_follows_a_topic_new_to_it_at_once(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    # librdkafka asked a topic new to a consumer idle for a second or more at its next
    # metadata tick, about 1 s later: a new epoch's task in another process waited so
    producer = confluent_kafka.Producer(producer_config(brokers))
    with reading(brokers, new_topic, (3, 0)) as (first, reader):
        assert sum(len(rows) for rows in reader.read(0, {first: (0, 3)}, 100, 10)) == 3
        second = new_topic(partitions=1)
        producer.produce(second, b"v", b"k")
        assert producer.flush(30) == 0
        time.sleep(2)  # idle (the condition itself: there is nothing to await)
        began = time.monotonic()
        tail = reader.tail({0: {second: 0}})
        try:
            while not tail.poll(10, 0.005):
                assert time.monotonic() - began < 10
        finally:
            tail.close()
        assert time.monotonic() - began < 0.4  # 0.9 s when its metadata was not asked first
