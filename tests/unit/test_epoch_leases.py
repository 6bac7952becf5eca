"""A task's partitions lease their stores at once as an epoch begins: a store opens in 8-14
ms under load (LevelDB replays its log and syncs its files), and the partitions' first
records wait for all of them."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from goka.errors import StorageError
from goka.processing.builders import Builders, leveldb_store
from goka.processing.epoch import run_epoch
from goka.storage.base import Storage
from goka.storage.memory import MemoryStorage

from .fake_kafka import FakeKafka, ListReader
from .machines import CLICKS, IN, Machine, click


def _opening(machine: Machine, open_store: object) -> None:
    builders = Builders(storage=open_store, producer=machine.kafka.producer,  # type: ignore[arg-type]
                        reader=machine.kafka.reader)  # fmt: skip
    machine.config = dataclasses.replace(machine.config, builders=builders)
    machine.builders = builders


def test_the_stores_of_a_tasks_partitions_open_at_the_same_time(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    machine = Machine(kafka, tmp_path)
    both = threading.Barrier(2, timeout=10)  # (opened one after the other, it breaks)
    opened: list[str] = []

    def open_store(path: Path, table: str) -> MemoryStorage:
        both.wait()
        opened.append(path.name)
        return MemoryStorage(table)

    _opening(machine, open_store)
    click(kafka, 30)
    summaries = run_epoch(machine.config, machine.worker, {0: {IN: 0}, 1: {IN: 0}}, 0.3)
    assert sorted(opened) == ["partition-0", "partition-1"]
    assert [s.partition for s in summaries] == [0, 1]
    assert sum(s.processed for s in summaries) == 30


def test_a_store_that_cannot_be_opened_fails_the_epoch_and_the_others_are_released(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    machine = Machine(kafka, tmp_path)
    opened: list[str] = []

    def open_store(path: Path, table: str) -> Storage:
        if path.name == "partition-1":
            raise StorageError(f"store {path}: disk full")
        opened.append(path.name)
        return leveldb_store(path, table)  # (locked while open)

    _opening(machine, open_store)
    click(kafka, 10)
    with pytest.raises(StorageError, match="partition-1: disk full"):
        run_epoch(machine.config, machine.worker, {0: {IN: 0}, 1: {IN: 0}}, 0.3)
    assert opened == ["partition-0"]
    # partition 0's store was let go: another process (worker) takes it without waiting
    other = Machine(kafka, tmp_path)
    _opening(other, leveldb_store)
    (summary,) = run_epoch(dataclasses.replace(other.config, store_timeout=0.5), other.worker,
                           {0: {IN: 0}}, 0.1)  # fmt: skip
    assert summary.partition == 0


def test_the_group_offsets_are_waited_for_only_where_nothing_goes_on(
    kafka: FakeKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As an epoch ends at its deadline (a bridge follows) and as a bridge ends for the next
    task, the group's offsets are committed without waiting for the broker; as a processor
    stops, they are waited for."""
    commits: list[tuple[str, int, bool]] = []
    commit = ListReader.commit

    def noting(self: ListReader, group: str, partition: int, offsets: Any, note: str, *,
               wait: bool = False) -> bool:  # fmt: skip
        commits.append((threading.current_thread().name, offsets.get(IN, -1), wait))
        return commit(self, group, partition, offsets, note, wait=wait)

    monkeypatch.setattr(ListReader, "commit", noting)
    machine = Machine(kafka, tmp_path)
    click(kafka, 20)
    run_epoch(machine.config, machine.worker, {0: {IN: 0}}, 0.3, bridge=True)
    assert commits[-1][1:] == (20, False)  # the epoch's end: its bridge goes on
    bridged = len(commits)
    click(kafka, 5, start=20)
    deadline = time.monotonic() + 10
    while kafka.end(CLICKS.table, 0) < 25 and time.monotonic() < deadline:
        threading.Event().wait(0.01)  # the bridge processes the 5 new clicks
    (summary,) = run_epoch(machine.config, machine.worker, {0: {IN: 20}}, 3600, lambda: True)
    bridge_end = [c for c in commits[bridged:] if c[0] == "goka-bridge"]
    assert bridge_end and bridge_end[-1][1:] == (25, False)  # ended for the next task here
    assert commits[-1] == (threading.current_thread().name, 25, True)  # the processor stops
    assert summary.processed == 5  # (what the bridge did, reported by the next task)
