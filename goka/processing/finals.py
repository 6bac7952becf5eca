"""Windows' final results, produced exactly once, also across crashes and replays.

Emits are at-least-once (a crash between producing and committing repeats them); a window's
final result must not be. So a final result is not produced with its batch: it becomes an
*outbox* row of the timers section (``o<window>\\0<key>@<start>-<end>``, written to
``<group>-timers`` and committed with the state that closed the window, like any change).
After the commit, and once the group has committed the batch's offsets (a store rebuilt on
another machine begins there: it must not process the batch again), the outbox is produced
(with header :data:`FINAL_ID`) and flushed; only once every result is acknowledged are its
rows deleted (tombstones in ``<group>-timers``, then the store): a deletion that landed with
a result that did not would lose the result for every rebuild. A crash leaves committed rows: the
next task reads the output partition from where it stood when the row was staged and produces
only the rows it does not find there. A batch that did not commit left no row (a rebuild
leaves out its changelog rows), and its replay closes the window again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

from goka.context import FINAL, TIMER
from goka.engine import Effect
from goka.errors import DeliveryError
from goka.kafka.producer import Producer
from goka.kafka.reader import RecordReader
from goka.keys import key_bytes
from goka.partitioner import partition_for
from goka.storage import Storage, WriteBatch
from goka.storage.base import SectionReader

__all__ = ["FINAL_ID", "Finals"]

log = logging.getLogger(__name__)

#: Header naming a final result: ``<group>/<partition>/<outbox row>``.
FINAL_ID = "goka-final-id"
OUTBOX = "o"


class Finals:
    """The outbox of one partition (see the module docstring).

    Args:
        group, partition: whose outbox.
        timers: the timers changelog topic (whose section holds the outbox).
        producer, reader: the task's clients.
        flush_timeout, read_timeout: seconds to wait for deliveries, and for a read.
    """

    def __init__(
        self, group: str, partition: int, timers: str, producer: Producer, reader: RecordReader,
        *, flush_timeout: float, read_timeout: float,
    ) -> None:  # fmt: skip
        self.group, self.partition, self.timers = group, partition, timers
        self.producer, self.reader = producer, reader
        self.flush_timeout, self.read_timeout = flush_timeout, read_timeout
        self._counts: dict[str, int] = {}
        self.delivered = 0

    def stage(self, effects: list[Effect]) -> None:
        """Turn the final results among ``effects`` into outbox rows (in place): each
        becomes a row of the timers changelog, with where its output partition stands."""
        stood: dict[tuple[str, int], int] = {}
        for index, (kind, topic, key, value, headers, source) in enumerate(effects):
            if kind != FINAL:
                continue
            partition = partition_for(key_bytes(key), self._count(topic))
            if (topic, partition) not in stood:  # a lower bound of where it will land
                stood[(topic, partition)] = self.reader.watermarks(topic, partition)[1]
            name = dict(headers or ()).get("goka-window", b"").decode()
            start, end = (
                dict(headers or ())[h].decode() for h in ("goka-window-start", "goka-window-end")
            )
            row = f"{OUTBOX}{name}\x00{key}@{start}-{end}"
            body = {"t": topic, "p": partition, "k": key, "w": stood[(topic, partition)],
                    "v": None if value is None else value.hex(), "ts": source[4],
                    "h": [[n, v.hex()] for n, v in headers or ()]}  # fmt: skip
            effects[index] = (TIMER, self.timers, row, json.dumps(body).encode(), None, source)

    def pending(self, store: Storage) -> bool:
        """Does ``store`` hold outbox rows?"""
        return next(iter(store.section(self.timers).items(prefix=OUTBOX)), None) is not None

    def deliver(self, store: Storage, *, check: bool) -> int:
        """Produce the committed outbox, then delete it; return how many were produced.
        With ``check`` (a task begins: an earlier one may have produced some before it
        stopped), rows found in their output partition are not produced again.

        Raises:
            DeliveryError: a result or a deletion was not acknowledged (the rows stay).
        """
        section = store.section(self.timers)
        rows = list(_outbox(section))
        if not rows:
            return 0
        found = self._produced(rows) if check else set()
        todo = [(row, body) for row, body in rows if self._id(row) not in found]
        failures: list[str] = []

        def delivered(error: Any, message: Any) -> None:
            if error is not None:
                failures.append(f"{message.topic()}: {error.str()}")

        for row, body in todo:
            headers: list[tuple[str, str | bytes | None]] = [
                (n, bytes.fromhex(v)) for n, v in body["h"]
            ]
            headers.append((FINAL_ID, self._id(row).encode()))
            value = None if body["v"] is None else bytes.fromhex(body["v"])
            self.producer.produce(body["t"], value, key_bytes(body["k"]), on_delivery=delivered,
                                  headers=headers, timestamp=body["ts"],
                                  partition=body["p"])  # fmt: skip
        self._flush(failures, "final results")  # their rows go only once they are in
        ends: dict[str, int] = {}

        def deleted(error: Any, message: Any) -> None:
            delivered(error, message)
            if error is None:
                ends[message.topic()] = message.offset() + 1

        for row, _ in rows:  # tombstones in the changelog: a rebuild does not see them again
            self.producer.produce(self.timers, None, row.encode("utf-8", "surrogateescape"),
                                  on_delivery=deleted, partition=self.partition)  # fmt: skip
        self._flush(failures, "outbox deletions")
        batch = WriteBatch(sections={self.timers: dict.fromkeys((r for r, _ in rows), None)})
        for topic, end in ends.items():
            batch.set_offset(topic, self.partition, end)
        store.write(batch)
        if check and len(todo) < len(rows):
            log.info("group %s partition %d: %d final results were produced before a stop, "
                     "%d produced now", self.group, self.partition, len(rows) - len(todo),
                     len(todo))  # fmt: skip
        self.delivered += len(todo)
        return len(todo)

    def _flush(self, failures: list[str], what: str) -> None:
        remaining = self.producer.flush(self.flush_timeout)
        if remaining or failures:
            raise DeliveryError(self.timers, None, f"partition {self.partition}: {what}: "
                                f"{remaining} unacknowledged, failed: {failures[:3]}")  # fmt: skip

    def _produced(self, rows: list[tuple[str, dict[str, Any]]]) -> set[str]:
        """The ids of ``rows`` found in their output partitions."""
        since: dict[tuple[str, int], int] = {}
        for _, body in rows:
            where = (body["t"], body["p"])
            since[where] = min(since.get(where, body["w"]), body["w"])
        found: set[str] = set()
        for (topic, partition), start in since.items():
            end = self.reader.watermarks(topic, partition)[1]
            for chunk in self.reader.read(partition, {topic: (start, end)}, self.read_timeout,
                                          10_000):  # fmt: skip
                for record in chunk:
                    value = dict(record[5] or ()).get(FINAL_ID)
                    if value is not None:
                        found.add(value.decode())
        return found

    def _id(self, row: str) -> str:
        return f"{self.group}/{self.partition}/{row}"

    def _count(self, topic: str) -> int:
        if topic not in self._counts:
            self._counts[topic] = self.producer.partition_count(topic, self.read_timeout)
        return self._counts[topic]


def _outbox(section: SectionReader) -> Iterator[tuple[str, dict[str, Any]]]:
    for row, value in section.items(prefix=OUTBOX):
        yield row, json.loads(value)
