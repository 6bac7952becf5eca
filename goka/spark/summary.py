"""What a processor's micro-batches and epochs did (summed on the driver), and how a failed
query is reported."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pyspark.errors import StreamingQueryException

from goka.errors import GokaError
from goka.partition_summary import Counts, PartitionSummary

__all__ = ["BatchSummary", "ProcessorFailed", "translate"]

_GOKA_ERROR = re.compile(r"goka\.errors\.(\w+): (.*)")


class ProcessorFailed(GokaError):
    """The streaming query stopped with an error (the message says where and why).

    Attributes:
        cause: the class name of the task's goka error (e.g. ``ProcessingError``), or "".
    """

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause


@dataclass
class BatchSummary(Counts):
    """What one micro-batch did, summed over its partitions.

    Attributes:
        stores: how many partition stores were reused, opened, caught_up, restored, rebuilt or
            created (see :mod:`goka.partition_table`).
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

    @property
    def rebuilt_partitions(self) -> int:
        """Partition stores rebuilt from the whole table topic."""
        return self.stores["rebuilt"]

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
        return text


def translate(exc: StreamingQueryException) -> GokaError:
    text = str(exc)
    found = _GOKA_ERROR.findall(text)  # the task's own error, inside Spark's wrapping
    if found:
        name, message = found[-1]
        text = f"{name}: {message}" if name != "ProcessingError" else message
        return ProcessorFailed(text, cause=name)
    return ProcessorFailed(text.splitlines()[0] if text else repr(exc))
