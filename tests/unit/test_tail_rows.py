"""The rows of consumed records, read by goka._speedups.tail_rows from confluent-kafka's Message
fields (after a calibration) against the reference that calls the Message methods
(:func:`goka.kafka.tail.rows_by_methods`)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from goka._accel import speedups
from goka.errors import BrokerError
from goka.kafka.config import consumer_config, producer_config
from goka.kafka.tail import TAIL_ROWS, KafkaTail, rows_by_methods

needs_c = pytest.mark.skipif(speedups is None, reason="goka._speedups is not built")


def _messages(seed: int, count: int) -> list[Any]:
    rng = random.Random(seed)
    found = []
    for offset in range(count):
        fields: dict[str, Any] = {
            "topic": rng.choice(["clicks", "pages", "ü-topic"]),
            "partition": rng.choice([0, 1, 3, 2_147_483_647]),
            "offset": offset * rng.choice([1, 1_000_003]),
            "timestamp": (confluent_kafka.TIMESTAMP_CREATE_TIME, rng.randrange(-1, 2**62)),
        }
        if rng.random() < 0.8:
            fields["key"] = rng.randbytes(rng.randrange(0, 12))
        if rng.random() < 0.8:
            fields["value"] = rng.randbytes(rng.randrange(0, 40))
        if rng.random() < 0.3:
            fields["headers"] = [(f"h{i}", rng.randbytes(3)) for i in range(rng.randrange(3))]
        if rng.random() < 0.05:
            fields["error"] = KafkaError(
                rng.choice([KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART])
            )
        found.append(confluent_kafka.Message(**fields))
    return found


@needs_c
def test_records_are_read_directly_on_this_confluent_kafka() -> None:
    assert TAIL_ROWS is not None


@needs_c
@pytest.mark.parametrize("seed", range(5))
def test_rows_read_directly_equal_the_rows_the_methods_give(seed: int) -> None:
    assert TAIL_ROWS is not None
    messages = _messages(seed, 2_000)
    found = TAIL_ROWS(messages)
    assert found is not None
    rows, errors = found
    expected_rows, expected_errors = rows_by_methods(messages)
    assert rows == expected_rows
    assert list(rows) == list(expected_rows)  # partitions in the order first met
    assert [id(m) for m in errors] == [id(m) for m in expected_errors] != []
    assert sum(map(len, rows.values())) + len(errors) == len(messages)


@needs_c
def test_a_message_of_another_type_leaves_the_rows_to_the_methods() -> None:
    assert TAIL_ROWS is not None

    class Lookalike:  # what a test double of a consumer might return
        def __getattr__(self, name: str) -> Callable[[], Any]:
            return lambda: None

    assert TAIL_ROWS([*_messages(1, 3), Lookalike()]) is None
    assert TAIL_ROWS([]) == ({}, [])
    with pytest.raises(TypeError, match="list of messages"):
        TAIL_ROWS(tuple(_messages(1, 3)))


class _Consumer:
    """What KafkaTail calls on a consumer, with records given."""

    def __init__(self, messages: list[Any]) -> None:
        self.messages = messages

    def consume(self, max_rows: int, timeout: float) -> list[Any]:
        found, self.messages = self.messages, []
        return found

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return partitions


def test_a_tail_skips_the_ends_of_partitions_and_fails_on_a_broker_error() -> None:
    eof = confluent_kafka.Message(topic="clicks", partition=0, offset=4,
                                  error=KafkaError(KafkaError._PARTITION_EOF))  # fmt: skip
    record = confluent_kafka.Message(topic="clicks", partition=0, offset=3, key=b"k",
                                     value=b"v", timestamp=(1, 17))  # fmt: skip
    tail = KafkaTail(_Consumer([record, eof]), {0: {"clicks": 0}})  # type: ignore[arg-type]
    assert tail.poll(10, 0) == {0: [("clicks", 3, b"k", b"v", 17, None)]}
    broken = confluent_kafka.Message(topic="clicks", partition=1, offset=0,
                                     error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))  # fmt: skip
    tail = KafkaTail(_Consumer([record, broken]), {0: {"clicks": 0}})  # type: ignore[arg-type]
    with pytest.raises(BrokerError, match="reading 'clicks'"):
        tail.poll(10, 0)


@pytest.mark.kafka
@needs_c
def test_consumed_records_with_headers_read_directly_as_by_the_methods(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    """Consumed records keep their headers in C until asked: read directly, the row asks."""
    assert TAIL_ROWS is not None
    topic = new_topic(partitions=2)
    producer = confluent_kafka.Producer(producer_config(brokers))
    for i in range(300):
        headers: list[tuple[str, str | bytes | None]] | None = (
            [("n", b"%d" % i), ("n", b"again")] if i % 3 else None
        )
        producer.produce(topic, None if i % 7 == 0 else b"v%d" % i, None if i % 5 == 0 else b"k",
                         partition=i % 2, headers=headers, timestamp=1_700_000_000_000 + i)  # fmt: skip
    assert producer.flush(10) == 0
    consumer = Consumer({**consumer_config(brokers), "group.id": f"{topic}-g",
                         "enable.partition.eof": True})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    messages: list[Any] = []
    while sum(m.error() is not None for m in messages) < 2:
        messages += consumer.consume(500, 5)
    consumer.close()
    found = TAIL_ROWS(messages)  # first: the headers are still the records' C headers
    assert found is not None
    rows, errors = found
    assert (rows, errors) == rows_by_methods(messages)
    assert sorted(len(r) for r in rows.values()) == [150, 150]
    assert rows[1][0][5] == [("n", b"1"), ("n", b"again")] and rows[0][0][5] is None
    assert [r[4] for r in rows[0][:2]] == [1_700_000_000_000, 1_700_000_000_002]
    assert [r[2:4] for r in rows[0][:4]] == [(None, None), (b"k", b"v2"), (b"k", b"v4"),
                                             (b"k", b"v6")]  # fmt: skip
