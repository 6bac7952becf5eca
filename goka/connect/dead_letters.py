"""A sink's dead letters, exactly once: the records its ``on_error="dead-letter"`` refuses go
to the dead-letter topic before the write that refused them commits, partition ``p`` of the
sink's topic into partition ``p`` of the dead-letter topic (so it needs at least as many),
each with header ``goka-source`` = ``<sink>\\t<topic>\\t<offset>`` and the reason in
``goka-error``. A write replayed after a crash between the two refuses the same records
again; the last dead letter of the partition says which went out already (the sink is the
only writer of its dead-letter partitions)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from goka.connect.positions import ERROR_HEADER, POSITION_HEADER, last_positions
from goka.connect.rows import Record
from goka.connect.source_producer import SourceProducer
from goka.errors import SinkError, SourceError

__all__ = ["ERROR_HEADER", "DeadLetters"]


class DeadLetters:
    """Produces one task's dead letters of ``sink`` (see the module docstring). Not
    thread-safe: one per task.

    Args:
        sink: the sink (with ``dead_letter`` and ``name``).
        brokers: bootstrap servers.
        kafka_config: librdkafka settings.
    """

    def __init__(self, sink: Any, brokers: str, kafka_config: dict[str, Any] | None = None):
        self.sink, self.brokers = sink, brokers
        self.kafka_config = dict(kafka_config or {})
        self._producer: SourceProducer | None = None
        self._last: dict[int, int] = {}  # partition -> the highest offset sent (this task)

    def send(self, partition: int, letters: Sequence[tuple[Record, str]]) -> int:
        """Produce ``letters`` (records of ``partition`` and why) not sent before, and wait
        for them; return how many were produced.

        Raises:
            SinkError: the dead-letter topic lacks the partition, is written by someone
                else, or refused a record.
        """
        if not letters:
            return 0
        topic = self.sink.dead_letter
        last = self._last[partition] if partition in self._last else self._read(partition)
        producer, sent = self._open(), 0
        for record, why in letters:
            offset = record[1]
            if offset <= last:
                continue
            headers = [(POSITION_HEADER, f"{self.sink.name}\t{record[0]}\t{offset}".encode()),
                       (ERROR_HEADER, why.encode())]  # fmt: skip
            producer.produce(topic, record[3], record[2], partition, max(record[4], 0), headers)
            last, sent = offset, sent + 1
        try:
            producer.flush()
        except SourceError as exc:
            self._last.pop(partition, None)  # read again: some may have gone out
            raise SinkError(f"sink {self.sink.name!r}: dead letters to {topic!r} partition "
                            f"{partition} failed: {exc}") from exc  # fmt: skip
        self._last[partition] = last
        return sent

    def _read(self, partition: int) -> int:
        """The offset of the last dead letter in ``partition`` (-1: none)."""
        topic = self.sink.dead_letter
        try:
            found = last_positions(self.brokers, [topic], self.sink.name, self.kafka_config)
        except Exception as exc:
            raise SinkError(f"sink {self.sink.name!r}: dead-letter topic {topic!r}: "
                            f"{exc}") from exc  # fmt: skip
        if (topic, partition) not in found:
            raise SinkError(f"sink {self.sink.name!r}: dead-letter topic {topic!r} has "
                            f"{len(found)} partitions; partition {partition} of "
                            f"{self.sink.topic!r} needs its own (at least as many)")  # fmt: skip
        where = found[(topic, partition)]
        return -1 if where is None else int(where.rsplit("\t", 1)[1])

    def _open(self) -> SourceProducer:
        if self._producer is None:
            from goka.kafka.config import producer_config

            self._producer = SourceProducer(producer_config(self.brokers, self.kafka_config))
        return self._producer

    def close(self) -> None:
        """Wait for what was produced (idempotent)."""
        if self._producer is not None:
            producer, self._producer = self._producer, None
            with contextlib.suppress(SourceError):  # (send reported every failure)
                producer.flush()
