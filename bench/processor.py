"""Processor throughput and latency on the embedded broker, against baselines of the same run.

1M click events over 100k keys (4 partitions) are counted per key, one table update per event:

* goka-py: the click-count group on a local SparkSession (``local[2]``), micro-batches of
  ``--batch`` events; whole run (first micro-batch included) and steady state (after it).
* plain loop (the ceiling): one process, confluent-kafka consume -> count in a dict -> produce
  the new count, flush at the end.
* quixstreams doing the same stateful count (RocksDB state, changelog), in its own virtualenv
  ``.venv-quix``; if it cannot run against the embedded broker, the exact error is printed.

Then end-to-end latency at 2,000 events/s: events are emitted at that rate while the processor
runs continuously; each table record carries its input event's timestamp, so a consumer tailing
the table measures emit -> visible.

    python -m bench.processor [--messages 1000000] [--runs 3] [--batch 250000]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import confluent_kafka

from bench.common import percentile, summary
from goka import Context, Int64Codec, StringCodec, TopicManager, define_group, input, persist
from goka.dev import EmbeddedBroker
from goka.kafka.config import consumer_config, producer_config
from goka.spark import Processor, build_session

PARTITIONS = 4
KEYS = 100_000
QUIX_PYTHON = Path(__file__).resolve().parent.parent / ".venv-quix" / "bin" / "python"


def count(ctx: Context[int], page: object) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


def fill(brokers: str, topic: str, messages: int) -> None:
    TopicManager(brokers).ensure_stream_exists(topic, PARTITIONS)
    producer = confluent_kafka.Producer(producer_config(brokers, {"linger.ms": 20}))
    rng = random.Random(7)
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, b"/page", f"user-{rng.randrange(KEYS)}")
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0


def plain_loop(brokers: str, topic: str, messages: int) -> float:
    TopicManager(brokers).ensure_table_exists(f"{topic}-plain", PARTITIONS)
    settings = {**consumer_config(brokers), "enable.partition.eof": True, "fetch.wait.max.ms": 10}
    started = time.perf_counter()
    consumer = confluent_kafka.Consumer(settings)
    producer = confluent_kafka.Producer(producer_config(brokers, {"linger.ms": 10}))
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    counts: dict[bytes, int] = {}
    seen, open_partitions, out = 0, set(range(PARTITIONS)), f"{topic}-plain"
    while open_partitions:
        for msg in consumer.consume(10_000, 0.1):
            if msg.error() is not None:
                open_partitions.discard(msg.partition())
                continue
            key = msg.key()
            n = counts.get(key, 0) + 1
            counts[key] = n
            while True:
                try:
                    producer.produce(out, b"%d" % n, key, partition=msg.partition())
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
            seen += 1
    assert producer.flush(120) == 0 and seen == messages
    consumer.close()
    return time.perf_counter() - started


def goka_run(spark: object, brokers: str, topic: str, batch: int) -> tuple[float, float, int]:
    graph = define_group(f"{topic}-{time.monotonic_ns()}", input(topic, StringCodec(), count),
                         persist(Int64Codec()))  # fmt: skip
    state = Path(tempfile.mkdtemp(prefix="goka-bench-"))
    try:
        processor = Processor(
            graph, brokers, spark=spark,  # type: ignore[arg-type]
            state_dir=state, checkpoint_dir=state / "checkpoint", max_offsets_per_trigger=batch,
        )  # fmt: skip
        started = time.time()
        batches = processor.run_until_caught_up()
        total = sum(b.processed for b in batches)
        whole = batches[-1].finished_at - started
        later = batches[1:]
        steady = (batches[-1].finished_at - batches[0].finished_at) if later else whole
        return total / whole, sum(b.processed for b in later) / steady if later else 0.0, total
    finally:
        shutil.rmtree(state, ignore_errors=True)


def quix_run(brokers: str, topic: str, messages: int) -> str:
    if not QUIX_PYTHON.exists():
        return "not run: .venv-quix is missing (make bench creates it)"
    TopicManager(brokers).ensure_stream_exists(f"{topic}-quix", PARTITIONS)
    with tempfile.TemporaryDirectory() as state:
        try:
            result = subprocess.run(
                [str(QUIX_PYTHON), str(Path(__file__).with_name("quix_count.py")), brokers, topic,
                 f"{topic}-quix", str(messages), state],
                capture_output=True, text=True, timeout=900,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return "did not finish within 900 s"
    lines = [line for line in result.stdout.splitlines() if line.startswith("elapsed")]
    if result.returncode != 0 or not lines:
        errors = [line for line in result.stderr.splitlines() if "rror" in line]
        last = (errors or result.stderr.splitlines() or ["?"])[-1]
        return f"failed (exit {result.returncode}): {last}"
    elapsed = float(lines[-1].split()[1])
    return f"{messages / elapsed:,.0f} msg/s"


def latency(spark: object, brokers: str, rate: int, seconds: int) -> list[float]:
    topic = f"bench-latency-{time.monotonic_ns()}"
    TopicManager(brokers).ensure_stream_exists(topic, PARTITIONS)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), count), persist(Int64Codec()))
    state = Path(tempfile.mkdtemp(prefix="goka-latency-"))
    processor = Processor(graph, brokers, spark=spark, state_dir=state, trigger="0 seconds",  # type: ignore[arg-type]
                          checkpoint_dir=state / "checkpoint")  # fmt: skip
    runner = threading.Thread(target=processor.run, daemon=True)
    runner.start()
    TopicManager(brokers).ensure_table_exists(graph.table, PARTITIONS)
    samples: list[float] = []
    stop = threading.Event()

    def tail() -> None:
        consumer = confluent_kafka.Consumer({**consumer_config(brokers), "fetch.wait.max.ms": 10})
        table = graph.table
        consumer.assign([confluent_kafka.TopicPartition(table, p, 0) for p in range(PARTITIONS)])
        while not stop.is_set():
            for msg in consumer.consume(1000, 0.1):
                if msg.error() is None:
                    samples.append(time.time() - msg.timestamp()[1] / 1000)
        consumer.close()

    tailer = threading.Thread(target=tail, daemon=True)
    tailer.start()
    time.sleep(15)  # let the query start and its first (empty) batches pass before measuring
    producer = confluent_kafka.Producer(producer_config(brokers, {"linger.ms": 1}))
    begin = time.time()
    for i in range(rate * seconds):
        due = begin + i / rate
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, b"/p", f"user-{i % 1000}", timestamp=int(time.time() * 1000))
        producer.poll(0)
    producer.flush(30)
    deadline = time.time() + 60
    while len(samples) < rate * seconds and time.time() < deadline:
        time.sleep(0.2)
    stop.set()
    processor.stop()
    runner.join(60)
    tailer.join(10)
    shutil.rmtree(state, ignore_errors=True)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=250_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--latency-seconds", type=int, default=20)
    args = parser.parse_args()
    spark = build_session("bench", "local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    with EmbeddedBroker() as broker:
        brokers = broker.bootstrap
        topic = "bench-clicks"
        fill(brokers, topic, args.messages)
        plain, whole, steady = [], [], []
        for run in range(1, args.runs + 1):
            plain.append(args.messages / plain_loop(brokers, topic, args.messages))
            w, s, total = goka_run(spark, brokers, topic, args.batch)
            assert total == args.messages
            whole.append(w)
            steady.append(s)
            print(f"run {run}: plain loop {plain[-1]:,.0f} msg/s   goka-py whole {w:,.0f} msg/s   "
                  f"steady {s:,.0f} msg/s", flush=True)  # fmt: skip
        quix = quix_run(brokers, topic, args.messages)
        print(f"\n{args.messages:,} events over {KEYS:,} keys, {PARTITIONS} partitions, "
              f"micro-batches of {args.batch:,}, {args.runs} runs (median)")  # fmt: skip
        print(f"plain loop (ceiling) : {summary(plain)}")
        print(f"goka-py whole run    : {summary(whole)}")
        print(f"goka-py steady state : {summary(steady)}")
        ratios = [s / p for s, p in zip(steady, plain, strict=True)]
        print(f"steady / plain loop  : {summary(ratios)}   (target >= 0.50)")
        print(f"quixstreams          : {quix}")
        samples = latency(spark, brokers, 2_000, args.latency_seconds)
        if samples:
            print(f"latency at 2,000 ev/s: p50 {percentile(samples, 50):.2f} s  "
                  f"p99 {percentile(samples, 99):.2f} s  ({len(samples)} events, "
                  f"median {statistics.median(samples):.2f} s)")  # fmt: skip
    spark.stop()


if __name__ == "__main__":
    main()
