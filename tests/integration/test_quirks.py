"""What differs between the brokers goka-py runs on (:mod:`goka.kafka.quirks`), measured on the
session's broker: each quirk is detected where it is, and its workaround gives Kafka's answer."""

from __future__ import annotations

from collections.abc import Callable

import confluent_kafka
import pytest

from goka.dev import EmbeddedBroker
from goka.kafka.config import consumer_config, producer_config
from goka.kafka.offsets import EndOffsets
from goka.kafka.quirks import KAFKA, TANSU, quirks_of

pytestmark = [pytest.mark.kafka, pytest.mark.smoke]


def test_queried_watermarks_after_several_batches(
    kafka_broker: EmbeddedBroker, brokers: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1)
    # linger long, flushed after each three: each three go as one record batch (with no
    # linger the first of them could go alone, and Tansu's answer moved with the split)
    producer = confluent_kafka.Producer(producer_config(brokers, {"linger.ms": 1000}))
    for batch in range(5):  # five record batches of three records: offsets 0..14
        for i in range(3):
            producer.produce(topic, b"v", f"k{batch}-{i}".encode())
        assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer(consumer_config(brokers, {"group.id": "quirks"}))
    try:
        quirks = quirks_of(consumer, 10)
        asked = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, 0), timeout=10, cached=False
        )
    finally:
        consumer.close()
    if kafka_broker.kind == "kafka":
        assert quirks == KAFKA
        assert tuple(asked) == (0, 15)  # the high watermark: no workaround needed
    else:
        assert quirks == TANSU
        assert asked[1] == 13  # the last batch's base offset + 1: the workaround is still needed
    ends = EndOffsets(brokers)
    try:
        assert ends.watermarks([(topic, 0)]) == {(topic, 0): (0, 15)}
    finally:
        ends.close()
