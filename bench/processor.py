"""Processor throughput and latency on the embedded broker, against baselines of the same run.

1M click events over 100k keys (4 partitions) are counted per key, one table update per event:

* goka-py: the click-count group on a local SparkSession (``local[2]``), micro-batches of
  ``--batch`` events; whole run (first micro-batch included) and steady state (after it).
* plain loop (the ceiling): one process, confluent-kafka consume -> count in a dict -> produce
  the new count, flush at the end.
* quixstreams doing the same stateful count (RocksDB state, changelog), in its own virtualenv
  ``.venv-quix``; if it cannot run against the embedded broker, the exact error is printed.

The same count in continuous mode (epochs; throughput from the group's committed offsets).

Then end-to-end latency at 2,000 events/s, in continuous and in micro-batch mode: events are
emitted at that rate while the processor runs; each table record carries its input event's
timestamp, so a consumer tailing the table measures emit -> visible. Before that, one event
measures the start (processor started -> its table record visible).

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

import confluent_kafka

from bench.common import percentile, summary
from goka import Context, Int64Codec, StringCodec, TopicManager, define_group, input, persist
from goka.dev import EmbeddedBroker
from goka.graph import GroupGraph
from goka.kafka.config import consumer_config, producer_config
from goka.spark import Processor, build_session
from goka.topic_manager import TopicManagerConfig
from goka.web.http import HttpService
from goka.web.monitor import ProcessorMonitor

PARTITIONS = 4
#: Epochs of the latency runs: short, so that a run of 20 s crosses two epoch boundaries (the
#: default 30 s would cross none). Longer runs measure the embedded broker more than us: its
#: hop grows with the length of its topics (p50 5 ms at first, 50 ms after 60 s at 2,000 ev/s).
LATENCY_EPOCH = 10.0
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


def count_group(topic: str, suffix: str = "") -> GroupGraph:
    """The plain count group of ``topic`` (a fresh group name each time)."""
    return define_group(f"{topic}-{suffix}{time.monotonic_ns()}",
                        input(topic, StringCodec(), count), persist(Int64Codec()))  # fmt: skip


def goka_run(
    spark: object, brokers: str, topic: str, batch: int, graph: GroupGraph | None = None
) -> tuple[float, float, int]:
    """Micro-batch throughput of ``graph`` (default: the plain count): whole run, steady
    state, events processed."""
    graph = graph or count_group(topic)
    state = Path(tempfile.mkdtemp(prefix="goka-bench-"))
    try:
        processor = Processor(
            graph, brokers, spark=spark,  # type: ignore[arg-type]
            state_dir=state, checkpoint_dir=state / "checkpoint", max_offsets_per_trigger=batch,
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
                    ) -> tuple[float, float]:  # fmt: skip
    """Throughput in continuous mode: the whole run, and the steady state (from the first
    commit on), from the group's committed offsets polled every 0.2 s. ``monitored``: with
    the monitor page served and a browser's refreshes (the page, then its JSON every 2 s).
    ``graph``: another group of ``topic`` than the plain count."""
    graph = graph or count_group(topic, "c")
    state = Path(tempfile.mkdtemp(prefix="goka-bench-"))
    processor = Processor(graph, brokers, spark=spark, state_dir=state,  # type: ignore[arg-type]
                          checkpoint_dir=state / "checkpoint", mode="continuous")  # fmt: skip
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


def quix_run(brokers: str, topic: str, messages: int, how: str = "count") -> str:
    """Run quixstreams (``bench/quix_count.py``: the count, or ``tumbling`` windows) over
    ``messages`` of ``topic``; return its rate, or why it did not run."""
    if not QUIX_PYTHON.exists():
        return "not run: .venv-quix is missing (make bench creates it)"
    sink = f"{topic}-quix" if how == "count" else f"{topic}-quix-{how}"
    TopicManager(brokers, TOPICS).ensure_stream_exists(sink, PARTITIONS)
    with tempfile.TemporaryDirectory() as state:
        try:
            result = subprocess.run(
                [str(QUIX_PYTHON), str(Path(__file__).with_name("quix_count.py")), brokers, topic,
                 sink, str(messages), state, how],
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


class Tail:
    """Follows a topic and notes each record's latency (now - its timestamp): a consumer per
    partition, each on its own thread, so that the observer adds as little as it can (the
    embedded broker answers a fetch of more partitions later: one hop at 2,000 events/s
    measured p50 8 / p99 19 ms fetching one partition, 21 / 81 ms fetching four)."""

    def __init__(
        self, brokers: str, topic: str, fetch_wait: int = 10, partitions: int = PARTITIONS
    ) -> None:
        self.brokers, self.topic, self.fetch_wait = brokers, topic, fetch_wait
        self.samples: list[float] = []
        self.series: list[tuple[float, float]] = []  # (sent, latency)
        self.first_seen = threading.Event()  # the record of key "first" arrived
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(p,), daemon=True)
                         for p in range(partitions)]  # fmt: skip
        for thread in self._threads:
            thread.start()

    def _run(self, partition: int) -> None:
        # 10 ms by default: the embedded broker waits the whole fetch wait even when records
        # are there (and answered much smaller waits with stalls of seconds)
        config = {**consumer_config(self.brokers), "fetch.wait.max.ms": self.fetch_wait}
        consumer = confluent_kafka.Consumer(config)
        consumer.assign([confluent_kafka.TopicPartition(self.topic, partition, 0)])
        while not self._stop.is_set():
            # consume(n, t) waits for n records or t seconds: take what is there, else wait
            # for one (as the processor's tail does), or the wait would be measured too
            messages = consumer.consume(1000, 0) or [m for m in [consumer.poll(0.05)] if m]
            now = time.time()
            for msg in messages:
                if msg.error() is not None:
                    continue
                if msg.key() == b"first":
                    self.first_seen.set()
                    continue
                sent = msg.timestamp()[1] / 1000
                with self._lock:
                    self.samples.append(now - sent)
                    self.series.append((sent, now - sent))
        consumer.close()

    def wait_for(self, count: int, timeout: float) -> None:
        deadline = time.time() + timeout
        while len(self.samples) < count and time.time() < deadline:
            time.sleep(0.1)

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)


def emit(producer: confluent_kafka.Producer, topic: str, rate: int, seconds: int) -> float:
    """Emit ``rate`` events/s for ``seconds``, each stamped when sent; return when it began."""
    begin = time.time()
    for i in range(rate * seconds):
        delay = begin + i / rate - time.time()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, b"/p", f"user-{i % 1000}", timestamp=int(time.time() * 1000))
        producer.poll(0)
    producer.flush(30)
    return begin


def latency(
    spark: object,
    brokers: str,
    rate: int,
    seconds: int,
    mode: str,
    fetch_wait: int = 10,
    partitions: int = PARTITIONS,
) -> Latency:
    """Emit ``rate`` events/s for ``seconds`` to a running processor; every table record carries
    its event's timestamp, so a consumer tailing the table measures emit -> visible. Before
    that, one event measures the start: processor started -> its table record visible."""
    topic = f"bench-latency-{time.monotonic_ns()}"
    TopicManager(brokers, TOPICS).ensure_stream_exists(topic, partitions)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), count), persist(Int64Codec()))
    TopicManager(brokers).ensure_table_exists(graph.table, partitions)
    state = Path(tempfile.mkdtemp(prefix="goka-latency-"))
    producer = confluent_kafka.Producer(producer_config(brokers, {"linger.ms": 1}))
    producer.produce(topic, b"/p", "first", timestamp=int(time.time() * 1000))
    producer.flush(30)
    tail = Tail(brokers, graph.table, fetch_wait, partitions)
    processor = Processor(graph, brokers, spark=spark, state_dir=state, mode=mode,  # type: ignore[arg-type]
                          checkpoint_dir=state / "checkpoint", trigger="0 seconds",
                          epoch=LATENCY_EPOCH,
                          kafka_config={"fetch.wait.max.ms": fetch_wait})  # fmt: skip
    started = time.time()
    runner = threading.Thread(target=processor.run, daemon=True)
    runner.start()
    assert tail.first_seen.wait(120), "the first event was not processed within 120 s"
    start_seconds = time.time() - started
    begin = emit(producer, topic, rate, seconds)
    tail.wait_for(rate * seconds, 60)
    tail.close()
    processor.stop()
    runner.join(60)
    shutil.rmtree(state, ignore_errors=True)
    if os.environ.get("GOKA_BENCH_SERIES"):  # the worst latency of each second, to find stalls
        worst: dict[int, float] = {}
        for sent, took in tail.series:
            worst[int(sent - begin)] = max(worst.get(int(sent - begin), 0.0), took)
        print(" ".join(f"{s}:{1000 * w:.0f}" for s, w in sorted(worst.items())), flush=True)
    return Latency(start_seconds, tail.samples, rate * seconds)


def cold_start(brokers: str, mode: str) -> float:
    """Seconds from launching ``goka processor run`` (a new process: JVM, session, Python
    workers) to the table record of an event emitted before it visible."""
    topic = f"bench-start-{time.monotonic_ns()}"
    TopicManager(brokers, TOPICS).ensure_stream_exists(topic, PARTITIONS)
    TopicManager(brokers).ensure_table_exists(f"{topic}-g-table", PARTITIONS)
    producer = confluent_kafka.Producer(producer_config(brokers))
    producer.produce(topic, b"/p", "first")
    producer.flush(30)
    tail = Tail(brokers, f"{topic}-g-table")
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


def broker_hop(
    brokers: str, rate: int, seconds: int, fetch_wait: int = 10, partitions: int = PARTITIONS
) -> Latency:
    """The baseline: one hop through the broker (emit -> visible to a consumer), measured the
    same way; a processor's record makes two (input topic, then table topic)."""
    topic = f"bench-hop-{time.monotonic_ns()}"
    TopicManager(brokers, TOPICS).ensure_stream_exists(topic, partitions)
    producer = confluent_kafka.Producer(producer_config(brokers, {"linger.ms": 1}))
    producer.produce(topic, b"/p", "first")  # emit once the tail reads: not before it fetches
    producer.flush(30)
    tail = Tail(brokers, topic, fetch_wait, partitions)
    assert tail.first_seen.wait(60), "the tail did not start within 60 s"
    emit(producer, topic, rate, seconds)
    tail.wait_for(rate * seconds, 30)
    tail.close()
    return Latency(0.0, tail.samples, rate * seconds)


class Latency:
    def __init__(self, start_seconds: float, samples: list[float], sent: int) -> None:
        self.start_seconds, self.samples, self.sent = start_seconds, samples, sent

    def describe(self) -> str:
        s = self.samples
        if not s:
            return f"no table record seen of {self.sent} events"
        ms = [1000 * x for x in s]
        return (f"p50 {percentile(ms, 50):,.0f} ms  p99 {percentile(ms, 99):,.0f} ms  "
                f"p99.9 {percentile(ms, 99.9):,.0f} ms  max {max(ms):,.0f} ms  "
                f"({len(s)} of {self.sent} events); first event after "
                f"{self.start_seconds:.1f} s")  # fmt: skip


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
    args = parser.parse_args()
    with EmbeddedBroker() as broker:
        if args.only == "monitor":
            spark = build_session("bench", "local[2]")
            monitor_cost(spark, broker.bootstrap, args)
            spark.stop()
        if args.only in (None, "throughput", "latency"):
            spark = build_session("bench", "local[2]")
            spark.sparkContext.setLogLevel("ERROR")
            if args.only in (None, "throughput"):
                throughput(spark, broker.bootstrap, args)
            if args.only in (None, "latency"):
                latencies(spark, broker.bootstrap, args.latency_seconds, args.fetch_wait)
            spark.stop()
        if args.only in (None, "start"):
            print("\ncold start (goka processor run launched -> first event's table record "
                  "visible):")  # fmt: skip
            for mode in ("continuous", "micro-batch"):
                starts = [cold_start(broker.bootstrap, mode) for _ in range(args.runs)]
                print(f"  {mode:<12}: {summary(starts)} s   (target <= 8 s)", flush=True)


def throughput(spark: object, brokers: str, args: argparse.Namespace) -> None:
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
    cont_whole, cont_steady = [], []
    for run in range(1, args.runs + 1):
        w, st = goka_continuous(spark, brokers, topic, args.messages)
        cont_whole.append(w)
        cont_steady.append(st)
        print(f"run {run}: goka-py continuous whole {w:,.0f} msg/s   steady {st:,.0f} msg/s",
              flush=True)  # fmt: skip
    quix = quix_run(brokers, topic, args.messages)
    print(f"\n{args.messages:,} events over {KEYS:,} keys, {PARTITIONS} partitions, "
          f"micro-batches of {args.batch:,}, {args.runs} runs (median)")  # fmt: skip
    print(f"plain loop (ceiling) : {summary(plain)}")
    print(f"goka-py whole run    : {summary(whole)}")
    print(f"goka-py steady state : {summary(steady)}")
    ratios = [s / p if p else float("nan") for s, p in zip(steady, plain, strict=True)]
    print(f"steady / plain loop  : {summary(ratios)}   (target >= 0.50)")
    print(f"continuous whole run : {summary(cont_whole)}")
    print(f"continuous steady    : {summary(cont_steady)}")
    cont = [c / m if m else float("nan") for c, m in zip(cont_steady, steady, strict=True)]
    print(f"continuous / micro-batch steady: {summary(cont)}   (target >= 1)")
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


def latencies(spark: object, brokers: str, seconds: int, fetch_wait: int) -> None:
    print(f"\nlatency at 2,000 ev/s for {seconds} s (emit -> table record visible), "
          f"fetch.wait.max.ms={fetch_wait}, {PARTITIONS} partitions:")  # fmt: skip
    hop = broker_hop(brokers, 2_000, seconds, fetch_wait)
    print(f"  {'broker hop':<12}: {hop.describe().split(';')[0]}  (the floor: one of two hops)")
    for mode in ("continuous", "micro-batch"):
        found = latency(spark, brokers, 2_000, seconds, mode, fetch_wait)
        print(f"  {mode:<12}: {found.describe()}", flush=True)
    # the embedded broker's hop grows with the partitions written to (one hop at 2,000 ev/s
    # measured p50 8 / 10 / 15 ms for 1 / 2 / 4): on one partition the processor's own share
    # of a record's latency shows beside the smallest hop this broker offers
    print("  one partition:")
    hop = broker_hop(brokers, 2_000, seconds, fetch_wait, partitions=1)
    print(f"  {'broker hop':<12}: {hop.describe().split(';')[0]}")
    found = latency(spark, brokers, 2_000, seconds, "continuous", fetch_wait, partitions=1)
    print(f"  {'continuous':<12}: {found.describe()}", flush=True)


if __name__ == "__main__":
    main()
