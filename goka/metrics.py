"""Prometheus metrics of goka-py.

Hot paths (one emitter callback per message) count into plain per-topic attributes that a
collector reads at scrape time, instead of calling a locking prometheus metric per message.
Nothing is registered at import: :func:`register` runs when the first emitter is created.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from goka._accel import speedups

__all__ = [
    "LATENCY_BUCKETS",
    "EmitterStats",
    "PyEmitterStats",
    "ViewMetrics",
    "connector_collector",
    "delivery_figures",
    "emitter_stats",
    "latency_percentile",
    "new_emitter_stats",
    "register",
    "view_metrics",
]

#: Upper bounds (seconds) of the delivery latency histogram.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


class EmitterStats(Protocol):
    """Cumulative counts of all emitters writing to one topic.

    Delivery callbacks call :meth:`record` once per acknowledged message, so it must be cheap:
    the C implementation (goka._speedups.Counters) buckets in C; the pure-Python one appends to
    an array and buckets in one vectorised step at scrape time (bucketing per message in Python
    cost 10% of emit throughput).
    """

    @property
    def delivered(self) -> int:
        """Messages acknowledged by the broker."""

    @property
    def failed(self) -> int:
        """Messages whose delivery failed."""

    @property
    def latency_sum(self) -> float:
        """Sum of delivery latencies in seconds."""

    def record(self, latency: float, /) -> None:
        """Count one acknowledged message that took ``latency`` seconds."""

    def add_failed(self) -> None:
        """Count one failed message."""

    def bucket_counts(self) -> list[int]:
        """Per-bucket latency counts for LATENCY_BUCKETS and a last +Inf bucket."""


class PyEmitterStats:
    """The pure-Python :class:`EmitterStats`: ``record`` is a bound C ``array.append``."""

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS) -> None:
        self._bounds = list(bounds)
        self._pending: array[float] = array("d")
        self.record: Callable[[float], None] = self._pending.append
        self._folded = 0
        self._failed = 0
        self._latency_sum = 0.0
        self._counts = [0] * (len(bounds) + 1)
        self._lock = threading.Lock()

    def fold(self) -> None:
        """Move recorded latencies into the histogram. Thread-safe; callbacks may append
        meanwhile (under the GIL, the copy and the delete each see whole appends)."""
        with self._lock:
            n = len(self._pending)
            if not n:
                return
            values = self._pending[:n]
            del self._pending[:n]
            counts, bounds = self._counts, self._bounds
            for value in values:  # buckets are "less than or equal" (Prometheus' le)
                counts[bisect_left(bounds, value)] += 1
            self._latency_sum += sum(values)
            self._folded += n

    @property
    def pending(self) -> int:
        """Latencies recorded but not folded yet."""
        return len(self._pending)

    @property
    def delivered(self) -> int:
        with self._lock:
            return self._folded + len(self._pending)

    @property
    def failed(self) -> int:
        return self._failed

    @property
    def latency_sum(self) -> float:
        self.fold()
        return self._latency_sum

    def add_failed(self) -> None:
        with self._lock:
            self._failed += 1

    def bucket_counts(self) -> list[int]:
        self.fold()
        return list(self._counts)


def new_emitter_stats() -> EmitterStats:
    """C counters where goka._speedups is built, else :class:`PyEmitterStats`."""
    if speedups is not None:
        stats: EmitterStats = speedups.Counters(LATENCY_BUCKETS)
        return stats
    return PyEmitterStats()


_STATS: dict[str, EmitterStats] = {}
_STATS_LOCK = threading.Lock()
_REGISTERED: set[int] = set()


def emitter_stats(topic: str) -> EmitterStats:
    """Return the process-wide stats of emitters writing to ``topic``."""
    with _STATS_LOCK:
        stats = _STATS.get(topic)
        if stats is None:
            stats = _STATS[topic] = new_emitter_stats()
        return stats


class _EmitterCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        with _STATS_LOCK:
            stats = list(_STATS.items())
        delivered = CounterMetricFamily(
            "goka_emitter_delivered_messages",
            "Messages emitted and acknowledged by the brokers",
            labels=["topic"],
        )
        failed = CounterMetricFamily(
            "goka_emitter_failed_messages", "Messages whose delivery failed", labels=["topic"]
        )
        latency = HistogramMetricFamily(
            "goka_emitter_delivery_latency_seconds",
            "Time from emit() to the broker's acknowledgement",
            labels=["topic"],
        )
        for topic, s in stats:
            counts = s.bucket_counts()
            delivered.add_metric([topic], s.delivered)
            failed.add_metric([topic], s.failed)
            running, buckets = 0, []
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), counts, strict=True):
                running += count
                buckets.append((_bound_label(bound), running))
            latency.add_metric([topic], buckets, s.latency_sum)
        yield delivered
        yield failed
        yield latency


def _bound_label(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def register(registry: CollectorRegistry = REGISTRY) -> None:
    """Register goka's collectors with ``registry`` (once; later calls do nothing)."""
    with _STATS_LOCK:
        if id(registry) in _REGISTERED:
            return
        _REGISTERED.add(id(registry))
    registry.register(_EmitterCollector())


# -- views -------------------------------------------------------------------------------------
_VIEW_METRICS: dict[str, Any] = {}
_VIEW_STATES = ("idle", "catching up", "running", "reconnecting", "failed", "closed")


def _view_families() -> dict[str, Any]:
    with _STATS_LOCK:
        if not _VIEW_METRICS:
            _VIEW_METRICS["applied"] = Counter(
                "goka_view_applied_records", "Table records applied to the view", ["table"]
            )
            _VIEW_METRICS["lag"] = Gauge(
                "goka_view_lag_records",
                "Records between the view and the table's end",
                ["table", "partition"],
            )
            _VIEW_METRICS["state"] = Gauge(
                "goka_view_state",
                "1 for the view's current state, 0 for the others",
                ["table", "state"],
            )
    return _VIEW_METRICS


class ViewMetrics:
    """Prometheus metrics of one view (updated once per consumed batch, not per record)."""

    def __init__(self, table: str) -> None:
        families = _view_families()
        self._table = table
        self._applied = families["applied"].labels(table)
        self._lag = families["lag"]
        self._state = families["state"]

    def applied(self, count: int) -> None:
        """Count ``count`` applied records."""
        self._applied.inc(count)

    def lag(self, lags: dict[int, int | None]) -> None:
        """Set the lag of each partition (unknown lags are not exported)."""
        for partition, lag in lags.items():
            if lag is not None:
                self._lag.labels(self._table, str(partition)).set(lag)

    def state(self, state: str) -> None:
        """Mark ``state`` as the current one."""
        for name in _VIEW_STATES:  # label values without spaces: catching_up
            self._state.labels(self._table, name.replace(" ", "_")).set(1 if name == state else 0)


def view_metrics(table: str) -> ViewMetrics:
    """Return the metrics of the view of ``table``."""
    return ViewMetrics(table)


def latency_percentile(counts: list[int], q: float) -> float | None:
    """The upper bound of the :data:`LATENCY_BUCKETS` bucket holding the ``q`` quantile of
    ``counts`` (per bucket, and a last +Inf one; None: no data)."""
    total = sum(counts)
    if not total:
        return None
    running = 0
    for bound, count in zip((*LATENCY_BUCKETS, float("inf")), counts, strict=True):
        running += count
        if running >= q * total:
            return bound
    return float("inf")


def delivery_figures(stats: EmitterStats) -> dict[str, Any]:
    """An emitter status page's figures: messages delivered and failed (by every emitter of
    the topic in the process) and delivery latency percentiles (upper bucket bounds, s)."""
    counts = stats.bucket_counts()
    return {
        "delivered": stats.delivered,
        "failed": stats.failed,
        "latency_p50_seconds": latency_percentile(counts, 0.50),
        "latency_p99_seconds": latency_percentile(counts, 0.99),
    }


# -- connectors ------------------------------------------------------------------------------------
_CONNECTOR_STATES = ("UNASSIGNED", "RUNNING", "STOPPED", "FAILED")


class _ConnectorCollector(Collector):
    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        connectors = self._snapshot().get("connectors", [])
        records = CounterMetricFamily(
            "goka_connector_records",
            "Records a connector counted, by what happened to them",
            labels=["connector", "count"],
        )
        lag = GaugeMetricFamily(
            "goka_connector_lag_records",
            "Records of a sink's topic not written yet",
            labels=["connector", "topic", "partition"],
        )
        state = GaugeMetricFamily("goka_connector_state", "1 for the connector's state, 0 for "
                                  "the others", labels=["connector", "state"])  # fmt: skip
        commit = GaugeMetricFamily("goka_connector_last_commit_timestamp_seconds", "When the "
                                   "connector last committed (batch or flush)",
                                   labels=["connector"])  # fmt: skip
        rate = GaugeMetricFamily("goka_connector_records_per_second", "Records moved per "
                                 "second (last sample)", labels=["connector"])  # fmt: skip
        for c in connectors:
            name = c["name"]
            for count, value in c["counts"].items():
                records.add_metric([name, count], value)
            for topic, partition, _, behind in c["partitions"]:
                if behind is not None:
                    lag.add_metric([name, topic, str(partition)], behind)
            for known in _CONNECTOR_STATES:
                state.add_metric([name, known.lower()], 1 if c["state"] == known else 0)
            commit.add_metric([name], c["last_commit"])
            rate.add_metric([name], c["rate"])
        yield from (records, lag, state, commit, rate)


def connector_collector(snapshot: Callable[[], dict[str, Any]]) -> Collector:
    """A collector of connectors' figures, read at scrape time from a monitor's last sample
    (:meth:`goka.web.connectors.ConnectorMonitor.snapshot`): records by count, each sink
    partition's lag, the state, the last commit and records per second."""
    return _ConnectorCollector(snapshot)
