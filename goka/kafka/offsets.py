"""Where partitions begin and end (offset queries; on Tansu, the high watermark of a fetch
response: see :mod:`goka.kafka.quirks`), and the consumer settings and errors every reader of
ranges shares."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import confluent_kafka

from goka.errors import BrokerError, TopicError, TopicRewoundError
from goka.kafka.admin import topic_partitions
from goka.kafka.config import Brokers, consumer_config
from goka.kafka.quirks import Quirks, quirks_of

__all__ = [
    "EOF", "OUT_OF_RANGE", "QUERY_TRY", "TP", "Deadline", "EndOffsets", "asked_watermarks",
    "fast_fetch", "out_of_range",
]  # fmt: skip

TP = tuple[str, int]
EOF = confluent_kafka.KafkaError._PARTITION_EOF
OUT_OF_RANGE = {
    confluent_kafka.KafkaError._AUTO_OFFSET_RESET, confluent_kafka.KafkaError.OFFSET_OUT_OF_RANGE
}  # fmt: skip

#: Errors of an offset query that pass: a new partition's leader not yet known to the broker
#: asked, a leader that moved (a broker lost: its partitions' leaders are elected anew; until
#: then the client's metadata may lack the partition: ``_UNKNOWN_PARTITION``, which stopped a
#: processor in the failover test).
_E = confluent_kafka.KafkaError
PASSING = {
    _E.NOT_LEADER_FOR_PARTITION, _E.LEADER_NOT_AVAILABLE, _E.REPLICA_NOT_AVAILABLE,
    _E.OFFSET_NOT_AVAILABLE, _E.FENCED_LEADER_EPOCH, _E.UNKNOWN_LEADER_EPOCH, _E._TRANSPORT,
    _E._TIMED_OUT, _E.REQUEST_TIMED_OUT, _E.NOT_CONTROLLER, _E._ALL_BROKERS_DOWN,
    _E._DESTROY_BROKER, _E._NODE_UPDATE, _E._UNKNOWN_PARTITION,
}  # fmt: skip

#: Seconds an offset query waits for its answer before the leaders are looked up again.
QUERY_TRY = 3.0

#: A fetch waits this long for records (kafka_config may say otherwise). Readers of ranges learn
#: that a partition ended from a fetch that found nothing, which waits this long on any broker.
FETCH_WAIT = {"fetch.wait.max.ms": 10}


def fast_fetch(brokers: Brokers, kafka_config: Mapping[str, Any] | None) -> dict[str, Any]:
    config = consumer_config(brokers, {**FETCH_WAIT, **(kafka_config or {})})
    config["enable.partition.eof"] = True  # how reads know they reached the end
    config["auto.offset.reset"] = "error"  # never jump over records: see TopicRewoundError
    return config


def asked_watermarks(consumer: Any, topic: str, partition: int) -> tuple[int, int] | None:
    """The first offset and high watermark of ``topic``/``partition`` as any consumer's query
    answers them now (None: no answer within seconds), for messages about a partition that
    went back."""
    try:
        low, high = consumer.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, partition), timeout=QUERY_TRY, cached=False
        )
    except confluent_kafka.KafkaException:
        return None
    return int(low), int(high)


def out_of_range(
    topic: str, partition: int, offset: int, error: Any, *, consumer: Any = None,
    reader: str = "this processor",
) -> TopicError:  # fmt: skip
    """Kafka's answer to a fetch from an offset the partition no longer holds: a
    :class:`TopicRewoundError` where ``consumer`` can tell the partition's offsets now."""
    marks = None if consumer is None else asked_watermarks(consumer, topic, partition)
    if marks is not None and (offset > marks[1] or 0 <= offset < marks[0]):
        return TopicRewoundError(topic, partition, offset, *marks, reader=reader)
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
        self._consumer = confluent_kafka.Consumer(fast_fetch(brokers, kafka_config))
        self._pool: ThreadPoolExecutor | None = None  # queries at once (each waits its answer)
        self._quirks: Quirks | None = None

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
        if len(partitions) > 1:  # at once: a query waits for its answer (releasing the GIL)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(8, thread_name_prefix="goka-offsets")
            queried = dict(zip(partitions, self._pool.map(self._query, partitions), strict=True))
        else:
            queried = {tp: self._query(tp) for tp in partitions}
        if self._quirks is None:
            self._quirks = quirks_of(self._consumer, self.timeout)
        if not self._quirks.queried_watermark_is_batch_start:
            return queried
        probe = {tp: hi for tp, (lo, hi) in queried.items() if hi > lo}
        found = self._fetch_high(probe) if probe else {}
        return {tp: (lo, found.get(tp, hi)) for tp, (lo, hi) in queried.items()}

    def _query(self, tp: TP) -> tuple[int, int]:
        """Ask for ``tp``'s watermarks. Errors that pass (no leader yet, a leader that moved
        or died) are asked again until the timeout, after the metadata is asked afresh: a
        consumer asks the leader its metadata names, which is refreshed only every five
        minutes otherwise, and a query of a dead broker's partition times out until then."""
        deadline = Deadline(self.timeout)
        while True:
            try:
                lo, hi = self._consumer.get_watermark_offsets(
                    confluent_kafka.TopicPartition(*tp), timeout=min(QUERY_TRY, self.timeout),
                    cached=False,
                )  # fmt: skip
                return int(lo), int(hi)
            except confluent_kafka.KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if getattr(error, "code", lambda: None)() not in PASSING or deadline.passed():
                    raise BrokerError(
                        f"cannot read the offsets of {tp[0]!r} partition {tp[1]}: {exc}"
                    ) from exc
            with contextlib.suppress(confluent_kafka.KafkaException):
                self._consumer.list_topics(timeout=QUERY_TRY)  # the leaders as they are now
            time.sleep(0.05)

    def _fetch_high(self, queried: dict[TP, int]) -> dict[TP, int]:
        """Fetch the last record each partition reported, to learn the fetch response's high
        watermark (:attr:`~goka.kafka.quirks.Quirks.queried_watermark_is_batch_start`)."""
        self._consumer.assign(
            [confluent_kafka.TopicPartition(t, p, hi - 1) for (t, p), hi in queried.items()]
        )
        waiting = set(queried)
        deadline = Deadline(self.timeout)
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
        if self._pool is not None:
            self._pool.shutdown()
        self._consumer.close()


class Deadline:
    """A point in time ``seconds`` from now."""

    def __init__(self, seconds: float) -> None:
        self._end = time.monotonic() + seconds

    def passed(self) -> bool:
        return time.monotonic() > self._end
