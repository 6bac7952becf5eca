"""Windowed groups against the plain count group, in the same run, on the embedded broker.

1M events (4 partitions) whose event times (record timestamps) span 20 minutes, in two inputs:
*sparse*, over 100k keys (a new window for nearly every event), and *dense*, over 1,000 keys
(every window of a key sees many events: 50 per key and minute):

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
steady throughput to the plain count's in the same mode and input is reported as
min/median/max over the runs (target: >= 0.7 at the median), with the changelog records each
group wrote per input record (its table's, timers' and window tables' topics). The last line:
``windows/plain: min X median Y max Z`` (over both windowed groups, modes and inputs).

    python -m bench.windows [--messages 1000000] [--runs 2] [--batch 250000]
        [--only windows|timers] [--inputs sparse,dense]
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
#: The inputs, by name: how many keys their events are spread over.
INPUTS = {"sparse": KEYS, "dense": 1_000}


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


def fill(brokers: str, topic: str, messages: int, keys: int = KEYS) -> None:
    """``messages`` clicks over ``keys`` keys, timestamps rising over SPAN_MS, ending an hour
    ago."""
    manager = TopicManager(brokers, TOPICS)
    manager.ensure_stream_exists(topic, PARTITIONS)
    manager.ensure_stream_exists(f"{topic}-per-minute", PARTITIONS)
    producer = confluent_kafka.Producer(producer_config(brokers, {"linger.ms": 20}))
    rng = random.Random(7)
    start = int(time.time() * 1000) - 3_600_000 - SPAN_MS
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, b"/page", f"user-{rng.randrange(keys)}",
                                 timestamp=start + i * SPAN_MS // messages)  # fmt: skip
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0


def changelog_records(brokers: str, graph: GroupGraph) -> int:
    """The records in ``graph``'s changelog topics (its table, timers, window tables)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": brokers, "group.id": "bench"})
    try:
        return sum(consumer.get_watermark_offsets(confluent_kafka.TopicPartition(t, p),
                                                  timeout=30, cached=False)[1]
                   for t in graph.changelogs() for p in range(PARTITIONS))  # fmt: skip
    finally:
        consumer.close()


def compare(spark: object, brokers: str, topic: str, args: argparse.Namespace, run: int,
            mode: str, ratios: dict[str, list[float]],
            written: dict[str, list[float]]) -> dict[str, float]:  # fmt: skip
    """One run of the plain, tumbling and hopping groups over ``topic`` in ``mode``: the
    windowed groups' ratios to the plain one into ``ratios``, the changelog records per input
    record into ``written``; return the steady rates."""
    steady, kind = {}, topic.rsplit("-", 1)[-1]
    for name, build in (("plain", count_group), ("tumbling", tumbling), ("hopping", hopping)):
        graph = build(topic)
        if mode == "micro-batch":
            _, steady[name], done = goka_run(spark, brokers, topic, args.batch, graph)
            assert done == args.messages, f"{name}: {done} of {args.messages}"
        else:
            _, steady[name] = goka_continuous(spark, brokers, topic, args.messages, graph=graph)
        per_record = changelog_records(brokers, graph) / args.messages
        written.setdefault(f"{kind} {name} {mode}", []).append(per_record)
    for name in ("tumbling", "hopping"):
        ratios.setdefault(f"{kind} {name} {mode}", []).append(steady[name] / steady["plain"])
    shown = "   ".join(f"{n} {v:,.0f} msg/s" for n, v in steady.items())
    print(f"run {run} {kind} {mode}: {shown}", flush=True)
    return steady


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=250_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--only", choices=["windows", "timers"], help="run one part")
    parser.add_argument("--inputs", default=",".join(INPUTS),
                        help=f"comma-separated, of {', '.join(INPUTS)}")  # fmt: skip
    add_broker(parser)
    args = parser.parse_args()
    inputs = [i for i in args.inputs.split(",") if i]
    if not inputs or any(i not in INPUTS for i in inputs):
        parser.error(f"--inputs: of {', '.join(INPUTS)}, got {args.inputs!r}")
    with start_broker(args.broker) as broker:
        brokers, topic = broker.bootstrap, "bench-windowed"
        for name in inputs:
            fill(brokers, f"{topic}-{name}", args.messages, INPUTS[name])
        spark = build_session("bench", "local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        ratios: dict[str, list[float]] = {}
        written: dict[str, list[float]] = {}
        tumbling_rates: list[str] = []
        for run in range(1, args.runs + 1 if args.only != "timers" else 1):
            for name in inputs:
                for mode in ("micro-batch", "continuous"):
                    steady = compare(spark, brokers, f"{topic}-{name}", args, run, mode, ratios,
                                     written)  # fmt: skip
                    if name == "sparse":
                        tumbling_rates.append(f"{mode} {steady['tumbling']:,.0f} msg/s")
        sparse = f"{topic}-sparse"
        if args.only != "windows" and "sparse" not in inputs:
            fill(brokers, sparse, args.messages, INPUTS["sparse"])
        timers_line = (million_timers(spark, broker, sparse, args.messages, args.batch)
                       if args.only != "windows" else "not run")  # fmt: skip
        quix = (quix_run(brokers, sparse, args.messages, "tumbling")
                if args.only != "timers" and "sparse" in inputs else "not run")  # fmt: skip
        spark.stop()
    over = ", ".join(f"{INPUTS[i]:,} keys ({i})" for i in inputs)
    print(f"\n{args.messages:,} events over {over}, {PARTITIONS} partitions, event times "
          f"over {SPAN_MS // 60_000} minutes, {args.runs} runs")  # fmt: skip
    for name, values in ratios.items():
        print(f"{name:<30}/ plain: {summary(values)}")
    for name, values in written.items():
        print(f"{name:<30} changelog records per input record: {summary(values)}")
    print(
        f"quixstreams tumbling (final, sparse input): {quix}; goka-py tumbling: "
        f"{', '.join(tumbling_rates) or 'not run'}"
    )
    print(f"timers: {timers_line}")
    if ratios:
        print(f"windows/plain: {summary([v for values in ratios.values() for v in values])}")


if __name__ == "__main__":
    main()
