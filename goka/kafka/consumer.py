"""Reading topics partition by partition, without a consumer group."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import confluent_kafka

from goka.errors import BrokerError, TopicError
from goka.kafka.admin import topic_partitions
from goka.kafka.config import Brokers, consumer_config

__all__ = ["Record", "last_records", "read_to_end"]


@dataclass(frozen=True, slots=True)
class Record:
    """One raw message as stored in Kafka."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes], ...]


def read_to_end(
    brokers: Brokers,
    topic: str,
    *,
    timeout: float = 60.0,
    kafka_config: Mapping[str, Any] | None = None,
) -> Iterator[Record]:
    """Yield every message of ``topic`` from the beginning to the end observed while reading.

    The end of each partition is detected with partition-EOF events (the fetch response's high
    watermark), which is right on every broker; a fetch at the end waits 10 ms for more, not
    the default 500 (``kafka_config`` may say otherwise).

    Raises:
        TopicError: the topic does not exist.
        BrokerError: no broker answered, or the end was not reached within ``timeout`` seconds.
    """
    settings = {**consumer_config(brokers, {"fetch.wait.max.ms": 10, **(kafka_config or {})}),
                "enable.partition.eof": True}  # fmt: skip
    consumer = confluent_kafka.Consumer(settings)
    try:
        counts = topic_partitions(consumer, timeout)
        if topic not in counts:
            raise TopicError(f"topic {topic!r} does not exist")
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(counts[topic])
            ]
        )
        yield from _consume_until_eof(consumer, topic, counts[topic], timeout)
    finally:
        consumer.close()


def _consume_until_eof(
    consumer: Any, topic: str, partitions: int, timeout: float
) -> Iterator[Record]:
    open_partitions = set(range(partitions))
    deadline = time.monotonic() + timeout
    while open_partitions:
        if time.monotonic() > deadline:
            raise BrokerError(
                f"topic {topic!r}: partitions {sorted(open_partitions)} not read to the end "
                f"within {timeout:g}s"
            )
        for msg in consumer.consume(10_000, 0.05):
            error = msg.error()
            if error is None:
                yield _record(msg)
            elif error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                open_partitions.discard(msg.partition())
            else:
                raise BrokerError(f"reading topic {topic!r}: {error.str()}")


def last_records(
    brokers: Brokers,
    topics: list[str],
    *,
    kafka_config: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
) -> dict[tuple[str, int], Record | None]:
    """The last record of each partition of ``topics`` (None: the partition is empty).

    Raises:
        TimeoutError: a last record could not be read in ``timeout`` seconds.
        BrokerError: no broker answered.
    """
    from goka.kafka.offsets import EndOffsets

    ends = EndOffsets(brokers, dict(kafka_config or {}))
    try:
        counts = ends.partition_counts(topics)
        partitions = [(t, p) for t in topics for p in range(counts[t])]
        high, low = ends.high(partitions), ends.low(partitions)
    finally:
        ends.close()
    found: dict[tuple[str, int], Record | None] = dict.fromkeys(partitions)
    wanted = {tp: high[tp] - 1 for tp in partitions if high[tp] > low[tp]}
    if not wanted:
        return found
    consumer = confluent_kafka.Consumer({
        **consumer_config(brokers, {"fetch.wait.max.ms": 10, **(kafka_config or {})}),
        "enable.partition.eof": True,
    })  # fmt: skip
    try:
        consumer.assign([confluent_kafka.TopicPartition(t, p, max(low[(t, p)], o))
                         for (t, p), o in wanted.items()])  # fmt: skip
        deadline = time.monotonic() + timeout
        seen: set[tuple[str, int]] = set()
        while wanted.keys() - seen:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the last records of {sorted(wanted.keys() - seen)} not "
                                   f"read in {timeout:.0f} s")  # fmt: skip
            for message in consumer.consume(len(wanted.keys() - seen), 0.5):  # as they come
                tp = (str(message.topic()), int(message.partition() or 0))
                error = message.error()
                if error is not None:
                    if error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                        seen.add(tp)  # (compacted away: none at the end)
                    continue
                if int(message.offset() or 0) >= wanted[tp]:
                    found[tp] = _record(message)
                    seen.add(tp)
    finally:
        consumer.close()
    return found


def _record(msg: Any) -> Record:
    return Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                  msg.timestamp()[1], tuple(msg.headers() or ()))  # fmt: skip
