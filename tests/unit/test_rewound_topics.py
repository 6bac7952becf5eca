"""Topics that went back (recreated shorter, truncated, records deleted): partition processors
fail with the topic, partition and offsets instead of skipping records, in batches and epochs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from goka.errors import TopicRewoundError
from goka.processing import applied
from goka.processing.recovery import checked_watermarks
from goka.storage import MemoryStorage, WriteBatch

from .fake_kafka import FakeKafka, ListReader
from .machines import (
    CLICKS,
    ENRICH,
    IN,
    Machine,
    Script,
    click,
    devices,
    epoch,
    table_of,
    with_builders,
)


@pytest.fixture(autouse=True)
def _rewound_told_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """These topics went back for good: no wait for a transaction's end to become stable."""
    monkeypatch.setattr(applied, "STABLE_SECONDS", 0.0)


def test_an_end_before_the_store_is_asked_again_until_it_is_stable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a transaction's commit returned, and the store was written with the changelog's end
    # after its records; the broker writes the markers then: the stable end comes after
    monkeypatch.setattr(applied, "STABLE_SECONDS", 5.0)
    answers = iter([(0, 3), (0, 3), (0, 3), (0, 4), (0, 6)])

    class Settling:
        def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
            return next(answers)

    assert checked_watermarks(Settling(), IN, 0, 5, "who") == (0, 6)  # type: ignore[arg-type]


def recreate(kafka: FakeKafka, topic: str, keep: int) -> None:
    """Replace ``topic``'s partition 0 by one holding only its first ``keep`` records."""
    del kafka.rows(topic, 0)[keep:]


def new(made: list[Machine], *args: Any, **config: Any) -> Machine:
    made.append(Machine(*args, **config))
    return made[-1]


@pytest.fixture
def machines() -> Iterator[list[Machine]]:
    """Machines to close after the test (their workers hold sockets)."""
    made: list[Machine] = []
    yield made
    for machine in made:
        machine.close()


def disk(found: dict[Path, MemoryStorage] | None = None) -> Callable[[Path, str], MemoryStorage]:
    """A storage builder whose stores outlive their lease (reopened with their content)."""
    found = {} if found is None else found

    def storage(path: Path, table: str) -> MemoryStorage:
        old, store = found.get(path), MemoryStorage(table)
        if old is not None:
            batch = WriteBatch(values=dict(old.items()))
            for (topic, partition), offset in old.offsets().items():
                batch.set_offset(topic, partition, offset)
            store.write(batch)
        found[path] = store
        return store

    return storage


def test_the_error_names_topic_partition_offsets_and_what_to_do() -> None:
    with pytest.raises(TopicRewoundError) as ended:
        TopicRewoundError.check("clicks", 3, 121_000, 0, 21_000, reader="group 'gb'")
    text = str(ended.value)
    assert "topic 'clicks' partition 3 ends at offset 21000" in text
    assert "group 'gb' has read it up to offset 121000" in text and "truncated or recreated" in text
    assert "delete its checkpoint and local state" in text
    with pytest.raises(TopicRewoundError, match=r"starts at offset 500.* records 200\.\.499"):
        TopicRewoundError.check("clicks", 3, 200, 500, 900, reader="group 'gb'")
    for position in (-1, 500, 700, 900):  # nothing read yet, or within the partition
        TopicRewoundError.check("clicks", 3, position, 500, 900, reader="group 'gb'")


def test_a_batch_over_an_input_recreated_shorter_than_the_store_fails(
    kafka: FakeKafka, tmp_path: Path, machines: list[Machine]
) -> None:
    machine = with_builders(new(machines, kafka, tmp_path), storage=disk())
    click(kafka, 30)
    machine.catch_up(0, {IN: 0})
    table = table_of(kafka)
    recreate(kafka, IN, 0)
    click(kafka, 10, start=100)  # a new topic of 10 records; the store has applied 30
    with pytest.raises(TopicRewoundError) as failed:
        machine.run(0, {IN: (0, 10)})  # a new checkpoint, or Spark running a batch again
    error = failed.value
    assert (error.topic, error.partition, error.position, error.high) == (IN, 0, 30, 10)
    assert "group 'counts'" in str(error)
    assert machine.offsets(0)[(IN, 0)] == 30 and table_of(kafka) == table  # nothing done


def test_a_batch_run_again_over_an_intact_topic_still_skips_its_replay(
    kafka: FakeKafka, tmp_path: Path, machines: list[Machine]
) -> None:
    machine = new(machines, kafka, tmp_path)
    sent = click(kafka, 30)
    machine.catch_up(0, {IN: 0})
    assert machine.run(0, {IN: (10, 30)}).skipped_applied == 20
    assert machine.state(0) == dict(sent) == table_of(kafka)


def test_a_group_table_truncated_while_the_store_stayed_open_fails_the_next_commit(
    kafka: FakeKafka, tmp_path: Path, machines: list[Machine]
) -> None:
    machine = with_builders(new(machines, kafka, tmp_path), storage=disk())
    click(kafka, 30)
    machine.catch_up(0, {IN: 0})
    recreate(kafka, CLICKS.table, 5)
    click(kafka, 3, start=30)
    with pytest.raises(TopicRewoundError, match=f"topic '{CLICKS.table}' partition 0 ends at"):
        machine.run(0, {IN: (30, 33)})
    assert machine.offsets(0)[(IN, 0)] == 30  # not committed


def test_a_group_table_truncated_while_the_processor_was_down_fails_at_open(
    kafka: FakeKafka, tmp_path: Path, machines: list[Machine]
) -> None:
    storage = disk()
    click(kafka, 30)
    with_builders(new(machines, kafka, tmp_path), storage=storage).catch_up(0, {IN: 0})
    recreate(kafka, CLICKS.table, 0)
    restarted = with_builders(new(machines, kafka, tmp_path), storage=storage)  # a new worker
    with pytest.raises(TopicRewoundError) as failed:
        restarted.run(0, {IN: (30, 30)})
    assert (failed.value.topic, failed.value.position, failed.value.high) == (CLICKS.table, 30, 0)


def test_a_store_catching_up_from_a_table_that_lost_its_tail_fails(
    kafka: FakeKafka, tmp_path: Path, machines: list[Machine]
) -> None:
    first, second = new(machines, kafka, tmp_path / "a"), new(machines, kafka, tmp_path / "b")
    click(kafka, 10)
    first.catch_up(0, {IN: 0})
    click(kafka, 10, start=10)
    second.catch_up(0, {IN: 0})  # the partition moved: first's store stays behind, at 10
    recreate(kafka, CLICKS.table, 3)
    click(kafka, 5, start=20)
    with pytest.raises(TopicRewoundError, match="ends at offset 3, but group 'counts'"):
        first.run(0, {IN: (20, 25)})


def test_a_store_catching_up_over_deleted_table_records_fails(
    kafka: FakeKafka, tmp_path: Path, machines: list[Machine]
) -> None:
    first, second = new(machines, kafka, tmp_path / "a"), new(machines, kafka, tmp_path / "b")
    click(kafka, 2)
    first.catch_up(0, {IN: 0})  # first's store: 2 inputs, 2 table records
    click(kafka, 8, start=2)
    second.catch_up(0, {IN: 0})
    kafka.low[(CLICKS.table, 0)] = 4  # retention deleted table records 0..3
    with pytest.raises(TopicRewoundError, match=r"starts at offset 4.* records 2\.\.3"):
        first.run(0, {IN: (10, 10)})


def test_an_epoch_over_an_input_recreated_shorter_fails_before_following_it(
    kafka: FakeKafka, tmp_path: Path, machines: list[Machine]
) -> None:
    machine = new(machines, kafka, tmp_path, commit_interval=0)
    click(kafka, 20)
    machine.catch_up(0, {IN: 0})
    recreate(kafka, IN, 4)
    script = Script(kafka, lambda: click(kafka, 1, start=50))
    with pytest.raises(TopicRewoundError) as failed:
        epoch(machine, {IN: 0}, script.done)
    assert (failed.value.topic, failed.value.position, failed.value.high) == (IN, 20, 4)
    assert script.polls == 0  # never followed


def test_an_epoch_over_a_joined_table_recreated_shorter_fails(
    kafka: FakeKafka, tmp_path: Path, machines: list[Machine]
) -> None:
    machine = with_builders(
        new(machines, kafka, tmp_path, ENRICH, commit_interval=0), lookup=devices
    )
    for user in ("u0", "u1", "u2"):
        kafka.append("profiles", user, b'{"country": "de"}', partition=0)
    script = Script(kafka, lambda: kafka.append(IN, "u0", b"/a", partition=0))
    epoch(machine, {IN: 0, "profiles": 0}, script.done)
    recreate(kafka, "profiles", 1)
    with pytest.raises(TopicRewoundError, match="topic 'profiles' partition 0 ends at offset 1"):
        epoch(machine, {IN: 0, "profiles": 0}, lambda: True)


def test_an_epoch_whose_group_table_was_truncated_fails_before_committing(
    kafka: FakeKafka, tmp_path: Path, machines: list[Machine]
) -> None:
    machine = with_builders(new(machines, kafka, tmp_path, commit_interval=0), storage=disk())
    click(kafka, 20)
    machine.catch_up(0, {IN: 0})
    recreate(kafka, CLICKS.table, 2)  # while the store stays open in its worker
    script = Script(kafka, lambda: click(kafka, 3, start=20))
    with pytest.raises(TopicRewoundError, match=f"topic '{CLICKS.table}' partition 0 ends at"):
        epoch(machine, {IN: 20}, script.done)
    assert machine.offsets(0)[(IN, 0)] == 20  # the three clicks were not committed


def test_an_answer_asked_before_the_store_moved_on_is_asked_again(kafka: FakeKafka) -> None:
    # an epoch asks for watermarks while it leases its stores; a bridge may commit further
    # records before it lets go of them: its answer is behind, not a rewound topic
    reader = ListReader(kafka)
    click(kafka, 3)
    reader.prefetch([(IN, 0)])  # (0, 3)
    click(kafka, 2)  # what the bridge processed: the store is at 5
    assert checked_watermarks(reader, IN, 0, 5, "who") == (0, 5)
    recreate(kafka, IN, 3)  # now the topic did go back: the answer asked again says so too
    reader.prefetch([(IN, 0)])
    with pytest.raises(TopicRewoundError) as failed:
        checked_watermarks(reader, IN, 0, 5, "who")
    assert (failed.value.position, failed.value.high) == (5, 3)
