"""Emitter throughput against a bare confluent-kafka Producer, and emit_sync latency.

Both sides send the same messages (N keyed 100-byte values, 100k distinct keys) to a fresh
topic on the same embedded broker with the same producer settings, and both learn the outcome
of every message: the baseline with a per-message delivery callback and ``poll(0)`` after each
``produce`` (confluent-kafka's documented pattern), the emitter through its futures and metrics.
Both are connected and know the topic's metadata before the clock starts (Emitter() checks at
construction); the clock stops when every message is acknowledged.

Two pairs: fire-and-forget (the baseline counts failures, the emitter's futures are dropped and
its metrics checked), and keeping every outcome (the baseline records each (partition, offset),
the caller keeps each future). A fifth variant runs the emitter with its C fast path
(goka._speedups) switched off, and a sixth is the bare producer with no callback at all (blind
to failures: the ceiling). Variants alternate within each run, in reverse order every other
run; each pair's ratio is reported as min/median/max over runs. On this 2-core machine the
broker and the client share the CPU and single runs vary by +-30% either way: read the medians
of many runs.

    python -m bench.emitter [--messages 1000000] [--runs 9] [--kafka linger.ms=50 ...]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import confluent_kafka

import goka.emitter
from bench.common import add_broker, fresh_topic, percentile, start_broker, summary
from goka import BytesCodec, Emitter, TopicManager
from goka.kafka.config import producer_config
from goka.metrics import emitter_stats

PARTITIONS = 8
VALUE = b"v" * 100
SETTINGS: dict[str, Any] = {}  # librdkafka settings for both sides (--kafka)


def keys(n: int) -> list[str]:
    return [f"user-{i % 100_000}" for i in range(n)]


def _send_all(topic: str, messages: list[str], producer: Any, on_delivery: Any) -> float:
    """confluent-kafka's documented loop: produce with a callback, poll(0) after each message."""
    produce, poll = producer.produce, producer.poll
    callback = {} if on_delivery is None else {"on_delivery": on_delivery}
    # connected and the topic's metadata known before the clock starts, as Emitter() checks
    assert topic in producer.list_topics(topic, timeout=10).topics
    started = time.perf_counter()
    for key in messages:
        while True:
            try:
                produce(topic, VALUE, key, **callback)
                break
            except BufferError:
                poll(0.001)
        poll(0)
    assert producer.flush(120) == 0
    return time.perf_counter() - started


def bare_producer(brokers: str, topic: str, messages: list[str]) -> float:
    """The bare producer counting failures."""
    failures: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            failures.append(err)

    producer = confluent_kafka.Producer(producer_config(brokers, SETTINGS))
    elapsed = _send_all(topic, messages, producer, on_delivery)
    assert not failures
    return elapsed


def bare_producer_blind(brokers: str, topic: str, messages: list[str]) -> float:
    """The bare producer with no delivery callback: never learns whether a message failed (the
    ceiling of what confluent-kafka can do, not something to run a service on)."""
    producer = confluent_kafka.Producer(producer_config(brokers, SETTINGS))
    return _send_all(topic, messages, producer, None)


def bare_producer_keeping_results(brokers: str, topic: str, messages: list[str]) -> float:
    """The bare producer recording every (partition, offset), as kept futures do."""
    results: list[tuple[int, int]] = []
    keep = results.append

    def on_delivery(err: object, msg: confluent_kafka.Message) -> None:
        assert err is None
        keep((msg.partition(), msg.offset()))  # type: ignore[arg-type]

    producer = confluent_kafka.Producer(producer_config(brokers, SETTINGS))
    elapsed = _send_all(topic, messages, producer, on_delivery)
    assert len(results) == len(messages)
    return elapsed


def goka_emitter(brokers: str, topic: str, messages: list[str]) -> float:
    """Fire and forget, as a request handler does; failures are checked through the metrics."""
    stats = emitter_stats(topic)
    with Emitter(brokers, topic, BytesCodec(), **SETTINGS) as emitter:
        emit = emitter.emit
        started = time.perf_counter()
        for key in messages:
            emit(key, VALUE)
        assert emitter.flush(120) == 0
        elapsed = time.perf_counter() - started
    assert stats.failed == 0 and stats.delivered == len(messages)
    return elapsed


def goka_emitter_pure_python(brokers: str, topic: str, messages: list[str]) -> float:
    """Fire and forget with the C fast path switched off (as where goka._speedups is not built)."""
    saved, goka.emitter.speedups = goka.emitter.speedups, None
    try:
        return goka_emitter(brokers, topic, messages)
    finally:
        goka.emitter.speedups = saved


def goka_emitter_keeping_futures(brokers: str, topic: str, messages: list[str]) -> float:
    """The caller keeps every future and checks each (more live objects for the GC)."""
    with Emitter(brokers, topic, BytesCodec(), **SETTINGS) as emitter:
        emit = emitter.emit
        started = time.perf_counter()
        futures = [emit(key, VALUE) for key in messages]
        assert emitter.flush(120) == 0
        elapsed = time.perf_counter() - started
    assert all(f.exception(0) is None for f in futures)
    return elapsed


def sync_latency(brokers: str, count: int) -> list[float]:
    topic = fresh_topic(brokers, "sync", PARTITIONS)
    latencies = []
    with Emitter(brokers, topic, BytesCodec(), **{"linger.ms": 0}) as emitter:
        for i in range(count):
            started = time.perf_counter()
            emitter.emit_sync(f"user-{i}", VALUE)
            latencies.append(time.perf_counter() - started)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--sync", type=int, default=2_000, help="emit_sync calls for latency")
    parser.add_argument("--kafka", action="append", default=[], metavar="NAME=VALUE",
                        help="a librdkafka setting for both sides, e.g. linger.ms=50")  # fmt: skip
    add_broker(parser)
    args = parser.parse_args()
    SETTINGS.update(setting.split("=", 1) for setting in args.kafka)
    messages = keys(args.messages)
    variants = {
        "bare producer": bare_producer,
        "Emitter.emit": goka_emitter,
        "bare, results kept": bare_producer_keeping_results,
        "emit, futures kept": goka_emitter_keeping_futures,
        "emit, pure Python": goka_emitter_pure_python,
        "bare, no callback": bare_producer_blind,
    }
    rates: dict[str, list[float]] = {name: [] for name in variants}
    with start_broker(args.broker) as broker:
        brokers = broker.bootstrap
        manager = TopicManager(brokers)
        for run in range(1, args.runs + 1):
            order = list(variants.items())
            for name, variant in order if run % 2 else reversed(order):  # cancel order effects
                topic = fresh_topic(brokers, name.split()[0].lower(), PARTITIONS)
                rates[name].append(args.messages / variant(brokers, topic, messages))
                manager.delete(topic)  # the broker keeps data in memory: don't let it pile up
            line = "   ".join(f"{name} {r[-1]:,.0f}/s" for name, r in rates.items())
            print(f"run {run}: {line}", flush=True)
        latencies = sync_latency(brokers, args.sync)
    print(
        f"\n{args.messages:,} messages x {args.runs} runs, {PARTITIONS} partitions, 100-byte values"
        f", settings: {SETTINGS or 'defaults'}"
    )
    for name, values in rates.items():
        print(f"{name:<20} msg/s : {summary(values)}")
    if goka.emitter.speedups is None:
        print("goka._speedups is not built or GOKA_NO_SPEEDUPS is set: all variants pure Python")
    for ours, base in (
        ("Emitter.emit", "bare producer"),
        ("emit, futures kept", "bare, results kept"),
        ("emit, pure Python", "bare producer"),
        ("Emitter.emit", "bare, no callback"),
    ):
        ratios = [a / b for a, b in zip(rates[ours], rates[base], strict=True)]
        target = "   (target >= 0.90)" if base != "bare, no callback" else ""
        print(f"ratio {ours} / {base}: {summary(ratios)}{target}")
    p50, p99 = percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000
    calls = len(latencies)
    print(f"emit_sync latency: p50 {p50:.2f} ms  p99 {p99:.2f} ms ({calls} calls, linger.ms=0)")


if __name__ == "__main__":
    main()
