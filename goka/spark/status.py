"""Where a processor's group stands, per partition and input topic: the offsets it committed,
when, and its lag (the monitor page, the lag metrics, :meth:`Processor.partition_status
<goka.spark.Processor.partition_status>`)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from goka.errors import GokaError
from goka.group.graph import GroupGraph
from goka.kafka.offsets import EndOffsets
from goka.kafka.ranges import RangeReader
from goka.spark.metrics import ProcessorMetrics

__all__ = ["PartitionStatus"]

log = logging.getLogger(__name__)

#: Seconds an answer serves every caller (the metrics and the monitor page).
_FRESH = 0.1
#: How long a status read waits for offsets an open transaction sent (a killed exactly-once
#: processor's are held back until its successor fences it): a read that fails says so.
_COMMITTED_SECONDS = 2.0


class PartitionStatus:
    """Reads the group's committed offsets and the partitions' ends. Thread-safe: callers
    within :data:`_FRESH` seconds of each other share one answer, and the clients that ask
    the brokers are kept between calls (:meth:`close` closes them; the next call makes new
    ones).

    Args:
        graph: the group.
        brokers, kafka_config: where the group's topics are.
    """

    def __init__(self, graph: GroupGraph, brokers: str, kafka_config: dict[str, Any]) -> None:
        self.graph, self.brokers, self.kafka_config = graph, brokers, kafka_config
        self._lock = threading.Lock()
        self._answer: tuple[list[dict[str, Any]] | None, float] = (None, 0.0)
        self._clients: tuple[RangeReader, EndOffsets] | None = None
        self._seen: dict[tuple[str, int], tuple[int, float]] = {}  # offset, when first seen
        self.reported = False  # the first commit was logged

    def read(self, partitions: int) -> list[dict[str, Any]]:
        """Per partition and input topic: ``offset`` the group committed, ``lag`` behind the
        partition's end, ``committed_at`` (unix seconds; None: never) -- the commit's own time
        where the broker keeps commit metadata, else when it was first seen here (the embedded
        broker drops metadata).

        Raises:
            BrokerError: the brokers did not answer.
        """
        with self._lock:
            answer, at = self._answer
            if answer is not None and time.monotonic() - at < _FRESH:
                return answer
            try:
                found = self._read(partitions)
            except BaseException:
                self._close()
                raise
            self._answer = (found, time.monotonic())
            return found

    def update_lag(self, partitions: int, metrics: ProcessorMetrics) -> None:
        """Set ``metrics``' lag from the group's commits, and log the first commit (a broker
        that does not answer is logged: the next update tries again)."""
        try:
            status = self.read(partitions)
            metrics.partition_lag(status)
            if not self.reported and any(s["offset"] is not None for s in status):
                self.reported = True
                lag = sum(s["lag"] or 0 for s in status)
                log.info("group %s: processing; lag %s records", self.graph.group, f"{lag:,}")
        except GokaError as exc:
            log.warning("group %s: lag not updated: %s", self.graph.group, exc)

    def follow(self, active: Callable[[], bool], partitions: int, metrics: ProcessorMetrics,
               every: float, stopping: threading.Event) -> None:  # fmt: skip
        """Update the lag every ``every`` seconds (every second until the first commit) while
        ``active()`` and not ``stopping`` (a continuous query: Spark reports an epoch only at
        its end, so the group's commits tell how far its tasks are)."""
        while not stopping.wait(every if self.reported else 1.0):
            if not active():
                return
            self.update_lag(partitions, metrics)

    def close(self) -> None:
        """Close the clients (the next :meth:`read` makes new ones). Idempotent."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        clients, self._clients = self._clients, None
        if clients is not None:
            clients[0].close()
            clients[1].close()

    def _read(self, partitions: int) -> list[dict[str, Any]]:
        topics = self.graph.input_topics()
        if self._clients is None:
            self._clients = (RangeReader(self.brokers, self.kafka_config),
                             EndOffsets(self.brokers, self.kafka_config))  # fmt: skip
        reader, ends = self._clients
        high = ends.high([(t, p) for t in topics for p in range(partitions)])
        found = []
        for p in range(partitions):
            committed = reader.committed(self.graph.group, p, topics, timeout=_COMMITTED_SECONDS)
            for topic in topics:
                offset, note = committed.get(topic, (None, ""))
                lag = high[(topic, p)] - offset if offset is not None else None
                seen = self._seen.get((topic, p))
                if offset is not None and (seen is None or seen[0] != offset):
                    self._seen[(topic, p)] = seen = (offset, time.time())
                at = _commit_time(note) or (seen[1] if offset is not None and seen else None)
                found.append({"topic": topic, "partition": p, "offset": offset,
                              "lag": lag, "committed_at": at})  # fmt: skip
        return found


def _commit_time(note: str) -> float | None:
    try:
        return float(json.loads(note)["time"])
    except (ValueError, KeyError, TypeError):
        return None
