"""End-to-end latency of the count group (emit -> its table record visible), in short windows,
beside the broker's own hops measured in the same windows (``python -m bench.processor --only
latency``, or ``python -m bench.latency``).

The measurements share one Apache Kafka broker (``--broker``, the default), warmed up first
(``--warm-up`` seconds of events through a relay at the highest rate: a new JVM compiles its hot
paths meanwhile, taking CPU the processor would have, and a broker serves for longer than a
run); on Tansu each measurement has a fresh broker (its hop grows with the length of its topics,
so a long run there measures the broker more than us). Events are emitted at ``rate`` for
``seconds`` while the processor runs; every table record carries its input event's timestamp,
so a consumer tailing the table measures emit -> visible. Beside it, in the same run, a probe
at 100 events/s measures the broker: one hop (emit -> a consumer sees it) and two hops (a
plain confluent-kafka consumer and producer relay each probe event to a second topic, the
processor's path without its work). Per window of ``--window`` seconds: the processor's p50,
p99, p99.9, the probe's one- and two-hop p99, the processor's added latency (its percentile
less the two-hop one) and whether the window meets the targets (where the hop p99 <= 100 ms:
processor p99 <= 2x two-hop p99, processor p50 <= two-hop p50 + 10 ms; under exactly-once
each target allows the commit interval more, as a record is visible when its transaction
commits); then the judged windows' records together against the p99 target over their probe
records (the run's p99, the broker's slow windows left out). Last, the loop's longest stalls
from the processor's timeline (:mod:`goka.processing.timeline`), each with its steps and the
probe's hops around it.
``--guarantees at-least-once,exactly-once`` measures each guarantee in turn.

    python -m bench.latency [--rates 500,2000] [--seconds 20] [--window 5]
        [--modes continuous,micro-batch] [--partitions 4,1] [--broker kafka|tansu]
        [--warm-up 30] [--guarantees at-least-once]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka

from bench.common import add_broker, percentile, start_broker
from goka import Context, Int64Codec, StringCodec, TopicManager, define_group, input, persist
from goka.kafka.config import consumer_config, producer_config
from goka.spark import Processor, build_session

#: The processor's commit interval in continuous mode (its default).
COMMIT_INTERVAL = 0.1
#: Epochs of the latency runs: short, so that a run of 20 s crosses epoch boundaries (the
#: default 30 s would cross none).
LATENCY_EPOCH = 10.0
PROBE_RATE = 100
HOP_TARGET = 0.1  # windows whose one-hop p99 is above it measure the broker, not us
P50_MARGIN_MS = 10  # the processor's p50 may exceed the two hops' by this much


def count(ctx: Context[int], page: object) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


class Tail:
    """Follows a topic and notes each record's latency (now - its timestamp): a consumer per
    partition, each on its own thread, so that the observer adds as little as it can (the
    embedded broker answers a fetch of more partitions later)."""

    def __init__(self, brokers: str, topic: str, fetch_wait: int, partitions: int) -> None:
        self.brokers, self.topic, self.fetch_wait = brokers, topic, fetch_wait
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
                    self.series.append((sent, now - sent))
        consumer.close()

    def wait_for(self, count: int, timeout: float) -> None:
        deadline = time.time() + timeout
        while len(self.series) < count and time.time() < deadline:
            time.sleep(0.1)

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)


class Probe:
    """The broker's hops in the same run: ``PROBE_RATE`` events/s to a topic (one hop, seen by
    ``one``), each relayed by a plain consumer and producer to a second topic (two hops, seen
    by ``two``), on one partition each."""

    def __init__(self, brokers: str, fetch_wait: int) -> None:
        stamp = time.monotonic_ns()
        self.first, self.second = f"probe-{stamp}-a", f"probe-{stamp}-b"
        manager = TopicManager(brokers)
        manager.ensure_stream_exists(self.first, 1)
        manager.ensure_stream_exists(self.second, 1)
        self.brokers, self.fetch_wait = brokers, fetch_wait
        self._stop = threading.Event()
        self.one = Tail(brokers, self.first, fetch_wait, 1)
        self.two = Tail(brokers, self.second, fetch_wait, 1)
        self._threads = [threading.Thread(target=f, daemon=True) for f in (self._emit, self._relay)]
        for thread in self._threads:
            thread.start()

    def _emit(self) -> None:
        producer = confluent_kafka.Producer(producer_config(self.brokers, {"linger.ms": 1}))
        begin, sent = time.time(), 0
        while not self._stop.is_set():
            delay = begin + sent / PROBE_RATE - time.time()
            if delay > 0:
                time.sleep(delay)
            producer.produce(self.first, b"p", b"probe", timestamp=int(time.time() * 1000))
            producer.poll(0)
            sent += 1
        producer.flush(10)

    def _relay(self) -> None:
        config = {**consumer_config(self.brokers), "fetch.wait.max.ms": self.fetch_wait}
        consumer = confluent_kafka.Consumer(config)
        consumer.assign([confluent_kafka.TopicPartition(self.first, 0, 0)])
        producer = confluent_kafka.Producer(producer_config(self.brokers, {"linger.ms": 1}))
        while not self._stop.is_set():
            for msg in consumer.consume(1000, 0) or [m for m in [consumer.poll(0.05)] if m]:
                if msg.error() is None:
                    producer.produce(self.second, msg.value(), msg.key(),
                                     timestamp=msg.timestamp()[1])  # fmt: skip
            producer.poll(0)
        producer.flush(10)
        consumer.close()

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)
        self.one.close()
        self.two.close()


def emit(producer: confluent_kafka.Producer, topic: str, rate: int, seconds: float) -> float:
    """Emit ``rate`` events/s for ``seconds``, each stamped when sent; return when it began."""
    begin = time.time()
    for i in range(int(rate * seconds)):
        delay = begin + i / rate - time.time()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, b"/p", f"user-{i % 1000}", timestamp=int(time.time() * 1000))
        producer.poll(0)
    producer.flush(30)
    return begin


@dataclass
class Run:
    """One measurement: the processor's series, the probe's, the loop's timeline."""

    mode: str
    rate: int
    partitions: int
    begin: float
    start_seconds: float
    series: list[tuple[float, float]]
    one_hop: list[tuple[float, float]]
    two_hops: list[tuple[float, float]]
    timeline: dict[str, Any] = field(default_factory=dict)
    guarantee: str = "at-least-once"
    seconds: float = 0.0  # how long events were emitted (0: up to the last one's stamp)


def warm_up(brokers: str, rate: int, seconds: float, fetch_wait: int) -> None:
    """Send ``rate`` events/s for ``seconds`` through a topic of 4 partitions followed by a
    tail, beside the probe's relay: the broker's produce and fetch paths get compiled."""
    if seconds <= 0:
        return
    began = time.monotonic()
    topic = f"warm-up-{time.monotonic_ns()}"
    TopicManager(brokers).ensure_stream_exists(topic, 4)
    tail, probe = Tail(brokers, topic, fetch_wait, 4), Probe(brokers, fetch_wait)
    producer = confluent_kafka.Producer(producer_config(brokers, {"linger.ms": 1}))
    try:
        emit(producer, topic, rate, seconds)
        tail.wait_for(int(rate * seconds), 30)
    finally:
        probe.close()
        tail.close()
    last = _within(probe.one.series, time.time() - 5, time.time())
    print(f"broker warmed up for {time.monotonic() - began:.0f} s ({rate:,} events/s), "
          f"one hop p99 {_p(last, 99):.0f} ms in its last 5 s", flush=True)  # fmt: skip


def measure(spark: object, rate: int, seconds: float, mode: str, *, partitions: int = 4,
            fetch_wait: int = 10, broker_kind: str = "kafka", brokers: str | None = None,
            guarantee: str = "at-least-once", epoch: float = LATENCY_EPOCH,
            **settings: Any) -> Run:  # fmt: skip
    """Run the count group in ``mode`` at ``rate`` events/s on ``brokers``, or on a fresh
    broker of ``broker_kind`` (see the module docstring), with epochs of ``epoch`` seconds;
    ``settings``: more processor settings (``snapshot_dir``...)."""
    with contextlib.nullcontext(brokers) if brokers else start_broker(broker_kind) as broker:
        brokers = broker if isinstance(broker, str) else broker.bootstrap
        topic = f"latency-{time.monotonic_ns()}"
        TopicManager(brokers).ensure_stream_exists(topic, partitions)
        graph = define_group(f"{topic}-g", input(topic, StringCodec(), count),
                             persist(Int64Codec()))  # fmt: skip
        TopicManager(brokers).ensure_table_exists(graph.table, partitions)
        state = Path(tempfile.mkdtemp(prefix="goka-latency-"))
        producer = confluent_kafka.Producer(producer_config(brokers, {"linger.ms": 1}))
        producer.produce(topic, b"/p", "first", timestamp=int(time.time() * 1000))
        producer.flush(30)
        tail = Tail(brokers, graph.table, fetch_wait, partitions)
        processor = Processor(graph, brokers, spark=spark, state_dir=state,  # type: ignore[arg-type]
                              mode=mode, checkpoint_dir=state / "checkpoint",
                              **({"trigger": "0 seconds"} if mode == "micro-batch" else {}),
                              epoch=epoch, guarantee=guarantee,
                              commit_interval=COMMIT_INTERVAL,
                              kafka_config={"consumer.fetch.wait.max.ms": fetch_wait},
                              **settings)  # fmt: skip
        probe = Probe(brokers, fetch_wait)  # warmed up while the processor starts
        started = time.time()
        runner = threading.Thread(target=processor.run, daemon=True)
        runner.start()
        try:
            assert tail.first_seen.wait(120), "the first event was not processed within 120 s"
            start_seconds = time.time() - started
            begin = emit(producer, topic, rate, seconds)
            tail.wait_for(int(rate * seconds), 60)
        finally:
            probe.close()
            tail.close()
            processor.stop()
            runner.join(60)
            shutil.rmtree(state, ignore_errors=True)
        timeline = json.loads(processor.totals.timeline) if processor.totals.timeline else {}
        return Run(mode, rate, partitions, begin, start_seconds, tail.series, probe.one.series,
                   probe.two.series, timeline, guarantee, seconds)  # fmt: skip


def _p(values: list[float], q: float) -> float:
    return 1000 * percentile(values, q) if values else float("nan")


def _within(series: list[tuple[float, float]], start: float, end: float) -> list[float]:
    return [took for sent, took in series if start <= sent < end]


def judged(run: Run, window: float) -> tuple[list[float], list[float]]:
    """The processor's latencies and the probe's two-hop ones in the windows where the
    broker's one hop met :data:`HOP_TARGET` (the windows :func:`report` judges)."""
    end = max((sent for sent, _ in run.series), default=run.begin)
    count = max(1, round(run.seconds / window)) if run.seconds else math.ceil((end - run.begin)
                                                                             / window)  # fmt: skip
    kept: tuple[list[float], list[float]] = ([], [])
    for k in range(count):
        start = run.begin + k * window
        until = start + window if k < count - 1 else math.inf
        mine = _within(run.series, start, until)
        one, two = (_within(s, start, until) for s in (run.one_hop, run.two_hops))
        if mine and one and two and _p(one, 99) <= HOP_TARGET * 1000:
            kept[0].extend(mine)
            kept[1].extend(two)
    return kept


def report(run: Run, window: float) -> list[str]:
    """Lines: the whole run, each window, the longest stalls."""
    lines = [f"{run.mode}, {run.guarantee}, {run.rate:,} events/s, {run.partitions} partitions "
             f"(first event after {run.start_seconds:.1f} s):"]  # fmt: skip
    # a record is visible when its transaction commits: up to a commit interval later
    more = 1000 * COMMIT_INTERVAL if run.guarantee == "exactly-once" else 0.0
    end = max((sent for sent, _ in run.series), default=run.begin)
    count = max(1, round(run.seconds / window)) if run.seconds else math.ceil((end - run.begin)
                                                                             / window)  # fmt: skip
    met, met_p50, judged = 0, 0, 0
    kept: tuple[list[float], list[float]] = ([], [])  # the judged windows' records, the probe's
    for k in range(count):  # (events stamped after the emitting's end, late, in the last one)
        start = run.begin + k * window
        until = start + window if k < count - 1 else math.inf
        mine = _within(run.series, start, until)
        one, two = (_within(s, start, until) for s in (run.one_hop, run.two_hops))
        if mine and one and two:
            ok = _p(mine, 99) <= 2 * _p(two, 99) + more
            ok_p50 = _p(mine, 50) <= _p(two, 50) + P50_MARGIN_MS + more
            usable = _p(one, 99) <= HOP_TARGET * 1000
            judged += usable
            if usable:
                kept[0].extend(mine)
                kept[1].extend(two)
            met += usable and ok
            met_p50 += usable and ok_p50
            verdict = (
                f"p99 {'meets' if ok else 'MISSES'}, p50 {'meets' if ok_p50 else 'MISSES'}"
                if usable
                else "broker slow: not judged"
            )
            lines.append(
                f"  {start - run.begin:5.0f}-{start - run.begin + window:<3.0f}s  processor p50 "
                f"{_p(mine, 50):5.0f} p99 {_p(mine, 99):5.0f} p99.9 {_p(mine, 99.9):5.0f} ms | "
                f"hop p99 {_p(one, 99):4.0f}, two hops p50 {_p(two, 50):4.0f} p99 "
                f"{_p(two, 99):4.0f} ms | added p50 {_p(mine, 50) - _p(two, 50):5.0f} p99 "
                f"{_p(mine, 99) - _p(two, 99):5.0f} ms | {verdict}"
            )
    plus = f" + {more:.0f} ms" if more else ""
    lines.append(f"  windows meeting p99 <= 2x two hops{plus}: {met} of {judged} judged; p50 "
                 f"<= two hops' p50 + {P50_MARGIN_MS} ms{plus}: {met_p50} of {judged}")  # fmt: skip
    if kept[0]:
        mine_p99, budget = _p(kept[0], 99), 2 * _p(kept[1], 99) + more
        lines.append(
            f"  the judged windows together: processor p99 {mine_p99:.0f} ms, 2x two "
            f"hops{plus} {budget:.0f} ms: {'meets' if mine_p99 <= budget else 'MISSES'}"
        )
    stalls = run.timeline.get("stalls", []) if run.timeline else []
    if stalls:
        lines.append("  longest loop stalls while emitting (when, length, steps; the probe's "
                     "hops around it):")  # fmt: skip
    for stall in [s for s in stalls if s["began"] >= run.begin][:5]:
        began, took = stall["began"], stall["seconds"]
        steps = ", ".join(f"{n} {t * 1000:.0f}" for n, t in stall["steps"] if t >= 0.001)
        near = _within(run.one_hop, began - 0.5, began + took + 0.5)
        lines.append(f"    +{began - run.begin:5.1f} s  {took * 1000:5.0f} ms  [{steps}]  hop max "
                     f"{1000 * max(near, default=float('nan')):.0f} ms")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="500,2000")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--window", type=float, default=5)
    parser.add_argument("--modes", default="continuous,micro-batch")
    parser.add_argument("--partitions", default="4,1")
    parser.add_argument("--fetch-wait", type=int, default=10)
    parser.add_argument("--guarantees", default="at-least-once",
                        help="comma-separated: at-least-once, exactly-once")  # fmt: skip
    parser.add_argument("--warm-up", type=float, default=30,
                        help="seconds of events through the shared Kafka broker first")  # fmt: skip
    add_broker(parser)
    args = parser.parse_args(argv)
    rates = [int(r) for r in args.rates.split(",")]
    with contextlib.ExitStack() as stack:
        shared = None
        if args.broker == "kafka":
            shared = stack.enter_context(start_broker(args.broker)).bootstrap
            warm_up(shared, max(rates), args.warm_up, args.fetch_wait)
        spark = build_session("bench", "local[2]")
        stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")
        for partitions in (int(p) for p in args.partitions.split(",")):
            for rate in rates:
                for mode in args.modes.split(","):
                    for guarantee in args.guarantees.split(","):
                        run = measure(spark, rate, args.seconds, mode, partitions=partitions,
                                      fetch_wait=args.fetch_wait, broker_kind=args.broker,
                                      brokers=shared, guarantee=guarantee)  # fmt: skip
                        print("\n".join(report(run, args.window)), flush=True)


if __name__ == "__main__":
    main()
