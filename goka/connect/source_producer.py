"""The producer a source writes its records with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from goka.errors import SourceError

__all__ = ["SourceProducer"]


class SourceProducer:
    """An idempotent producer (each partition in order, no duplicates from retries); a failed
    delivery stops the source at the next :meth:`flush`."""

    def __init__(self, config: dict[str, Any]) -> None:
        from goka.kafka.producer import raw_producer

        self._failures: list[str] = []
        self._producer = raw_producer(
            {**config, "on_delivery": self._delivered, "delivery.report.only.error": True}
        )

    def _delivered(self, err: Any, message: Any) -> None:
        if err is not None:
            self._failures.append(f"topic {message.topic()!r} partition "
                                  f"{message.partition()}: {err}")  # fmt: skip

    @property
    def raw_produce(self) -> Callable[..., None]:
        """confluent-kafka's ``produce`` (raises BufferError when the queue is full)."""
        produce: Callable[..., None] = self._producer.produce
        return produce

    def produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int,
                timestamp: int, headers: list[Any]) -> None:  # fmt: skip
        """Produce, waiting while the queue is full."""
        produce = self._producer.produce
        while True:
            try:
                produce(topic, value, key, partition=partition, timestamp=timestamp,
                        headers=headers)  # fmt: skip
                return
            except BufferError:
                self._producer.poll(0.002)  # (errors-only reports: poll waits it out)

    def flush(self) -> None:
        """Wait until every record is acknowledged.

        Raises:
            SourceError: a record could not be produced.
        """
        while self._producer.flush(1.0) > 0:
            pass
        if self._failures:
            failures, self._failures = self._failures[:3], []
            raise SourceError(f"records could not be produced: {failures}")
