"""Windowed groups against the plain count group, in the same run, on the embedded broker.

1M events over 100k keys (4 partitions) whose event times (record timestamps) span 20 minutes:

* tumbling 1-minute windows with final results (one per key and minute, exactly once);
* hopping 5-minute windows advancing by 1 minute (each event in 5 windows), updates only;
* the plain count group of ``bench.processor`` (one table update per event): the baseline.

Each group runs in micro-batches and in continuous mode; the ratio of each windowed group's
steady throughput to the plain count's in the same mode is reported as min/median/max over
the runs (target: >= 0.7 at the median). The last line:
``windows/plain: min X median Y max Z`` (over both windowed groups and modes).

    python -m bench.windows [--messages 1000000] [--runs 2] [--batch 250000]
"""

from __future__ import annotations

import argparse
import random
import time

import confluent_kafka

from bench.common import summary
from bench.processor import KEYS, PARTITIONS, TOPICS, count_group, goka_continuous, goka_run
from goka import (
    Context,
    Hopping,
    Int64Codec,
    StringCodec,
    TopicManager,
    Tumbling,
    define_group,
    input,
    output,
    persist,
    window,
)
from goka.dev import EmbeddedBroker
from goka.graph import GroupGraph
from goka.kafka.config import producer_config
from goka.spark import build_session

SPAN_MS = 20 * 60_000


def per_minute(ctx: Context[int], page: str) -> None:
    ctx.window("minute").update(lambda n: (n or 0) + 1)


def per_five(ctx: Context[int], page: str) -> None:
    ctx.window("five").update(lambda n: (n or 0) + 1)


def tumbling(topic: str) -> GroupGraph:
    return define_group(
        f"{topic}-t{time.monotonic_ns()}", input(topic, StringCodec(), per_minute),
        window("minute", Tumbling(minutes=1), Int64Codec(), grace=5_000, emit="final",
               output=f"{topic}-per-minute"),
        output(f"{topic}-per-minute", Int64Codec()), persist(Int64Codec()),
    )  # fmt: skip


def hopping(topic: str) -> GroupGraph:
    return define_group(
        f"{topic}-h{time.monotonic_ns()}", input(topic, StringCodec(), per_five),
        window("five", Hopping(5 * 60_000, 60_000), Int64Codec()), persist(Int64Codec()),
    )  # fmt: skip


def fill(brokers: str, topic: str, messages: int) -> None:
    """``messages`` clicks over KEYS keys, timestamps rising over SPAN_MS, ending an hour ago."""
    manager = TopicManager(brokers, TOPICS)
    manager.ensure_stream_exists(topic, PARTITIONS)
    manager.ensure_stream_exists(f"{topic}-per-minute", PARTITIONS)
    producer = confluent_kafka.Producer(producer_config(brokers, {"linger.ms": 20}))
    rng = random.Random(7)
    start = int(time.time() * 1000) - 3_600_000 - SPAN_MS
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, b"/page", f"user-{rng.randrange(KEYS)}",
                                 timestamp=start + i * SPAN_MS // messages)  # fmt: skip
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=250_000, help="maxOffsetsPerTrigger")
    args = parser.parse_args()
    with EmbeddedBroker() as broker:
        brokers, topic = broker.bootstrap, "bench-windowed"
        fill(brokers, topic, args.messages)
        spark = build_session("bench", "local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        ratios: dict[str, list[float]] = {}
        for run in range(1, args.runs + 1):
            for mode in ("micro-batch", "continuous"):
                steady = {}
                for name, build in (("plain", count_group), ("tumbling", tumbling),
                                    ("hopping", hopping)):  # fmt: skip
                    graph = build(topic)
                    if mode == "micro-batch":
                        _, steady[name], done = goka_run(spark, brokers, topic, args.batch, graph)
                        assert done == args.messages, f"{name}: {done} of {args.messages}"
                    else:
                        _, steady[name] = goka_continuous(spark, brokers, topic, args.messages,
                                                          graph=graph)  # fmt: skip
                for name in ("tumbling", "hopping"):
                    ratios.setdefault(f"{name} {mode}", []).append(steady[name] / steady["plain"])
                shown = "   ".join(f"{n} {v:,.0f} msg/s" for n, v in steady.items())
                print(f"run {run} {mode}: {shown}", flush=True)
        spark.stop()
    print(f"\n{args.messages:,} events over {KEYS:,} keys, {PARTITIONS} partitions, event times "
          f"over {SPAN_MS // 60_000} minutes, {args.runs} runs")  # fmt: skip
    for name, values in ratios.items():
        print(f"{name:<24}/ plain: {summary(values)}")
    print(f"windows/plain: {summary([v for values in ratios.values() for v in values])}")


if __name__ == "__main__":
    main()
