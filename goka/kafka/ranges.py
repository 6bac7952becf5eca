"""Offset ranges: where partitions end, and reading one partition's ranges of several topics.

End offsets are taken from fetch responses, not from offset queries: the embedded broker answers
``ListOffsets(latest)`` with the base offset of the last record batch + 1, while the high
watermark in a fetch response is right there as on Kafka.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import confluent_kafka

from goka.errors import BrokerError, TopicError, TopicRewoundError
from goka.kafka.admin import topic_partitions
from goka.kafka.config import Brokers, bootstrap_servers, consumer_config

__all__ = ["EndOffsets", "KafkaTail", "RangeReader", "RecordReader", "Row", "Tail"]

log = logging.getLogger(__name__)

TP = tuple[str, int]
#: ``(topic, offset, key, value, timestamp_ms, headers)``.
Row = tuple[str, int, bytes | None, bytes | None, int, list[tuple[str, bytes]] | None]
_EOF = confluent_kafka.KafkaError._PARTITION_EOF
_OUT_OF_RANGE = {
    confluent_kafka.KafkaError._AUTO_OFFSET_RESET, confluent_kafka.KafkaError.OFFSET_OUT_OF_RANGE
}  # fmt: skip

#: A fetch waits this long for records (kafka_config may say otherwise: on Kafka, which answers
#: as soon as records are there, a longer wait costs nothing; the embedded broker always waits it).
_FETCH_WAIT = {"fetch.wait.max.ms": 10}


def _fast_fetch(brokers: Brokers, kafka_config: Mapping[str, Any] | None) -> dict[str, Any]:
    config = consumer_config(brokers, {**_FETCH_WAIT, **(kafka_config or {})})
    config["enable.partition.eof"] = True  # how reads know they reached the end
    config["auto.offset.reset"] = "error"  # never jump over records: see TopicRewoundError
    return config


def _out_of_range(topic: str, partition: int, offset: int, error: Any) -> TopicError:
    """Kafka's answer to a fetch from an offset the partition no longer holds."""
    return TopicError(
        f"topic {topic!r} partition {partition}: offset {offset} is out of range "
        f"({error.str()}): the topic was truncated or recreated, or its records were deleted "
        "before they were read. Nothing was skipped"
    )


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
        self._consumer = confluent_kafka.Consumer(_fast_fetch(brokers, kafka_config))

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
        return {tp: high for tp, (_, high) in self.watermarks(partitions).items()}

    def watermarks(self, partitions: list[TP]) -> dict[TP, tuple[int, int]]:
        """Return the first offset and the high watermark of each partition."""
        queried = {tp: self._query(tp) for tp in partitions}
        probe = {tp: hi for tp, (lo, hi) in queried.items() if hi > lo}
        found = self._fetch_high(probe) if probe else {}
        return {tp: (lo, found.get(tp, hi)) for tp, (lo, hi) in queried.items()}

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

    def tail(self, starts: Mapping[int, Mapping[str, int]]) -> Tail:
        """Follow ``{partition: {topic: start offset}}`` as records arrive."""
        ...

    def commit(
        self,
        group: str,
        partition: int,
        offsets: Mapping[str, int],
        note: str,
        *,
        wait: bool = False,
    ) -> None:
        """Record the next offset of ``partition`` of each topic that ``group`` has processed
        (Kafka's committed offsets), with ``note`` as metadata: asynchronously, or if ``wait``
        until the broker answered (a failure is logged: these offsets inform, the stores
        hold the truth)."""
        ...

    def committed(
        self, group: str, partition: int, topics: list[str]
    ) -> dict[str, tuple[int, str]]:
        """The committed ``{topic: (offset, note)}`` of ``group`` (topics without one left out)."""
        ...

    def close(self) -> None:
        """Release the reader's connections. Idempotent."""
        ...


class Tail(Protocol):
    """Records of one partition number as they arrive (see :meth:`RecordReader.tail`)."""

    def poll(self, max_rows: int, timeout: float) -> dict[int, list[Row]]:
        """Return the records that arrived by partition, at most ``max_rows``; wait up to
        ``timeout`` seconds for the first one (return as soon as there is one)."""
        ...

    def close(self) -> None:
        """Stop following."""
        ...


class RangeReader:
    """Reads offset ranges of one partition number in several topics (a :class:`RecordReader`
    on Kafka). Not thread-safe; reuse it across tasks: a new consumer costs a connection and a
    first fetch."""

    def __init__(self, brokers: Brokers, kafka_config: Mapping[str, Any] | None = None) -> None:
        self._brokers, self._kafka_config = brokers, kafka_config
        self._last_error: tuple[float, str] | None = None
        self._consumer = confluent_kafka.Consumer(
            {**_fast_fetch(brokers, kafka_config), "error_cb": self._on_error}
        )
        self._ends: EndOffsets | None = None
        self._groups: dict[str, confluent_kafka.Consumer] = {}
        self._closed = False

    def _on_error(self, error: Any) -> None:  # librdkafka's: connection trouble, mostly
        self._last_error = (time.monotonic(), str(error.str()))

    def _stalled(self, what: str, seconds: float) -> BrokerError:
        """The error for a read that got nothing for ``seconds``: the broker is named as the
        cause if librdkafka reported trouble meanwhile."""
        if self._last_error is not None and time.monotonic() - self._last_error[0] < seconds + 1:
            servers = bootstrap_servers(self._brokers)
            return BrokerError(
                f"{what}: nothing read for {seconds:g}s, the brokers ({servers}) cannot be "
                f"reached: {self._last_error[1]}"
            )
        return BrokerError(f"{what}: nothing read for {seconds:g}s (the brokers answer, "
                           "but send no records)")  # fmt: skip

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """Return the first offset and the high watermark of ``topic``/``partition``.

        Raises:
            BrokerError: the broker did not answer.
        """
        if self._ends is None:
            self._ends = EndOffsets(self._brokers, self._kafka_config)
        return self._ends.watermarks([(topic, partition)])[(topic, partition)]

    def close(self) -> None:
        """Close the consumers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for consumer in [self._consumer, *self._groups.values()]:
            consumer.close()
        if self._ends is not None:
            self._ends.close()

    def tail(self, starts: Mapping[int, Mapping[str, int]]) -> KafkaTail:
        """Follow ``{partition: {topic: start}}`` (uses this reader's consumer: close the tail
        before reading ranges again)."""
        self._consumer.assign(
            [confluent_kafka.TopicPartition(t, p, o)
             for p, offsets in starts.items() for t, o in offsets.items()]
        )  # fmt: skip
        return KafkaTail(self._consumer, starts)

    def _group(self, group: str) -> confluent_kafka.Consumer:
        if group not in self._groups:
            config = consumer_config(self._brokers, self._kafka_config)
            config.update({"group.id": group, "enable.auto.commit": False})
            self._groups[group] = confluent_kafka.Consumer(config)
        return self._groups[group]

    def commit(
        self,
        group: str,
        partition: int,
        offsets: Mapping[str, int],
        note: str,
        *,
        wait: bool = False,
    ) -> None:
        """Commit as ``group`` (without joining it: no rebalance, as the processor's tasks own
        their partitions). A failure is logged (by librdkafka if asynchronous); the next commit
        carries the newer offsets anyway."""
        if not offsets:
            return
        found = [confluent_kafka.TopicPartition(t, partition, o, metadata=note)
                 for t, o in offsets.items()]  # fmt: skip
        try:
            if wait:
                self._group(group).commit(offsets=found, asynchronous=False)
            else:
                self._group(group).commit(offsets=found, asynchronous=True)
        except confluent_kafka.KafkaException as exc:
            log.warning("group %s partition %d: offsets %s not committed: %s",
                        group, partition, dict(offsets), exc)  # fmt: skip

    def committed(
        self, group: str, partition: int, topics: list[str]
    ) -> dict[str, tuple[int, str]]:
        """Raises: BrokerError: the group coordinator did not answer."""
        try:
            found = self._group(group).committed(
                [confluent_kafka.TopicPartition(t, partition) for t in topics], timeout=30
            )
        except confluent_kafka.KafkaException as exc:
            raise BrokerError(
                f"cannot read the committed offsets of group {group!r}: {exc}"
            ) from exc
        return {tp.topic: (tp.offset, tp.metadata or "") for tp in found if tp.offset >= 0}

    def read(
        self, partition: int, ranges: Mapping[str, tuple[int, int]], timeout: float, chunk: int
    ) -> Iterator[list[Row]]:
        """Yield chunks of rows of ``[start, end)`` of each topic's ``partition``, in offset order
        per topic.

        Raises:
            BrokerError: nothing was read for ``timeout`` seconds (naming the brokers if they
                cannot be reached).
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
                    raise self._stalled(f"partition {partition}: reading {todo}", timeout)
                rows = self._consume(todo, chunk)
                if rows:
                    deadline = _Deadline(timeout)  # a long read that progresses goes on
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
                elif error.code() in _OUT_OF_RANGE:
                    raise _out_of_range(topic, msg.partition() or 0, todo[topic][0], error)
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


class KafkaTail:
    """A :class:`Tail` over an assigned consumer: ``consume`` would wait for ``max_rows``
    records, so it takes what is there without waiting, and waits for one record only when
    there was none. About every second it compares the high watermarks of the last fetch
    responses with how far it read: a topic that went back fails the tail (Kafka answers a
    fetch beyond the end with an error, the embedded broker with nothing)."""

    #: Seconds between checks of the fetched high watermarks.
    CHECK_SECONDS = 1.0

    def __init__(
        self, consumer: confluent_kafka.Consumer, starts: Mapping[int, Mapping[str, int]]
    ) -> None:
        self._consumer = consumer
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
            if high is not None and 0 <= high < offset:
                raise TopicRewoundError(topic, partition, offset, 0, high, reader="this processor")

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
        rows: dict[int, list[Row]] = {}
        for msg in messages:
            error = msg.error()
            if error is not None:
                if error.code() in _OUT_OF_RANGE:
                    tp = (msg.topic() or "", msg.partition() or 0)
                    raise _out_of_range(*tp, self._next().get(tp, -1), error)
                if error.code() != _EOF:
                    raise BrokerError(f"reading {msg.topic()!r}: {error.str()}")
                continue
            row = (msg.topic(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1],
                   msg.headers())  # fmt: skip
            partition: int = msg.partition()  # type: ignore[assignment]  # set on records
            found = rows.get(partition)
            if found is None:
                rows[partition] = found = []
            found.append(row)  # type: ignore[arg-type]  # topic and offset are set on records
        return rows

    def close(self) -> None:
        """Stop following (the consumer stays open for its reader)."""
        self._consumer.unassign()
