"""What the continuous plain count can reach on this machine at most, against the plain loop.

``bench.processor`` compares the continuous plain count (two Spark tasks, one per core) with
the plain confluent-kafka loop (one thread, librdkafka's fetch backoff: "as a new user writes
it"). Part of the count's cost per record is not the implementation's but its contract's under
at-least-once: every record is consumed, its key decoded, its count decoded and encoded, and
one changelog row produced with its two provenance headers (which source offset made it: what
makes the state exact after a crash) and a delivery report taken for it. This script runs only
that, in the simplest single-threaded Python loop over the input of ``bench.processor`` (a dict
for the store, no LevelDB, no callback API, no Spark, no offsets), and the plain loop, both at
full speed, alternating, with the CPU each takes per record (the process's, librdkafka's
threads included) and the broker's CPU per record meanwhile. A processor whose other costs were
nothing, with a task on every core, would still need the floor loop's CPU and the broker's for
each record: its throughput is at most ``cores / (floor + broker)``, printed against the plain
loop with librdkafka's backoff measured in the same run (``bench.processor``'s baseline).

    python -m bench.processor_floor [--messages 2000000] [--runs 4]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from typing import Any

import confluent_kafka

from bench.common import CpuShare, add_broker, start_broker, summary
from bench.processor import LIBRDKAFKA_BACKOFF, PARTITIONS, fill, plain_loop
from goka import TopicManager
from goka.kafka.config import consumer_config, producer_config


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _consumer(brokers: str, topic: str) -> confluent_kafka.Consumer:
    settings = {**consumer_config(brokers), "enable.partition.eof": True, "fetch.wait.max.ms": 10}
    consumer = confluent_kafka.Consumer(settings)
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    return consumer


def _produce(producer: Any, *args: Any) -> None:
    while True:
        try:
            producer.produce(*args)
            return
        except BufferError:
            producer.poll(0.01)


def floor(brokers: str, topic: str, messages: int) -> None:
    """The count's contract under at-least-once in one loop."""
    out = f"{topic}-floor-{time.monotonic_ns()}"
    TopicManager(brokers).ensure_table_exists(out, PARTITIONS)
    consumer = _consumer(brokers, topic)
    producer = confluent_kafka.Producer(producer_config(brokers, {"linger.ms": 5}))
    counts: dict[str, bytes] = {}
    outstanding, failures = [0], []

    def delivered(error: Any, message: Any) -> None:
        outstanding[0] -= 1
        if error is not None:
            failures.append(error)

    source = ("goka-src-topic", topic.encode())
    seen, open_partitions = 0, set(range(PARTITIONS))
    while open_partitions:
        by_partition: dict[int, list[tuple[Any, ...]]] = {}
        for msg in consumer.consume(10_000, 0.1):
            if msg.error() is not None:
                open_partitions.discard(msg.partition())
                continue
            row = (msg.topic(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1],
                   msg.headers())  # fmt: skip
            by_partition.setdefault(msg.partition(), []).append(row)
        for partition, rows in by_partition.items():
            for row in rows:
                key = row[2].decode()
                stored = counts.get(key)
                data = b"%d" % ((int(stored) if stored is not None else 0) + 1)
                counts[key] = data
                outstanding[0] += 1
                headers = [source, ("goka-src-offset", b"%d" % row[1])]
                _produce(producer, out, data, key, partition, delivered, None, row[4], headers)
            seen += len(rows)
        producer.poll(0)
    assert producer.flush(120) == 0 and outstanding[0] == 0 and not failures
    assert seen == messages, (seen, messages)
    consumer.close()


def plain(brokers: str, topic: str, messages: int) -> None:
    """The plain loop at full speed (goka's consumer defaults)."""
    plain_loop(brokers, topic, messages)


def measure(loop: Any, brokers: str, topic: str, messages: int, broker_pid: int | None,
            ) -> tuple[float, float, float]:  # fmt: skip
    """Records/s of ``loop``, its CPU µs per record, the broker's CPU µs per record."""
    share = CpuShare(broker_pid)
    share.start()
    began, used = time.perf_counter(), _cpu()
    loop(brokers, topic, messages)
    took, used = time.perf_counter() - began, _cpu() - used
    broker, _ = share.cores()
    return messages / took, used / messages * 1e6, broker * took / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=4)
    add_broker(parser)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with start_broker(args.broker) as broker:
        topic = "bench-floor-clicks"
        fill(broker.bootstrap, topic, args.messages)
        found: dict[str, list[tuple[float, float, float]]] = {"plain": [], "floor": []}
        baseline = []
        for run in range(args.runs):
            loops = [plain, floor] if run % 2 == 0 else [floor, plain]
            for loop in loops:
                found[loop.__name__].append(
                    measure(loop, broker.bootstrap, topic, args.messages, broker.pid)
                )
                rate, us, broker_us = found[loop.__name__][-1]
                print(f"run {run} {loop.__name__:<5}: {rate:,.0f} records/s, {us:.2f} µs CPU "
                      f"a record, the broker {broker_us:.2f} µs", flush=True)  # fmt: skip
            took = plain_loop(broker.bootstrap, topic, args.messages, LIBRDKAFKA_BACKOFF)
            baseline.append(args.messages / took)
            print(f"run {run} the plain loop with librdkafka's backoff: "
                  f"{baseline[-1]:,.0f} records/s", flush=True)  # fmt: skip
        print()
        for name, rows in found.items():
            print(
                f"{name:<5} records/s {summary([r[0] for r in rows])}; CPU µs a record "
                f"{summary([r[1] for r in rows])}; the broker's {summary([r[2] for r in rows])}"
            )
        base = statistics.median(baseline)
        ceilings = [cores / (us + broker_us) * 1e6 for _, us, broker_us in found["floor"]]
        print(f"the plain loop with librdkafka's backoff: {summary(baseline)} records/s")
        print(f"a processor that did only the floor's work on {cores} cores: at most "
              f"{summary(ceilings)} records/s = {summary([c / base for c in ceilings])} x the "
              f"plain loop's median (bench.processor's target: continuous >= 1.8)")  # fmt: skip


if __name__ == "__main__":
    main()
