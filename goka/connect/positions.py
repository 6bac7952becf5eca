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

from goka.errors import SourceError

__all__ = ["ERROR_HEADER", "POSITION_HEADER", "SourceError", "last_positions"]

POSITION_HEADER = "goka-source"
#: The header of a dead letter (a source's or a sink's) naming why it was refused.
ERROR_HEADER = "goka-error"


def last_positions(brokers: str, topics: Iterable[str], name: str,
                   kafka_config: dict[str, Any] | None = None,
                   timeout: float = 60.0) -> dict[tuple[str, int], str | None]:  # fmt: skip
    """The position of source ``name`` in the last record of each partition of ``topics``
    (None: the partition is empty).

    Raises:
        SourceError: a partition's last record has no position of ``name`` (another writer).
        TimeoutError: a last record could not be read in ``timeout`` seconds.
    """
    from goka.kafka.consumer import last_records

    found: dict[tuple[str, int], str | None] = {}
    last = last_records(brokers, list(topics), kafka_config=kafka_config, timeout=timeout)
    for (topic, partition), record in last.items():
        if record is None:
            found[(topic, partition)] = None
            continue
        position = dict(record.headers).get(POSITION_HEADER)
        owner, _, where = (position or b"").decode("utf-8", "replace").partition("\t")
        if position is None or owner != name:
            writer = "no source" if position is None else f"source {owner!r}"
            raise SourceError(f"source {name!r}: topic {topic!r} partition {partition} offset "
                              f"{record.offset} was written by {writer}; a source needs the "
                              "partitions it writes to itself")  # fmt: skip
        found[(topic, partition)] = where
    return found
