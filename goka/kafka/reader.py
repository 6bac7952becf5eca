"""The seam partition processors read Kafka through: :class:`RecordReader` (offset ranges of
one partition number in several topics, watermarks, the group's offsets) and :class:`Tail`
(following partitions as records arrive). On Kafka: :class:`goka.kafka.ranges.RangeReader`;
tests use readers over lists."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

__all__ = ["RecordReader", "Row", "Tail"]

#: ``(topic, offset, key, value, timestamp_ms, headers)``.
Row = tuple[str, int, bytes | None, bytes | None, int, list[tuple[str, bytes]] | None]


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

    def prefetch(self, partitions: list[tuple[str, int]], group: str | None = None) -> None:
        """Ask now, in one request each, for the watermarks of ``partitions`` and the offsets
        ``group`` committed in them: the next :meth:`watermarks` and :meth:`committed` call
        for each is answered from these, once (an epoch's start asks for many partitions in
        turn, a broker round trip each). Replaces what an earlier call left: ``prefetch([])``
        forgets it."""
        ...

    def tell(
        self, watermarks: Mapping[tuple[str, int], tuple[int, int]],
        committed: Mapping[tuple[str, str, int], tuple[int, str] | None] | None = None,
    ) -> None:  # fmt: skip
        """Answers known without asking (partitions followed until just now), kept as
        :meth:`prefetch` keeps its answers (added to them): ``{(topic, partition): (first,
        high watermark)}`` and ``{(group, topic, partition): (offset, note) or None}``."""
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
    ) -> bool:
        """Record the next offset of ``partition`` of each topic that ``group`` has processed
        (Kafka's committed offsets), with ``note`` as metadata: asynchronously, or if ``wait``
        until the broker answered (a failure is logged and False returned: these offsets
        inform, the stores hold the truth; but windows' final results wait for them)."""
        ...

    def committed(
        self, group: str, partition: int, topics: list[str], *, timeout: float = 30.0
    ) -> dict[str, tuple[int, str]]:
        """The committed ``{topic: (offset, note)}`` of ``group`` (topics without one left out),
        waiting at most ``timeout`` seconds for the offsets an open transaction sent."""
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

    def watermarks(self) -> dict[tuple[str, int], tuple[int, int]]:
        """The first offset and high watermark of each followed partition, as the last
        answers to the tail's reads said (no request; partitions without one left out)."""
        ...

    def close(self) -> None:
        """Stop following."""
        ...
