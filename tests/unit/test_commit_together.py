"""Under exactly-once, a continuous task's partitions commit their transactions at once
(``goka.processing.epoch_partition.commit_all``): each partition has its own producer, and a
commit of the task waits for the slowest of them, not for their sum. A transaction that fails
leaves the others committed and their stores written; then its error stops the task. And an
epoch's task commits as soon as it caught up with the records that waited for it."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from goka.errors import FencedError
from goka.processing.builders import leveldb_store
from goka.processing.epoch import run_epoch
from goka.processing.settings import MOST_EXACTLY_ONCE_COMMIT_INTERVAL

from .fake_kafka import FakeKafka
from .machines import (
    HOUR,
    IN,
    FakeTransactions,
    Machine,
    Script,
    click,
    epoch,
    exactly_once,
    table_of,
)
from .machines import with_builders as built_with


class Meeting(FakeTransactions):
    """A transaction whose commit waits until every partition's commit began (they would
    wait for each other forever if the task committed them one after another); the one of
    ``fenced`` is refused."""

    lock = threading.Lock()

    def __init__(self, barrier: threading.Barrier, fenced: int | None, *args: Any) -> None:
        super().__init__(*args)
        self.barrier, self.fenced = barrier, fenced

    def commit(self, offsets: Mapping[str, int] | None = None) -> None:
        self.barrier.wait(timeout=10)  # (BrokenBarrierError: the commits were not together)
        if self.partition == self.fenced:
            raise FencedError(self.group, self.partition, f"{self.group}-{self.partition}",
                              "a newer writer")  # fmt: skip
        with Meeting.lock:  # (the fake Kafka is not thread-safe)
            super().commit(offsets)


def _machine(kafka: FakeKafka, root: Path, fenced: int | None = None) -> Machine:
    barrier = threading.Barrier(2)
    machine = exactly_once(Machine(kafka, root, commit_interval=0, write_interval=0))
    return built_with(machine, storage=leveldb_store,  # (kept on disk: a failed task reopens it)
                      transactions=lambda *args: Meeting(barrier, fenced, kafka, *args))  # fmt: skip


def _clicks(kafka: FakeKafka, sent: Counter[str]) -> None:
    for i in range(40):  # keys of both partitions
        kafka.append(IN, f"user-{i % 9}", b"/p")
        sent[f"user-{i % 9}"] += 1


def test_the_partitions_of_a_task_commit_their_transactions_at_once(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent: Counter[str] = Counter()
    script = Script(kafka, lambda: _clicks(kafka, sent), lambda: _clicks(kafka, sent))
    machine = _machine(kafka, tmp_path)
    summaries = run_epoch(machine.config, machine.worker, {0: {IN: 0}, 1: {IN: 0}}, HOUR,
                          script.done)  # fmt: skip
    assert sum(s.processed for s in summaries) == 80 and all(s.processed for s in summaries)
    assert {**machine.state(0), **machine.state(1)} == dict(sent)
    assert {**table_of(kafka, 0), **table_of(kafka, 1)} == dict(sent)
    for p in (0, 1):
        assert kafka.committed[("counts", IN, p)][0] == kafka.end(IN, p)


def test_a_fenced_partition_leaves_the_other_committed_and_its_store_written(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent: Counter[str] = Counter()
    script = Script(kafka, lambda: _clicks(kafka, sent))
    machine = _machine(kafka, tmp_path, fenced=1)
    with pytest.raises(FencedError, match="partition 1"):
        run_epoch(machine.config, machine.worker, {0: {IN: 0}, 1: {IN: 0}}, HOUR, script.done)
    ours = {k: n for k, n in sent.items() if k in table_of(kafka, 0)}
    assert ours and machine.state(0) == ours == table_of(kafka, 0)
    assert kafka.committed[("counts", IN, 0)][0] == kafka.end(IN, 0)
    assert ("counts", IN, 1) not in kafka.committed and machine.state(1) == {}


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_an_epoch_under_exactly_once_commits_at_once_as_it_caught_up(
    kafka: FakeKafka, tmp_path: Path, guarantee: str
) -> None:
    """Records that waited across an epoch boundary are seen (read committed) as soon as the
    next epoch's task caught up with them, not a commit interval later (here the longest
    exactly-once allows, 15 s); under at-least-once its outputs are seen as they are produced,
    and it commits on its cadence."""
    click(kafka, 30)
    seen: list[dict[tuple[str, str, int], tuple[int, str]]] = []
    script = Script(kafka, lambda: None, lambda: seen.append(dict(kafka.committed)))
    machine = Machine(kafka, tmp_path, commit_interval=MOST_EXACTLY_ONCE_COMMIT_INTERVAL,
                      epoch=2 * HOUR)  # fmt: skip
    if guarantee == "exactly-once":
        machine = exactly_once(machine)
    epoch(machine, {IN: 0}, script.done)
    assert seen[0].get(("counts", IN, 0), (0, ""))[0] == (30 if guarantee == "exactly-once" else 0)
    assert kafka.committed[("counts", IN, 0)][0] == 30  # (at the epoch's end in either)
