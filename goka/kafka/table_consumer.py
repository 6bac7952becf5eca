"""A consumer that reads every partition of one topic from given offsets, without a group.

Views use it to follow table topics. It reports records, partition ends (EOF) and connection
trouble separately, so the caller can tell "caught up" from "broker gone". The end of a partition
is known from partition-EOF events (the fetch response's high watermark), which is right on Kafka
and on the embedded broker, whose queried high watermarks are not.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka

from goka.errors import BrokerError, TopicError
from goka.kafka.admin import topic_partitions
from goka.kafka.config import Brokers, consumer_config
from goka.kafka.offsets import asked_watermarks

__all__ = ["Polled", "TableConsumer"]

_KafkaError = confluent_kafka.KafkaError
_TRANSIENT = {
    _KafkaError._TRANSPORT, _KafkaError._ALL_BROKERS_DOWN, _KafkaError._RESOLVE,
    _KafkaError._TIMED_OUT, _KafkaError.UNKNOWN_TOPIC_OR_PART, _KafkaError.LEADER_NOT_AVAILABLE,
    _KafkaError.NOT_LEADER_FOR_PARTITION, _KafkaError._UNKNOWN_PARTITION,
}  # fmt: skip
_OUT_OF_RANGE = {_KafkaError._AUTO_OFFSET_RESET, _KafkaError.OFFSET_OUT_OF_RANGE}

#: One record: ``(partition, offset, key, value)``; a None value is a tombstone.
Row = tuple[int, int, bytes | None, bytes | None]


@dataclass
class Polled:
    """What one poll returned."""

    records: list[Row] = field(default_factory=list)
    eof: list[int] = field(default_factory=list)
    transient: list[str] = field(default_factory=list)
    fatal: str | None = None
    #: ``{partition: high watermark now}`` of partitions a fetch found out of range.
    ends: dict[int, int] = field(default_factory=dict)


class TableConsumer:
    """Reads all partitions of ``topic`` from explicit offsets. Not thread-safe.

    Args:
        brokers: bootstrap servers.
        topic: the topic to follow.
        kafka_config: extra librdkafka settings.
    """

    def __init__(
        self, brokers: Brokers, topic: str, kafka_config: Mapping[str, Any] | None = None
    ) -> None:
        self.topic = topic
        self._errors: list[str] = []
        self._lock = threading.Lock()
        settings = {
            **consumer_config(brokers, kafka_config),
            "enable.partition.eof": True,
            "auto.offset.reset": "error",  # a table topic shorter than our offsets is an error
            "error_cb": self._on_error,
            "fetch.wait.max.ms": 50,
        }
        self._consumer = confluent_kafka.Consumer(settings)

    def _on_error(self, error: Any) -> None:
        with self._lock:
            self._errors.append(str(error.str()))

    def partitions(self, timeout: float) -> int:
        """Return the topic's partition count.

        Raises:
            BrokerError: no broker answered.
            TopicError: the topic does not exist.
        """
        counts = topic_partitions(self._consumer, timeout)
        if self.topic not in counts:
            raise TopicError(f"table topic {self.topic!r} does not exist")
        return counts[self.topic]

    def assign(self, offsets: Mapping[int, int | None]) -> None:
        """Read each partition from its offset (None: from the beginning)."""
        self._consumer.assign([
            confluent_kafka.TopicPartition(
                self.topic, p, confluent_kafka.OFFSET_BEGINNING if o is None else o
            )
            for p, o in offsets.items()
        ])  # fmt: skip

    def poll(self, max_records: int, timeout: float) -> Polled:
        """Return what arrived within ``timeout`` seconds (at most ``max_records`` events)."""
        polled = Polled()
        append = polled.records.append
        for msg in self._consumer.consume(max_records, timeout):
            error = msg.error()
            if error is None:
                append((msg.partition(), msg.offset(), msg.key(), msg.value()))  # type: ignore[arg-type]
                continue
            code = error.code()
            if code == _KafkaError._PARTITION_EOF:
                polled.eof.append(msg.partition())  # type: ignore[arg-type]
            elif code in _OUT_OF_RANGE:
                polled.fatal = (
                    f"table topic {self.topic!r} partition {msg.partition()}: {error.str()} "
                    "(the topic was truncated or recreated; delete the local storage to rebuild)"
                )
                marks = asked_watermarks(self._consumer, self.topic, msg.partition())  # type: ignore[arg-type]
                if marks is not None:
                    polled.ends[msg.partition()] = marks[1]  # type: ignore[index]
            elif code in _TRANSIENT or error.retriable():
                polled.transient.append(error.str())
            else:
                polled.fatal = f"table topic {self.topic!r}: {error.str()}"
        with self._lock:
            polled.transient.extend(self._errors)
            self._errors.clear()
        return polled

    def high_watermark(self, partition: int) -> int | None:
        """The high watermark of ``partition`` from the last fetch response (None if unknown)."""
        try:
            _, high = self._consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(self.topic, partition), cached=True
            )
        except confluent_kafka.KafkaException:
            return None
        return high if high is not None and high >= 0 else None

    def reachable(self, timeout: float) -> bool:
        """Return True if a broker answers and the topic exists."""
        try:
            return self.topic in topic_partitions(self._consumer, timeout)
        except BrokerError:
            return False

    def close(self) -> None:
        """Close the consumer. Idempotent."""
        with contextlib.suppress(RuntimeError):  # already closed
            self._consumer.close()
