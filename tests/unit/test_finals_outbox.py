"""A window's final result goes out through the outbox of its partition (``goka.processing.
finals``): its row may be deleted from the changelog only once the result is acknowledged.
Here the output refuses the results of a first run while the changelog accepts everything;
a second run on a new machine, rebuilt from the changelog, still finds the rows and produces
each result once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

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
from goka.tester import Tester
from goka.windowing import WINDOW_START

from .fake_kafka import FakeKafka
from .machines import Machine

IN, FINALS, SECOND = "views", "per-minute", 1_000


def at(event: dict[str, int]) -> int:
    return event["t"]


def count(ctx: Context[int], event: dict[str, int]) -> None:
    ctx.window("minute").update(lambda n: (n or 0) + 1)


GRAPH = define_group(
    "minutes", input(IN, JsonCodec(), count, event_time=at),
    window("minute", Tumbling(minutes=1), Int64Codec(), emit="final", output=FINALS),
    output(FINALS, Int64Codec()), persist(Int64Codec()),
)  # fmt: skip


def finals(kafka: FakeKafka) -> Counter[tuple[str, int, int]]:
    return Counter(
        (r[2].decode(), int(dict(r[5])[WINDOW_START]), int(r[3]))
        for p in range(kafka.partitions) for r in kafka.rows(FINALS, p)
    )  # fmt: skip


def test_refused_final_results_keep_their_outbox_rows_for_the_next_machine(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    events = [("u", {"t": t * SECOND}) for t in (0, 10, 30, 65, 70, 130, 200)]
    events += [("w", {"t": t * SECOND}) for t in (201, 260, 330)]  # both in partition 0
    for key, event in events:
        kafka.append(IN, key, json.dumps(event).encode(), partition=0, timestamp=1)
    kafka.fail_deliveries_to.add(FINALS)
    with pytest.raises((DeliveryError, ProcessingError)):
        Machine(kafka, tmp_path / "a", GRAPH).run(0, {IN: (0, len(events))})
    assert not finals(kafka)
    kafka.fail_deliveries_to.clear()
    b = Machine(kafka, tmp_path / "b", GRAPH)
    b.run(0, {IN: (0, len(events))})
    tester = Tester(GRAPH, partitions=2, now=0)
    for key, event in events:
        tester.consume(IN, key, event)
    want = Counter((m.key, int(dict(m.headers)[WINDOW_START]), int(m.value or b"0"))
                   for m in tester.messages(FINALS))  # fmt: skip
    assert want and finals(kafka) == want
