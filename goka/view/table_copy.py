"""A local copy of a table topic, as a view keeps it (Go Goka's ``partition_table.go``): where
the copy is in each partition, and how a batch of the topic's records is applied to its storage
(values and offsets in one write, so a restarted copy resumes exactly where it stopped)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from goka.errors import ViewError
from goka.kafka.table_consumer import Polled
from goka.keys import key_str
from goka.metrics import ViewMetrics
from goka.storage import Storage, WriteBatch

__all__ = ["PartitionStats", "TableCopy"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionStats:
    """Where a view (its copy of the table) is in one partition."""

    offset: int
    high_watermark: int | None
    lag: int | None


class TableCopy:
    """The progress of one table's copy, per partition. One thread applies; others may read
    the counts and offsets (a read may see a batch's counts before its offsets).

    Attributes:
        offsets: the next offset of each partition.
        high: each partition's high watermark as last seen (None: not yet).
        applied: records applied; skipped: records left out (no key).
    """

    def __init__(self, table: str, metrics: ViewMetrics) -> None:
        self.table, self._metrics = table, metrics
        self.offsets: dict[int, int] = {}
        self.high: dict[int, int | None] = {}
        self.applied = self.skipped = 0

    def resume(self, storage: Storage, partitions: int) -> dict[int, int]:
        """Take up where ``storage`` is; return its stored offsets.

        Raises:
            ViewError: the storage has offsets of partitions the topic does not have.
        """
        stored = {p: o for (t, p), o in storage.offsets().items() if t == self.table}
        beyond = [p for p in stored if p >= partitions]
        if beyond:
            raise ViewError(
                f"storage of table {self.table!r} has offsets for partitions {beyond}, but the "
                f"topic has {partitions} partitions; delete the storage to rebuild it"
            )
        self.offsets = {p: stored.get(p, 0) for p in range(partitions)}
        return stored

    def apply(self, storage: Storage, polled: Polled) -> None:
        """Write ``polled``'s records and the partitions' next offsets in one write."""
        batch = WriteBatch()
        values, last = batch.values, {}
        try:
            for partition, offset, key, value in polled.records:
                # goka.keys.key_str, inlined: any bytes, no loss
                values[key.decode("utf-8", "surrogateescape")] = value  # type: ignore[union-attr]  # None: slow path
                last[partition] = offset
        except AttributeError:
            values.clear()
            last = self._apply_checked(polled, values)
        for partition, offset in last.items():
            batch.set_offset(self.table, partition, offset + 1)
        storage.write(batch)
        self.offsets.update((p, o + 1) for p, o in last.items())
        self.applied += len(polled.records)
        self._metrics.applied(len(polled.records))

    def _apply_checked(self, polled: Polled, values: dict[str, bytes | None]) -> dict[int, int]:
        last = {}
        for partition, offset, key, value in polled.records:
            last[partition] = offset
            if key is None:
                self.skipped += 1
                log.warning(
                    "view %s: skipping partition %d offset %d: a table record without a key",
                    self.table, partition, offset,
                )  # fmt: skip
            else:
                values[key_str(key)] = value
        return last

    def saw_end(self, partition: int, high: int | None) -> None:
        """Note ``partition``'s high watermark.

        Raises:
            ViewError: the topic ends before the copy's offset: it was truncated or recreated,
                and reading on would silently lose what the copy has.
        """
        self.high[partition] = high
        if high is not None and high < self.offsets[partition]:
            raise ViewError(
                f"table topic {self.table!r} partition {partition} ends at offset {high}, before "
                f"the view's offset {self.offsets[partition]}: the topic was truncated or "
                "recreated; delete the view's storage to rebuild it"
            )

    def lags(self) -> dict[int, int | None]:
        """Records behind each partition's high watermark (None: not known yet)."""
        return {
            p: None if self.high.get(p) is None else max(0, (self.high[p] or 0) - o)
            for p, o in self.offsets.items()
        }

    def partition_stats(self) -> dict[int, PartitionStats]:
        """Where the copy is in each partition."""
        lags = self.lags()
        return {
            p: PartitionStats(o, self.high.get(p), lags[p]) for p, o in sorted(self.offsets.items())
        }
