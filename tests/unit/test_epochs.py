"""Continuous epochs of the partition processor, without Spark or a broker: records arrive while
the epoch runs (``FakeKafka.on_poll`` hooks append them between polls)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goka import (
    Context,
    Int64Codec,
    StringCodec,
    define_group,
    input,
    loop,
    output,
    persist,
)
from goka.errors import DeliveryError
from goka.partitioner import partition_for
from goka.processing.builders import Builders, leveldb_store
from goka.processing.config import TaskConfig
from goka.processing.epoch import run_epoch
from goka.processing.epoch_partition import MAX_SEALED
from goka.processing.timeline import STEPS
from goka.processing.worker import Worker

from ..helpers import TrackedStores
from .fake_kafka import FakeKafka
from .machines import (
    CLICKS,
    ENRICH,
    HOUR,
    IN,
    Machine,
    Script,
    click,
    devices,
    epoch,
    refused_after,
    table_of,
)


def test_an_epoch_processes_records_as_they_arrive_and_commits_each_interval(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent: Counter[str] = Counter()
    script = Script(kafka, *[lambda i=i: sent.update(click(kafka, 10, start=10 * i))
                             for i in range(3)])  # fmt: skip
    machine = Machine(kafka, tmp_path, commit_interval=0, write_interval=0)
    summary = epoch(machine, {IN: 0}, script.done)
    assert (summary.processed, summary.table_updates, summary.commits) == (30, 30, 3)
    assert machine.state(0) == dict(sent) == table_of(kafka)
    assert kafka.committed[("counts", IN, 0)][0] == 30 == machine.offsets(0)[(IN, 0)]
    writes = [i for i, e in enumerate(kafka.events) if e.startswith("write clicks")]
    assert [kafka.events[i] for i in writes] == [f"write clicks {n}" for n in (0, 10, 20, 30)]
    for n, w in zip((10, 20, 30), writes[1:], strict=True):  # each commit after its outputs
        assert kafka.events[:w].count(f"deliver {CLICKS.table}") == n
    timeline = json.loads(summary.timeline)  # the loop's steps timed (goka.processing.timeline)
    steps = timeline["steps"]
    assert set(steps) == set(STEPS)  # every step timed
    assert sum(steps["flush"]["counts"]) >= sum(steps["write"]["counts"]) == summary.commits
    assert all(sum(steps[s]["counts"]) == 1 for s in ("lease", "ask", "begin", "assign"))
    assert timeline["turns"] >= sum(steps["poll"]["counts"]) >= 3
    # what the start asks the broker was asked at once, and forgotten after
    assert kafka.prefetched == [([(IN, 0), ("counts-table", 0)], "counts"), ([], None)]


def test_a_commit_does_not_stop_the_loop_its_state_is_written_once_its_outputs_are_in(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent: Counter[str] = Counter()

    def acknowledged() -> None:
        kafka.unacknowledged = False
        sent.update(click(kafka, 5, start=10))

    kafka.unacknowledged = True  # the broker does not answer the first two commits' outputs
    script = Script(kafka, lambda: sent.update(click(kafka, 5)),
                    lambda: sent.update(click(kafka, 5, start=5)), acknowledged)  # fmt: skip
    machine = Machine(kafka, tmp_path, commit_interval=0, write_interval=0)
    summary = epoch(machine, {IN: 0}, script.done)
    writes = [e for e in kafka.events if e.startswith("write clicks")]
    assert writes == [f"write clicks {n}" for n in (0, 5, 10, 15)]  # each commit, in order
    first = kafka.events.index("write clicks 5")
    assert kafka.events[:first].count(f"produce {CLICKS.table}") == 15  # processed on meanwhile
    assert kafka.events[:first].count(f"deliver {CLICKS.table}") == 15
    assert summary.commits == 3
    assert machine.state(0) == dict(sent) == table_of(kafka)  # read through what waited


def toggle(ctx: Context[str], command: str) -> None:
    if command == "set":
        ctx.set_value("a")  # one-character values: the same bytes object each time
    elif command == "delete":
        ctx.delete()
    else:
        ctx.emit("seen", ctx.key, ctx.value() or "none")


TOGGLE = define_group("toggle", input(IN, StringCodec(), toggle), output("seen", StringCodec()),
                      persist(StringCodec()))  # fmt: skip


def test_a_value_set_again_while_commits_wait_is_read_after_an_older_commit_is_written(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    def command(name: str) -> Callable[[], object]:
        return lambda: kafka.append(IN, "k", name.encode(), partition=0)

    def first_two_acknowledged() -> None:
        kafka.acknowledge()  # the set and the delete: written after this poll's commit
        command("set")()  # the same value again, its commit waiting

    def acknowledged() -> None:
        kafka.unacknowledged = False

    kafka.unacknowledged = True
    script = Script(kafka, command("set"), command("delete"), first_two_acknowledged,
                    command("get"), acknowledged)  # fmt: skip
    machine = Machine(kafka, tmp_path, TOGGLE, commit_interval=0, write_interval=0)
    epoch(machine, {IN: 0}, script.done)
    assert [r[3] for r in kafka.rows("seen", 0)] == [b"a"]
    assert [e for e in kafka.events if e.startswith("write clicks")] == [
        f"write clicks {n}" for n in (0, 1, 2, 3, 4)
    ]


def test_a_commit_waits_for_the_outputs_once_too_many_commits_wait(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    kafka.unacknowledged = True
    script = Script(kafka, *[lambda i=i: click(kafka, 2, start=2 * i)
                             for i in range(MAX_SEALED + 3)])  # fmt: skip
    machine = Machine(kafka, tmp_path, commit_interval=0)
    with pytest.raises(DeliveryError, match=r"partition 0: 2 messages unacknowledged"):
        epoch(machine, {IN: 0}, script.done)
    assert script.polls == MAX_SEALED + 1  # the commit of the last poll waited, and failed
    assert [e for e in kafka.events if e.startswith("write clicks")] == ["write clicks 0"]
    assert ("counts", IN, 0) not in kafka.committed


def test_changes_not_committed_yet_are_seen_by_later_records(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    script = Script(kafka, *[lambda: click(kafka, 5, users=1) for _ in range(4)])
    machine = Machine(kafka, tmp_path, commit_interval=HOUR, epoch=2 * HOUR)  # one commit: the end
    summary = epoch(machine, {IN: 0}, script.done)
    assert summary.commits == 1 and machine.state(0) == {"u0": 20}
    assert [int(v) for *_, v, _, _ in kafka.rows(CLICKS.table, 0)] == list(range(1, 21))


def test_an_epoch_ends_at_its_time_or_when_asked(kafka: FakeKafka, tmp_path: Path) -> None:
    machine = Machine(kafka, tmp_path, commit_interval=0)
    click(kafka, 3)
    started = time.monotonic()
    assert epoch(machine, {IN: 0}, lambda: False, seconds=0.3).processed == 3
    assert 0.3 <= time.monotonic() - started < 2
    click(kafka, 3, start=3)
    started = time.monotonic()
    summary = epoch(machine, {IN: 3}, lambda: kafka.end(CLICKS.table, 0) >= 6)
    assert summary.processed == 3 and time.monotonic() - started < 1
    assert machine.offsets(0)[(IN, 0)] == 6


def test_an_epoch_whose_delivery_fails_keeps_its_earlier_commits_and_the_next_is_exact(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent: Counter[str] = Counter()
    script = refused_after(kafka, sent)
    machine = Machine(kafka, tmp_path, commit_interval=0, write_interval=0)
    with pytest.raises(DeliveryError, match=r"partition 0: 0 messages unacknowledged .*10 failed"):
        epoch(machine, {IN: 0}, script.done)
    assert "write clicks 10" in kafka.events and "write clicks 20" not in kafka.events
    assert kafka.committed[("counts", IN, 0)][0] == 10
    kafka.fail_deliveries_to.clear()
    kafka.on_poll.clear()
    polls = Script(kafka)
    summary = epoch(machine, {IN: kafka.committed[("counts", IN, 0)][0]}, polls.done)
    assert summary.store == "rebuilt"  # memory storage: the failed task's store was dropped
    assert machine.state(0) == dict(sent) == table_of(kafka)


def test_a_join_sees_the_table_updates_that_precede_each_input_in_time(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    def profile(country: str, ts: int) -> None:
        kafka.append("profiles", "u0", b'{"country": "%s"}' % country.encode(), partition=0,
                     timestamp=ts)  # fmt: skip

    def first() -> None:  # one poll brings both topics, interleaved in time
        profile("de", 100)
        profile("fr", 200)
        kafka.append(IN, "u0", b"/a", partition=0, timestamp=150)
        kafka.append(IN, "u0", b"/b", partition=0, timestamp=250)

    def later() -> None:
        profile("it", 300)
        kafka.append(IN, "u0", b"/c", partition=0, timestamp=350)

    script = Script(kafka, first, later)
    machine = Machine(kafka, tmp_path, ENRICH, commit_interval=0)
    machine.builders = Builders(**{**machine.builders.__dict__, "lookup": devices})
    machine.config = TaskConfig(**{**machine.config.__dict__, "builders": machine.builders})
    summary = epoch(machine, {IN: 0, "profiles": 0}, script.done)
    seen = [v for _, _, _, v, _, _ in kafka.rows(ENRICH.table, 0)]
    assert seen == [
        b'{"page":"/a","country":"de","device":"phone"}',
        b'{"page":"/b","country":"fr","device":"phone"}',
        b'{"page":"/c","country":"it","device":"phone"}',
    ]
    assert summary.table_records == 3  # joined records applied while the epoch ran
    assert kafka.committed[("enrich", IN, 0)][0] == 3
    assert ("enrich", "profiles", 0) not in kafka.committed  # no group consumes joined tables


def test_an_epoch_planned_before_a_crash_and_run_again_starts_where_the_group_committed(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent: Counter[str] = Counter()
    script = Script(kafka, lambda: sent.update(click(kafka, 40)))
    epoch(Machine(kafka, tmp_path / "a", commit_interval=0), {IN: 0}, script.done)
    assert kafka.committed[("counts", IN, 0)][0] == 40
    script = Script(kafka, lambda: sent.update(click(kafka, 5, start=40)))
    b = Machine(kafka, tmp_path / "b", commit_interval=0)  # another machine, the old plan
    summary = epoch(b, {IN: 0}, script.done)
    assert summary.processed == 5 and len(kafka.rows(CLICKS.table, 0)) == 45  # none again
    assert b.state(0) == dict(sent) == table_of(kafka)


def test_a_store_recovered_to_an_older_offset_catches_up_with_what_it_left_out(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    sent: Counter[str] = Counter()
    script = Script(kafka, lambda: sent.update(click(kafka, 40)))
    epoch(Machine(kafka, tmp_path / "a", commit_interval=0), {IN: 0}, script.done)
    kafka.committed.clear()  # the group's commits were lost: b is told to begin at 0
    b = Machine(kafka, tmp_path / "b", commit_interval=0)
    epoch(b, {IN: 0}, lambda: True, seconds=0)  # leaves out the 40 updates, made for 0..39
    script = Script(kafka, lambda: sent.update(click(kafka, 5, start=40)))
    summary = epoch(b, {IN: 40}, script.done)  # its own store is the base: replays them
    assert (summary.store, summary.processed) == ("caught_up", 5)
    assert b.state(0) == dict(sent) == table_of(kafka)


def test_joined_tables_are_current_before_the_first_input_of_an_epoch(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    kafka.append("profiles", "u0", b'{"country": "de"}', partition=0, timestamp=500)
    kafka.append("profiles", "u1", b'{"country": "fr"}', partition=0, timestamp=500)
    script = Script(kafka, lambda: kafka.append(IN, "u0", b"/a", partition=0, timestamp=100))
    machine = Machine(kafka, tmp_path, ENRICH, commit_interval=0)
    machine.builders = Builders(**{**machine.builders.__dict__, "lookup": devices})
    machine.config = TaskConfig(**{**machine.config.__dict__, "builders": machine.builders})
    summary = epoch(machine, {IN: 0, "profiles": 0}, script.done)  # an input stamped earlier
    seen = [v for _, _, _, v, _, _ in kafka.rows(ENRICH.table, 0)]
    assert seen == [b'{"page":"/a","country":"de","device":"phone"}']
    assert summary.table_records == 2  # read before following the input
    assert ("enrich", "profiles", 0) not in kafka.committed  # no group consumes joined tables


def _forward(ctx: Context[Any], page: str) -> None:
    ctx.loopback(f"{ctx.key}-looped", page)


LOOPED = define_group(
    "looped", input(IN, StringCodec(), _forward), loop(StringCodec(), CLICKS.inputs[IN].callback),
    persist(Int64Codec()),
)  # fmt: skip


def test_loopbacks_come_back_within_the_same_epoch(kafka: FakeKafka, tmp_path: Path) -> None:
    sent = Counter[str]()
    machine = Machine(kafka, tmp_path, LOOPED, commit_interval=0)
    script = Script(kafka, lambda: sent.update(click(kafka, 12, users=3)), *[lambda: None] * 3)
    summary = epoch(machine, {IN: 0, LOOPED.loop_topic: 0}, script.done)
    here = {f"{u}-looped": n for u, n in sent.items()
            if partition_for(f"{u}-looped".encode(), kafka.partitions) == 0}  # fmt: skip
    assert here and machine.state(0) == here  # the loop's keys of this partition
    assert (summary.processed, summary.loopbacks) == (12 + sum(here.values()), 12)


def test_one_task_runs_an_epoch_of_several_partitions(kafka: FakeKafka, tmp_path: Path) -> None:
    sent: Counter[str] = Counter()

    def both() -> None:
        for i in range(40):  # keys of both partitions
            kafka.append(IN, f"user-{i % 9}", b"/p")
            sent[f"user-{i % 9}"] += 1

    script = Script(kafka, both, both)
    machine = Machine(kafka, tmp_path, commit_interval=0)
    summaries = run_epoch(machine.config, machine.worker, {0: {IN: 0}, 1: {IN: 0}}, HOUR,
                          script.done)  # fmt: skip
    assert [s.partition for s in summaries] == [0, 1]
    assert sum(s.processed for s in summaries) == 80 and all(s.processed for s in summaries)
    assert {**machine.state(0), **machine.state(1)} == dict(sent)
    assert {**table_of(kafka, 0), **table_of(kafka, 1)} == dict(sent)
    for p in (0, 1):
        assert kafka.committed[("counts", IN, p)][0] == kafka.end(IN, p)


def _await(condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.01)


def test_a_worker_processes_on_between_epochs_and_the_next_epoch_reports_it(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    machine = Machine(kafka, tmp_path, commit_interval=0, epoch=HOUR)
    sent = click(kafka, 10)
    first = run_epoch(machine.config, machine.worker, {0: {IN: 0}}, 0.2, bridge=True)
    assert [s.processed for s in first] == [10]
    sent += click(kafka, 7, start=10)  # the epoch reached its deadline: the worker goes on
    _await(lambda: kafka.committed[("counts", IN, 0)][0] == 17, "the bridge commits")
    assert table_of(kafka) == dict(sent)
    (second,) = run_epoch(machine.config, machine.worker, {0: {IN: 10}}, 0.1)
    assert second.processed == 7 and second.skipped_applied == 0  # the bridge's work, reported
    assert machine.state(0) == dict(sent) == table_of(kafka)
    assert machine.offsets(0)[(IN, 0)] == 17


def test_what_follows_an_epoch_here_is_told_what_the_broker_would_answer_not_asking_it(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    machine = Machine(kafka, tmp_path, commit_interval=0, epoch=HOUR)
    sent = click(kafka, 10)
    run_epoch(machine.config, machine.worker, {0: {IN: 0}}, 0.2, bridge=True)
    sent += click(kafka, 7, start=10)
    _await(lambda: kafka.committed[("counts", IN, 0)][0] == 17, "the bridge commits")
    (second,) = run_epoch(machine.config, machine.worker, {0: {IN: 10}}, 0.1)
    assert second.processed == 7 and machine.state(0) == dict(sent) == table_of(kafka)
    # the first epoch asked about its input and table; the bridge after it and the epoch
    # after the bridge asked about nothing: they were told what the reads before them said
    asked = [p for p in kafka.prefetched if p[0] or p[1]]
    assert asked == [([(IN, 0), ("counts-table", 0)], "counts"), ([], "counts"), ([], "counts")]
    assert kafka.told == [[(IN, 0)], [(IN, 0)]]
    # an epoch that reached its deadline without a bridge, and then one more here: asked
    run_epoch(machine.config, machine.worker, {0: {IN: 17}}, 0.1)
    run_epoch(machine.config, machine.worker, {0: {IN: 17}}, 0.1)
    assert [p for p in kafka.prefetched if p[0] or p[1]][-1][0] == [(IN, 0), ("counts-table", 0)]


def test_an_epoch_that_was_stopped_leaves_no_bridge(kafka: FakeKafka, tmp_path: Path) -> None:
    machine = Machine(kafka, tmp_path, commit_interval=0, epoch=HOUR)
    click(kafka, 4)
    script = Script(kafka, lambda: None)
    run_epoch(machine.config, machine.worker, {0: {IN: 0}}, HOUR, script.done, bridge=True)
    click(kafka, 3, start=4)
    time.sleep(0.5)  # a bridge would have committed these within a poll (commit interval 0)
    assert kafka.committed[("counts", IN, 0)][0] == 4
    assert machine.worker.take_carried("counts") == []


def two_processes(kafka: FakeKafka, tmp_path: Path) -> tuple[Machine, Machine]:
    """Two worker processes of one machine (one state directory), with LevelDB stores: one
    process at a time may open a store."""
    machines = (
        Machine(kafka, tmp_path, commit_interval=0, epoch=HOUR),
        Machine(kafka, tmp_path, commit_interval=0, epoch=HOUR),
    )
    for machine in machines:
        builders = dataclasses.replace(machine.builders, storage=leveldb_store)
        machine.config = dataclasses.replace(machine.config, builders=builders)
    return machines


def test_a_bridge_gives_its_stores_to_another_process_that_asks_with_what_it_knew(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    here, there = two_processes(kafka, tmp_path)  # worker processes of one machine
    sent = click(kafka, 5)
    run_epoch(here.config, here.worker, {0: {IN: 0}}, 0.2, bridge=True)
    # (a bridge asked before it began lets go with nothing to leave: seen on a busy machine)
    _await(lambda: len(kafka.told) > 0, "the bridge begins (told what the epoch read)")
    sent += click(kafka, 5, start=5)
    kafka.prefetched.clear()
    started = time.monotonic()
    (summary,) = run_epoch(there.config, there.worker, {0: {IN: 5}}, 0.5)
    assert time.monotonic() - started < 5  # asked, the bridge let go at once
    here.worker.end_bridge()  # as its next task would (it ended already, asked)
    assert table_of(kafka) == dict(sent) == there.state(0)
    assert kafka.committed[("counts", IN, 0)][0] == 10
    bridged = sum(s.processed for s in here.worker.take_carried("counts"))
    assert summary.store == "opened" and summary.processed + bridged == 5
    # the bridge left what it knew beside the store: the epoch asked the broker nothing
    assert [p for p in kafka.prefetched if p[0]] == []
    assert kafka.told[-1] == [(IN, 0), ("counts-table", 0)]  # the table's end: the store's
    assert not list(tmp_path.glob("counts/*.followed"))  # the note was taken
    # a note that aged is not taken (the store was where it said: only the time tells)
    told = len(kafka.told)
    run_epoch(there.config, there.worker, {0: {IN: 10}}, 0.1, bridge=True)
    _await(lambda: len(kafka.told) > told, "the bridge begins (told what the epoch read)")
    kafka.told.clear()
    kafka.prefetched.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("goka.processing.starts.FOLLOWED_SECONDS", -1.0)
        run_epoch(here.config, here.worker, {0: {IN: 10}}, 0.1)
    there.worker.end_bridge()
    assert kafka.told == [] and [p for p in kafka.prefetched if p[0]] == []  # asked as it began


def test_stores_a_bridge_left_to_its_holder_come_with_its_note_to_another_process(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    here, there = two_processes(kafka, tmp_path)
    sent = click(kafka, 5)
    run_epoch(here.config, here.worker, {0: {IN: 0}}, 0.2, bridge=True)
    sent += click(kafka, 2, start=5)
    _await(lambda: kafka.committed[("counts", IN, 0)][0] == 7, "the bridge commits")
    here.worker.end_bridge(hold=True)  # its next task began (another partition's): it holds on
    kafka.prefetched.clear()
    (summary,) = run_epoch(there.config, there.worker, {0: {IN: 5}}, 0.2)
    assert summary.store == "opened" and table_of(kafka) == dict(sent) == there.state(0)
    assert [p for p in kafka.prefetched if p[0]] == []
    assert kafka.told[-1] == [(IN, 0), ("counts-table", 0)]


def test_an_epoch_asking_the_broker_while_a_bridge_elsewhere_commits_asks_again(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    """A bridge in another process processes and writes the table until it lets the stores go:
    the next epoch asks for the table's end and the group's offsets meanwhile (the holder has
    no inbox, so it is not known to be there, leaving a note), so an answer that looks
    shorter than the store is asked again (else a TopicRewoundError of a table that never
    went back)."""
    here, there = two_processes(kafka, tmp_path)
    here.worker.close()
    here.worker = Worker(inbox=False)  # asked by a file, which it finds within its poll
    sent = click(kafka, 5)
    run_epoch(here.config, here.worker, {0: {IN: 0}}, 0.2, bridge=True)
    clicks = itertools.count(5)
    kafka.on_poll.append(lambda: sent.update(click(kafka, 1, start=next(clicks))))  # each poll
    try:
        (summary,) = run_epoch(there.config, there.worker, {0: {IN: 5}}, 0.3)
    finally:
        kafka.on_poll.clear()
        here.worker.end_bridge()
    bridged = sum(s.processed for s in here.worker.take_carried("counts"))
    assert bridged > 0  # the bridge processed on while the epoch began
    assert summary.processed + bridged == sum(sent.values()) - 5
    assert table_of(kafka) == dict(sent) == there.state(0)


def test_stores_stay_open_for_the_bridge_and_the_next_epoch_where_they_were_handed_over(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    machine = Machine(kafka, tmp_path, commit_interval=0, epoch=HOUR)
    stores = TrackedStores()
    machine.config = dataclasses.replace(
        machine.config, builders=dataclasses.replace(machine.builders, storage=stores)
    )
    path = tmp_path / "counts" / "partition-0"
    sent = click(kafka, 10)
    run_epoch(machine.config, machine.worker, {0: {IN: 0}}, 0.2)
    other = Worker()  # another process asks for the store: this worker hands its stores over
    with other.lease(stores, path, CLICKS.table, timeout=5):
        pass
    other.close()
    run_epoch(machine.config, machine.worker, {0: {IN: 0}}, 0.2, bridge=True)
    sent += click(kafka, 3, start=10)
    _await(lambda: kafka.committed[("counts", IN, 0)][0] == 13, "the bridge commits")
    flushed = stores.flushes.get(path, 0)
    machine.worker.end_bridge(hold=True)  # as the next epoch's task in this process does
    (bridged,) = machine.worker.take_carried("counts")
    assert bridged.store == "reused"  # not closed and reopened between the epoch and the bridge
    _await(lambda: stores.flushes.get(path, 0) > flushed, "the housekeeper settles the store")
    assert path in stores.open()  # kept for the next task: not handed over
    (second,) = run_epoch(machine.config, machine.worker, {0: {IN: 10}}, 0.1)
    assert second.store == "reused" and second.skipped_applied == 0
    assert table_of(kafka) == dict(sent) and kafka.committed[("counts", IN, 0)][0] == 13


def test_a_partition_that_caught_up_commits_the_groups_offsets_soon_not_a_second_later(
    kafka: FakeKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import goka.processing.group_offsets as offsets

    monkeypatch.setattr(offsets, "GROUP_COMMIT_SECONDS", 60.0)  # only the idle catch-up commits
    group, sent = ("counts", IN, 0), []

    def feed() -> None:  # 10 records; 10 more once the first commit told the group (at once)
        if not sent or (len(sent) == 1 and kafka.committed.get(group, (0,))[0] == 10):
            sent.append(click(kafka, 10, start=10 * len(sent)))

    kafka.on_poll.append(feed)
    machine = Machine(kafka, tmp_path, commit_interval=0.02)
    caught_up: list[float] = []
    deadline = time.monotonic() + 10

    def stop() -> bool:  # the epoch ends once the group's offsets say all was processed
        if len(sent) == 2 and kafka.committed.get(group, (0,))[0] == 20:
            caught_up.append(time.monotonic())
        return bool(caught_up) or time.monotonic() > deadline

    began = time.monotonic()
    summary = epoch(machine, {IN: 0}, stop)
    assert summary.processed == 20
    assert caught_up, "the group's offsets were not committed while the partition was idle"
    assert caught_up[0] - began < 5  # (within IDLE_GROUP_COMMIT_SECONDS of idling, not 60 s)
