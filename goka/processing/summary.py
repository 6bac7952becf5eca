"""What partition processors did: counts per partition, per micro-batch or epoch, summed by
the driver (:class:`goka.spark.summary.BatchSummary`). One definition of the summary row: the
Spark DDL and the Arrow schema are derived from :class:`PartitionSummary`."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cache
from typing import TYPE_CHECKING

from goka.processing.timeline import merge_reports

if TYPE_CHECKING:
    import pyarrow as pa

    from goka.group.effects import Flight
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
        key_waits: records (of a group with ``concurrency``) that waited behind an earlier
            record of their key.
        in_flight_seconds: the time records were in flight, added up (over the task's time:
            how many were in flight on average).
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
    key_waits: int = 0
    in_flight_seconds: float = 0.0

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
    ``in_flight_most`` and ``in_flight_longest`` are the most records in flight at once and
    the longest one was (seconds), ``in_flight_held`` the most finished records held back at
    once behind an earlier one not finished, ``waiting_keys`` the keys whose records waited
    most behind an earlier record of their key (JSON ``{key: records}``, the
    :data:`WAITING_KEYS` most).
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
    in_flight_most: int = 0
    in_flight_longest: float = 0.0
    in_flight_held: int = 0
    waiting_keys: str = ""

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
        self.in_flight_most = max(self.in_flight_most, other.in_flight_most)
        self.in_flight_longest = max(self.in_flight_longest, other.in_flight_longest)
        self.in_flight_held = max(self.in_flight_held, other.in_flight_held)
        if other.waiting_keys:
            self.waiting_keys = _most_waiting(self.waiting_keys, json.loads(other.waiting_keys))
        emitted = Counter(json.loads(self.emitted or "{}"))
        emitted.update(json.loads(other.emitted or "{}"))
        self.emitted = json.dumps(dict(emitted)) if emitted else ""

    def flown(self, flight: Flight | None) -> None:
        """Add how a call's records were in flight together."""
        if flight is None:
            return
        self.in_flight_most = max(self.in_flight_most, flight.most)
        self.in_flight_longest = max(self.in_flight_longest, flight.longest)
        self.in_flight_held = max(self.in_flight_held, flight.held)
        self.in_flight_seconds += flight.seconds
        self.key_waits += sum(flight.waited.values())
        if flight.waited:
            self.waiting_keys = _most_waiting(self.waiting_keys, flight.waited)

    def count(self, recovery: Recovery, lease: Lease) -> None:
        """Add what recovering a store did."""
        self.corrupt_stores += lease.fresh and lease.discarded is not None
        self.table_records += recovery.records
        self.restored_bytes += recovery.restored_bytes
        self.restore_seconds += recovery.restore_seconds


#: How many of the keys that waited most a summary names.
WAITING_KEYS = 10


def _most_waiting(said: str, more: Mapping[str, int]) -> str:
    """``said`` (JSON ``{key: waits}``) with ``more`` added, the :data:`WAITING_KEYS` most."""
    waits = Counter(json.loads(said or "{}"))
    waits.update(more)
    return json.dumps(dict(waits.most_common(WAITING_KEYS)))


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
