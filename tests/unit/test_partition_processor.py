"""The partition processor without Spark or a broker: memory storage, a recording producer, a
reader over lists, snapshots in fsspec's memory file system or on the S3 server. Each `Machine` is an executor: its
own state directory and its own worker process resources."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import pytest

from goka import (
    Context,
    DeliveryError,
    Int64Codec,
    StringCodec,
    define_group,
    input,
    persist,
)
from goka.processing.applied import SRC_OFFSET, SRC_PARTITION, SRC_TOPIC, from_unfinished_batch
from goka.processing.builders import Builders
from goka.processing.clients import Clients
from goka.processing.config import TaskConfig
from goka.processing.output import ORIGINAL_SIZE, TRUNCATED
from goka.storage.snapshots import SnapshotStore

from .fake_kafka import FakeKafka
from .machines import CLICKS, ENRICH, IN, Machine, click, count, devices, table_of


# -- one batch ---------------------------------------------------------------------------------
def test_a_batch_commits_state_and_offsets_after_every_output_is_flushed(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent = click(kafka, 30)
    machine = Machine(kafka, tmp_path / "a")
    summary = machine.run(0, {IN: (0, 30)})
    assert (summary.processed, summary.table_updates, summary.store) == (30, 30, "created")
    assert machine.state(0) == dict(sent) == table_of(kafka)
    events = kafka.events
    assert events[0] == "write clicks 0"  # the new store, made current for the batch's start
    assert events.count("write clicks 30") == 1
    assert (
        events.index("write clicks 30")
        > events.index("flush")
        > max(i for i, e in enumerate(events) if e.startswith("produce"))
    )
    assert machine.offsets(0) == {(IN, 0): 30, (CLICKS.table, 0): 30}
    headers = dict(kafka.rows(CLICKS.table, 0)[7][5] or [])
    assert headers == {SRC_TOPIC: IN.encode(), SRC_OFFSET: b"7"}  # (the partition is the row's)


def test_rows_with_the_source_partition_as_written_before_are_recovered_alike() -> None:
    old = [(SRC_TOPIC, IN.encode()), (SRC_PARTITION, b"0"), (SRC_OFFSET, b"7")]
    new = [(SRC_TOPIC, IN.encode()), (SRC_OFFSET, b"7")]
    for starts, unfinished in (({IN: 7}, True), ({IN: 8}, False), ({"other": 0}, False)):
        assert (
            from_unfinished_batch(old, starts) is from_unfinished_batch(new, starts) is unfinished
        )


def test_a_full_producer_queue_is_waited_for_and_every_update_goes_out_once_in_order(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    kafka.capacity = 3  # produce() refuses a fourth message until the queue is polled
    sent = click(kafka, 40, users=7)
    machine = Machine(kafka, tmp_path / "a")
    summary = machine.run(0, {IN: (0, 40)})
    assert kafka.refused > 0
    assert summary.table_updates == 40 and machine.state(0) == dict(sent) == table_of(kafka)
    offsets = [int(dict(r[5] or [])[SRC_OFFSET]) for r in kafka.rows(CLICKS.table, 0)]
    assert offsets == list(range(40))  # each update once, in order, with its provenance


def test_a_failed_delivery_commits_nothing_and_the_rerun_is_exact(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent = click(kafka, 10)
    machine = Machine(kafka, tmp_path / "a")
    kafka.fail_deliveries_to.add(CLICKS.table)
    with pytest.raises(DeliveryError, match=r"partition 0: 0 messages unacknowledged .*10 failed"):
        machine.run(0, {IN: (0, 10)})
    assert "write clicks 10" not in kafka.events and machine.state(0) == {}
    kafka.fail_deliveries_to.clear()
    kafka.unacknowledged = True
    with pytest.raises(DeliveryError, match="10 messages unacknowledged"):
        machine.run(0, {IN: (0, 10)})
    assert "write clicks 10" not in kafka.events and machine.state(0) == {}
    kafka.unacknowledged = False
    machine.run(0, {IN: (0, 10)})
    assert machine.state(0) == dict(sent) == table_of(kafka)


def test_a_producer_that_failed_to_deliver_is_not_lent_to_the_next_task(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    click(kafka, 10)
    machine = Machine(kafka, tmp_path / "a")
    built: list[Any] = []

    def producer(config: dict[str, Any]) -> Any:
        built.append(kafka.producer(config))
        return built[-1]

    machine.builders = Builders(**{**machine.builders.__dict__, "producer": producer})
    machine.config = dataclasses.replace(machine.config, builders=machine.builders)
    machine.run(0, {IN: (0, 5)})
    machine.run(0, {IN: (5, 6)})
    assert len(built) == 1  # kept between tasks
    kafka.unacknowledged = True
    with pytest.raises(DeliveryError):
        machine.run(0, {IN: (6, 10)})
    kafka.unacknowledged = False
    machine.run(0, {IN: (6, 10)})
    assert len(built) == 2 and built[1] is not built[0]  # a new one after the failure
    machine.close()


def test_a_batch_run_again_after_its_commit_is_recognised_as_a_replay(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent = click(kafka, 12)
    machine = Machine(kafka, tmp_path / "a")
    machine.run(0, {IN: (0, 12)})
    again = machine.run(0, {IN: (0, 12)})  # Spark did not record the batch as done
    assert (again.skipped_applied, again.table_updates, again.store) == (12, 0, "reused")
    assert len(kafka.rows(CLICKS.table, 0)) == 12
    assert machine.state(0) == dict(sent)


# -- where a store comes from ------------------------------------------------------------------
def test_a_batch_planned_behind_the_group_s_commits_begins_there_even_on_a_new_machine(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent = click(kafka, 30)
    Machine(kafka, tmp_path / "a").run(0, {IN: (0, 30)})
    b = Machine(kafka, tmp_path / "b")  # Spark's older plan on another machine (a mode switch)
    again = b.run(0, {IN: (0, 10)})
    assert (again.processed, again.skipped_applied, again.store) == (0, 10, "rebuilt")
    assert len(kafka.rows(CLICKS.table, 0)) == 30  # nothing produced again
    assert b.state(0) == dict(sent) and b.offsets(0)[(IN, 0)] == 30
    assert kafka.committed[("counts", IN, 0)][0] == 30  # the group's commits never go back


def test_a_store_stays_open_for_the_next_batch_of_its_worker(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    machine = Machine(kafka, tmp_path / "a")
    click(kafka, 10)
    assert machine.catch_up(0, {IN: 0}).store == "created"
    click(kafka, 10, start=10)
    second = machine.run(0, {IN: (10, 20)})
    assert (second.store, second.table_records) == ("reused", 0)


def test_a_moved_partition_restores_the_newest_snapshot_and_replays_only_the_tail(
    kafka: FakeKafka, tmp_path: Path, url: str
) -> None:
    a = Machine(kafka, tmp_path / "a", snapshots=url)
    sent = click(kafka, 100, users=50)
    a.run(0, {IN: (0, 100)})  # snapshot 1: at input 100, table 100
    a.config = TaskConfig(**{**a.config.__dict__, "snapshot_interval": 3600.0})
    sent += click(kafka, 20, users=50, start=100)
    a.run(0, {IN: (100, 120)})  # no snapshot: the tail is 20 table records
    b = Machine(kafka, tmp_path / "b", snapshots=url)
    sent += click(kafka, 5, users=50, start=120)
    moved = b.run(0, {IN: (120, 125)})
    assert (moved.store, moved.table_records) == ("restored", 20)
    assert moved.restored_bytes > 0 and moved.restore_seconds > 0
    assert b.state(0) == dict(sent) == table_of(kafka)


def test_without_snapshots_a_moved_partition_is_rebuilt_from_the_whole_table(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    a, b = Machine(kafka, tmp_path / "a"), Machine(kafka, tmp_path / "b")
    sent = click(kafka, 40)
    a.run(0, {IN: (0, 40)})
    sent += click(kafka, 3, start=40)
    moved = b.run(0, {IN: (40, 43)})
    assert (moved.store, moved.table_records) == ("rebuilt", 40)
    assert b.state(0) == dict(sent) == table_of(kafka)


def test_a_partition_coming_back_catches_up_from_its_own_older_store(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    a, b = Machine(kafka, tmp_path / "a"), Machine(kafka, tmp_path / "b")
    sent = click(kafka, 40)
    a.run(0, {IN: (0, 40)})
    sent += click(kafka, 6, start=40)
    b.run(0, {IN: (40, 46)})  # rebuilt on b
    sent += click(kafka, 4, start=46)
    back = a.run(0, {IN: (46, 50)})  # a's store is at 40: read b's 6 table records only
    assert (back.store, back.table_records) == ("caught_up", 6)
    assert a.state(0) == dict(sent) == table_of(kafka)


def test_a_rebuild_leaves_out_table_records_of_an_unfinished_batch(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent = click(kafka, 10)
    Machine(kafka, tmp_path / "a").run(0, {IN: (0, 10)})
    click(kafka, 5, start=10)  # a batch [10, 15) whose attempt wrote updates, then died
    for offset, user in ((10, "u0"), (12, "u2")):
        kafka.append(CLICKS.table, user, b"999", partition=0,
                     headers=[(SRC_TOPIC, IN.encode()), (SRC_OFFSET, b"%d" % offset)])  # fmt: skip
    sent += click(kafka, 0)
    b = Machine(kafka, tmp_path / "b")
    summary = b.run(0, {IN: (10, 15)})  # the batch runs again elsewhere
    assert summary.store == "rebuilt"
    sent.update(f"u{i % 5}" for i in range(10, 15))
    assert b.state(0) == dict(sent) == table_of(kafka)


def test_a_corrupt_snapshot_file_is_named_and_an_older_snapshot_used(
    kafka: FakeKafka, tmp_path: Path, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    a = Machine(kafka, tmp_path / "a", snapshots=url)
    sent = click(kafka, 30)
    a.run(0, {IN: (0, 30)})
    sent += click(kafka, 10, start=30)
    a.run(0, {IN: (30, 40)})
    store = SnapshotStore(url)
    newest, older = store.manifests(CLICKS.group, 0)[:2]
    (file,) = newest.stores["partition"].files.values()
    fs = store.fs
    target = f"{store.location(CLICKS.group, 0)}/{file.object}"
    fs.pipe_file(target, fs.cat_file(target)[:-3] + b"xyz")  # same size, other bytes
    b = Machine(kafka, tmp_path / "b", snapshots=url)
    sent += click(kafka, 1, start=40)
    with caplog.at_level(logging.WARNING):
        moved = b.run(0, {IN: (40, 41)})
    assert f"{target} is corrupt (CRC-32 mismatch)" in caplog.text
    assert f"snapshot {newest.id} of store partition not used" in caplog.text
    assert (moved.store, moved.table_records) == ("restored", 10)  # the older: input 30
    assert older.stores["partition"].offsets[(IN, 0)] == 30
    assert b.state(0) == dict(sent)


def test_truncated_and_missing_snapshot_files_fall_back_to_a_rebuild(
    kafka: FakeKafka, tmp_path: Path, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    a = Machine(kafka, tmp_path / "a", snapshots=url)
    sent = click(kafka, 30)
    a.run(0, {IN: (0, 30)})
    store = SnapshotStore(url)
    (only,) = store.manifests(CLICKS.group, 0)
    (file,) = only.stores["partition"].files.values()
    fs = store.fs
    target = f"{store.location(CLICKS.group, 0)}/{file.object}"
    fs.pipe_file(target, fs.cat_file(target)[:100])
    with caplog.at_level(logging.WARNING):
        moved = Machine(kafka, tmp_path / "b", snapshots=url).run(0, {IN: (30, 30)})
    assert f"{target} has 100 bytes, expected {file.size}" in caplog.text
    assert moved.store == "rebuilt"
    newest = store.manifests(CLICKS.group, 0)[0]  # b's own, after its rebuild
    (file,) = newest.stores["partition"].files.values()
    missing = f"{store.location(CLICKS.group, 0)}/{file.object}"
    fs.rm_file(missing)
    caplog.clear()
    c = Machine(kafka, tmp_path / "c", snapshots=url)
    with caplog.at_level(logging.WARNING):
        assert c.run(0, {IN: (30, 30)}).store == "rebuilt"
    assert f"{missing} is missing" in caplog.text and f"{target} has 100 bytes" in caplog.text
    assert c.state(0) == dict(sent)


def test_a_snapshot_ahead_of_the_batch_is_not_restored(
    kafka: FakeKafka, tmp_path: Path, url: str
) -> None:
    a = Machine(kafka, tmp_path / "a", snapshots=url)
    first = click(kafka, 20)
    a.run(0, {IN: (0, 20)})
    click(kafka, 20, start=20)
    a.run(0, {IN: (20, 40)})  # newest snapshot: input 40
    kafka.committed.clear()  # the group's offsets expired: only Spark's checkpoint says where
    b = Machine(kafka, tmp_path / "b", snapshots=url)
    again = b.run(0, {IN: (20, 20)})  # Spark's checkpoint says the batch from 20 is not done
    assert (again.store, again.table_records) == ("restored", 20)
    assert b.offsets(0)[(IN, 0)] == 20
    assert b.state(0) == dict(first)  # the batch from 20 left its table records out: it reruns
    redo = b.run(0, {IN: (20, 40)})
    assert redo.skipped_applied == 0 and b.state(0) == table_of(kafka)


def test_snapshots_are_taken_at_most_every_interval(
    kafka: FakeKafka, tmp_path: Path, url: str
) -> None:
    machine = Machine(kafka, tmp_path / "a", snapshots=url, interval=3600.0)
    for batch in range(3):
        click(kafka, 5, start=5 * batch)
        summary = machine.run(0, {IN: (5 * batch, 5 * batch + 5)})
        assert (summary.snapshot_seconds > 0) == (batch == 0)
    assert len(SnapshotStore(url).manifests(CLICKS.group, 0)) == 1
    reports = [r for b in [summary] for r in __import__("json").loads(b.uploads)]
    assert reports == []  # the one upload was reported by the first batch's summary


def test_old_snapshots_are_pruned_to_the_kept_number(
    kafka: FakeKafka, tmp_path: Path, url: str
) -> None:
    machine = Machine(kafka, tmp_path / "a", snapshots=url, snapshots_kept=2)
    for batch in range(4):
        click(kafka, 5, start=5 * batch)
        machine.run(0, {IN: (5 * batch, 5 * batch + 5)})
    store = SnapshotStore(url, grace=0)
    manifests = store.manifests(CLICKS.group, 0)
    assert [m.stores["partition"].offsets[(IN, 0)] for m in manifests] == [20, 15]


@pytest.mark.s3
def test_a_workers_s3_snapshot_store_is_ready_before_its_first_upload(
    kafka: FakeKafka, tmp_path: Path, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    machine = Machine(kafka, tmp_path / "a", snapshots=f"{s3.url}/snapshots")
    store = Clients(machine.config, machine.worker).snapshots()
    # (its first request made the client: not the upload thread, beside a task's loop)
    assert store is not None and store.fs._s3 is not None
    assert Clients(machine.config, machine.worker).snapshots() is store  # (built once)


def test_a_joined_table_store_follows_its_partition_too(
    kafka: FakeKafka, tmp_path: Path, url: str
) -> None:
    for user, country in (("u0", "de"), ("u1", "fr")):
        kafka.append("profiles", user, b'{"country": "%s"}' % country.encode(), partition=0)
    kafka.append(IN, "u0", b"/a", partition=0)
    a = Machine(kafka, tmp_path / "a", ENRICH, snapshots=url)
    a.builders = Builders(**{**a.builders.__dict__, "lookup": devices})
    a.config = TaskConfig(**{**a.config.__dict__, "builders": a.builders})
    a.catch_up(0, {IN: 0, "profiles": 0})
    kafka.append("profiles", "u1", b'{"country": "it"}', partition=0)
    kafka.append(IN, "u1", b"/b", partition=0)
    b = Machine(kafka, tmp_path / "b", ENRICH, snapshots=url)
    b.builders = Builders(**{**b.builders.__dict__, "lookup": devices})
    b.config = TaskConfig(**{**b.config.__dict__, "builders": b.builders})
    moved = b.run(0, {IN: (1, 2), "profiles": (2, 3)})
    assert moved.store == "restored"
    values = {k.decode(): v for _, _, k, v, _, _ in kafka.rows(ENRICH.table, 0) if k}
    assert values["u0"] == b'{"page":"/a","country":"de","device":"phone"}'
    assert values["u1"] == b'{"page":"/b","country":"it","device":"phone"}'


def test_dead_letters_carry_the_raw_record_and_its_origin(kafka: FakeKafka, tmp_path: Path) -> None:
    graph = define_group("ints", input(IN, Int64Codec(), count), persist(Int64Codec()))
    for value in (b"1", b"oops", b"2"):
        kafka.append(IN, "k", value, partition=0)
    machine = Machine(kafka, tmp_path / "a", graph, on_error="dead-letter")
    summary = machine.run(0, {IN: (0, 3)})
    assert (summary.processed, summary.failed, summary.dead_letters) == (3, 1, 1)
    ((_, _, key, value, _, headers),) = kafka.rows("ints-dlq", 0) or kafka.rows("ints-dlq", 1)
    assert (key, value) == (b"k", b"oops")
    assert dict(headers or [])[SRC_OFFSET] == b"1"
    assert "cannot decode the value" in summary.errors


def test_a_dead_letter_too_large_for_the_producer_keeps_what_fits_and_says_so(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    graph = define_group("ints", input(IN, Int64Codec(), count), persist(Int64Codec()))
    for value in (b"1", b"x" * 50_000, b"2"):
        kafka.append(IN, "k", value, partition=0)
    machine = Machine(kafka, tmp_path, graph, on_error="dead-letter",
                      producer_config={"message.max.bytes": 20_000})  # fmt: skip
    summary = machine.run(0, {IN: (0, 3)})
    assert (summary.processed, summary.dead_letters, machine.state(0)) == (3, 1, {"k": 2})
    ((_, _, key, value, _, headers),) = kafka.rows("ints-dlq", 0) or kafka.rows("ints-dlq", 1)
    found = dict(headers or [])
    assert found[TRUNCATED] == b"true" and found[ORIGINAL_SIZE] == b"50000"
    assert found[SRC_OFFSET] == b"1" and key == b"k"
    assert value == b"x" * len(value) and 0 < len(value) <= machine.config.max_message_bytes


def test_a_state_too_large_for_the_producer_is_skipped_and_counted(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    def store(ctx: Context[str], page: str) -> None:
        ctx.set_value(page)

    graph = define_group("pages", input(IN, StringCodec(), store), persist(StringCodec()))
    for value in (b"/a", b"/" * 30_000, b"/b"):
        kafka.append(IN, "k", value, partition=0)
    machine = Machine(kafka, tmp_path, graph, on_error="skip",
                      producer_config={"message.max.bytes": 20_000})  # fmt: skip
    summary = machine.run(0, {IN: (0, 3)})
    assert (summary.processed, summary.failed, summary.table_updates) == (3, 1, 2)
    assert "is 30,000 bytes, over the limit" in summary.errors
    assert [r[3] for r in kafka.rows("pages-table", 0) + kafka.rows("pages-table", 1)] == [
        b"/a", b"/b"
    ]  # fmt: skip


def test_recovering_partitions_say_so_on_the_board(kafka: FakeKafka, tmp_path: Path) -> None:
    """What the monitor shows: rebuilding (how many of how many records), then running."""
    from goka.processing.signals import PartitionBoard

    board_url = str(tmp_path / "board")
    a = Machine(kafka, tmp_path / "a", board_url=board_url)
    b = Machine(kafka, tmp_path / "b", board_url=board_url)
    said: list[tuple[str, int, int]] = []
    original = PartitionBoard.report

    def noting(self: PartitionBoard, partition: int, state: str, records: int = 0,
               of: int = 0) -> None:  # fmt: skip
        said.append((state, records, of))
        original(self, partition, state, records, of)

    PartitionBoard.report = noting  # type: ignore[method-assign]
    try:
        click(kafka, 40)
        a.run(0, {IN: (0, 40)})
        b.run(0, {IN: (40, 40)})  # moved: rebuilt from the table's 40 records
    finally:
        PartitionBoard.report = original  # type: ignore[method-assign]
    assert ("rebuilding", 0, 40) in said and ("rebuilding", 40, 40) in said
    assert said[-1][0] == "running"
    b.worker.close()  # (the board is written on a thread: a worker's close waits for it)
    assert PartitionBoard(board_url).read()[0]["state"] == "running"
