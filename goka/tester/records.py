"""What the tester's topics hold."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from goka.keys import key_bytes

if TYPE_CHECKING:
    from goka.codec import Codec
    from goka.group.effects import Message

__all__ = ["QueueTracker", "Record"]


@dataclass(frozen=True)
class Record:
    """A message as stored in one of the tester's topics."""

    topic: str
    partition: int
    offset: int
    key: str
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int

    def message(self) -> Message:
        """The record as the engine takes it."""
        return (self.topic, self.offset, key_bytes(self.key), self.value, self.timestamp,
                list(self.headers) or None)  # fmt: skip


class _Logs(Protocol):
    """What a tracker reads of the tester: its topics' records."""

    _logs: dict[str, list[Record]]


class QueueTracker:
    """Reads the messages written to one topic, decoded, starting where it was created."""

    def __init__(self, tester: _Logs, topic: str, codec: Codec[Any]) -> None:
        self.topic = topic
        self._tester = tester
        self._decode = codec.decode
        self._position = len(tester._logs.get(topic, ()))

    @property
    def hwm(self) -> int:
        """How many messages the topic holds (its high water mark, over all partitions)."""
        return len(self._tester._logs.get(self.topic, ()))

    @property
    def next_offset(self) -> int:
        """The position of the next message to read."""
        return self._position

    def next(self) -> tuple[str, Any] | None:
        """Return the next ``(key, value)``, or None if none is left."""
        log = self._tester._logs.get(self.topic, ())
        if self._position >= len(log):
            return None
        record = log[self._position]
        self._position += 1
        return record.key, None if record.value is None else self._decode(record.value)

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        """Yield the remaining ``(key, value)`` pairs."""
        while (item := self.next()) is not None:
            yield item

    def __len__(self) -> int:
        """Messages not read yet."""
        return self.hwm - self._position
