"""A task's partitions lease their stores at once as an epoch begins: a store opens in 8-14
ms under load (LevelDB replays its log and syncs its files), and the partitions' first
records wait for all of them."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from goka.errors import StorageError
from goka.processing.builders import Builders, leveldb_store
from goka.processing.epoch import run_epoch
from goka.storage.base import Storage
from goka.storage.memory import MemoryStorage

from .fake_kafka import FakeKafka
from .machines import IN, Machine, click


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
