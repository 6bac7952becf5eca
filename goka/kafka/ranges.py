"""Offset ranges: where partitions end, and reading one partition's ranges of several topics.

End offsets are taken from fetch responses, not from offset queries: the embedded broker answers
``ListOffsets(latest)`` with the base offset of the last record batch + 1, while the high
watermark in a fetch response is right there as on Kafka.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import confluent_kafka

from goka.errors import BrokerError, TopicError
from goka.kafka.admin import topic_partitions
from goka.kafka.config import Brokers, consumer_config

__all__ = ["EndOffsets", "RangeReader", "RecordReader", "Row"]

TP = tuple[str, int]
#: ``(topic, offset, key, value, timestamp_ms, headers)``.
Row = tuple[str, int, bytes | None, bytes | None, int, list[tuple[str, bytes]] | None]
_EOF = confluent_kafka.KafkaError._PARTITION_EOF

_FAST_FETCH = {"fetch.wait.max.ms": 10, "enable.partition.eof": True}


class EndOffsets:
    """Finds the low and high watermarks of partitions. Not thread-safe; reuse it.

    Args:
        brokers: bootstrap servers.
        kafka_config: extra librdkafka settings.
        timeout: seconds for each round of requests.
    """

    def __init__(
        self, brokers: Brokers, kafka_config: Mapping[str, Any] | None = None, timeout: float = 30
    ) -> None:
        self.timeout = timeout
        self._consumer = confluent_kafka.Consumer(
            {**consumer_config(brokers, kafka_config), **_FAST_FETCH}
        )

    def partition_counts(self, topics: list[str]) -> dict[str, int]:
        """Return the partition count of each topic.

        Raises:
            TopicError: naming the topics that do not exist.
        """
        counts = topic_partitions(self._consumer, self.timeout)
        missing = [t for t in topics if t not in counts]
        if missing:
            raise TopicError(f"topics do not exist: {', '.join(map(repr, missing))}")
        return {t: counts[t] for t in topics}

    def low(self, partitions: list[TP]) -> dict[TP, int]:
        """Return the first offset of each partition."""
        return {tp: self._query(tp)[0] for tp in partitions}

    def high(self, partitions: list[TP]) -> dict[TP, int]:
        """Return the high watermark (the next offset to be written) of each partition."""
        queried = {tp: self._query(tp) for tp in partitions}
        probe = {tp: hi for tp, (lo, hi) in queried.items() if hi > lo}
        ends = {tp: hi for tp, (_, hi) in queried.items()}
        if probe:
            ends.update(self._fetch_high(probe))
        return ends

    def _query(self, tp: TP) -> tuple[int, int]:
        try:
            lo, hi = self._consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(*tp), timeout=self.timeout, cached=False
            )
        except confluent_kafka.KafkaException as exc:
            raise BrokerError(
                f"cannot read the offsets of {tp[0]!r} partition {tp[1]}: {exc}"
            ) from exc
        return int(lo), int(hi)

    def _fetch_high(self, queried: dict[TP, int]) -> dict[TP, int]:
        """Fetch the last record each partition reported, to learn the fetch response's HWM."""
        self._consumer.assign(
            [confluent_kafka.TopicPartition(t, p, hi - 1) for (t, p), hi in queried.items()]
        )
        waiting = set(queried)
        deadline = _Deadline(self.timeout)
        while waiting and not deadline.passed():
            # ask for as many events as partitions wait: consume() returns as soon as it has them
            for msg in self._consumer.consume(len(waiting), 0.1):
                waiting.discard((msg.topic(), msg.partition()))
        if waiting:
            raise BrokerError(f"no fetch response for {sorted(waiting)} within {self.timeout:g}s")
        ends = {}
        for (topic, partition), hi in queried.items():
            _, cached = self._consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic, partition), cached=True
            )
            ends[(topic, partition)] = max(hi, int(cached))
        self._consumer.unassign()
        return ends

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self._end = time.monotonic() + seconds

    def passed(self) -> bool:
        return time.monotonic() > self._end


class RecordReader(Protocol):
    """Reads records of one partition number (the reader seam of partition processors)."""

    def read(
        self, partition: int, ranges: Mapping[str, tuple[int, int]], timeout: float, chunk: int
    ) -> Iterator[list[Row]]:
        """Yield chunks of rows of ``[start, end)`` of each topic, in offset order per topic."""
        ...

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """Return the first offset and the high watermark (next offset to be written)."""
        ...

    def close(self) -> None:
        """Release the reader's connections. Idempotent."""
        ...


class RangeReader:
    """Reads offset ranges of one partition number in several topics (a :class:`RecordReader`
    on Kafka). Not thread-safe; reuse it across tasks: a new consumer costs a connection and a
    first fetch."""

    def __init__(self, brokers: Brokers, kafka_config: Mapping[str, Any] | None = None) -> None:
        self._brokers, self._kafka_config = brokers, kafka_config
        self._consumer = confluent_kafka.Consumer(
            {**consumer_config(brokers, kafka_config), **_FAST_FETCH}
        )
        self._ends: EndOffsets | None = None
        self._closed = False

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """Return the first offset and the high watermark of ``topic``/``partition``.

        Raises:
            BrokerError: the broker did not answer.
        """
        if self._ends is None:
            self._ends = EndOffsets(self._brokers, self._kafka_config)
        tp = (topic, partition)
        return self._ends.low([tp])[tp], self._ends.high([tp])[tp]

    def close(self) -> None:
        """Close the consumers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._consumer.close()
        if self._ends is not None:
            self._ends.close()

    def read(
        self, partition: int, ranges: Mapping[str, tuple[int, int]], timeout: float, chunk: int
    ) -> Iterator[list[Row]]:
        """Yield chunks of rows of ``[start, end)`` of each topic's ``partition``, in offset order
        per topic.

        Raises:
            BrokerError: the ranges were not read completely within ``timeout`` seconds.
        """
        todo = {t: r for t, r in ranges.items() if r[1] > r[0]}
        if not todo:
            return
        self._consumer.assign(
            [confluent_kafka.TopicPartition(t, partition, start) for t, (start, _) in todo.items()]
        )
        deadline = _Deadline(timeout)
        try:
            while todo:
                if deadline.passed():
                    raise BrokerError(
                        f"partition {partition}: ranges {todo} not read within {timeout:g}s"
                    )
                rows = self._consume(todo, chunk)
                if rows:
                    yield rows
        finally:
            self._consumer.unassign()

    def _consume(self, todo: dict[str, tuple[int, int]], chunk: int) -> list[Row]:
        rows: list[Row] = []
        append = rows.append
        # consume() waits until it has ``num`` events or the timeout: never ask for more than
        # the ranges can still hold, or every range end costs a full timeout
        left = sum(end - start for start, end in todo.values()) + len(todo)
        for msg in self._consumer.consume(max(1, min(chunk, left)), 0.2):
            topic = msg.topic()
            if topic not in todo:
                continue
            end = todo[topic][1]
            error = msg.error()
            if error is not None:
                if error.code() == _EOF and (msg.offset() or 0) >= end:
                    del todo[topic]
                elif error.code() != _EOF:
                    raise BrokerError(f"reading {topic!r}: {error.str()}")
                continue
            offset: int = msg.offset()  # type: ignore[assignment]  # set on records
            if offset >= end:
                del todo[topic]
                continue
            append((topic, offset, msg.key(), msg.value(), msg.timestamp()[1], msg.headers()))  # type: ignore[arg-type]  # list headers
            todo[topic] = (offset + 1, end)
            if offset + 1 >= end:
                del todo[topic]
        return rows
