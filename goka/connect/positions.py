"""Where a source connector stands, kept in the records it writes (no broker transactions: the
embedded broker does not isolate aborted ones, and a position in another store could not be
committed with the records).

Each record a source produces carries its source position in header ``goka-source``:
``<source name>\\t<position>`` with a position that sorts in the order the source produces.
The producer is idempotent (no duplicates from retries, each partition in order), and the
source is the only writer of its partitions. So the last record of a partition says how far
that partition got: a record whose position is at or below its partition's last position was
written already. A restart reads the last record of each partition (:func:`last_positions`)
and writes only what lies beyond, partition by partition.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from goka.errors import SinkError

__all__ = ["POSITION_HEADER", "SourceError", "last_positions"]

POSITION_HEADER = "goka-source"


class SourceError(SinkError):
    """A source cannot read a record (it names the file or row and why), or cannot resume
    (a partition it writes was last written by someone else)."""


def last_positions(brokers: str, topics: Iterable[str], name: str,
                   kafka_config: dict[str, Any] | None = None,
                   timeout: float = 60.0) -> dict[tuple[str, int], str | None]:  # fmt: skip
    """The position of source ``name`` in the last record of each partition of ``topics``
    (None: the partition is empty).

    Raises:
        SourceError: a partition's last record has no position of ``name`` (another writer).
        TimeoutError: a last record could not be read in ``timeout`` seconds.
    """
    import time

    import confluent_kafka

    from goka.kafka.config import consumer_config
    from goka.kafka.offsets import EndOffsets

    topics = list(topics)
    ends = EndOffsets(brokers, kafka_config or {})
    try:
        counts = ends.partition_counts(topics)
        partitions = [(t, p) for t in topics for p in range(counts[t])]
        high, low = ends.high(partitions), ends.low(partitions)
    finally:
        ends.close()
    found: dict[tuple[str, int], str | None] = dict.fromkeys(partitions)
    wanted = {tp: high[tp] - 1 for tp in partitions if high[tp] > low[tp]}
    if not wanted:
        return found
    consumer = confluent_kafka.Consumer(
        consumer_config(brokers, {**(kafka_config or {}), "enable.partition.eof": True})
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(t, p, max(low[(t, p)], o))
                         for (t, p), o in wanted.items()])  # fmt: skip
        deadline = time.monotonic() + timeout
        last: dict[tuple[str, int], Any] = {}
        while wanted.keys() - last.keys():
            if time.monotonic() > deadline:
                raise TimeoutError(f"source {name!r}: the last records of "
                                   f"{sorted(wanted.keys() - last.keys())} not read in "
                                   f"{timeout:.0f} s")  # fmt: skip
            for message in consumer.consume(100, 0.5):
                tp = (str(message.topic()), int(message.partition() or 0))
                error = message.error()
                if error is not None:
                    if error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                        last.setdefault(tp, None)  # (compacted away: none at the end)
                    continue
                if int(message.offset() or 0) >= wanted[tp]:
                    last[tp] = message
        for tp, message in last.items():
            if message is None:
                continue
            headers = dict(message.headers() or [])
            position = headers.get(POSITION_HEADER)
            owner, _, where = (position or b"").decode("utf-8", "replace").partition("\t")
            if position is None or owner != name:
                writer = "no source" if position is None else f"source {owner!r}"
                raise SourceError(f"source {name!r}: topic {tp[0]!r} partition {tp[1]} offset "
                                  f"{message.offset()} was written by {writer}; a source needs "
                                  "the partitions it writes to itself")  # fmt: skip
            found[tp] = where
    finally:
        consumer.close()
    return found
