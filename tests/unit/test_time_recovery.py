"""A timed partition recovered to a start its last run did not stop at (another run planned
other batches): the stream time it continues from is the one after the record before that
start, whatever batches and ticks the runs that wrote its changelogs had."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from goka import (
    Context,
    Int64Codec,
    JsonCodec,
    Tumbling,
    define_group,
    input,
    persist,
    timers,
    window,
)
from goka.processing.applied import SRC_TOPIC
from goka.tester import Tester
from goka.time.rows import Timer

from .fake_kafka import FakeKafka
from .machines import Machine

IN, SECOND = "views", 1_000


def at(event: dict[str, int]) -> int:
    return event["t"]


def count(ctx: Context[int], event: dict[str, int]) -> None:
    ctx.window("minute").update(lambda n: (n or 0) + 1)


def never(ctx: Context[int], timer: Timer) -> None:
    raise AssertionError("no timer is set")


GRAPH = define_group(
    "minutes", input(IN, JsonCodec(), count, event_time=at),
    window("minute", Tumbling(minutes=1), Int64Codec()), timers(never),  # timers: it ticks
    persist(Int64Codec()),
)  # fmt: skip
WINDOWS = GRAPH.windows["minute"].topic


def windows_of(machine: Machine) -> dict[str, int]:
    """The windows in ``machine``'s store of partition 0."""
    path = Path(machine.config.state_dir) / GRAPH.group / "partition-0"
    with machine.worker.lease(machine.builders.storage, path, GRAPH.table) as lease:
        rows = lease.storage.section(WINDOWS).items(prefix="w")
        return {key[1:]: int(value) for key, value in rows}


@pytest.mark.parametrize(("times", "tick"), [
    ([0, 10, 30, 65, 70, 20, 200], False),  # 20 s: late (65 s closed [0, 60))
    ([0, 10, 30, 65, 70, 75, 200], True),  # 75 s: counts in [60, 120) (closed by 200 s only)
])  # fmt: skip
def test_a_recovery_inside_a_batch_continues_from_the_stream_time_after_the_record_before(
    kafka: FakeKafka, tmp_path: Path, times: list[int], tick: bool
) -> None:
    """The first run processes offsets 0-6 (and a tick after them) in one batch; another
    run had planned a batch from offset 5: it runs on a new machine, whose store is rebuilt
    from what the first run wrote (its group commit lost). The stream time at offset 5 is
    70 s, not what the first run's batch ended with (200 s) nor what it had before (none)."""
    events: list[tuple[str, Any]] = [("u", {"t": t * SECOND}) for t in times]
    for key, event in events:
        kafka.append(IN, key, json.dumps(event).encode(), partition=0, timestamp=1)
    ticks = GRAPH.group.ticks
    if tick:
        kafka.append(ticks, "", b"", partition=0, timestamp=2)  # after every record
    Machine(kafka, tmp_path / "a", GRAPH).run(0, {IN: (0, 7), ticks: (0, int(tick))})
    kafka.committed.clear()
    b = Machine(kafka, tmp_path / "b", GRAPH)
    summary = b.run(0, {IN: (5, 7), ticks: (int(tick), int(tick))})
    assert summary.store == "rebuilt"
    tester = Tester(GRAPH, partitions=2, now=0)
    for key, event in events:
        tester.consume(IN, key, event)
    assert windows_of(b) == tester.table(WINDOWS)
    stream_rows = [r for r in kafka.rows(GRAPH.group.timers, 0) if r[2] == b"s0000"]
    assert stream_rows and all(dict(r[5] or ())[SRC_TOPIC] == IN.encode() for r in stream_rows)
