"""What a processor's micro-batches and epochs did (summed on the driver), and how a failed
query is reported."""

from __future__ import annotations

import json
import re
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from pyspark.errors import StreamingQueryException

from goka.errors import GokaError, ProcessorFailed
from goka.processing.summary import Counts, PartitionSummary
from goka.processing.timeline import merge_reports

__all__ = ["HISTORY", "BatchSummary", "ProcessorFailed", "Totals", "translate"]

#: How many micro-batch (or epoch) summaries a processor keeps (its monitor shows the last).
HISTORY = 100
#: How many error messages :class:`Totals` keeps.
ERRORS_KEPT = 20

_GOKA_ERROR = re.compile(r"goka\.errors\.(\w+): (.*)")


@dataclass
class BatchSummary(Counts):
    """What one micro-batch did, summed over its partitions.

    Attributes:
        stores: how many partition stores were reused, opened, caught_up, restored, rebuilt or
            created (see :mod:`goka.processing.recovery`).
        uploads: snapshot uploads that finished during the batch (of any partition).
        partitions: each partition's own summary.
    """

    batch_id: int
    stores: Counter[str] = field(default_factory=Counter)
    uploads: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    finished_at: float = 0.0
    errors: list[str] = field(default_factory=list)
    emitted: Counter[str] = field(default_factory=Counter)
    partitions: list[PartitionSummary] = field(default_factory=list)
    timeline: str = ""

    @classmethod
    def of(cls, batch_id: int, partitions: list[PartitionSummary]) -> BatchSummary:
        """Sum the partitions' summaries."""
        summary = cls(batch_id, finished_at=time.time(), partitions=partitions)
        for part in partitions:
            summary.add(part)
            summary.stores[part.store] += 1
            summary.seconds = max(summary.seconds, part.seconds)
            summary.errors += json.loads(part.errors or "[]")
            summary.uploads += json.loads(part.uploads or "[]")
            summary.emitted.update(json.loads(part.emitted or "{}"))
        summary.timeline = merge_reports(*(part.timeline for part in partitions))
        return summary

    def describe(self) -> str:
        """One line for the log."""
        stores = ", ".join(f"{n} {origin}" for origin, n in sorted(self.stores.items()))
        sent = [u for u in self.uploads if not u.get("error")]
        rate = self.processed / self.seconds if self.seconds > 0 else 0.0
        text = (
            f"batch {self.batch_id}: {self.processed:,} records, {rate:,.0f}/s, "
            f"{self.seconds:.2f} s; stores: {stores or 'none'}"
        )
        if self.skipped_applied:
            text += f"; {self.skipped_applied:,} already applied, skipped"
        if self.table_records:
            text += f"; {self.table_records} table records replayed"
        if self.restored_bytes:
            text += f"; {self.restored_bytes / 1e6:.1f} MB restored in {self.restore_seconds:.2f}s"
        if self.uploads:
            text += (
                f"; snapshots: {len(sent)} uploaded ({sum(u['bytes'] for u in sent) / 1e6:.1f} MB)"
                f", {len(self.uploads) - len(sent)} failed"
            )
        if self.failed:
            text += f"; {self.failed} failed messages ({self.dead_letters} dead-lettered)"
        if self.timeline:
            stalls = json.loads(self.timeline)["stalls"]
            text += f"; longest loop stall {stalls[0]['seconds'] * 1000:.0f} ms" if stalls else ""
        return text


@dataclass
class Totals(Counts):
    """Running sums over micro-batches or epochs: of one run (what
    :meth:`~goka.spark.Processor.run_until_caught_up` returns) or of a processor's life
    (:attr:`~goka.spark.Processor.totals`). Its size does not grow with the number of
    batches: only the last :data:`HISTORY` summaries and :data:`ERRORS_KEPT` errors are kept.
    Not thread-safe: one thread adds (Spark's batch callback), others read.

    Attributes:
        batches: micro-batches (or epochs) summed.
        stores: how the partition stores were made current, summed (see ``BatchSummary``).
        emitted: emitted messages per output topic.
        uploads, failed_uploads: snapshots published, and uploads that failed.
        errors: the last error messages of failed records.
        first_finished_at, last_finished_at: when the first and the last batch ended (unix s).
        recent: the last batches' summaries, oldest first.
        timeline: the continuous loops' timelines, merged
            (:mod:`goka.processing.timeline`): step histograms and the longest stalls.
    """

    batches: int = 0
    stores: Counter[str] = field(default_factory=Counter)
    emitted: Counter[str] = field(default_factory=Counter)
    uploads: int = 0
    failed_uploads: int = 0
    errors: deque[str] = field(default_factory=lambda: deque(maxlen=ERRORS_KEPT))
    first_finished_at: float = 0.0
    last_finished_at: float = 0.0
    recent: deque[BatchSummary] = field(default_factory=lambda: deque(maxlen=HISTORY))
    timeline: str = ""

    def add_batch(self, batch: BatchSummary) -> None:
        """Add one batch's summary."""
        self.add(batch)
        self.batches += 1
        self.stores.update(batch.stores)
        self.emitted.update(batch.emitted)
        failed = sum(1 for upload in batch.uploads if upload.get("error"))
        self.uploads += len(batch.uploads) - failed
        self.failed_uploads += failed
        self.errors.extend(batch.errors)
        self.first_finished_at = self.first_finished_at or batch.finished_at
        self.last_finished_at = batch.finished_at
        self.recent.append(batch)
        self.timeline = merge_reports(self.timeline, batch.timeline)

    def describe(self, failed: str = "") -> str:
        """One line: what was processed (``failed``: what became of failed records, e.g.
        ``" (2 skipped)"``), what was skipped as applied already, how stores were made
        current."""
        from goka.processing.recovery import ORIGINS

        skipped = f" ({self.skipped_applied} already applied, skipped)" if self.skipped_applied \
            else ""  # fmt: skip
        stores = ", ".join(f"{self.stores[o]} {o}" for o in ORIGINS)
        return (f"{self.processed} messages{failed} in {self.batches} batches{skipped}; "
                f"stores: {stores}")  # fmt: skip


def translate(exc: StreamingQueryException) -> GokaError:
    text = str(exc)
    found = _GOKA_ERROR.findall(text)  # the task's own error, inside Spark's wrapping
    if found:
        name, message = found[-1]
        text = f"{name}: {message}" if name != "ProcessingError" else message
        return ProcessorFailed(text, cause=name)
    if not text:
        return ProcessorFailed(repr(exc))
    lines = text.splitlines()
    cause = [line.strip() for line in lines if _PYTHON_ERROR.match(line.strip())]
    first = lines[0] if len(lines[0]) <= 400 else lines[0][:400] + "..."
    return ProcessorFailed(f"{first} (Python: {cause[-1]})" if cause else first)


#: The last line of a Python traceback inside Spark's message (what a worker or the driver's
#: batch function raised: an import error, say), kept when no goka error is found.
_PYTHON_ERROR = re.compile(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)(: .*)?\Z")
