"""What partition processors did: counts per partition, per micro-batch or epoch, summed by
the driver (:class:`goka.spark.summary.BatchSummary`). One definition of the summary row: the
Spark DDL and the Arrow schema are derived from :class:`PartitionSummary`."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, fields
from functools import cache
from typing import TYPE_CHECKING

from goka.processing.timeline import merge_reports

if TYPE_CHECKING:
    import pyarrow as pa

    from goka.processing.leases import Lease
    from goka.processing.recovery import Recovery

__all__ = ["SUMMARY_DDL", "Counts", "PartitionSummary", "summary_schema"]


@dataclass(kw_only=True)
class Counts:
    """What processing did, per partition or summed over a micro-batch's partitions.

    Attributes:
        skipped_applied: input records of the planned ranges that the store had applied
            already (a range run again after a crash, or planned behind the store): skipped.
        table_records: records read from table topics to make stores current.
        restored_bytes, restore_seconds: snapshot files fetched to restore stores.
        corrupt_stores: stores found corrupt on disk, deleted and rebuilt.
        commits: state commits (one per micro-batch; one per commit interval in an epoch).
    """

    processed: int = 0
    failed: int = 0
    table_updates: int = 0
    emits: int = 0
    loopbacks: int = 0
    dead_letters: int = 0
    skipped_applied: int = 0
    table_records: int = 0
    restored_bytes: int = 0
    restore_seconds: float = 0.0
    corrupt_stores: int = 0
    commits: int = 0

    def add(self, other: Counts) -> None:
        """Add ``other``'s counts to these."""
        for item in fields(Counts):
            setattr(self, item.name, getattr(self, item.name) + getattr(other, item.name))


@dataclass
class PartitionSummary(Counts):
    """What one partition processor did in one micro-batch (one row of the batch's result).

    ``store`` says how the group store was made current: reused, opened, caught_up, restored,
    rebuilt or created (see :mod:`goka.processing.recovery`). ``started_at`` is when the task began
    (unix seconds), ``ready_seconds`` how long it took to lease and recover its stores.
    ``emitted`` counts the emitted messages per output topic (JSON). ``store_bytes`` is the
    size of the group store's files when the task ended (0 for stores kept in memory).
    ``uploads`` lists the snapshot uploads this worker finished since its previous summary, of
    any partition (JSON). ``timeline`` is the continuous loop's
    (:meth:`goka.processing.timeline.Timeline.report`; on one partition of the loop's task).
    """

    partition: int
    store: str = ""
    snapshot_seconds: float = 0.0
    seconds: float = 0.0
    started_at: float = 0.0
    ready_seconds: float = 0.0
    ends: str = ""
    errors: str = ""
    uploads: str = ""
    emitted: str = ""
    store_bytes: int = 0
    timeline: str = ""

    def absorb(self, other: PartitionSummary) -> None:
        """Add the counts, errors, uploads and emits of ``other`` (work of the same group that
        no task reported: see :func:`goka.processing.epoch.run_epoch`) to this summary."""
        self.add(other)
        for name in ("errors", "uploads"):
            found = json.loads(getattr(self, name) or "[]") + json.loads(
                getattr(other, name) or "[]"
            )
            setattr(self, name, json.dumps(found) if found else "")
        self.timeline = merge_reports(self.timeline, other.timeline)
        emitted = Counter(json.loads(self.emitted or "{}"))
        emitted.update(json.loads(other.emitted or "{}"))
        self.emitted = json.dumps(dict(emitted)) if emitted else ""

    def count(self, recovery: Recovery, lease: Lease) -> None:
        """Add what recovering a store did."""
        self.corrupt_stores += lease.fresh and lease.discarded is not None
        self.table_records += recovery.records
        self.restored_bytes += recovery.restored_bytes
        self.restore_seconds += recovery.restore_seconds


#: Field types of a summary row: Python annotation -> (Spark DDL type, pyarrow type factory).
_TYPES = {"int": ("long", "int64"), "float": ("double", "float64"), "str": ("string", "string")}
#: A :class:`PartitionSummary` as Spark DDL: the row a task returns per partition.
SUMMARY_DDL = ", ".join(f"{f.name} {_TYPES[str(f.type)][0]}" for f in fields(PartitionSummary))


@cache
def summary_schema() -> pa.Schema:
    """:data:`SUMMARY_DDL` in Arrow (imports pyarrow: tasks only)."""
    import pyarrow as pa

    return pa.schema(
        [(f.name, getattr(pa, _TYPES[str(f.type)][1])()) for f in fields(PartitionSummary)]
    )


def store_bytes(storage: object) -> int:
    """The size of a store's files (a LevelDB directory); 0 for stores without a path."""
    path = getattr(storage, "path", None)
    if path is None:
        return 0
    try:
        with os.scandir(path) as entries:  # closed also when a file goes away under it
            return sum(entry.stat().st_size for entry in entries if entry.is_file())
    except OSError:  # moved aside or closed meanwhile: unknown
        return 0
