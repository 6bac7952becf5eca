"""A sink's dead letters, exactly once: the records its ``on_error="dead_letter"`` refuses go
to the dead-letter topic before the write that refused them commits, partition ``p`` of the
sink's topic into partition ``p`` of the dead-letter topic (so it needs at least as many),
each with header ``goka-source`` = ``<sink>\\t<topic>\\t<offset>`` and the reason in
``goka-error``. A write replayed after a crash between the two refuses the same records
again; the last dead letter of the partition says which went out already (the sink is the
only writer of its dead-letter partitions)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from goka.connect.positions import POSITION_HEADER, last_positions
from goka.connect.rows import Record
from goka.errors import SinkError

__all__ = ["ERROR_HEADER", "DeadLetters"]

#: The header of a dead letter naming why.
ERROR_HEADER = "goka-error"


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
        self._producer: Any = None
        self._last: dict[int, int] = {}  # partition -> the highest offset sent (this task)
        self._failures: list[str] = []

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
            while True:
                try:
                    producer.produce(topic, record[3], record[2], partition=partition,
                                     timestamp=max(record[4], 0), headers=headers)  # fmt: skip
                    break
                except BufferError:
                    producer.poll(0.05)
            last, sent = offset, sent + 1
        while producer.flush(1.0) > 0:
            pass
        if self._failures:
            failures, self._failures = self._failures[:3], []
            self._last.pop(partition, None)  # read again: some may have gone out
            raise SinkError(f"sink {self.sink.name!r}: dead letters to {topic!r} partition "
                            f"{partition} failed: {failures}")  # fmt: skip
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

    def _open(self) -> Any:
        if self._producer is None:
            from goka.kafka.config import producer_config
            from goka.kafka.producer import raw_producer

            def delivered(err: Any, message: Any) -> None:
                if err is not None:
                    self._failures.append(str(err))

            self._producer = raw_producer({**producer_config(self.brokers, self.kafka_config),
                                           "on_delivery": delivered,
                                           "delivery.report.only.error": True})  # fmt: skip
        return self._producer

    def close(self) -> None:
        """Wait for what was produced (idempotent)."""
        if self._producer is not None:
            producer, self._producer = self._producer, None
            producer.flush(30.0)
