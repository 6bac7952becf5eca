"""A controllable Producer for emitter unit tests (the real one is exercised in integration)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from goka.errors import BrokerError, TopicError


@dataclass
class FakeMessage:
    _topic: str
    _partition: int
    _offset: int
    _key: bytes | None
    value: bytes | None
    headers: Any
    timestamp: int

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def latency(self) -> float:
        return 0.001


@dataclass
class FakeError:
    text: str
    retry: bool = False

    def str(self) -> str:
        return self.text

    def retriable(self) -> bool:
        return self.retry


@dataclass
class FakeProducer:
    """Queues messages; ``deliver()`` acknowledges (or fails) them as a broker would."""

    config: dict[str, Any]
    topics: dict[str, int] = field(default_factory=lambda: {"clicks": 1})
    capacity: int = 1_000_000
    reachable: bool = True  # answers metadata requests
    acking: bool = True  # acknowledges queued messages when polled
    queued: list[tuple[FakeMessage, Any]] = field(default_factory=list)
    sent: list[FakeMessage] = field(default_factory=list)
    fail_with: FakeError | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def produce(self, topic, value, key, *, on_delivery, headers=None, timestamp=0, partition=-1):  # type: ignore[no-untyped-def]
        with self.lock:
            if len(self.queued) >= self.capacity:
                raise BufferError("Local: Queue full")
            offset = len(self.sent) + len(self.queued)
            if not isinstance(key, str | bytes):
                raise TypeError("key must be str or bytes")
            raw = key.encode() if isinstance(key, str) else key
            self.queued.append(
                (FakeMessage(topic, 0, offset, raw, value, headers, timestamp), on_delivery)
            )

    def deliver(self) -> int:
        with self.lock:
            batch, self.queued = self.queued, []
        for message, callback in batch:
            if self.fail_with is None:
                self.sent.append(message)
            callback(self.fail_with, message)
        return len(batch)

    def poll(self, timeout: float) -> int:
        if self.acking:
            return self.deliver()
        threading.Event().wait(min(timeout, 0.01))
        return 0

    def flush(self, timeout: float) -> int:
        self.poll(timeout)
        return len(self.queued)

    def purge(self) -> None:
        self.fail_with = FakeError("Local: Purged in queue")
        self.acking = True  # purged messages are reported on the next poll

    def __len__(self) -> int:
        return len(self.queued)

    def partition_count(self, topic: str, timeout: float) -> int:
        if not self.reachable:
            raise BrokerError(f"no Kafka broker answered within {timeout:g}s")
        if topic not in self.topics:
            raise TopicError(f"topic {topic!r} does not exist")
        return self.topics[topic]
