"""Engine core throughput against a bare Python loop doing the same counting.

Both sides get the same 1M click messages over 100k keys as raw bytes, in one partition, and do
the same work: decode the key and the value, add one to the key's count, encode the new count as
Goka's int64 (decimal text) and record a table update. The bare loop does it inline with a dict;
goka-py runs the click-count callback through :class:`goka.group.engine.Engine` (context, state
cache, codecs, effects). Runs alternate; the ratio is reported as min/median/max.

    python -m bench.engine [--messages 1000000] [--keys 100000] [--runs 5]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from bench.common import summary
from examples.click_count.group import graph
from goka.group.effects import Message
from goka.group.engine import Engine


def make_messages(count: int, keys: int, seed: int = 1) -> list[Message]:
    rng = random.Random(seed)
    users = [f"user-{i}".encode() for i in range(keys)]
    topic = graph.inputs.__iter__().__next__()
    return [(topic, offset, rng.choice(users), b"/page", 1_700_000_000_000 + offset, None)
            for offset in range(count)]  # fmt: skip


def bare_loop(messages: list[Message]) -> tuple[float, dict[str, int]]:
    started = time.perf_counter()
    counts: dict[str, int] = {}
    updates: list[tuple[str, bytes]] = []
    for _topic, _offset, key, value, _timestamp, _headers in messages:
        k = key.decode()  # type: ignore[union-attr]
        value.decode()  # type: ignore[union-attr]  # the input codec's work
        n = counts.get(k, 0) + 1
        counts[k] = n
        updates.append((k, b"%d" % n))
    elapsed = time.perf_counter() - started
    assert len(updates) == len(messages)
    return elapsed, counts


def engine_run(messages: list[Message]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    engine = Engine(graph, 0, store={}.get)
    result = engine.process(messages)
    elapsed = time.perf_counter() - started
    assert len(result.effects) == len(messages)
    return elapsed, result.changes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    messages = make_messages(args.messages, args.keys)
    bare_rates, engine_rates, ratios = [], [], []
    for run in range(1, args.runs + 1):
        bare_time, counts = bare_loop(messages)
        engine_time, changes = engine_run(messages)
        assert {k: int(v) for k, v in changes.items()} == counts, "engine and bare loop disagree"
        bare_rates.append(args.messages / bare_time)
        engine_rates.append(args.messages / engine_time)
        ratios.append(bare_time / engine_time)
        print(f"run {run}: bare loop {bare_rates[-1]:,.0f} msg/s   engine {engine_rates[-1]:,.0f} "
              f"msg/s   ratio {ratios[-1]:.2f}", flush=True)  # fmt: skip
    print(f"\n{args.messages:,} messages over {args.keys:,} keys, {args.runs} runs")
    print(f"bare loop msg/s : {summary(bare_rates)}")
    print(f"engine msg/s    : {summary(engine_rates)}")
    print(f"ratio           : {summary(ratios)}   (target >= 0.50)")


if __name__ == "__main__":
    main()
