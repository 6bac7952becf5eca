"""The truth a click-count group must reach, and the three places its state is seen: the group
table topic, the partition stores a processor left on disk, and a view of the table.

The truth is computed from what the tests emitted (every click acknowledged), never from the
code under test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import IsolationLevel
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from goka import Int64Codec
from goka.errors import BrokerError
from goka.kafka.consumer import read_to_end
from goka.kafka.offsets import EndOffsets
from goka.kafka.ranges import RangeReader
from goka.storage import LevelDBStorage
from goka.view import View

__all__ = ["Seen", "committed", "ends", "open_transaction", "seen", "stores"]


def table_topic(brokers: str, table: str) -> tuple[dict[str, int], int]:
    """The table as a reader of the whole topic sees it (last value wins, tombstones delete),
    and how many records the topic holds."""
    found: dict[str, int] = {}
    records = 0
    for record in read_to_end(brokers, table):
        records += 1
        assert record.key is not None
        if record.value is None:
            found.pop(record.key.decode(), None)
        else:
            found[record.key.decode()] = int(record.value)
    return found, records


def stores(state_dir: Path, group: str, table: str) -> tuple[dict[str, int], dict[str, int]]:
    """The values in the partition stores under ``<state_dir>/<group>/partition-N`` (the
    processor must have exited: LevelDB admits one process), and the input offsets they
    applied ``{"topic/partition": offset}``."""
    values: dict[str, int] = {}
    offsets: dict[str, int] = {}
    for path in sorted((state_dir / group).glob("partition-*")):
        if not path.is_dir():
            continue
        with LevelDBStorage(path, table) as storage:
            values.update((k, int(v)) for k, v in storage.items())
            offsets.update((f"{t}/{p}", o) for (t, p), o in storage.offsets().items())
    return values, offsets


def view_of(brokers: str, table: str) -> dict[str, int]:
    """The table as a view serves it."""
    with View(brokers, table, Int64Codec()) as view:
        view.wait_recovered(60)
        return dict(view.items())


@dataclass(frozen=True)
class Seen:
    """A group's state in its three places, and the table records beyond one per click."""

    table: dict[str, int]
    stores: dict[str, int]
    view: dict[str, int]
    duplicates: int

    def wrong(self, truth: Mapping[str, int]) -> list[str]:
        """Where the state differs from ``truth`` (empty: exact everywhere)."""
        expected = dict(truth)
        return [f"{name}: {_difference(found, expected)}"
                for name, found in (("table topic", self.table), ("partition stores",
                                    self.stores), ("view", self.view)) if found != expected]  # fmt: skip


def seen(brokers: str, table: str, state_dir: Path, group: str, truth: Counter[str]) -> Seen:
    """Read the group's state from its three places (see :class:`Seen`)."""
    found, records = table_topic(brokers, table)
    values, _ = stores(state_dir, group, table)
    return Seen(found, values, view_of(brokers, table), records - sum(truth.values()))


def _difference(found: Mapping[str, int], expected: Mapping[str, int]) -> str:
    keys = sorted(set(found) | set(expected))
    wrong = [k for k in keys if found.get(k) != expected.get(k)]
    sample = ", ".join(f"{k}: {found.get(k)} (truth {expected.get(k)})" for k in wrong[:5])
    return (f"{len(wrong)} of {len(keys)} keys wrong, sum {sum(found.values())} instead of "
            f"{sum(expected.values())} ({sample})")  # fmt: skip


def committed(brokers: str, group: str, topic: str, partitions: int) -> int:
    """How many records of ``topic`` the group committed, summed over partitions."""
    return sum(committed_by_partition(brokers, group, topic, partitions))


def committed_by_partition(brokers: str, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offset of each partition of ``topic`` (0 for none; -1 while an
    open transaction holds its offsets back: a killed exactly-once processor's, until a new
    writer fences it)."""
    reader = RangeReader(brokers)
    try:
        return [reader.committed(group, p, [topic], timeout=5).get(topic, (0, ""))[0]
                for p in range(partitions)]  # fmt: skip
    except BrokerError:
        return [-1] * partitions
    finally:
        reader.close()


def ends(brokers: str, topic: str, partitions: int) -> int:
    """How many records ``topic`` holds, summed over partitions (it starts at offset 0)."""
    offsets = EndOffsets(brokers)
    try:
        return sum(offsets.high([(topic, p) for p in range(partitions)]).values())
    finally:
        offsets.close()


def open_transaction(brokers: str, topic: str, partitions: int) -> bool:
    """Does ``topic`` end later for a read_uncommitted reader than for a read_committed one
    (a transaction is open)?"""
    admin = AdminClient({"bootstrap.servers": brokers})
    parts = [ConfluentPartition(topic, p) for p in range(partitions)]

    def ends_at(level: IsolationLevel) -> list[int]:
        found = admin.list_offsets({tp: OffsetSpec.latest() for tp in parts},
                                   isolation_level=level)  # fmt: skip
        return [found[tp].result().offset for tp in parts]

    return ends_at(IsolationLevel.READ_UNCOMMITTED) != ends_at(IsolationLevel.READ_COMMITTED)
