"""What a view reports about itself: its lifecycle and a snapshot of its progress."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from goka.view.table_copy import PartitionStats

__all__ = ["ViewState", "ViewStats"]


class ViewState(enum.Enum):
    """Lifecycle of a view."""

    IDLE = "idle"
    CATCHING_UP = "catching up"
    RUNNING = "running"
    RECONNECTING = "reconnecting"
    REBUILDING = "rebuilding"  # its store was damaged: rebuilt from the table topic
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(frozen=True)
class ViewStats:
    """A snapshot of a view's progress."""

    table: str
    state: ViewState
    recovered: bool
    applied: int
    skipped: int
    partitions: dict[int, PartitionStats]

    @property
    def lag(self) -> int | None:
        """Total lag over all partitions (None while some high watermark is unknown)."""
        lags = [p.lag for p in self.partitions.values()]
        return None if any(lag is None for lag in lags) else sum(lag or 0 for lag in lags)
