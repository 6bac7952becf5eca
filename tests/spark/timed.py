"""A timed group for the Spark tests (windows with final results, stream timers, a TTL),
its input, and its reference: the tester run over the same records in the same partitions.
Module-level, so Spark pickles the graph's functions by reference."""

from __future__ import annotations

import asyncio
import datetime as dt
import random
from collections import Counter
from typing import Any

from goka import (
    Calendar,
    Context,
    Int64Codec,
    JsonCodec,
    Session,
    Tumbling,
    define_group,
    input,
    output,
    persist,
    timers,
    window,
)
from goka.tester import Tester
from goka.time.rows import WINDOW_START, Timer

MINUTE = 60_000


def event_time(event: dict[str, Any]) -> int:
    return int(event["t"])


def on_event(ctx: Context[int], event: dict[str, Any]) -> None:
    ctx.window("minute").update(lambda n: (n or 0) + 1)
    ctx.set_value((ctx.value() or 0) + 1)
    ctx.schedule(ctx.event_time_ms + 90_000, "quiet")  # rescheduled by every record


async def on_event_later(ctx: Context[int], event: dict[str, Any]) -> None:
    """:func:`on_event` after a wait of 0-4 ms, as a call to a service would: records in
    flight finish in a random order."""
    await asyncio.sleep(random.random() * 0.004)
    on_event(ctx, event)


def on_timer(ctx: Context[int], timer: Timer) -> None:
    ctx.emit(f"quiet-{ctx.topic}", ctx.key, {"at": timer.at_ms, "count": ctx.value()})


def timed_graph(topic: str, concurrency: int = 1) -> Any:
    """The group; above ``concurrency`` 1 its records await (:func:`on_event_later`)."""
    callback = on_event if concurrency == 1 else on_event_later
    return define_group(
        f"{topic}-g",
        input(topic, JsonCodec(), callback, event_time=event_time),
        window("minute", Tumbling(minutes=1), Int64Codec(), grace=5_000, emit="final",
               output=f"{topic}-finals"),
        timers(on_timer),
        output(f"{topic}-finals", Int64Codec()),
        output("quiet-" + topic, JsonCodec()),
        persist(Int64Codec(), ttl=dt.timedelta(minutes=8), ttl_domain="stream"),
        concurrency=concurrency,
    )  # fmt: skip


class TimedInput:
    """The group's input, one event a call: event times moving forward ``step`` ms a record
    from ``hours`` ago, with jitter (out of order, some late), keyed among ``keys`` keys
    (``key``: that key instead). Timer outputs carry their times: a broker refuses those more
    than an hour ahead of its clock (``log.message.timestamp.after.max.ms``)."""

    def __init__(self, keys: int, seed: int, step: int = 900, hours: int = 2) -> None:
        self.keys, self.rng, self.number, self.step = keys, random.Random(seed), 0, step
        self.start = int(dt.datetime.now(dt.UTC).timestamp() * 1000) - hours * 3_600_000

    def __call__(self, key: str | None = None) -> tuple[str, dict[str, int]]:
        drawn = f"k{self.rng.randrange(self.keys)}"
        at = self.start + self.number * self.step + self.rng.randint(-40_000, 3_000)
        self.number += 1
        return key or drawn, {"t": at}


def events(n: int, keys: int, seed: int) -> list[tuple[str, dict[str, int]]]:
    """``n`` events of :class:`TimedInput`: over ~30 minutes for 2,000."""
    source = TimedInput(keys, seed)
    return [source() for _ in range(n)]


def reference(graph: Any, topic: str, items: list[tuple[str, Any]], partitions: int) -> Tester:
    tester = Tester(graph, partitions=partitions)
    for key, value in items:
        tester.consume(topic, key, value)
    return tester


def finals_of(records: list[tuple[str, bytes | None, Any]]) -> Counter[tuple[str, int, int]]:
    return Counter((k, int(dict(h)[WINDOW_START]), int(v or b"0")) for k, v, h in records)


def read_topic(
    brokers: str, topic: str, partitions: int = 4
) -> list[tuple[str, bytes | None, Any]]:
    return [(bytes(r[2] or b"").decode(), r[3], r[5] or [])
            for rows in topic_rows(brokers, topic, partitions).values() for r in rows]  # fmt: skip


def topic_rows(brokers: str, topic: str, partitions: int) -> dict[int, list[Any]]:
    """Every record of ``topic``, by partition: rows ``(topic, offset, key, value, timestamp,
    headers)`` in offset order."""
    from goka.kafka.ranges import RangeReader

    found: dict[int, list[Any]] = {}
    reader = RangeReader(brokers)
    try:
        for partition in range(partitions):
            low, high = reader.watermarks(topic, partition)
            rows = found.setdefault(partition, [])
            if high > low:
                for chunk in reader.read(partition, {topic: (low, high)}, 30, 10_000):
                    rows += chunk
    finally:
        reader.close()
    return found


IDLE_MS = 1_500


def act(ctx: Context[int], action: str) -> None:
    ctx.set_value((ctx.value() or 0) + 1)
    ctx.schedule(dt.timedelta(milliseconds=IDLE_MS), "idle", domain="wall")


def idle(ctx: Context[int], timer: Timer) -> None:
    ctx.emit(f"{ctx.topic}-sessions", ctx.key, {"actions": ctx.value(), "due": timer.at_ms,
                                                 "fired": ctx.wall_time_ms})  # fmt: skip
    ctx.delete()


def idle_graph(topic: str) -> Any:
    """Sessions that end after IDLE_MS of wall-clock silence: wall timers on idle partitions.
    Its timers fire on ticks (the output names the topic of what triggered them)."""
    return define_group(
        f"{topic}-idle", input(topic, JsonCodec(), act), timers(idle),
        output(f"{topic}-idle-ticks-sessions", JsonCodec()),
        output(f"{topic}-sessions", JsonCodec()), persist(Int64Codec()),
    )  # fmt: skip


def on_mixed(ctx: Context[int], event: dict[str, Any]) -> None:
    ctx.window("day").update(lambda n: (n or 0) + 1)
    ctx.window("visits").update(lambda n: (n or 0) + 1)
    if event.get("op") == "set":
        ctx.schedule(event["t"] + event["in"], "t", data=event["in"])
    elif event.get("op") == "cancel":
        ctx.cancel("t")


async def on_mixed_later(ctx: Context[int], event: dict[str, Any]) -> None:
    await asyncio.sleep(0.001 * (sum(ctx.key.encode()) % 3))  # (keys finish out of order)
    on_mixed(ctx, event)


def on_mixed_timer(ctx: Context[int], timer: Timer) -> None:
    ctx.emit(f"{ctx.group}-fired", ctx.key, {"at": timer.at_ms, "in": timer.data})


def mixed_graph(topic: str, concurrency: int = 1) -> Any:
    """Calendar days in Europe/Berlin across the 2026-10-25 switch (a 25-hour day), sessions
    that merge, and stream timers set in the past and the future, cancelled and set again;
    above ``concurrency`` 1 its records await (:func:`on_mixed_later`)."""
    group = f"{topic}-mixed"
    callback = on_mixed if concurrency == 1 else on_mixed_later
    return define_group(
        group, input(topic, JsonCodec(), callback, event_time=event_time),
        window("day", Calendar("day", tz="Europe/Berlin"), Int64Codec(), grace=3_600_000,
               retention=10**11),
        window("visits", Session(2 * MINUTE), Int64Codec(), grace=MINUTE, retention=10**11,
               merge=lambda a, b: a + b),
        timers(on_mixed_timer, wall=False), output(f"{group}-fired", JsonCodec()),
        persist(Int64Codec()), concurrency=concurrency,
    )  # fmt: skip


def dst_events(n: int, keys: int, seed: int) -> list[tuple[str, dict[str, Any]]]:
    """Events from 2026-10-24 20:00 to 2026-10-26 05:00 Berlin time, out of order, some with
    timer operations."""
    rng = random.Random(seed)
    start = int(dt.datetime.fromisoformat("2026-10-24T20:00:00+02:00").timestamp() * 1000)
    span = 34 * 3_600_000
    found = []
    for i in range(n):
        event: dict[str, Any] = {"t": start + i * span // n + rng.randint(-3 * MINUTE, MINUTE)}
        if i % 7 == 0:
            event.update(op="set", **{"in": rng.randint(-5 * MINUTE, 10 * MINUTE)})
        elif i % 11 == 0:
            event["op"] = "cancel"
        found.append((f"k{rng.randrange(keys)}", event))
    return found


def run_to_end(processor: Any, mode: str) -> None:
    """Run ``processor`` until it has processed what its inputs hold: a bounded run in
    micro-batches, an epoch stopped once every input (ticks aside) is committed to its end."""
    from tests.helpers import wait_for
    from tests.spark.fixtures import Running

    processor.prepare_topics(create_outputs=True)
    if mode == "micro-batch":
        processor.run_until_caught_up(timeout=600)
        return
    running = Running(processor)
    ticks = processor.graph.group.ticks  # they keep coming
    wait_for(lambda: all(p["lag"] == 0 for p in processor.partition_status()
                         if p["topic"] != ticks), 300, "the epoch to catch up")  # fmt: skip
    running.stop(within=60)


def read_back_reference(graph: Any, brokers: str, topic: str, partitions: int) -> Tester:
    """The tester's run over what ``topic`` holds, each partition's records in offset order
    (the input as the processors read it, whoever emitted it and in whatever interleaving)."""
    tester = Tester(graph, partitions=partitions)
    for partition, rows in topic_rows(brokers, topic, partitions).items():
        for row in rows:
            record = tester.consume_raw(topic, bytes(row[2]), row[3])
            assert record.partition == partition, (row[2], partition, record.partition)
    return tester


def timed_wrong(graph: Any, brokers: str, topic: str, expected: Tester,
                exactly_once: bool = True, partitions: int = 4) -> list[str]:  # fmt: skip
    """How the timed group's results on the broker differ from ``expected``'s: its table, its
    window table, its final results (each once), its timer outputs (each at least once; once
    under ``exactly_once``, read committed). Empty: exact."""
    from goka.view import View

    wrong = []
    for table in (graph.table, graph.windows["minute"].topic):
        with View(brokers, table, Int64Codec()) as view:
            view.wait_recovered(60)
            found, want = dict(view.items()), expected.table(table)
        if found != want:
            keys = sorted(k for k in found.keys() | want.keys() if found.get(k) != want.get(k))
            wrong.append(f"{table}: {len(keys)} keys differ, e.g. "
                         f"{[(k, found.get(k), want.get(k)) for k in keys[:5]]} (found, expected)")  # fmt: skip
    want_finals = finals_of([(r.key, r.value, r.headers)
                             for r in expected.messages(f"{topic}-finals")])  # fmt: skip
    finals = finals_of(read_topic(brokers, f"{topic}-finals", partitions))
    if finals != want_finals:
        extra, lost = finals - want_finals, want_finals - finals
        wrong.append(f"{sum(extra.values())} final results extra, {sum(lost.values())} lost: "
                     f"{list(extra)[:5]}, {list(lost)[:5]}")  # fmt: skip
    quiet = Counter(r.value for r in expected.messages("quiet-" + topic))
    found_quiet = Counter(v for _, v, _ in read_topic(brokers, "quiet-" + topic, partitions))
    if quiet - found_quiet:
        wrong.append(f"timer outputs lost: {list(quiet - found_quiet)[:5]}")
    if exactly_once and found_quiet - quiet:
        wrong.append(f"{sum((found_quiet - quiet).values())} timer outputs repeated: "
                     f"{list(found_quiet - quiet)[:5]}")  # fmt: skip
    return wrong
