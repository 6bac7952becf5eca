"""What the tester's topics hold."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Record"]


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
