"""Following partitions as records arrive (a :class:`~goka.kafka.reader.Tail` on Kafka)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import confluent_kafka

from goka._accel import speedups
from goka.errors import BrokerError, TopicRewoundError
from goka.kafka.offsets import EOF, OUT_OF_RANGE, TP, out_of_range
from goka.kafka.reader import Row

__all__ = ["KafkaTail", "rows_by_methods"]


def rows_by_methods(messages: list[Any]) -> tuple[dict[int, list[Row]], list[Any]]:
    """The records of consumed ``messages`` as rows by partition, and the messages that carry
    an error, in order (the reference of ``goka._speedups.tail_rows``)."""
    rows: dict[int, list[Row]] = {}
    errors = []
    for msg in messages:
        if msg.error() is not None:
            errors.append(msg)
            continue
        row = (msg.topic(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1],
               msg.headers())  # fmt: skip
        found = rows.get(msg.partition())
        if found is None:
            rows[msg.partition()] = found = []
        found.append(row)
    return rows, errors


def _calibrated() -> bool:
    """Whether goka._speedups reads consumed records' fields directly: a probe built with
    confluent-kafka's public constructor must read back as given (else the methods are
    called: 0.33 against 0.15 µs a record, measured)."""
    if speedups is None:
        return False
    topic, key, value = "goka-probe", b"key-7", b"value-9"
    headers: list[tuple[str, str | bytes | None]] = [("h", b"1")]
    partition, offset, timestamp = 123_457, 9_876_543_210_123, 1_700_000_000_123
    try:
        probe = confluent_kafka.Message(
            topic=topic, key=key, value=value, headers=headers, partition=partition,
            offset=offset, timestamp=(confluent_kafka.TIMESTAMP_CREATE_TIME, timestamp),
        )  # fmt: skip
    except Exception:  # a confluent-kafka without the constructor
        return False
    return bool(speedups.calibrate_record(probe, topic, key, value, headers, partition, offset,
                                          timestamp))  # fmt: skip


#: goka._speedups.tail_rows where it reads consumed records directly (see _calibrated).
TAIL_ROWS = speedups.tail_rows if speedups is not None and _calibrated() else None


class KafkaTail:
    """A :class:`Tail` over an assigned consumer: ``consume`` would wait for ``max_rows``
    records, so it takes what is there without waiting, and waits for one record only when
    there was none. About every second it compares the high watermarks of the last fetch
    responses with how far it read: a topic that went back fails the tail (Kafka answers a
    fetch beyond the end with an error, the embedded broker with nothing).

    Those watermarks can be older than the start: librdkafka keeps a partition's last fetch
    answer across assignments (and notes one it drops as outdated), so a consumer that
    followed a partition up to 10 while another process read on to 15 holds 10 until its
    first fetch from 15 is answered. An end before the position is therefore asked of the
    broker (``asked``: ``(low, high)`` of a topic and partition, as the reader's queries
    answer them) before the tail fails; without ``asked`` it fails at once."""

    #: Seconds between checks of the fetched high watermarks.
    CHECK_SECONDS = 1.0

    def __init__(
        self, consumer: confluent_kafka.Consumer, starts: Mapping[int, Mapping[str, int]],
        asked: Callable[[str, int], tuple[int, int]] | None = None,
    ) -> None:  # fmt: skip
        self._consumer, self._asked = consumer, asked
        self._starts = {(t, p): o for p, offsets in starts.items() for t, o in offsets.items()}
        self._checked = time.monotonic()

    def _next(self) -> dict[TP, int]:
        """The next offset of each followed partition (its start until a record came)."""
        found = self._consumer.position(
            [confluent_kafka.TopicPartition(t, p) for t, p in self._starts]
        )
        return {(tp.topic, tp.partition): tp.offset if tp.offset >= 0 else self._starts[
            (tp.topic, tp.partition)] for tp in found}  # fmt: skip

    def _check(self) -> None:
        self._checked = time.monotonic()
        for (topic, partition), offset in self._next().items():
            _, high = self._consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic, partition), cached=True
            )
            if high is None or not 0 <= high < offset:
                continue
            low = 0
            if self._asked is not None:  # (the cached end may predate the start: see above)
                low, high = self._asked(topic, partition)
            if high < offset:
                raise TopicRewoundError(topic, partition, offset, low, high,
                                        reader="this processor")  # fmt: skip

    def poll(self, max_rows: int, timeout: float) -> dict[int, list[Row]]:
        """Raises: BrokerError: the broker reported an error for a followed partition;
        TopicError: a followed topic went back (truncated, recreated)."""
        if time.monotonic() - self._checked > self.CHECK_SECONDS:
            self._check()
        messages = self._consumer.consume(max_rows, 0)
        if not messages:
            first = self._consumer.poll(timeout)
            if first is None:
                return {}
            messages = (
                [first, *self._consumer.consume(max_rows - 1, 0)] if max_rows > 1 else [first]
            )
        found = None if TAIL_ROWS is None else TAIL_ROWS(messages)
        rows, errors = rows_by_methods(messages) if found is None else found
        for msg in errors:
            error = msg.error()
            if error.code() in OUT_OF_RANGE:
                tp = (msg.topic() or "", msg.partition() or 0)
                raise out_of_range(*tp, self._next().get(tp, -1), error, consumer=self._consumer)
            if error.code() != EOF:
                raise BrokerError(f"reading {msg.topic()!r}: {error.str()}")
        return rows

    def watermarks(self) -> dict[TP, tuple[int, int]]:
        """See :meth:`goka.kafka.reader.Tail.watermarks` (from the last fetch responses)."""
        found = {}
        for topic, partition in self._starts:
            low, high = self._consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic, partition), cached=True
            )
            if low is not None and high is not None and 0 <= low <= high:
                found[(topic, partition)] = (int(low), int(high))
        return found

    def close(self) -> None:
        """Stop following (the consumer stays open for its reader)."""
        self._consumer.unassign()
