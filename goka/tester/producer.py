"""A :class:`~goka.kafka.Producer` that writes into a :class:`~goka.tester.Tester`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from goka.keys import key_bytes, key_str
from goka.tester.records import Record

#: Writes a message into the tester: ``(topic, key, value, headers, timestamp, partition)``.
Write = Callable[[str, str, bytes | None, tuple[tuple[str, bytes], ...], int, int], Record]

__all__ = ["TesterProducer"]


class _Delivered:
    """The delivery report of a message written into the tester."""

    __slots__ = ("_record",)

    def __init__(self, record: Record) -> None:
        self._record = record

    def topic(self) -> str:
        return self._record.topic

    def partition(self) -> int:
        return self._record.partition

    def offset(self) -> int:
        return self._record.offset

    def key(self) -> bytes:
        return key_bytes(self._record.key)

    def latency(self) -> float:
        return 0.0


class TesterProducer:
    """Writes produced messages into a tester and reports them delivered at once.

    Args:
        write: the tester's :meth:`~goka.tester.Tester.write`.
        check_topic: raises for a topic no group of the tester declares.
        partitions: the partitions of every topic.
    """

    def __init__(self, write: Write, check_topic: Callable[[str], object], partitions: int) -> None:
        self._write, self._check_topic, self._partitions = write, check_topic, partitions

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: str | bytes | None,
        *,
        on_delivery: Any,
        headers: Any = None,
        timestamp: int = 0,
        partition: int = -1,
    ) -> None:
        if not isinstance(key, str | bytes):
            raise TypeError(f"keys are str or bytes, got {type(key).__name__}")
        text = key_str(key)
        pairs = tuple(headers.items() if isinstance(headers, dict) else headers or ())
        when = timestamp or int(time.time() * 1000)
        record = self._write(topic, text, value, pairs, when, partition)
        on_delivery(None, _Delivered(record))

    def poll(self, timeout: float) -> int:
        time.sleep(min(timeout, 0.05))  # nothing is ever pending
        return 0

    def flush(self, timeout: float) -> int:
        return 0

    def purge(self) -> None:
        pass

    def __len__(self) -> int:
        return 0

    def partition_count(self, topic: str, timeout: float) -> int:
        self._check_topic(topic)
        return self._partitions
