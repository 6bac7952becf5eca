"""Reading offset ranges of one partition number in several topics: the seam partition
processors read through (:class:`RecordReader`, :class:`Tail`) and its Kafka implementation
(:class:`RangeReader`). Where partitions end: :mod:`goka.kafka.offsets`; following them as
records arrive: :mod:`goka.kafka.tail`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import confluent_kafka

from goka.errors import BrokerError
from goka.kafka.config import Brokers, bootstrap_servers, consumer_config
from goka.kafka.offsets import (
    EOF,
    OUT_OF_RANGE,
    QUERY_TRY,
    Deadline,
    EndOffsets,
    fast_fetch,
    out_of_range,
)
from goka.kafka.reader import RecordReader, Row, Tail
from goka.kafka.tail import KafkaTail

__all__ = ["EndOffsets", "RangeReader", "RecordReader", "Row", "Tail"]

log = logging.getLogger(__name__)


class RangeReader:
    """Reads offset ranges of one partition number in several topics (a :class:`RecordReader`
    on Kafka). Not thread-safe; reuse it across tasks: a new consumer costs a connection and a
    first fetch."""

    def __init__(self, brokers: Brokers, kafka_config: Mapping[str, Any] | None = None) -> None:
        self._brokers, self._kafka_config = brokers, kafka_config
        self._last_error: tuple[float, str] | None = None
        self._consumer = confluent_kafka.Consumer(
            {**fast_fetch(brokers, kafka_config), "error_cb": self._on_error}
        )
        self._ends: EndOffsets | None = None
        self._groups: dict[str, confluent_kafka.Consumer] = {}
        self._closed = False
        self._known: set[str] = set()  # topics whose metadata the consumer has
        self._watermarks: dict[tuple[str, int], tuple[int, int]] = {}  # prefetched, used once
        self._committed: dict[tuple[str, str, int], tuple[int, str] | None] = {}  # likewise

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
        found = self._watermarks.pop((topic, partition), None)
        return self._asked(topic, partition) if found is None else found

    def _asked(self, topic: str, partition: int) -> tuple[int, int]:
        """The watermarks of ``topic``/``partition`` asked now (not an answer told or
        prefetched before)."""
        if self._ends is None:
            self._ends = EndOffsets(self._brokers, self._kafka_config)
        return self._ends.watermarks([(topic, partition)])[(topic, partition)]

    def prefetch(self, partitions: list[tuple[str, int]], group: str | None = None) -> None:
        """See :meth:`goka.kafka.reader.RecordReader.prefetch`.

        Raises:
            BrokerError: the broker did not answer.
        """
        self._watermarks, self._committed = {}, {}
        if not partitions:
            return
        if self._ends is None:
            self._ends = EndOffsets(self._brokers, self._kafka_config)
        if group is None:
            self._watermarks = self._ends.watermarks(partitions)
            return
        with ThreadPoolExecutor(1) as pool:  # the group's offsets meanwhile (another consumer)
            asking = pool.submit(self._ask_committed, group, partitions)
            self._watermarks = self._ends.watermarks(partitions)
            found = asking.result()
        self._committed = {(group, t, p): offset for (t, p), offset in found.items()}

    def tell(
        self, watermarks: Mapping[tuple[str, int], tuple[int, int]],
        committed: Mapping[tuple[str, str, int], tuple[int, str] | None] | None = None,
    ) -> None:  # fmt: skip
        """See :meth:`goka.kafka.reader.RecordReader.tell`."""
        self._watermarks.update(watermarks)
        self._committed.update(committed or {})

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
        self._assign([confluent_kafka.TopicPartition(t, p, o)
                      for p, offsets in starts.items() for t, o in offsets.items()])  # fmt: skip
        return KafkaTail(self._consumer, starts, self._asked)

    def _assign(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        """Assign ``partitions``, first asking the metadata of topics new to the consumer: a
        consumer that had been idle fetched a topic it had not seen about 1 s after its
        assignment (librdkafka asks an unknown topic's leader at its next metadata tick), and 5
        ms after its metadata was asked (a new epoch's task in another process waited so)."""
        for topic in sorted({tp.topic for tp in partitions} - self._known):
            with contextlib.suppress(confluent_kafka.KafkaException):  # the fetch will say
                found = self._consumer.list_topics(topic, timeout=QUERY_TRY).topics.get(topic)
                if found is not None and found.error is None:
                    self._known.add(topic)
        self._consumer.assign(partitions)

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
    ) -> bool:
        """Commit as ``group`` (without joining it: no rebalance, as the processor's tasks own
        their partitions). A failure is logged (by librdkafka if asynchronous); the next commit
        carries the newer offsets anyway. Return False if a commit ``wait``-ed for failed."""
        if not offsets:
            return True
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
            return False
        return True

    def committed(
        self, group: str, partition: int, topics: list[str], *, timeout: float = 30.0
    ) -> dict[str, tuple[int, str]]:
        """Raises: BrokerError: the group coordinator did not answer (in ``timeout`` seconds:
        it holds offsets a transaction sent back until the transaction ends)."""
        keys = [(group, t, partition) for t in topics]
        if keys and all(k in self._committed for k in keys):  # prefetched
            found = {k[1]: self._committed.pop(k) for k in keys}
        else:
            asked = self._ask_committed(group, [(t, partition) for t in topics], timeout)
            found = {t: offset for (t, _), offset in asked.items()}
        return {t: offset for t, offset in found.items() if offset is not None}

    def _ask_committed(
        self, group: str, partitions: list[tuple[str, int]], timeout: float = 30.0
    ) -> dict[tuple[str, int], tuple[int, str] | None]:
        """The committed ``(offset, note)`` of ``group`` in each partition (None: none), as
        committed: offsets that an open transaction sent are waited for (read_committed)."""
        try:
            found = self._group(group).committed(
                [confluent_kafka.TopicPartition(t, p) for t, p in partitions], timeout=timeout
            )
        except confluent_kafka.KafkaException as exc:
            raise BrokerError(
                f"cannot read the committed offsets of group {group!r}: {exc}"
            ) from exc
        failed = [tp for tp in found if tp.error is not None]
        if failed:  # (an offset not read is not "none committed": a task would begin behind)
            raise BrokerError(f"cannot read the committed offsets of group {group!r} in "
                              f"{failed[0].topic} partition {failed[0].partition}: "
                              f"{failed[0].error}")  # fmt: skip
        return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "") if tp.offset >= 0
                else None for tp in found}  # fmt: skip

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
        self._assign(
            [confluent_kafka.TopicPartition(t, partition, start) for t, (start, _) in todo.items()]
        )
        deadline = Deadline(timeout)
        try:
            while todo:
                if deadline.passed():
                    raise self._stalled(f"partition {partition}: reading {todo}", timeout)
                rows = self._consume(todo, chunk)
                if rows:
                    deadline = Deadline(timeout)  # a long read that progresses goes on
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
                if error.code() == EOF and (msg.offset() or 0) >= end:
                    del todo[topic]
                elif error.code() in OUT_OF_RANGE:
                    raise out_of_range(topic, msg.partition() or 0, todo[topic][0], error,
                                       consumer=self._consumer)  # fmt: skip
                elif error.code() != EOF:
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
