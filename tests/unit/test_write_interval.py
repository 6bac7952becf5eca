"""A continuous epoch writes its state every ``write_interval``, not every commit: the commits
acknowledged meanwhile are written together, each changed key once (without Spark or a
broker: :mod:`tests.unit.fake_kafka`)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest

from goka.errors import ConfigurationError, DeliveryError, FencedError
from goka.processing import epoch_partition
from goka.processing.builders import leveldb_store
from goka.processing.config import TaskConfig
from goka.processing.epoch import run_epoch
from goka.storage import WriteBatch

from .fake_kafka import FakeKafka
from .machines import (
    CLICKS,
    HOUR,
    IN,
    FakeTransactions,
    Machine,
    Script,
    click,
    epoch,
    exactly_once,
    refused_after,
    table_of,
)
from .machines import with_builders as built_with


def _written(kafka: FakeKafka) -> list[str]:
    return [e for e in kafka.events if e.startswith("write clicks")]


def _counting(machine: Machine) -> list[int]:
    """How many values each write of ``machine``'s partition store holds (appended to)."""
    sizes: list[int] = []
    inner = machine.builders.storage

    def storage(path: Path, table: str) -> object:
        store = inner(path, table)
        write = store.write

        def counted(batch: WriteBatch) -> None:
            sizes.append(len(batch.values))
            write(batch)

        store.write = counted  # type: ignore[method-assign]
        return store

    built_with(machine, storage=storage)
    return sizes


def test_commits_acknowledged_between_writes_are_written_together_each_key_once(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent: Counter[str] = Counter()
    script = Script(kafka, *[lambda i=i: sent.update(click(kafka, 10, users=2, start=10 * i))
                             for i in range(4)])  # fmt: skip
    machine = Machine(kafka, tmp_path, commit_interval=0, write_interval=HOUR)
    sizes = _counting(machine)
    summary = epoch(machine, {IN: 0}, script.done)
    assert summary.processed == 40
    assert _written(kafka) == ["write clicks 0", "write clicks 40"]  # the start, then once
    assert sizes[-1] == 2  # two keys changed 40 times: each written once, its last value
    assert machine.state(0) == dict(sent) == table_of(kafka)
    assert len(kafka.rows(CLICKS.table, 0)) == 40  # at-least-once: a changelog row per update
    assert kafka.committed[("counts", IN, 0)][0] == 40  # the group's offsets after the write


def test_a_write_interval_of_0_writes_each_commit_as_it_is_acknowledged(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    script = Script(kafka, *[lambda i=i: click(kafka, 10, users=2, start=10 * i)
                             for i in range(3)])  # fmt: skip
    machine = Machine(kafka, tmp_path, commit_interval=0, write_interval=0)
    sizes = _counting(machine)
    epoch(machine, {IN: 0}, script.done)
    assert _written(kafka) == [f"write clicks {n}" for n in (0, 10, 20, 30)]
    assert sizes[-3:] == [2, 2, 2]


def test_a_partition_whose_records_stop_writes_what_it_held_back_at_its_next_commit(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    seen: list[list[str]] = []
    script = Script(
        kafka,
        lambda: click(kafka, 10),
        lambda: click(kafka, 10, start=10),
        lambda: seen.append(_written(kafka)),  # before the poll that finds none
        lambda: seen.append(_written(kafka)),
    )  # after that poll's commit
    machine = Machine(kafka, tmp_path, commit_interval=0, write_interval=HOUR)
    epoch(machine, {IN: 0}, script.done)
    assert seen == [["write clicks 0"], ["write clicks 0", "write clicks 20"]]
    assert _written(kafka) == ["write clicks 0", "write clicks 20"]  # nothing left for the end


def test_held_back_changes_are_written_early_once_too_many_keys_wait(
    kafka: FakeKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(epoch_partition, "UNWRITTEN_KEYS", 15)
    sent: Counter[str] = Counter()
    script = Script(kafka, *[lambda i=i: sent.update(click(kafka, 10, users=40, start=10 * i))
                             for i in range(3)])  # fmt: skip
    machine = Machine(kafka, tmp_path, commit_interval=0, write_interval=HOUR)
    epoch(machine, {IN: 0}, script.done)
    assert _written(kafka) == ["write clicks 0", "write clicks 20", "write clicks 30"]
    assert machine.state(0) == dict(sent) == table_of(kafka)


def test_a_failed_delivery_loses_only_what_was_held_back_and_the_next_epoch_is_exact(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent: Counter[str] = Counter()
    script = refused_after(kafka, sent)
    machine = built_with(
        Machine(kafka, tmp_path, commit_interval=0, write_interval=HOUR), storage=leveldb_store
    )  # (kept on disk: the next task reopens it)
    with pytest.raises(DeliveryError, match=r"partition 0: .*10 failed"):
        epoch(machine, {IN: 0}, script.done)
    assert machine.offsets(0).get((IN, 0), 0) == 0  # the first commit acknowledged, held back
    assert ("counts", IN, 0) not in kafka.committed  # and the group's offsets with it
    kafka.fail_deliveries_to.clear()
    kafka.on_poll.clear()
    summary = epoch(machine, {IN: 0}, Script(kafka).done)
    assert (summary.store, summary.processed) == ("reused", 20)  # at-least-once: again
    assert machine.state(0) == dict(sent) == table_of(kafka)


class _SecondFenced(FakeTransactions):
    """A transactional producer fenced at its second commit."""

    def commit(self, offsets: Mapping[str, int] | None = None) -> None:
        if self.commits == 1:
            raise FencedError(self.group, self.partition, f"{self.group}-{self.partition}",
                              "a newer writer")  # fmt: skip
        super().commit(offsets)


def test_under_exactly_once_a_store_behind_its_committed_transactions_catches_up(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent: Counter[str] = Counter()
    script = Script(kafka, lambda: sent.update(click(kafka, 10)),
                    lambda: sent.update(click(kafka, 10, start=10)))  # fmt: skip
    machine = exactly_once(Machine(kafka, tmp_path, commit_interval=0, write_interval=HOUR))
    built_with(machine, storage=leveldb_store,
               transactions=lambda *args: _SecondFenced(kafka, *args))  # fmt: skip
    with pytest.raises(FencedError):
        epoch(machine, {IN: 0}, script.done)
    assert kafka.committed[("counts", IN, 0)][0] == 10  # the first transaction committed
    assert machine.offsets(0).get((IN, 0), 0) == 0  # and was held back from the store
    kafka.on_poll.clear()
    built_with(machine, transactions=lambda *args: FakeTransactions(kafka, *args))
    summary = epoch(machine, {IN: 10}, Script(kafka).done)
    assert (summary.store, summary.processed) == ("caught_up", 10)  # nothing processed twice
    assert machine.state(0) == dict(sent) == table_of(kafka)


def test_a_negative_write_interval_is_refused_at_declaration() -> None:
    with pytest.raises(ConfigurationError, match="write_interval must be >= 0, got -1"):
        TaskConfig(CLICKS, "fake:9092", write_interval=-1)


def test_a_bridge_between_epochs_writes_each_commit(kafka: FakeKafka, tmp_path: Path) -> None:
    machine = Machine(kafka, tmp_path, commit_interval=0, write_interval=HOUR, epoch=HOUR)
    sent = click(kafka, 4)
    run_epoch(machine.config, machine.worker, {0: {IN: 0}}, 0.1, bridge=True)
    clicks = iter(range(4, 24))

    def one_more() -> None:  # a record before every poll of the bridge: each commit has news
        i = next(clicks, None)
        if i is not None:
            sent.update(click(kafka, 1, start=i))

    kafka.on_poll.append(one_more)
    deadline = time.monotonic() + 10
    while ("counts", IN, 0) not in kafka.committed or kafka.committed[("counts", IN, 0)][0] < 24:
        assert time.monotonic() < deadline, "the bridge commits the 20 records within 10 s"
        time.sleep(0.01)
    machine.worker.end_bridge()
    offsets = [int(e.split()[-1]) for e in _written(kafka)]
    assert len([o for o in offsets if 4 < o < 24]) >= 10  # not held back until the last
    assert machine.state(0) == dict(sent) == table_of(kafka)
