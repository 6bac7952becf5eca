"""Processor throughput and latency on the embedded broker, against baselines of the same run.

1M click events over 100k keys (4 partitions) are counted per key, one table update per event:

* goka-py: the click-count group on a local SparkSession (``local[2]``), micro-batches of
  ``--batch`` events; whole run (first micro-batch included) and steady state (after it).
* plain loop (the ceiling): one process, confluent-kafka consume -> count in a dict -> produce
  the new count, flush at the end.
* quixstreams doing the same stateful count (RocksDB state, changelog), in its own virtualenv
  ``.venv-quix``; if it cannot run against the embedded broker, the exact error is printed.

The same count in continuous mode (epochs; throughput from the group's committed offsets).

Then end-to-end latency (:mod:`bench.latency`): at 500 and 2,000 events/s, in continuous and
in micro-batch mode, on 4 partitions and on 1, on a broker of their own, in windows of 5 s beside
the broker's one- and two-hop latency of the same windows, and the processor loop's longest
stalls.

Last, the cold start in each mode: ``goka processor run`` launched in a new process (a new JVM,
new Python workers) -> the table record of an event emitted before it visible.

    python -m bench.processor [--messages 1000000] [--runs 3] [--batch 250000]
        [--only throughput|latency|start]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import confluent_kafka

import bench.latency
from bench.common import CpuShare, add_broker, start_broker, summary
from goka import Context, Int64Codec, StringCodec, TopicManager, define_group, input, persist
from goka.group.graph import GroupGraph
from goka.kafka.config import consumer_config, producer_config
from goka.spark import Processor, build_session
from goka.topic_manager import TopicManagerConfig
from goka.web.http import HttpService
from goka.web.monitor import ProcessorMonitor

PARTITIONS = 4
KEYS = 100_000
ROOT = Path(__file__).resolve().parent.parent
#: Topics are created with an explicit retention: quixstreams reads it to create its changelog
#: topics, and the embedded broker describes only settings given at creation.
TOPICS = TopicManagerConfig(stream_config={"retention.ms": "604800000"})
QUIX_PYTHON = Path(__file__).resolve().parent.parent / ".venv-quix" / "bin" / "python"


def count(ctx: Context[int], page: object) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


def fill(brokers: str, topic: str, messages: int) -> None:
    TopicManager(brokers, TOPICS).ensure_stream_exists(topic, PARTITIONS)
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


#: librdkafka's own fetch backoff, where goka's consumer defaults set 10 ms: the plain loop as a
#: new user writes it, capped at about 150,000 records/s (see goka.kafka.config)
LIBRDKAFKA_BACKOFF = {"fetch.queue.backoff.ms": 1000}


def plain_loop(brokers: str, topic: str, messages: int, consumer: dict[str, Any] | None = None,
               ) -> float:  # fmt: skip
    """Seconds the plain loop takes (its consumer with goka's defaults, and ``consumer``)."""
    TopicManager(brokers).ensure_table_exists(f"{topic}-plain", PARTITIONS)
    settings = {**consumer_config(brokers), "enable.partition.eof": True, "fetch.wait.max.ms": 10,
                **(consumer or {})}  # fmt: skip
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


def count_group(topic: str, suffix: str = "") -> GroupGraph:
    """The plain count group of ``topic`` (a fresh group name each time)."""
    return define_group(f"{topic}-{suffix}{time.monotonic_ns()}",
                        input(topic, StringCodec(), count), persist(Int64Codec()))  # fmt: skip


def goka_run(
    spark: object, brokers: str, topic: str, batch: int, graph: GroupGraph | None = None,
    **settings: Any,
) -> tuple[float, float, int]:  # fmt: skip
    """Micro-batch throughput of ``graph`` (default: the plain count; ``settings``: more of
    the processor's): whole run, steady state, events processed."""
    graph = graph or count_group(topic)
    state = Path(tempfile.mkdtemp(prefix="goka-bench-"))
    try:
        processor = Processor(
            graph, brokers, spark=spark,  # type: ignore[arg-type]
            state_dir=state, checkpoint_dir=state / "checkpoint", max_offsets_per_trigger=batch,
            **settings,
        )  # fmt: skip
        started = time.time()
        run = processor.run_until_caught_up()
        whole = run.last_finished_at - started
        first = run.recent[0] if run.batches == len(run.recent) else None
        if first is None or run.batches < 2:  # the steady state: from the first batch's end
            return run.processed / whole, 0.0, run.processed
        steady = run.last_finished_at - first.finished_at
        return run.processed / whole, (run.processed - first.processed) / steady, run.processed
    finally:
        shutil.rmtree(state, ignore_errors=True)


def goka_continuous(spark: object, brokers: str, topic: str, messages: int,
                    monitored: bool = False, graph: GroupGraph | None = None,
                    **settings: Any) -> tuple[float, float]:  # fmt: skip
    """Throughput in continuous mode: the whole run, and the steady state (from the first
    commit on), from the group's committed offsets polled every 0.2 s. ``monitored``: with
    the monitor page served and a browser's refreshes (the page, then its JSON every 2 s).
    ``graph``: another group of ``topic`` than the plain count; ``settings``: more of the
    processor's."""
    graph = graph or count_group(topic, "c")
    state = Path(tempfile.mkdtemp(prefix="goka-bench-"))
    processor = Processor(graph, brokers, spark=spark, state_dir=state,  # type: ignore[arg-type]
                          checkpoint_dir=state / "checkpoint", mode="continuous",
                          **settings)  # fmt: skip
    watching = threading.Event()
    if monitored:
        monitor = ProcessorMonitor([processor]).start()
        http = HttpService(routes=[monitor.handle])

        def watch() -> None:
            urllib.request.urlopen(f"{http.url}/", timeout=10).read()
            while not watching.wait(2.0):
                urllib.request.urlopen(f"{http.url}/api/monitor", timeout=10).read()

        threading.Thread(target=watch, daemon=True).start()
    try:
        started = time.time()
        runner = threading.Thread(target=processor.run, daemon=True)
        runner.start()
        first: tuple[float, int] | None = None
        done = 0
        while done < messages and runner.is_alive():
            time.sleep(0.2)
            if not processor.prepared:  # topics not prepared yet
                continue
            done = sum(p["offset"] or 0 for p in processor.partition_status()
                       if p["topic"] == topic)  # fmt: skip
            if first is None and done:
                first = (time.time(), done)
        ended = time.time()
        processor.stop()
        runner.join(60)
        assert done == messages, f"processed {done} of {messages}"
        assert first is not None
        return messages / (ended - started), (messages - first[1]) / (ended - first[0])
    finally:
        watching.set()
        if monitored:
            monitor.close()
            http.close()
        shutil.rmtree(state, ignore_errors=True)


def quix_figures(brokers: str, topic: str, messages: int, how: str = "count",
                 guarantee: str = "at-least-once") -> tuple[float, int] | str:  # fmt: skip
    """Run quixstreams (``bench/quix_count.py``: the count, or ``tumbling`` or ``hopping``
    windows) over ``messages`` of ``topic``; return its rate and peak RSS (kB), or why it did
    not run."""
    if not QUIX_PYTHON.exists():
        return "not run: .venv-quix is missing (make bench creates it)"
    sink = f"{topic}-quix" if how == "count" else f"{topic}-quix-{how}"
    TopicManager(brokers, TOPICS).ensure_stream_exists(sink, PARTITIONS)
    with tempfile.TemporaryDirectory() as state:
        try:
            result = subprocess.run(
                [str(QUIX_PYTHON), str(Path(__file__).with_name("quix_count.py")), brokers, topic,
                 sink, str(messages), state, how, guarantee],
                capture_output=True, text=True, timeout=900,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return "did not finish within 900 s"
    lines = [line for line in result.stdout.splitlines() if line.startswith("elapsed")]
    if result.returncode != 0 or not lines:
        errors = [line for line in result.stderr.splitlines() if "rror" in line]
        last = (errors or result.stderr.splitlines() or ["?"])[-1]
        return f"failed (exit {result.returncode}): {last}"
    fields = lines[-1].split()
    return messages / float(fields[1]), int(fields[5])


def quix_run(brokers: str, topic: str, messages: int, how: str = "count") -> str:
    """:func:`quix_figures`' rate as text, or why quixstreams did not run."""
    figures = quix_figures(brokers, topic, messages, how)
    return figures if isinstance(figures, str) else f"{figures[0]:,.0f} msg/s"


def cold_start(brokers: str, mode: str) -> float:
    """Seconds from launching ``goka processor run`` (a new process: JVM, session, Python
    workers) to the table record of an event emitted before it visible."""
    topic = f"bench-start-{time.monotonic_ns()}"
    TopicManager(brokers, TOPICS).ensure_stream_exists(topic, PARTITIONS)
    TopicManager(brokers).ensure_table_exists(f"{topic}-g-table", PARTITIONS)
    producer = confluent_kafka.Producer(producer_config(brokers))
    producer.produce(topic, b"/p", "first")
    producer.flush(30)
    tail = bench.latency.Tail(brokers, f"{topic}-g-table", 10, PARTITIONS)
    state = Path(tempfile.mkdtemp(prefix="goka-start-"))
    env = {**os.environ, "GOKA_BENCH_TOPIC": topic, "GOKA_LOG_LEVEL": "WARNING",
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    command = [sys.executable, "-m", "goka.cli", "processor", "run", "bench.start_graph:graph",
               "--brokers", brokers, "--state-dir", str(state), "--mode", mode,
               "--trigger", "0 seconds", "--http-port", "0"]  # fmt: skip
    started = time.monotonic()
    quiet = subprocess.DEVNULL
    with subprocess.Popen(command, env=env, cwd=ROOT, stdout=quiet, stderr=quiet,
                          start_new_session=True) as process:  # fmt: skip
        seen = tail.first_seen.wait(180)
        took = time.monotonic() - started
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
    tail.close()
    shutil.rmtree(state, ignore_errors=True)
    assert seen, f"{mode}: the first event was not processed within 180 s"
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=250_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--latency-seconds", type=int, default=20)
    parser.add_argument("--fetch-wait", type=int, default=10,
                        help="fetch.wait.max.ms of the processor and of the tail that measures "
                        "latency (default 10)")  # fmt: skip
    parser.add_argument("--only", choices=["throughput", "latency", "start", "monitor"],
                        help="run one part of the bench")  # fmt: skip
    add_broker(parser)
    args = parser.parse_args()
    with start_broker(args.broker) as broker:
        if args.only == "monitor":
            spark = build_session("bench", "local[2]")
            monitor_cost(spark, broker.bootstrap, args)
            spark.stop()
        if args.only in (None, "throughput"):
            spark = build_session("bench", "local[2]")
            spark.sparkContext.setLogLevel("ERROR")
            throughput(spark, broker.bootstrap, args, broker.pid)
            spark.stop()
        if args.only in (None, "latency"):
            bench.latency.main(["--seconds", str(args.latency_seconds), "--fetch-wait",
                                str(args.fetch_wait), "--broker", args.broker])  # fmt: skip
        if args.only in (None, "start"):
            print("\ncold start (goka processor run launched -> first event's table record "
                  "visible):")  # fmt: skip
            for mode in ("continuous", "micro-batch"):
                starts = [cold_start(broker.bootstrap, mode) for _ in range(args.runs)]
                print(f"  {mode:<12}: {summary(starts)} s   (target <= 8 s)", flush=True)


def throughput(spark: object, brokers: str, args: argparse.Namespace,
               broker_pid: int | None = None) -> None:  # fmt: skip
    """Each run's rates, and the cores the broker and the rest of the machine used meanwhile
    (on 2 cores, what the broker takes the processor cannot have)."""
    topic = "bench-clicks"
    fill(brokers, topic, args.messages)
    plain, tuned, whole, steady = [], [], [], []
    cpu = CpuShare(broker_pid)
    for run in range(1, args.runs + 1):
        cpu.start()
        tuned.append(args.messages / plain_loop(brokers, topic, args.messages))
        print(f"run {run}: plain loop with goka's consumer defaults {tuned[-1]:,.0f} msg/s "
              f"({cpu.line()})", flush=True)  # fmt: skip
        cpu.start()
        plain.append(args.messages / plain_loop(brokers, topic, args.messages, LIBRDKAFKA_BACKOFF))
        plain_cpu = cpu.line()
        cpu.start()
        w, s, total = goka_run(spark, brokers, topic, args.batch)
        assert total == args.messages
        whole.append(w)
        steady.append(s)
        print(f"run {run}: plain loop {plain[-1]:,.0f} msg/s ({plain_cpu})   goka-py whole "
              f"{w:,.0f} msg/s   steady {s:,.0f} msg/s ({cpu.line()})", flush=True)  # fmt: skip
    cont_whole, cont_steady = [], []
    for run in range(1, args.runs + 1):
        cpu.start()
        w, st = goka_continuous(spark, brokers, topic, args.messages)
        cont_whole.append(w)
        cont_steady.append(st)
        print(f"run {run}: goka-py continuous whole {w:,.0f} msg/s   steady {st:,.0f} msg/s "
              f"({cpu.line()})", flush=True)  # fmt: skip
    quix = quix_run(brokers, topic, args.messages)
    print(f"\n{args.messages:,} events over {KEYS:,} keys, {PARTITIONS} partitions, "
          f"micro-batches of {args.batch:,}, {args.runs} runs (median)")  # fmt: skip
    print(f"plain loop (librdkafka's fetch backoff, as a new user writes it): {summary(plain)}")
    print(f"plain loop, goka's consumer defaults (one core's ceiling): {summary(tuned)}")
    print(f"goka-py whole run    : {summary(whole)}")
    print(f"goka-py steady state : {summary(steady)}")
    ratios = [s / p if p else float("nan") for s, p in zip(steady, plain, strict=True)]
    print(f"steady / plain loop  : {summary(ratios)}   (target >= 1.0)")
    print(f"continuous whole run : {summary(cont_whole)}")
    print(f"continuous steady    : {summary(cont_steady)}")
    cont = [c / m if m else float("nan") for c, m in zip(cont_steady, steady, strict=True)]
    print(f"continuous / micro-batch steady: {summary(cont)}   (target >= 1)")
    cont_plain = [c / p if p else float("nan") for c, p in zip(cont_steady, plain, strict=True)]
    print(f"continuous steady / plain loop: {summary(cont_plain)}   (target >= 1.8)")
    for name, rates in (("micro-batch", steady), ("continuous", cont_steady)):
        shares = [r / t if t else float("nan") for r, t in zip(rates, tuned, strict=True)]
        print(f"{name} steady / the loop with goka's defaults: {summary(shares)}")
    print(f"quixstreams          : {quix}")


def monitor_cost(spark: object, brokers: str, args: argparse.Namespace) -> None:
    """Continuous steady throughput with the monitor page open and refreshing vs without,
    alternating in the same session (the order reversed every other run)."""
    topic = "bench-clicks"
    fill(brokers, topic, args.messages)
    plain, watched = [], []
    for run in range(1, args.runs + 1):
        order = (False, True) if run % 2 else (True, False)
        for monitored in order:
            _, steady = goka_continuous(spark, brokers, topic, args.messages, monitored)
            (watched if monitored else plain).append(steady)
        print(f"run {run}: without {plain[-1]:,.0f} msg/s   with the monitor open "
              f"{watched[-1]:,.0f} msg/s", flush=True)  # fmt: skip
    ratios = [w / p for w, p in zip(watched, plain, strict=True)]
    print(f"continuous steady without monitor: {summary(plain)}")
    print(f"continuous steady, monitor open  : {summary(watched)}")
    print(f"with / without                   : {summary(ratios)}   (target >= 0.95)")


if __name__ == "__main__":
    main()
