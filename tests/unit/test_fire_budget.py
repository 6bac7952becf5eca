"""A record that makes more due than the fire budget (a stream time jump over many timers):
the partition commits in slices instead of holding every effect in memory, in the order the
tester fires them, in micro-batches and epochs, and a stop after a slice loses nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from goka import Context, Int64Codec, JsonCodec, define_group, input, output, persist, timers
from goka.group.retries import with_concurrency
from goka.processing.stores import PartitionStores
from goka.tester import Tester
from goka.time.rows import Timer

from .fake_kafka import FakeKafka
from .machines import Machine, Script
from .machines import epoch as run_epoch

IN, OUT, MINUTE, BUDGET = "events", "fired", 60_000, 4


def at(event: dict[str, int]) -> int:
    return event["t"]


def schedule(ctx: Context[int], event: dict[str, int]) -> None:
    ctx.schedule(event["t"] + MINUTE + event["n"], f"t{event['n']}")
    ctx.set_value((ctx.value() or 0) + 1_000)  # (a record cut off by the budget changes none)


def fired(ctx: Context[int], timer: Timer) -> None:
    ctx.set_value((ctx.value() or 0) + 1)
    ctx.emit(OUT, ctx.key, {"timer": timer.name, "count": ctx.value()})


GRAPH = define_group(
    "budget", input(IN, JsonCodec(), schedule, event_time=at), timers(fired, wall=False),
    output(OUT, JsonCodec()), persist(Int64Codec()),
)  # fmt: skip
#: 13 timers of 3 keys (all in partition 0), then a record an hour later: 13 due at once.
EVENTS = [(k, {"t": n * 1_000, "n": n}) for n, k in enumerate("uwy" * 4 + "u")]
EVENTS.append(("w", {"t": 60 * MINUTE, "n": 99}))
JUMP = len(EVENTS) - 1
EVENTS.extend((k, {"t": 60 * MINUTE + n, "n": 100 + n}) for n, k in enumerate("uwyu"))  # (after)
#: the group with records in flight (those after the jump run before its timers fire: the
#: budget's cut abandons them, and the next call runs them again)
CONCURRENT = with_concurrency(GRAPH, 8)


class Stopped(Exception):
    """The processor stopped (killed) at a commit."""


@dataclass
class Commits:
    """Commits so far; the commit numbered ``stop_at`` stops the processor (None: none)."""

    made: int = 0
    stop_at: int | None = None


COMMITS = Commits()


@pytest.fixture(autouse=True)
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    real = PartitionStores.write
    COMMITS.made, COMMITS.stop_at = 0, None

    def counted(self: PartitionStores, *args: Any, **kwargs: Any) -> None:
        if COMMITS.made == COMMITS.stop_at:
            raise Stopped
        real(self, *args, **kwargs)
        COMMITS.made += 1

    monkeypatch.setattr(PartitionStores, "write", counted)


def fill(kafka: FakeKafka) -> None:
    for key, event in EVENTS:
        kafka.append(IN, key, json.dumps(event).encode(), partition=0, timestamp=1)


def expected() -> tuple[dict[str, int], list[tuple[str, Any]]]:
    tester = Tester(GRAPH, partitions=2)
    for key, event in EVENTS:
        tester.consume(IN, key, event)
    return tester.table(GRAPH.table), [(m.key, json.loads(m.value)) for m in tester.messages(OUT)]


def outputs(kafka: FakeKafka) -> list[tuple[str, Any]]:
    return [(r[2].decode(), json.loads(r[3])) for r in kafka.rows(OUT, 0)]


@pytest.mark.parametrize("graph", [GRAPH, CONCURRENT], ids=["one-at-a-time", "concurrency-8"])
def test_a_micro_batch_fires_a_backlog_in_committed_slices(
    kafka: FakeKafka, tmp_path: Path, graph: Any
) -> None:
    fill(kafka)
    machine = Machine(kafka, tmp_path, graph, fire_budget=BUDGET)
    machine.run(0, {IN: (0, len(EVENTS))})
    table, emitted = expected()
    assert len(emitted) == 13 and outputs(kafka) == emitted  # the tester's order
    assert machine.state(0) == table
    assert COMMITS.made >= 13 // BUDGET + 1  # slices of at most BUDGET firings


@pytest.mark.parametrize("graph", [GRAPH, CONCURRENT], ids=["one-at-a-time", "concurrency-8"])
def test_an_epoch_fires_a_backlog_in_committed_slices(
    kafka: FakeKafka, tmp_path: Path, graph: Any
) -> None:
    fill(kafka)
    machine = Machine(kafka, tmp_path, graph, fire_budget=BUDGET)
    run_epoch(machine, {IN: 0}, Script(kafka).done)
    table, emitted = expected()
    assert outputs(kafka) == emitted and machine.state(0) == table
    assert COMMITS.made >= 13 // BUDGET + 1


@pytest.mark.parametrize("graph", [GRAPH, CONCURRENT], ids=["one-at-a-time", "concurrency-8"])
def test_a_stop_inside_a_backlog_fires_the_rest_on_the_next_machine(
    kafka: FakeKafka, tmp_path: Path, graph: Any
) -> None:
    fill(kafka)
    COMMITS.stop_at = 1  # after the first slice
    with pytest.raises(Stopped):
        Machine(kafka, tmp_path / "a", graph, fire_budget=BUDGET).run(0, {IN: (0, len(EVENTS))})
    COMMITS.stop_at = None
    assert 0 < len(outputs(kafka)) < 13  # the first slice, committed with the records before it
    b = Machine(kafka, tmp_path / "b", graph, fire_budget=BUDGET)  # rebuilt: the records up to
    summary = b.run(0, {IN: (0, len(EVENTS))})  # the jump applied already
    assert summary.store == "rebuilt" and summary.skipped_applied == JUMP + 1
    table, emitted = expected()
    assert outputs(kafka) == emitted and b.state(0) == table
