"""An in-memory Kafka for partition processor unit tests: topics as lists, a producer that
records and appends, a reader over the lists. Builders are bound methods (tests do not pickle)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from goka.errors import BrokerError
from goka.kafka.reader import Row
from goka.partitioner import partition_for

from .fake_producer import FakeError, FakeMessage


@dataclass
class FakeKafka:
    """Topics of partitions of rows ``(topic, offset, key, value, timestamp, headers)``.

    ``events`` records, in order, what producers and stores did (``produce <topic>``,
    ``flush``), for tests of the commit ordering.
    """

    partitions: int = 2
    topics: dict[str, list[list[Row]]] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    fail_deliveries_to: set[str] = field(default_factory=set)
    unacknowledged: bool = False  # flush() leaves messages queued (a broker that does not answer)
    late: bool = False  # poll() takes no reports, flush() waits for them (a broker answering late)
    committed: dict[tuple[str, str, int], tuple[int, str]] = field(default_factory=dict)
    on_poll: list[Callable[[], object]] = field(default_factory=list)
    low: dict[tuple[str, int], int] = field(default_factory=dict)  # first offsets, if not 0
    prefetched: list[tuple[list[tuple[str, int]], str | None]] = field(default_factory=list)
    told: list[list[tuple[str, int]]] = field(default_factory=list)  # answers known, not asked
    producers: list[RecordingProducer] = field(default_factory=list)
    capacity: int | None = None  # a producer's queue: produce() raises BufferError when full
    refused: int = 0  # how often it did
    # transactions with producer epochs (tests/unit/fencing.py): the latest epoch of each
    # transactional id, the rows read_committed readers do not see (open or aborted
    # transactions'), and the offsets committed outside any transaction
    epochs: dict[str, int] = field(default_factory=dict)
    hidden: dict[tuple[str, int, int], str] = field(default_factory=dict)
    plain_commits: list[tuple[str, int, dict[str, int]]] = field(default_factory=list)

    def stable_end(self, topic: str, partition: int) -> int:
        """Where a ``read_committed`` reader of the partition stops: before the first row of
        an open transaction (the last stable offset), else its end."""
        opened = [o for (t, p, o), state in self.hidden.items()
                  if state.startswith("open") and (t, p) == (topic, partition)]  # fmt: skip
        return min(opened, default=self.end(topic, partition))

    def visible(self, row: Row, partition: int) -> bool:
        """Does a ``read_committed`` reader get ``row`` (not a marker, not of an open or
        aborted transaction)?"""
        return row[5] is not CONTROL and (row[0], partition, row[1]) not in self.hidden

    def topic(self, name: str) -> list[list[Row]]:
        return self.topics.setdefault(name, [[] for _ in range(self.partitions)])

    def append(self, topic: str, key: str, value: bytes | None, *, partition: int | None = None,
               headers: list[tuple[str, bytes]] | None = None, timestamp: int = 0) -> int:  # fmt: skip
        rows = self.topic(topic)[partition_for(key.encode(), self.partitions)
                                  if partition is None else partition]  # fmt: skip
        rows.append((topic, len(rows), key.encode(), value, timestamp or len(rows), headers))
        return len(rows) - 1

    def rows(self, topic: str, partition: int) -> list[Row]:
        return self.topic(topic)[partition]

    def mark(self, topic: str, partition: int) -> None:
        """Append a transaction's marker: an offset no reader is given (see :data:`CONTROL`)."""
        rows = self.rows(topic, partition)
        rows.append((topic, len(rows), None, None, 0, CONTROL))

    def end(self, topic: str, partition: int) -> int:
        return len(self.rows(topic, partition))

    def ranges(self, topics: Mapping[str, int], partition: int) -> dict[str, tuple[int, int]]:
        """``{topic: (start, end now)}`` for a batch from ``start`` to the end."""
        return {t: (start, self.end(t, partition)) for t, start in topics.items()}

    # -- builders ------------------------------------------------------------------------------
    def producer(self, config: dict[str, Any]) -> RecordingProducer:
        self.producers.append(RecordingProducer(self))
        return self.producers[-1]

    def acknowledge(self) -> None:
        """Deliver what the producers have queued (``unacknowledged`` or not)."""
        held, self.unacknowledged = self.unacknowledged, False
        for producer in self.producers:
            producer.poll(0, flushing=True)
        self.unacknowledged = held

    def reader(self, brokers: str, settings: Mapping[str, Any]) -> ListReader:
        return ListReader(self)


@dataclass
class RecordingProducer:
    """Appends produced messages to the fake topics when flushed or polled, in order."""

    kafka: FakeKafka
    queued: list[tuple[str, int, str | bytes | None, bytes | None, Any, int, Any]] = field(
        default_factory=list
    )
    closed: bool = False

    def produce(self, topic: str, value: bytes | None, key: str | bytes | None, *,
                on_delivery: Any, headers: Any = None, timestamp: int = 0,
                partition: int = -1) -> None:  # fmt: skip
        if self.kafka.capacity is not None and len(self.queued) >= self.kafka.capacity:
            self.kafka.refused += 1
            raise BufferError("Local: Queue full")
        self.kafka.events.append(f"produce {topic}")
        self.queued.append((topic, partition, key, value, headers, timestamp, on_delivery))

    def poll(self, timeout: float, *, flushing: bool = False) -> int:
        if self.kafka.unacknowledged or (self.kafka.late and not flushing):
            return 0
        done, self.queued = self.queued, []
        for topic, partition, key, value, headers, timestamp, on_delivery in done:
            text = key.decode() if isinstance(key, bytes) else str(key)
            if topic in self.kafka.fail_deliveries_to:
                refused = FakeMessage(topic, max(partition, 0), -1, key, value, headers, timestamp)
                on_delivery(FakeError("Broker: refused"), refused)
                continue
            where = partition if partition >= 0 else None
            offset = self.kafka.append(topic, text, value, partition=where, headers=headers,
                                       timestamp=timestamp)  # fmt: skip
            number = (
                where if where is not None else partition_for(text.encode(), self.kafka.partitions)
            )
            self.kafka.events.append(f"deliver {topic}")
            on_delivery(None, FakeMessage(topic, number, offset, key, value, headers, timestamp))
        return len(done)

    def flush(self, timeout: float) -> int:
        self.kafka.events.append("flush")
        self.poll(timeout, flushing=True)
        return len(self.queued)

    def partition_count(self, topic: str, timeout: float) -> int:
        self.kafka.events.append(f"metadata {topic}")
        return len(self.kafka.topic(topic))

    def __len__(self) -> int:
        return len(self.queued)


#: The headers of a fake control record (a transaction's commit marker): it takes an offset,
#: and readers skip it.
CONTROL: list[tuple[str, bytes]] = [("fake-control-record", b"")]


@dataclass
class ListReader:
    """Reads the fake topics (a :class:`goka.kafka.ranges.RecordReader`)."""

    kafka: FakeKafka
    closed: bool = False
    # prefetched answers, each given once (as the Kafka reader does)
    _watermarks: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    _committed: dict[tuple[str, str, int], tuple[int, str] | None] = field(default_factory=dict)

    def read(self, partition: int, ranges: Mapping[str, tuple[int, int]], timeout: float,
             chunk: int) -> Iterator[list[Row]]:  # fmt: skip
        for topic, (start, end) in ranges.items():
            rows, stable = (
                self.kafka.rows(topic, partition),
                self.kafka.stable_end(topic, partition),
            )
            if end > stable:  # (Kafka's read_committed reader would wait for the transaction)
                raise BrokerError(f"{topic} partition {partition} is stable up to {stable} "
                                  f"(ends at {len(rows)}), not {end}")  # fmt: skip
            visible = self.kafka.visible
            for low in range(start, end, chunk):
                yield [r for r in rows[low : min(end, low + chunk)] if visible(r, partition)]

    def prefetch(self, partitions: list[tuple[str, int]], group: str | None = None) -> None:
        self.kafka.prefetched.append((sorted(partitions), group))
        self._watermarks = {(t, p): self._now(t, p) for t, p in partitions}
        self._committed = {} if group is None else {
            (group, t, p): self.kafka.committed.get((group, t, p)) for t, p in partitions
        }  # fmt: skip

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        return self._watermarks.pop((topic, partition), None) or self._now(topic, partition)

    def tell(
        self, watermarks: Mapping[tuple[str, int], tuple[int, int]],
        committed: Mapping[tuple[str, str, int], tuple[int, str] | None] | None = None,
    ) -> None:  # fmt: skip
        self.kafka.told.append(sorted(watermarks))
        self._watermarks.update(watermarks)
        self._committed.update(committed or {})

    def _now(self, topic: str, partition: int) -> tuple[int, int]:
        return self.kafka.low.get((topic, partition), 0), self.kafka.stable_end(topic, partition)

    def tail(self, starts: Mapping[int, Mapping[str, int]]) -> ListTail:
        return ListTail(self.kafka, {p: dict(offsets) for p, offsets in starts.items()})

    def commit(
        self,
        group: str,
        partition: int,
        offsets: Mapping[str, int],
        note: str,
        *,
        wait: bool = False,
    ) -> bool:
        self.kafka.plain_commits.append((group, partition, dict(offsets)))
        for topic, offset in offsets.items():
            self.kafka.committed[(group, topic, partition)] = (offset, note)
        return True

    def committed(
        self, group: str, partition: int, topics: list[str], *, timeout: float = 30.0
    ) -> dict[str, tuple[int, str]]:
        keys = [(group, t, partition) for t in topics]
        if keys and all(k in self._committed for k in keys):
            found = {k[1]: self._committed.pop(k) for k in keys}
        else:
            found = {t: self.kafka.committed.get((group, t, partition)) for t in topics}
        return {t: c for t, c in found.items() if c is not None}

    def close(self) -> None:
        self.closed = True


@dataclass
class ListTail:
    """Follows the fake topics; ``on_poll`` runs before each poll (tests append records or
    ask the processor to stop there)."""

    kafka: FakeKafka
    positions: dict[int, dict[str, int]]

    def poll(self, max_rows: int, timeout: float) -> dict[int, list[Row]]:
        for hook in list(self.kafka.on_poll):
            hook()
        rows: dict[int, list[Row]] = {}
        left, visible = max_rows, self.kafka.visible
        for partition, offsets in self.positions.items():
            for topic, start in offsets.items():
                stable = self.kafka.stable_end(topic, partition)
                found = self.kafka.rows(topic, partition)[start : min(stable, start + left)]
                if found:
                    rows.setdefault(partition, []).extend(r for r in found if visible(r, partition))
                    offsets[topic] = start + len(found)
                    left -= len(found)
        return rows

    def watermarks(self) -> dict[tuple[str, int], tuple[int, int]]:
        return {(t, p): (0, len(self.kafka.rows(t, p)))
                for p, offsets in self.positions.items() for t in offsets}  # fmt: skip

    def close(self) -> None:
        self.kafka.events.append("tail closed")
