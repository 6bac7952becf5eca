"""A window's final result is produced after the commit that closed the window, from the store
(``goka.processing.finals``): the delivered watermark moves, and a window due to expire goes,
only once the result is acknowledged. Here the output refuses the results of a first run
while the changelogs accept everything, or the watermark's move fails after the results went
out; a second run on a new machine, rebuilt from the changelogs, produces each result once,
and the window table ends as the tester's."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
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
    output,
    persist,
    window,
)
from goka.errors import DeliveryError, ProcessingError
from goka.group.graph import GroupGraph
from goka.processing.finals import Finals
from goka.processing.output import Output
from goka.tester import Tester
from goka.time.rows import WINDOW_START, decode_composite

from .fake_kafka import CONTROL, FakeKafka
from .machines import Machine, RecordingStore, Script, epoch, exactly_once, with_builders

IN, FINALS, SECOND = "views", "per-minute", 1_000


def at(event: dict[str, int]) -> int:
    return event["t"]


def count(ctx: Context[int], event: dict[str, int]) -> None:
    ctx.window("minute").update(lambda n: (n or 0) + 1)


def graph_of(retention: int) -> GroupGraph:
    return define_group(
        "minutes", input(IN, JsonCodec(), count, event_time=at),
        window("minute", Tumbling(minutes=1), Int64Codec(), emit="final", output=FINALS,
               retention=retention),
        output(FINALS, Int64Codec()), persist(Int64Codec()),
    )  # fmt: skip


#: Keys u and w (both in partition 0); the last record closes every window but the last.
EVENTS = [("u", {"t": t * SECOND}) for t in (0, 10, 30, 65, 70, 130, 200)]
EVENTS += [("w", {"t": t * SECOND}) for t in (201, 260, 330)]


def finals(kafka: FakeKafka) -> Counter[tuple[str, int, int]]:
    return Counter(
        (r[2].decode(), int(dict(r[5])[WINDOW_START]), int(r[3]))
        for p in range(kafka.partitions) for r in kafka.rows(FINALS, p) if r[5] is not CONTROL
    )  # fmt: skip


def run_tester(graph: GroupGraph) -> Tester:
    tester = Tester(graph, partitions=2, now=0)
    for key, event in EVENTS:
        tester.consume(IN, key, event)
    return tester


def wanted(tester: Tester) -> Counter[tuple[str, int, int]]:
    return Counter((m.key, int(dict(m.headers)[WINDOW_START]), int(m.value or b"0"))
                   for m in tester.messages(FINALS))  # fmt: skip


def windows(kafka: FakeKafka, graph: GroupGraph) -> dict[tuple[str, int, int], int]:
    """The window changelog of partition 0, compacted."""
    table: dict[tuple[str, int, int], int] = {}
    for row in kafka.rows(graph.windows["minute"].topic, 0):
        if row[5] is CONTROL:
            continue
        where = decode_composite(row[2].decode())
        if row[3] is None:
            table.pop(where, None)
        else:
            table[where] = int(row[3])
    return table


def windows_of_tester(tester: Tester, graph: GroupGraph) -> dict[tuple[str, int, int], int]:
    return {(k, w.start, w.end): v for k in "uw"
            for w, v in tester.windows(graph.group, "minute", k)}  # fmt: skip


def fill(kafka: FakeKafka) -> None:
    for key, event in EVENTS:
        kafka.append(IN, key, json.dumps(event).encode(), partition=0, timestamp=1)


@pytest.mark.parametrize("retention", [86_400_000, 0], ids=["kept", "expired-at-close"])
def test_refused_final_results_stay_pending_for_the_next_machine(
    kafka: FakeKafka, tmp_path: Path, retention: int
) -> None:
    graph = graph_of(retention)
    fill(kafka)
    kafka.fail_deliveries_to.add(FINALS)
    with pytest.raises((DeliveryError, ProcessingError)):
        Machine(kafka, tmp_path / "a", graph).run(0, {IN: (0, len(EVENTS))})
    assert not finals(kafka)
    # the windows whose results were refused are still in the changelog, expired or not
    assert len(windows(kafka, graph)) == 7  # 6 closed, 1 open
    kafka.fail_deliveries_to.clear()
    Machine(kafka, tmp_path / "b", graph).run(0, {IN: (0, len(EVENTS))})
    tester = run_tester(graph)
    assert wanted(tester) and finals(kafka) == wanted(tester)
    assert windows(kafka, graph) == windows_of_tester(tester, graph)
    assert len(windows(kafka, graph)) == (7 if retention else 1)


def test_results_out_before_the_watermark_moved_are_not_produced_again(
    kafka: FakeKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = graph_of(0)
    fill(kafka)
    real = Finals._write

    def stop_before_the_watermark(self: Finals, store: Any, rows: Any, expired: Any,
                                  at: Any = None) -> None:  # fmt: skip
        if any(k.startswith("d") for k in rows):
            raise DeliveryError(graph.group.timers, None, "stopped before the watermark")
        real(self, store, rows, expired, at)

    monkeypatch.setattr(Finals, "_write", stop_before_the_watermark)
    with pytest.raises((DeliveryError, ProcessingError)):
        Machine(kafka, tmp_path / "a", graph).run(0, {IN: (0, len(EVENTS))})
    tester = run_tester(graph)
    assert finals(kafka) == wanted(tester)  # every result is out, the watermark is not
    monkeypatch.setattr(Finals, "_write", real)
    Machine(kafka, tmp_path / "b", graph).run(0, {IN: (0, len(EVENTS))})
    assert finals(kafka) == wanted(tester)  # none twice
    assert windows(kafka, graph) == windows_of_tester(tester, graph)


@pytest.mark.parametrize("retention", [86_400_000, 0], ids=["kept", "expired-at-close"])
def test_under_exactly_once_a_delivery_committed_before_a_crash_is_not_produced_again(
    kafka: FakeKafka, tmp_path: Path, retention: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under exactly-once a delivery is a transaction: the results and the watermark's row
    committed, the store's write lost (as a kill between them leaves it; the delivery moved no
    input offset). The next task on the machine replays the timers changelog's committed tail into
    the store, so it produces none again, reading no output back."""
    graph = graph_of(retention)
    fill(kafka)
    machine = exactly_once(Machine(kafka, tmp_path, graph))
    real = RecordingStore.write

    def lost(self: RecordingStore, batch: Any) -> None:  # (the store as a kill leaves it)
        if not any(k.startswith("d") for k in batch.section(graph.group.timers)):
            real(self, batch)

    monkeypatch.setattr(RecordingStore, "write", lost)
    machine.run(0, {IN: (0, len(EVENTS))})
    tester = run_tester(graph)
    assert finals(kafka) == wanted(tester)  # every result is out, the store's watermark is not
    monkeypatch.setattr(RecordingStore, "write", real)
    read: list[str] = []
    reader = machine.builders.reader

    def reading(*args: Any) -> Any:
        made = reader(*args)
        inner = made.read
        made.read = lambda p, ranges, *rest: read.extend(ranges) or inner(p, ranges, *rest)  # type: ignore[method-assign]
        return made

    with_builders(machine, reader=reading)  # (the same machine: its store stays open)
    summary = machine.run(0, {IN: (len(EVENTS), len(EVENTS))})
    assert finals(kafka) == wanted(tester)  # none twice
    assert windows(kafka, graph) == windows_of_tester(tester, graph)
    assert summary.store == "reused"
    assert FINALS not in read


@pytest.mark.parametrize("retention", [86_400_000, 0], ids=["kept", "expired-at-close"])
def test_an_epoch_whose_commits_wait_for_their_outputs_closes_each_window_once(
    kafka: FakeKafka, tmp_path: Path, retention: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits of a continuous epoch do not stop it: windows opened in a commit not written
    yet are updated, closed and expired by later records; the results come from the store
    once the commits that closed the windows are written."""
    graph = graph_of(retention)

    def step(index: int) -> Callable[[], object]:
        def run() -> None:
            if index % 3 == 0:  # what the last three polls produced is acknowledged now
                kafka.acknowledge()
            key, event = EVENTS[index]
            kafka.append(IN, key, json.dumps(event).encode(), partition=0, timestamp=1)

        return run

    def acknowledged() -> None:
        kafka.late = False

    kafka.late = True  # delivery reports come only when waited for, or every third poll
    waits: list[int] = []
    real = Output.wait
    monkeypatch.setattr(Output, "wait", lambda self: waits.append(1) or real(self))
    script = Script(kafka, *[step(i) for i in range(len(EVENTS))], acknowledged)
    machine = Machine(kafka, tmp_path, graph, commit_interval=0)
    summary = epoch(machine, {IN: 0}, script.done)
    tester = run_tester(graph)
    assert summary.commits >= len(EVENTS) - 1 and len(waits) <= 1  # at the end, if at all
    assert wanted(tester) and finals(kafka) == wanted(tester)
    assert windows(kafka, graph) == windows_of_tester(tester, graph)
    assert len(windows(kafka, graph)) == (7 if retention else 1)


class Tagged:
    """A codec of ints unlike the window's (``b"n=<int>"``): results are re-encoded."""

    name = "tagged"

    def encode(self, value: int) -> bytes:
        return b"n=%d" % value

    def decode(self, data: bytes) -> int:
        return int(data.removeprefix(b"n="))


def test_results_of_two_tables_go_out_in_close_order_each_in_its_output_codec(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    """Two tables of final results, one whose output's codec is not the window's."""
    pairs = f"{FINALS}-pairs"

    def both(ctx: Context[int], event: dict[str, int]) -> None:
        ctx.window("minute").update(lambda n: (n or 0) + 1)
        ctx.window("pair").update(lambda n: (n or 0) + 10)

    graph = define_group(
        "two-tables", input(IN, JsonCodec(), both, event_time=at),
        window("minute", Tumbling(minutes=1), Int64Codec(), emit="final", output=FINALS),
        window("pair", Tumbling(minutes=2), Int64Codec(), emit="final", output=pairs),
        output(FINALS, Int64Codec()), output(pairs, Tagged()), persist(Int64Codec()),
    )  # fmt: skip
    fill(kafka)
    Machine(kafka, tmp_path, graph).run(0, {IN: (0, len(EVENTS))})
    tester = run_tester(graph)
    for topic in (FINALS, pairs):
        got = [(r[2], dict(r[5])[WINDOW_START], r[3], r[4])
               for p in range(kafka.partitions) for r in kafka.rows(topic, p)]  # fmt: skip
        expected = [(m.key.encode(), dict(m.headers)[WINDOW_START], m.value, m.timestamp)
                    for m in tester.messages(topic)]  # fmt: skip
        assert expected and Counter(got) == Counter(expected)
    out = [r for p in range(kafka.partitions) for r in kafka.rows(pairs, p)]
    assert all(r[3].startswith(b"n=") for r in out)
    for topic in (FINALS, pairs):  # each in close order (a result's timestamp: its close)
        stamps = [r[4] for r in kafka.rows(topic, 0)]
        assert stamps == sorted(stamps)


def test_an_epoch_produces_the_results_of_a_window_boundary_over_turns_processing_on(
    kafka: FakeKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window boundary closes a window per key: a continuous epoch produces their results
    a few per turn (one here), processing records and writing commits meanwhile (windows
    closed by those wait for the next delivery); each result once, the watermark moved once
    all are in, as the tester does."""
    from goka.partitioner import partition_for
    from goka.processing import epoch_partition

    keys = [k for k in (f"user-{i}" for i in range(40)) if partition_for(k.encode(), 2) == 0][:8]
    events = [(k, {"t": t * SECOND}) for t in (1, 61, 121, 181) for k in keys]
    events.append((keys[0], {"t": 300 * SECOND}))  # closes all but the last
    graph = graph_of(0)
    monkeypatch.setattr(epoch_partition, "FINALS_PER_TURN", 1)
    overlapped: list[int] = []  # records processed while results of a delivery were out
    real_apply = epoch_partition.Epoch.apply

    def apply(self: Any, rows: Any) -> None:
        if self.stores.delivery is not None:
            overlapped.append(len(rows))
        real_apply(self, rows)

    monkeypatch.setattr(epoch_partition.Epoch, "apply", apply)
    real_deliver = epoch_partition.Epoch.deliver
    left: list[bool] = []  # at the epoch's end: was a delivery still going on?

    def deliver(self: Any, lap: Any = None, *, wait: bool = False) -> None:
        if wait:
            left.append(self.stores.delivery is not None)
        real_deliver(self, *([lap] if lap else []), wait=wait)

    monkeypatch.setattr(epoch_partition.Epoch, "deliver", deliver)
    steps = [
        lambda k=k, e=e: kafka.append(IN, k, json.dumps(e).encode(), partition=0, timestamp=1)
        for k, e in events
    ]
    script = Script(kafka, *steps, *[lambda: None] * 20)  # then quiet: no records, no commits
    machine = Machine(kafka, tmp_path, graph, commit_interval=0)
    epoch(machine, {IN: 0}, script.done)
    tester = Tester(graph, partitions=2, now=0)
    for key, event in events:
        tester.consume(IN, key, event)
    assert len(wanted(tester)) == 4 * len(keys) and finals(kafka) == wanted(tester)
    assert overlapped, "no record was processed while final results were being produced"
    assert left == [False]  # the quiet turns finished it: the reports were taken
    assert windows(kafka, graph) == {
        (k, w.start, w.end): v for k in keys for w, v in tester.windows(graph.group, "minute", k)
    }


_WRITE = Finals._write

#: The results of a window boundary under exactly-once: events of 2,500 keys of partition 0 in
#: one minute, then one that closes their windows.
BOUNDARY = 2_500


def boundary(kafka: FakeKafka, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Append the boundary's events to partition 0 and make each delivery's transactions
    hold 1,000 results (``TRANSACTION_SECONDS`` 0: a commit every ``SLICE_CHECK``)."""
    from goka.partitioner import partition_for
    from goka.processing import finals as finals_module

    keys = [k for k in (f"user-{i}" for i in range(5_000)) if partition_for(k.encode(), 2) == 0]
    events = [(k, {"t": 1 * SECOND}) for k in keys[:BOUNDARY]] + [("u", {"t": 70 * SECOND})]
    for key, event in events:
        kafka.append(IN, key, json.dumps(event).encode(), partition=0, timestamp=1)
    monkeypatch.setattr(finals_module, "SLICE_CHECK", 1_000)
    monkeypatch.setattr(finals_module, "TRANSACTION_SECONDS", 0.0)
    return events


def stopping_at(graph: GroupGraph, moves: list[int], at_move: int) -> Callable[..., None]:
    """``Finals._write`` counting the watermarks' moves in ``moves``, failing the
    ``at_move``-th (then writing as ``Finals._write`` does)."""
    real = _WRITE

    def write(self: Finals, store: Any, rows: Any, expired: Any, at: Any = None) -> None:
        if any(k.startswith("d") for k in rows):
            moves.append(1)
            if len(moves) == at_move:
                raise DeliveryError(graph.group.timers, None, f"stopped at move {at_move}")
        real(self, store, rows, expired, at)

    return write


def fencing(kafka: FakeKafka, machine: Machine) -> Machine:
    """``machine`` under exactly-once, its producers with epochs."""
    from .fake_transactions import epoch_transactions

    return with_builders(exactly_once(machine), transactions=epoch_transactions(kafka))


def committed_finals(kafka: FakeKafka) -> Counter[tuple[str, int, int]]:
    """The final results a read_committed reader finds in partition 0."""
    return Counter((r[2].decode(), int(dict(r[5])[WINDOW_START]), int(r[3]))
                   for r in kafka.rows(FINALS, 0) if kafka.visible(r, 0))  # fmt: skip


def fed_tester(graph: GroupGraph, events: list[tuple[str, Any]]) -> Tester:
    tester = Tester(graph, partitions=2, now=0)
    for key, event in events:
        tester.consume(IN, key, event)
    return tester


def test_under_exactly_once_a_window_boundary_goes_out_in_transactions_each_moving_the_watermark(
    kafka: FakeKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window boundary that closes a window per key is not one transaction (the broker
    aborts one open for 60 s): about every ``TRANSACTION_SECONDS`` (0 here: every
    ``SLICE_CHECK`` results) a commit, its watermark at its last result. A writer that stops
    after the first leaves the rest to the next one, which produces only those: read committed,
    each result once, the window table as the tester's."""
    events, graph, moves = boundary(kafka, monkeypatch), graph_of(0), []
    real = Finals._write
    monkeypatch.setattr(Finals, "_write", stopping_at(graph, moves, 2))
    with pytest.raises((DeliveryError, ProcessingError)):
        fencing(kafka, Machine(kafka, tmp_path / "a", graph)).run(0, {IN: (0, len(events))})
    assert sum(committed_finals(kafka).values()) == 1_000  # the first slice's, and its watermark
    moves.clear()
    monkeypatch.setattr(Finals, "_write", lambda *a: moves.append(1) or real(*a))
    fencing(kafka, Machine(kafka, tmp_path / "b", graph)).run(0, {IN: (0, len(events))})
    tester = fed_tester(graph, events)
    assert len(wanted(tester)) == BOUNDARY and committed_finals(kafka) == wanted(tester)
    assert len(moves) == 2  # slices of 1,000 and 500
    assert windows(kafka, graph) == {
        (k, w.start, w.end): v
        for k, _ in events
        for w, v in tester.windows(graph.group, "minute", k)
    }


def test_results_an_at_least_once_run_left_out_are_found_until_the_last_slice_commits(
    kafka: FakeKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An at-least-once run produced a boundary's results and stopped before its watermark
    moved; the group goes on under exactly-once, whose first slice commits, the second
    fails. The output positions the at-least-once run left (which tell which results are out
    already) stay until the delivery's last commit: the next task produces none again (it
    did produce those after the first slice's watermark when the first commit deleted them)."""
    events, graph, moves = boundary(kafka, monkeypatch), graph_of(0), []
    real = Finals._write
    monkeypatch.setattr(Finals, "_write", stopping_at(graph, moves, 1))  # every result out
    with pytest.raises((DeliveryError, ProcessingError)):
        Machine(kafka, tmp_path / "a", graph).run(0, {IN: (0, len(events))})
    assert sum(finals(kafka).values()) == BOUNDARY
    moves.clear()
    monkeypatch.setattr(Finals, "_write", stopping_at(graph, moves, 2))  # the second slice fails
    with pytest.raises((DeliveryError, ProcessingError)):
        fencing(kafka, Machine(kafka, tmp_path / "a", graph)).run(0, {IN: (0, len(events))})
    monkeypatch.setattr(Finals, "_write", real)
    fencing(kafka, Machine(kafka, tmp_path / "b", graph)).run(0, {IN: (0, len(events))})
    tester = fed_tester(graph, events)
    assert len(wanted(tester)) == BOUNDARY and committed_finals(kafka) == wanted(tester)
