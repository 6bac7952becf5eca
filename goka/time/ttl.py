"""A persisted key's time to live (``persist(ttl=...)``): every change schedules an internal
timer (:data:`goka.time.rows.TTL_TIMER`) a TTL after now, by the TTL's clock; when it fires the
engine deletes the key (:mod:`goka.group.firing`), and until then a read of an expired key
finds nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from goka.time.rows import TTL_TIMER

if TYPE_CHECKING:
    from goka.group.graph import GroupGraph

__all__ = ["TtlMethods"]


class TtlMethods:
    """A key's TTL (mixed into :class:`~goka.time.partition.PartitionTime`, which holds the
    attributes and the timers)."""

    graph: GroupGraph
    stream_time: int
    clock: Callable[[], int]

    @property
    def has_ttl(self) -> bool:
        """Do the group's keys expire?"""
        return self.graph.ttl is not None

    def schedule(self, key: str, name: str, at: int, domain: str, data: Any, source: Any) -> None:
        raise NotImplementedError  # the timers'

    def wall_clock(self) -> int:
        raise NotImplementedError  # the partition's

    def timer(self, key: str, name: str) -> tuple[str, int] | None:
        raise NotImplementedError  # the timers'

    def touch(self, key: str, source: Any) -> None:
        """``key`` changed: it expires a TTL after now (by the TTL's clock)."""
        assert self.graph.ttl is not None
        ttl, domain = self.graph.ttl
        now = self.stream_time if domain == "stream" else self.wall_clock()
        self.schedule(key, TTL_TIMER, max(now, 0) + ttl, domain, None, source)

    def expired(self, key: str) -> bool:
        """Has ``key`` outlived its TTL (its deletion is due)?"""
        found = self.timer(key, TTL_TIMER)
        if found is None:
            return False
        domain, at = found
        return at <= (self.stream_time if domain == "stream" else self.wall_clock())
