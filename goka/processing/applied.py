"""What a partition store has applied, and the rule the runtime rests on: it never goes back.

A partition store (a group's state, or a joined table's copy) records, for each topic it
follows (the inputs and loop, the group table, a joined table), the next offset to apply:
every record below it is in the store. Spark plans ranges that may start, or even end, below
that offset -- a micro-batch run again after a crash, the first epoch after a bridge, a bounded
run after a continuous one whose epoch Spark never committed, any ``max_offsets_per_trigger``.
So, whatever the range:

* the records below the store's offset are skipped (and counted: ``skipped_applied``), never
  applied a second time;
* a commit moves the store's offsets forward only: the offset a range ends at is taken only
  where it is beyond what the store has; an offset below the stored one is a bug, refused
  before anything is written (:class:`~goka.errors.OffsetRegressionError`).

:class:`Applied` decides what of a range is new; :func:`commit` is the only write of state
with offsets (recovery, which replaces a store's content, writes only offsets its content has).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from goka.errors import OffsetRegressionError, TopicRewoundError
from goka.group.effects import Message
from goka.kafka.reader import RecordReader
from goka.storage import Storage, WriteBatch

__all__ = [
    "SRC_OFFSET",
    "SRC_PARTITION",
    "SRC_TOPIC",
    "STABLE_SECONDS",
    "Applied",
    "checked_watermarks",
    "commit",
    "from_unfinished_batch",
    "record_before",
]

#: ``{topic: (start, end)}``, end exclusive.
Ranges = Mapping[str, tuple[int, int]]

#: Headers naming where a record came from: a changelog row has the source's topic and offset
#: (its partition is the row's; rows written before 2026-11-28 had it), a dead letter all three.
SRC_TOPIC, SRC_PARTITION, SRC_OFFSET = "goka-src-topic", "goka-src-partition", "goka-src-offset"


def from_unfinished_batch(headers: list[tuple[str, bytes]] | None,
                          starts: Mapping[str, int]) -> bool:  # fmt: skip
    """Was this changelog record written for a source offset at or beyond ``starts`` (a
    record a store that has applied ``starts`` processes next: a replay leaves it out)?"""
    found = dict(headers or ())
    topic = found.get(SRC_TOPIC)
    if topic is None:
        return False  # not written by a goka-py processor: applied as it is
    start = starts.get(topic.decode())
    return start is not None and int(found.get(SRC_OFFSET, b"-1")) >= start


@dataclass(frozen=True)
class Applied:
    """The next offset a store applies in each topic of one partition (-1: none yet).

    Attributes:
        partition: the partition.
        offsets: ``{topic: next offset}`` of the topics asked for.
    """

    partition: int
    offsets: Mapping[str, int]

    @classmethod
    def of(cls, store: Storage, partition: int, topics: list[str]) -> Applied:
        """What ``store`` has applied of ``topics`` in ``partition``."""
        stored = store.offsets()
        return cls(partition, {t: stored.get((t, partition), -1) for t in topics})

    def todo(self, ranges: Ranges) -> dict[str, tuple[int, int]]:
        """The part of each range not applied yet (``start`` raised to the store's offset;
        empty where the store is at or beyond its end)."""
        return {t: (max(s, self.offsets.get(t, -1)), e) for t, (s, e) in ranges.items()}

    def skipped(self, ranges: Ranges) -> int:
        """How many offsets of ``ranges`` the store has applied already."""
        return sum(max(0, min(self.offsets.get(t, -1), e) - s) for t, (s, e) in ranges.items())

    def behind(self, starts: Mapping[str, int], topics: list[str]) -> dict[str, tuple[int, int]]:
        """The ranges from ``starts`` up to the store's offsets of ``topics`` (what an epoch
        planned from ``starts`` skips)."""
        return {t: (starts[t], max(starts[t], self.offsets.get(t, -1))) for t in topics}

    def ends(self, ranges: Ranges) -> dict[str, int]:
        """Where the store is once ``ranges`` are applied: each range's end, or the store's
        offset where that is further."""
        return {t: max(e, self.offsets.get(t, -1)) for t, (_, e) in ranges.items()}


def commit(store: Storage, batch: WriteBatch, *, who: str) -> None:
    """Write ``batch`` (state changes with offsets) to ``store``, refusing any offset below
    the store's own.

    Args:
        who: names the store in the error (``group 'g' partition 3 (partition store)``).

    Raises:
        OffsetRegressionError: an offset would go back; nothing was written.
        StorageError: the write failed.
    """
    stored = store.offsets()
    back = {tp: (stored[tp], o) for tp, o in batch.offsets.items() if o < stored.get(tp, o)}
    if back:
        raise OffsetRegressionError(who, back)
    store.write(batch)


def record_before(positions: Mapping[str, int]) -> Message | None:
    """A record before ``positions`` (an input's last applied one), to which what is due
    before the first record is attributed (see :meth:`goka.group.engine.Engine.process`)."""
    for topic, offset in positions.items():
        if offset > 0:
            return (topic, offset - 1, None, None, 0, None)
    return None


#: How long a check waits for a topic's end to reach a store's offset: the broker writes a
#: committed transaction's markers after its commit returned, and until then the stable end
#: a ``read_committed`` reader is told stops before the transaction's records.
STABLE_SECONDS = 2.0


def checked_watermarks(
    reader: RecordReader, topic: str, partition: int, offset: int, who: str
) -> tuple[int, int]:
    """Return the first offset and high watermark of ``topic``/``partition``, failing unless
    it still holds ``offset`` (-1: none). A prefetched answer may predate the store's last
    commit (an epoch's start): it is asked again; and a transaction's end may not be stable
    yet: an end before ``offset`` is asked again for up to :data:`STABLE_SECONDS`.

    Raises:
        TopicRewoundError: the topic ends before ``offset`` (truncated or recreated) or starts
            after it (records deleted): reading on would silently lose them.
    """
    low, high = reader.watermarks(topic, partition)
    if offset > high or 0 <= offset < low:
        low, high = reader.watermarks(topic, partition)
    deadline = time.monotonic() + STABLE_SECONDS
    while offset > high and time.monotonic() < deadline:
        time.sleep(0.02)
        low, high = reader.watermarks(topic, partition)
    TopicRewoundError.check(topic, partition, offset, low, high, reader=who)
    return low, high
