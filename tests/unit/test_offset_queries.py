"""Offset queries of a partition whose leader is being elected anew (a broker lost): errors
that pass are asked again, the metadata refreshed between tries; others fail at once."""

from __future__ import annotations

from typing import Any

import confluent_kafka
import pytest

from goka.errors import BrokerError
from goka.kafka.offsets import EndOffsets
from goka.kafka.quirks import KAFKA


class Consumer:
    """Answers the watermark queries with ``errors`` first (one per query), then (0, 7)."""

    def __init__(self, *errors: int) -> None:
        self.errors, self.asked, self.refreshed = list(errors), 0, 0

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        self.asked += 1
        if self.errors:
            raise confluent_kafka.KafkaException(confluent_kafka.KafkaError(self.errors.pop(0)))
        return 0, 7

    def list_topics(self, timeout: float) -> None:
        self.refreshed += 1

    def close(self) -> None:
        pass


def ends_with(consumer: Consumer, timeout: float = 5) -> EndOffsets:
    ends = EndOffsets("127.0.0.1:1", timeout=timeout)
    ends._consumer.close()
    ends._consumer, ends._quirks = consumer, KAFKA  # type: ignore[assignment]
    return ends


def test_a_partition_unknown_while_its_leader_is_elected_is_asked_again() -> None:
    err = confluent_kafka.KafkaError
    consumer = Consumer(err._UNKNOWN_PARTITION, err.LEADER_NOT_AVAILABLE, err._TRANSPORT)
    assert ends_with(consumer).watermarks([("t", 3)]) == {("t", 3): (0, 7)}
    assert consumer.asked == 4 and consumer.refreshed == 3  # the leaders looked up each time


def test_an_error_that_does_not_pass_fails_at_once_naming_the_partition() -> None:
    consumer = Consumer(confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(BrokerError, match="cannot read the offsets of 't' partition 3"):
        ends_with(consumer).watermarks([("t", 3)])
    assert consumer.asked == 1


def test_errors_that_pass_fail_after_the_timeout() -> None:
    consumer = Consumer(*[confluent_kafka.KafkaError._UNKNOWN_PARTITION] * 1000)
    with pytest.raises(BrokerError, match="Unknown partition|UNKNOWN_PARTITION"):
        ends_with(consumer, timeout=0.3).watermarks([("t", 3)])
    assert 2 <= consumer.asked < 1000
