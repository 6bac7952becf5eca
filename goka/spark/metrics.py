"""Prometheus metrics of processors, updated on the driver once per micro-batch."""

from __future__ import annotations

import collections
import json
import threading
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from goka.processing.summary import WAITING_KEYS
from goka.processing.timeline import BUCKETS

if TYPE_CHECKING:
    from goka.spark.summary import BatchSummary

__all__ = ["ProcessorMetrics"]

_LOCK = threading.Lock()
_FAMILIES: dict[str, Any] = {}
#: Buckets of restore and upload times (seconds).
_STATE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def _families() -> dict[str, Any]:
    with _LOCK:
        if not _FAMILIES:
            labels = ["group"]
            _FAMILIES.update(
                processed=Counter(
                    "goka_processor_messages", "Input messages processed (failed included)", labels
                ),
                table=Counter("goka_processor_table_updates", "Group table updates", labels),
                emitted=Counter(
                    "goka_processor_emitted_messages",
                    "Messages emitted (ctx.emit), per topic",
                    [*labels, "topic"],
                ),
                loopbacks=Counter(
                    "goka_processor_loopback_messages",
                    "Messages looped back (ctx.loopback)",
                    labels,
                ),
                errors=Counter(
                    "goka_processor_failed_messages",
                    "Input messages whose callback failed, by --on-error policy (label values "
                    "fail, skip, dead_letter)",
                    [*labels, "policy"],
                ),
                skipped_applied=Counter(
                    "goka_processor_skipped_applied_messages",
                    "Input messages of planned ranges that the partition stores had applied "
                    "already (a range run again after a crash or planned behind the store): "
                    "skipped, not applied again",
                    labels,
                ),
                duration=Histogram(
                    "goka_processor_batch_duration_seconds",
                    "Longest task of each micro-batch",
                    labels,
                    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
                ),
                lag=Gauge(
                    "goka_processor_lag_records",
                    "Records not processed yet",
                    [*labels, "topic", "partition"],
                ),
                offset=Gauge(
                    "goka_processor_committed_offset",
                    "Next input offset to process, as committed to the consumer group "
                    "(in continuous mode updated while an epoch runs)",
                    [*labels, "topic", "partition"],
                ),
                committed_at=Gauge(
                    "goka_processor_last_commit_timestamp_seconds",
                    "When the partition last committed (unix time)",
                    [*labels, "topic", "partition"],
                ),
                stores=Counter(
                    "goka_processor_store_recoveries",
                    "How each partition store was made current for a batch "
                    "(reused, opened, caught_up, restored, rebuilt, created)",
                    [*labels, "partition", "origin"],
                ),
                table_records=Counter(
                    "goka_processor_recovery_table_records",
                    "Records read from table topics to make stores current",
                    [*labels, "partition"],
                ),
                corrupt=Counter(
                    "goka_processor_corrupt_stores",
                    "Partition stores found corrupt on disk, deleted and rebuilt",
                    labels,
                ),
                restored=Counter(
                    "goka_processor_restored_bytes", "Bytes of snapshots restored", labels
                ),
                restore_seconds=Histogram(
                    "goka_processor_restore_seconds",
                    "Time to fetch and open snapshots, per partition",
                    labels,
                    buckets=_STATE_BUCKETS,
                ),
                uploads=Counter(
                    "goka_processor_snapshot_uploads", "Snapshots published", [*labels, "result"]
                ),
                upload_bytes=Counter(
                    "goka_processor_snapshot_upload_bytes", "Bytes of snapshots uploaded", labels
                ),
                upload_seconds=Histogram(
                    "goka_processor_snapshot_upload_seconds",
                    "Time to publish a snapshot (new files, manifest, pruning)",
                    labels,
                    buckets=_STATE_BUCKETS,
                ),
                key_waits=Counter(
                    "goka_processor_key_waits",
                    "Records (of a group with concurrency) that waited behind an earlier "
                    "record of their key",
                    labels,
                ),
                in_flight_seconds=Counter(
                    "goka_processor_in_flight_seconds",
                    "Time records were in flight, added up (its rate: the records in flight "
                    "on average)",
                    labels,
                ),
                in_flight_most=Gauge(
                    "goka_processor_in_flight_most_records",
                    "The most records of the partition in flight at once in the last batch (epoch)",
                    [*labels, "partition"],
                ),
                in_flight_longest=Gauge(
                    "goka_processor_in_flight_longest_seconds",
                    "The longest a record of the partition was in flight in the last batch (epoch)",
                    [*labels, "partition"],
                ),
                in_flight_held=Gauge(
                    "goka_processor_in_flight_held_records",
                    "The most finished records of the partition held back at once behind an "
                    "earlier record not finished (released in offset order), in the last "
                    "batch (epoch)",
                    [*labels, "partition"],
                ),
                waiting_keys=Gauge(
                    "goka_processor_waiting_key_records",
                    "Records that waited behind an earlier record of their key in the last "
                    "batch (epoch), for the keys that waited most",
                    [*labels, "key"],
                ),
                loop_steps=_LoopSteps(),
            )
            REGISTRY.register(_FAMILIES["loop_steps"])
    return _FAMILIES


class _LoopSteps(Collector):
    """``goka_processor_loop_step_seconds``: the continuous loops' step histograms
    (:mod:`goka.processing.timeline`), added up from the tasks' summaries."""

    _name, _labelnames = "goka_processor_loop_step_seconds", ("group", "step")  # as metrics have

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._figures: dict[tuple[str, str], tuple[list[int], float]] = {}

    def add(self, group: str, report: str) -> None:
        """Add the step histograms of a timeline report."""
        if not report:
            return
        with self._lock:
            for step, found in json.loads(report)["steps"].items():
                counts, total = self._figures.get((group, step), ([0] * len(found["counts"]), 0.0))
                added = [a + b for a, b in zip(counts, found["counts"], strict=True)]
                self._figures[(group, step)] = (added, total + found["sum"])

    def collect(self) -> list[Metric]:
        family = HistogramMetricFamily(
            self._name,
            "Duration of each step of the continuous loops' turns (begin, assign, poll, process, "
            "flush, write, group_commit, finals, snapshot)",
            labels=list(self._labelnames),
        )
        with self._lock:
            figures = dict(self._figures)
        for (group, step), (counts, total) in sorted(figures.items()):
            running, buckets = 0, []
            for bound, count in zip((*BUCKETS, float("inf")), counts, strict=True):
                running += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
            family.add_metric([group, step], buckets, total)
        return [family]


class ProcessorMetrics:
    """The metrics of one processor group."""

    def __init__(self, group: str) -> None:
        self.group = group
        self._f = _families()
        self._waiting: dict[str, int] = {}  # the keys the waiting gauge has

    def batch(self, summary: BatchSummary, policy: str) -> None:
        """Count one micro-batch."""
        f, g = self._f, self.group
        f["processed"].labels(g).inc(summary.processed)
        f["table"].labels(g).inc(summary.table_updates)
        for topic, count in summary.emitted.items():
            f["emitted"].labels(g, topic).inc(count)
        f["loopbacks"].labels(g).inc(summary.loopbacks)
        # (the label keeps the policy's spelling of before 2026-11: dashboards match on it)
        f["errors"].labels(g, policy.replace("-", "_")).inc(summary.failed)
        f["skipped_applied"].labels(g).inc(summary.skipped_applied)
        f["corrupt"].labels(g).inc(summary.corrupt_stores)
        f["duration"].labels(g).observe(summary.seconds)
        f["loop_steps"].add(g, summary.timeline)
        f["key_waits"].labels(g).inc(summary.key_waits)
        f["in_flight_seconds"].labels(g).inc(summary.in_flight_seconds)
        waiting: collections.Counter[str] = collections.Counter()
        for part in summary.partitions:
            f["stores"].labels(g, part.partition, part.store).inc()
            if part.in_flight_most:
                f["in_flight_most"].labels(g, part.partition).set(part.in_flight_most)
                f["in_flight_longest"].labels(g, part.partition).set(part.in_flight_longest)
                f["in_flight_held"].labels(g, part.partition).set(part.in_flight_held)
                waiting.update(json.loads(part.waiting_keys or "{}"))
            f["table_records"].labels(g, part.partition).inc(part.table_records)
            if part.restored_bytes:
                f["restored"].labels(g).inc(part.restored_bytes)
                f["restore_seconds"].labels(g).observe(part.restore_seconds)
        if waiting:  # (the keys of the last batch only: keys come and go)
            for key in self._waiting:
                f["waiting_keys"].remove(g, key)
            self._waiting = dict(waiting.most_common(WAITING_KEYS))
            for key, count in self._waiting.items():
                f["waiting_keys"].labels(g, key).set(count)
        for upload in summary.uploads:
            f["uploads"].labels(g, "failed" if upload.get("error") else "ok").inc()
            f["upload_bytes"].labels(g).inc(upload.get("bytes", 0))
            f["upload_seconds"].labels(g).observe(upload.get("seconds", 0.0))

    def lag(self, progress: dict[str, Any]) -> None:
        """Set the lag per input partition from a query progress report."""
        for source in progress.get("sources", []):
            latest, end = _offsets(source.get("latestOffset")), _offsets(source.get("endOffset"))
            for topic, partitions in latest.items():
                for partition, offset in partitions.items():
                    done = end.get(topic, {}).get(partition, offset)
                    self._f["lag"].labels(self.group, topic, partition).set(max(0, offset - done))

    def partition_lag(self, partitions: list[dict[str, Any]]) -> None:
        """Set the lag, committed offset and commit time per input partition from
        :meth:`Processor.partition_status`."""
        for part in partitions:
            labels = (self.group, part["topic"], part["partition"])
            for name, value in (("lag", part["lag"]), ("offset", part["offset"]),
                                ("committed_at", part["committed_at"])):  # fmt: skip
                if value is not None:
                    self._f[name].labels(*labels).set(max(0, value))


def _offsets(value: Any) -> dict[str, dict[str, int]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}
