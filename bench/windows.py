"""Windowed groups against the plain count group, in the same run, on the embedded broker.

1M events over 100k keys (4 partitions) whose event times (record timestamps) span 20 minutes:

* tumbling 1-minute windows with final results (one per key and minute, exactly once);
* hopping 5-minute windows advancing by 1 minute (each event in 5 windows), updates only;
* the plain count group of ``bench.processor`` (one table update per event): the baseline.

Then a million timers: a group schedules one stream timer per event (unique names), due after
the last event; one record per partition moves the stream time past them all and they fire.
Reported: the rate timers are scheduled and fired (each fired timer counts in the group table,
checked against the number scheduled), and the growth of the processor's memory (RSS of this
process and every process below it but the embedded broker, which holds every record in its
memory: the JVM and Spark's Python workers) from after a plain
count run over the same events (workers warm) to after the timers fired.

quixstreams counts in the same tumbling windows (final results) over the same input, in its own
virtualenv (``.venv-quix``, made by ``make bench``), for comparison.

Each group runs in micro-batches and in continuous mode; the ratio of each windowed group's
steady throughput to the plain count's in the same mode is reported as min/median/max over
the runs (target: >= 0.7 at the median). The last line:
``windows/plain: min X median Y max Z`` (over both windowed groups and modes).

    python -m bench.windows [--messages 1000000] [--runs 2] [--batch 250000]
        [--only windows|timers]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import confluent_kafka

from bench.common import add_broker, start_broker, summary
from bench.processor import (
    KEYS,
    PARTITIONS,
    TOPICS,
    count_group,
    goka_continuous,
    goka_run,
    quix_run,
)
from examples.click_count.demo import tree_memory
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
    timers,
    window,
)
from goka.dev import EmbeddedBroker
from goka.group.graph import GroupGraph
from goka.kafka.config import producer_config
from goka.spark import build_session
from goka.time.rows import Timer
from goka.view import View

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


def schedule_one(ctx: Context[int], page: str) -> None:
    ctx.schedule(ctx.event_time_ms + SPAN_MS + 60_000, str(ctx.offset))


def fired(ctx: Context[int], timer: Timer) -> None:
    """A timer fired: count it (the bench checks every timer fired, once)."""
    ctx.set_value((ctx.value() or 0) + 1)


def processor_memory(broker: EmbeddedBroker) -> float:
    """RSS (bytes) of this process and every process below it but the broker (which keeps
    every record it holds in its memory)."""
    return tree_memory(os.getpid())[0] * 1024 - broker_memory(broker)


def broker_memory(broker: EmbeddedBroker) -> float:
    """RSS (bytes) of the broker."""
    assert broker.pid is not None
    return tree_memory(broker.pid)[0] * 1024


def million_timers(
    spark: object, broker: EmbeddedBroker, topic: str, messages: int, batch: int
) -> str:
    """Schedule a timer per event, then fire them all; return what was measured."""
    from goka.spark import Processor

    graph = define_group(
        f"{topic}-timers{time.monotonic_ns()}", input(topic, StringCodec(), schedule_one),
        timers(fired, wall=False), persist(Int64Codec()),
    )  # fmt: skip
    brokers = broker.bootstrap
    goka_run(spark, brokers, topic, batch)  # the plain count first: the workers warmed up
    state = Path(tempfile.mkdtemp(prefix="goka-bench-"))
    try:
        processor = Processor(
            graph, brokers, spark=spark,  # type: ignore[arg-type]
            state_dir=state, checkpoint_dir=state / "checkpoint", max_offsets_per_trigger=batch,
        )  # fmt: skip
        before, broker_before = processor_memory(broker), broker_memory(broker)
        started = time.monotonic()
        scheduled = processor.run_until_caught_up().processed
        scheduling = time.monotonic() - started
        after_scheduling = processor_memory(broker)
        producer = confluent_kafka.Producer(producer_config(brokers, {"linger.ms": 5}))
        late = int(time.time() * 1000) - 3_600_000 + SPAN_MS + 120_000  # past every timer
        for partition in range(PARTITIONS):
            producer.produce(topic, b"/page", b"tick", partition=partition, timestamp=late)
        assert producer.flush(30) == 0
        started = time.monotonic()
        Processor(graph, brokers, spark=spark, state_dir=state,  # type: ignore[arg-type]
                  checkpoint_dir=state / "checkpoint").run_until_caught_up()  # fmt: skip
        firing = time.monotonic() - started
        after, broker_after = processor_memory(broker), broker_memory(broker)
        with View(brokers, graph.table, Int64Codec()) as view:
            view.wait_recovered(120)
            counted = sum(n for _, n in view.items())
        assert counted == scheduled, f"{counted:,} timers fired of {scheduled:,}"
        return (f"{scheduled:,} timers (each fired once) scheduled at "
                f"{scheduled / scheduling:,.0f}/s, fired at {scheduled / firing:,.0f}/s; "
                f"processor RSS {before / 2**20:,.0f} MB before, "
                f"{after_scheduling / 2**20:,.0f} MB scheduled, {after / 2**20:,.0f} MB fired "
                f"(growth {(max(after, after_scheduling) - before) / 2**20:,.0f} MB); the "
                f"broker, left out, {broker_before / 2**20:,.0f} -> "
                f"{broker_after / 2**20:,.0f} MB")  # fmt: skip
    finally:
        shutil.rmtree(state, ignore_errors=True)


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
    parser.add_argument("--only", choices=["windows", "timers"], help="run one part")
    add_broker(parser)
    args = parser.parse_args()
    with start_broker(args.broker) as broker:
        brokers, topic = broker.bootstrap, "bench-windowed"
        fill(brokers, topic, args.messages)
        spark = build_session("bench", "local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        ratios: dict[str, list[float]] = {}
        tumbling_rates: list[str] = []
        for run in range(1, args.runs + 1 if args.only != "timers" else 1):
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
                tumbling_rates.append(f"{mode} {steady['tumbling']:,.0f} msg/s")
                shown = "   ".join(f"{n} {v:,.0f} msg/s" for n, v in steady.items())
                print(f"run {run} {mode}: {shown}", flush=True)
        timers_line = (million_timers(spark, broker, topic, args.messages, args.batch)
                       if args.only != "windows" else "not run")  # fmt: skip
        quix = (quix_run(brokers, topic, args.messages, "tumbling")
                if args.only != "timers" else "not run")  # fmt: skip
        spark.stop()
    print(f"\n{args.messages:,} events over {KEYS:,} keys, {PARTITIONS} partitions, event times "
          f"over {SPAN_MS // 60_000} minutes, {args.runs} runs")  # fmt: skip
    for name, values in ratios.items():
        print(f"{name:<24}/ plain: {summary(values)}")
    print(
        f"quixstreams tumbling (final, same input): {quix}; goka-py tumbling: "
        f"{', '.join(tumbling_rates) or 'not run'}"
    )
    print(f"timers: {timers_line}")
    if ratios:
        print(f"windows/plain: {summary([v for values in ratios.values() for v in values])}")


if __name__ == "__main__":
    main()
