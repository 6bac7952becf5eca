"""Keys of any bytes, as Go Goka's services write them (raw bytes, Sarama's FNV-1a
partitioner), for the tests that read them back through views, gRPC and HTTP."""

from __future__ import annotations

import confluent_kafka

from goka.kafka.config import producer_config

#: What a Go service may use as keys: Latin-1 text, binary ids, a cut UTF-8 sequence, an
#: encoded surrogate, NUL bytes, and ordinary text.
GO_KEYS = [
    b"caf\xe9",
    b"\x00\x01\xff\xfe",
    b"\xc3",
    b"\xed\xa0\x80",
    b"a\x00b",
    b"user-1",
    b"\xf0\x9f\x98\x80",
]


def written_as_go_does(brokers: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    """Produce raw key bytes with librdkafka's FNV-1a partitioner (Sarama's hash partitioner)."""
    producer = confluent_kafka.Producer(producer_config(brokers, {"partitioner": "fnv1a"}))
    for key, value in records:
        producer.produce(topic, value, key)
    assert producer.flush(30) == 0
