"""Under exactly-once a commit writes each changed key of each changelog once, with its last
value (``goka.processing.output``): a store rebuilt from those changelogs on another machine
must equal the store that wrote them, row for row (windows, their close index, timers, their
due index, the stream time, the table), and the tester's windows; at-least-once still writes
every update."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from goka import Int64Codec
from goka.group.effects import TABLE, TIMER, WINDOW, BatchResult
from goka.processing.applied import SRC_OFFSET
from goka.processing.config import TaskConfig
from goka.processing.output import Output
from goka.processing.summary import PartitionSummary
from goka.storage import MemoryStorage
from goka.tester import Tester
from goka.time.rows import STREAM_TIME_HEADER
from tests.spark.timed import dst_events, mixed_graph

from .fake_kafka import FakeKafka
from .machines import Machine, exactly_once

IN = "days"
GRAPH = mixed_graph(IN)


def machine(kafka: FakeKafka, root: Path, guarantee: str) -> Machine:
    made = Machine(kafka, root, GRAPH)
    return exactly_once(made) if guarantee == "exactly-once" else made


def store_rows(made: Machine) -> dict[str, dict[str, bytes]]:
    """Every row of ``made``'s store of partition 0: the values, and each section's rows."""
    path = Path(made.config.state_dir) / GRAPH.group / "partition-0"
    with made.worker.lease(made.builders.storage, path, GRAPH.table) as lease:
        found = {"": dict(lease.storage.items())}
        for topic in [GRAPH.group.timers, *(e.topic for e in GRAPH.windows.values())]:
            found[topic] = dict(lease.storage.section(topic).items())
        return found


def changelogs(kafka: FakeKafka) -> dict[str, int]:
    topics = [GRAPH.table, GRAPH.group.timers, *(e.topic for e in GRAPH.windows.values())]
    return {t: kafka.end(t, 0) for t in topics}


def test_a_store_rebuilt_from_coalesced_changelogs_equals_the_store_that_wrote_them(
    tmp_path: Path,
) -> None:
    events = dst_events(1_800, keys=6, seed=5)
    written: dict[str, dict[str, int]] = {}
    headed: dict[str, int] = {}  # rows naming the stream time in a header
    for guarantee in ("at-least-once", "exactly-once"):
        kafka = FakeKafka(partitions=1)
        for key, event in events:
            kafka.append(IN, key, json.dumps(event).encode(), partition=0, timestamp=1)
        writer = machine(kafka, tmp_path / guarantee / "a", guarantee)
        for start in range(0, len(events), 300):  # six commits
            writer.run(0, {IN: (start, start + 300)})
        written[guarantee] = changelogs(kafka)
        headed[guarantee] = sum(any(n == STREAM_TIME_HEADER for n, _ in row[5] or ())
                                for t in written[guarantee] for row in kafka.rows(t, 0))  # fmt: skip
        rebuilt = machine(kafka, tmp_path / guarantee / "b", guarantee)
        summary = rebuilt.catch_up(0, {IN: len(events)})
        assert summary.store == "rebuilt"
        assert store_rows(rebuilt) == store_rows(writer), guarantee
        tester = Tester(GRAPH, partitions=1)
        for key, event in events:
            tester.consume(IN, key, event)
        for window in GRAPH.windows.values():
            stored = {k[1:]: Int64Codec().decode(v) for k, v in
                      store_rows(writer)[window.topic].items() if k.startswith("w")}  # fmt: skip
            assert stored == tester.table(window.topic), (guarantee, window.topic)
    row_by_row, coalesced = written["at-least-once"], written["exactly-once"]
    # a replay may stop inside an at-least-once commit, never inside a transaction: there
    # each commit's stream time row says it (and the rebuilt stream time equals, above)
    assert headed["at-least-once"] > 0 and headed["exactly-once"] == 0, headed
    day = GRAPH.windows["day"].topic
    assert row_by_row[day] == len(events)  # every update
    for topic in (GRAPH.group.timers, day):
        assert coalesced[topic] < row_by_row[topic] / 10, (topic, coalesced, row_by_row)
    visits = GRAPH.windows["visits"].topic  # a session that grows is a new window each time
    assert coalesced[visits] < row_by_row[visits], (coalesced, row_by_row)
    assert coalesced[day] <= 6 * 6 * 2  # (6 keys, 6 commits, a day or two in each)


def result(*effects: Any) -> BatchResult:
    return BatchResult(effects=list(effects), processed=len(effects))


def source(offset: int) -> tuple[str, int, bytes, bytes, int, None]:
    return (IN, offset, b"k", b"v", 1_000 + offset, None)


def test_a_coalescing_output_keeps_the_last_value_per_key_the_stream_time_and_its_bound(
    tmp_path: Path,
) -> None:
    kafka = FakeKafka(partitions=1)
    config = TaskConfig(GRAPH, "fake:9092", state_dir=str(tmp_path))
    timers, day = GRAPH.group.timers, GRAPH.windows["day"].topic
    stream = [(STREAM_TIME_HEADER, b"777")]
    output = Output(kafka.producer({}), 0, config, MemoryStorage(GRAPH.table),
                    coalesce=True, held_rows=5)  # fmt: skip
    effects = [(TABLE, GRAPH.table, "a", b"1", None, source(0)),
               (TIMER, timers, "s0000", b"5", None, source(0)),
               (WINDOW, day, "x", b"1", stream, source(0)),
               (TABLE, GRAPH.table, "a", b"2", None, source(1)),
               (WINDOW, day, "x", b"2", None, source(2)),
               (TABLE, GRAPH.table, "b", None, None, source(2))]  # fmt: skip
    output.send(result(*effects), PartitionSummary(partition=0))
    assert not len(output.producer), "changelog rows held until the commit"
    ends = output.flush()
    rows = {(r[0], r[2]): r for t in (GRAPH.table, timers, day) for r in kafka.rows(t, 0)}
    assert {k: r[3] for k, r in rows.items()} == {
        (GRAPH.table, b"a"): b"2", (GRAPH.table, b"b"): None,  # the last value, a tombstone
        (timers, b"s0000"): b"5", (day, b"x"): b"2"}  # fmt: skip
    headers = dict(rows[(day, b"x")][5])
    assert headers[STREAM_TIME_HEADER] == b"777"  # an earlier row's stream time stays
    assert headers[SRC_OFFSET] == b"2"  # the last update's source
    assert ends == {GRAPH.table: 2, timers: 1, day: 1}
    # past ``held_rows`` the held rows are produced at once (into the open transaction)
    output.send(result(*[(TABLE, GRAPH.table, f"k{i}", b"1", None, source(i)) for i in range(5)]),
                PartitionSummary(partition=0))  # fmt: skip
    assert len(output.producer) == 5
    assert output.flush() == {GRAPH.table: 7}
