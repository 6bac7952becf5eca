"""Records in flight in a group that keeps time, against the same group without time: what
keeping windows, timers and a TTL exact costs records in flight (the engine alone: no Kafka,
no Spark, in one process).

Input: ``--messages`` records over ``--keys`` keys in one partition, event times 50 ms apart
with up to 20 s of jitter (some late). For each record the callback awaits ``--wait`` ms (a
call to a service, ``asyncio.sleep``), then counts the key. Groups, each at ``--concurrency``
records in flight, given the records in calls of ``--batch`` (a slice of a micro-batch):

* ``untimed``: the count only (the floor: key-ordered concurrency as it is);
* ``timed``: the count, a one-minute tumbling window with final results, a five-minute
  hopping window, a stream timer per key set again by each of its records (two minutes on:
  a key quiet that long fires it; ``--no-timers``: none) and a stream TTL of ten minutes;

and the timed group one record at a time (on fewer records: it runs at about 1,000 / wait
records/s). Runs alternate; reported per run: records/s of each; over the runs
(min/median/max): timed / untimed at the concurrency, and timed in flight / one at a time.
Every run checks the timed group's table and outputs against one at a time's.

    python -m bench.timed_flight [--runs 3] [--messages 20000] [--keys 1000]
        [--concurrency 64] [--wait 10] [--batch 2000] [--no-timers]

Where a timer comes due, the records of its key after it wait for every record before it
(a place: :mod:`goka.group.timed_flight`); the other keys' go on.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import random
import time
from typing import Any

from bench.common import summary
from goka import (
    Context,
    Hopping,
    Int64Codec,
    StringCodec,
    Tumbling,
    define_group,
    input,
    output,
    persist,
    timers,
    window,
)
from goka.group.effects import TABLE, TIMER, WINDOW
from goka.group.engine import Engine
from goka.storage.base import WriteBatch
from goka.storage.memory import MemoryStorage
from goka.time.pending_rows import section_graces
from goka.time.rows import Timer, section_rows

NOW = int(time.time() * 1000) - 3_600_000  # (event times behind the wall clock)
MINUTE = 60_000
WAIT = [0.01]  # seconds a record awaits (set from --wait)
TIMERS = [True]  # each record sets its key's quiet timer (--no-timers: not)


async def count(ctx: Context[int], page: str) -> None:
    await asyncio.sleep(WAIT[0])
    ctx.set_value((ctx.value() or 0) + 1)


async def count_in_time(ctx: Context[int], page: str) -> None:
    await asyncio.sleep(WAIT[0])
    ctx.set_value((ctx.value() or 0) + 1)
    ctx.window("minute").update(lambda n: (n or 0) + 1)
    ctx.window("five").update(lambda n: (n or 0) + 1)
    if TIMERS[0]:
        ctx.schedule(ctx.event_time_ms + 2 * MINUTE, "quiet")


def quiet(ctx: Context[int], timer: Timer) -> None:
    ctx.emit("quiet", ctx.key, str(ctx.value()))


def graph(timed: bool, concurrency: int) -> Any:
    if not timed:
        return define_group("untimed", input("pages", StringCodec(), count),
                            persist(Int64Codec()), concurrency=concurrency)  # fmt: skip
    return define_group(
        "timed", input("pages", StringCodec(), count_in_time),
        window("minute", Tumbling(minutes=1), Int64Codec(), grace=5_000, emit="final",
               output="per-minute"),
        window("five", Hopping(5 * MINUTE, MINUTE), Int64Codec()),
        timers(quiet, wall=False), output("per-minute", Int64Codec()),
        output("quiet", StringCodec()),
        persist(Int64Codec(), ttl=dt.timedelta(minutes=10), ttl_domain="stream"),
        concurrency=concurrency,
    )  # fmt: skip


def records(n: int, keys: int) -> list[tuple[str, str, int]]:
    """(key, value, event time) of ``n`` records."""
    rng = random.Random(7)
    return [(f"k{rng.randrange(keys)}", "/", NOW + i * 50 - rng.randint(0, 20_000))
            for i in range(n)]  # fmt: skip


def run(group: Any, items: list[tuple[str, str, int]], batch: int) -> tuple[float, Any]:
    """Records/s of ``group``'s engine over ``items`` in calls of ``batch``, its changes
    applied after each call as a processor commits them (state, timer and window rows); its
    table and outputs, each key's in order."""
    messages = [("pages", n, k.encode(), v.encode(), at, None) for n, (k, v, at) in
                enumerate(items)]  # fmt: skip
    sections = {t: MemoryStorage(t) for t in group.changelogs()[1:]}
    graces, table = section_graces(group), dict[str, bytes | None]()
    windows = {n: sections[group.group.window(n)] for n in group.windows}
    engine = Engine(group, 0, store=table.get, pause_gc=False, windows=windows,
                    timers=sections.get(group.group.timers))  # fmt: skip
    outputs: dict[tuple[str, str], list[bytes | None]] = {}
    began = time.perf_counter()
    for first in range(0, len(messages), batch):
        rest = messages[first : first + batch]
        while rest:
            result = engine.process(rest)
            for kind, topic, key, data, _, _ in result.effects:
                if kind in (TIMER, WINDOW):
                    rows = section_rows(sections[topic].get, key, data, grace=graces[topic])
                    sections[topic].write(WriteBatch(values=rows))
                elif kind == TABLE:
                    table[key] = data
                else:
                    outputs.setdefault((topic, key), []).append(data)
            engine.committed()
            rest = rest[result.consumed :]
    return len(messages) / (time.perf_counter() - began), (table, outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--wait", type=float, default=10.0, help="ms each record awaits")
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--no-timers", action="store_true", help="no quiet timer per key")
    args = parser.parse_args()
    WAIT[0], TIMERS[0] = args.wait / 1000, not args.no_timers
    messages = records(args.messages, args.keys)
    serial_count = min(args.messages, max(200, int(2_000 / max(args.wait, 0.1))))
    overhead, gain = [], []
    for number in range(1, args.runs + 1):
        rates = {}
        for name, timed in (("untimed", False), ("timed", True))[:: 1 if number % 2 else -1]:
            rates[name], _ = run(graph(timed, args.concurrency), messages, args.batch)
        rate1, alone = run(graph(True, 1), messages[:serial_count], args.batch)
        _, together = run(graph(True, args.concurrency), messages[:serial_count], args.batch)
        assert alone == together and alone[0], "records in flight: not what one at a time gives"
        overhead.append(rates["timed"] / rates["untimed"])
        gain.append(rates["timed"] / rate1)
        print(f"run {number}: untimed {rates['untimed']:,.0f} records/s, timed "
              f"{rates['timed']:,.0f} records/s at concurrency {args.concurrency}; timed one "
              f"at a time {rate1:,.0f} records/s", flush=True)  # fmt: skip
    print(f"\n{args.messages:,} records over {args.keys:,} keys, {args.wait:g} ms each, calls "
          f"of {args.batch:,}, {args.runs} runs")  # fmt: skip
    print(f"timed/untimed at concurrency {args.concurrency}: {summary(overhead)}")
    print(f"timed: concurrency {args.concurrency} / one at a time: {summary(gain)}")


if __name__ == "__main__":
    main()
