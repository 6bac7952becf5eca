"""How long a partition's transactional producer takes to start: goka's
:class:`~goka.kafka.transactions.Transactions` against a bare confluent-kafka producer that calls
``init_transactions`` at once, on the same broker, alternating.

Each start takes over a transactional id whose last writer just committed a transaction (50
records over 4 partitions), as a task does when Spark moves a partition to another Python worker
(micro-batches: up to four a batch) or a continuous epoch begins. Reported: each side's start
times (min / median / max, and how many took over 0.4 s: librdkafka's 500 ms retry of the
producer ID), and bare / goka of the medians.

Then a processor's idempotent (non-transactional) producer: seconds from its start to the
delivery report of its first record, a bare :class:`~goka.kafka.producer.KafkaProducer`
against one that asked metadata as it was built (what ``Clients.producer`` does), alternating.

    python -m bench.producer_start [--starts 24]
"""

from __future__ import annotations

import argparse
import statistics
import time

import confluent_kafka

from bench.common import add_broker, fresh_topic, start_broker, summary
from goka.kafka.config import producer_config
from goka.kafka.producer import KafkaProducer
from goka.kafka.transactions import Transactions

SLOW = 0.4


def committed(brokers: str, topic: str, txid: str) -> None:
    """A writer of ``txid`` commits a transaction and goes."""
    writer = confluent_kafka.Producer({"bootstrap.servers": brokers, "transactional.id": txid})
    writer.list_topics(timeout=30)
    writer.init_transactions(30)
    writer.begin_transaction()
    for n in range(50):
        writer.produce(topic, b"v", str(n).encode(), partition=n % 4)
    writer.commit_transaction(30)


def bare(brokers: str, txid: str) -> float:
    started = time.monotonic()
    producer = confluent_kafka.Producer({"bootstrap.servers": brokers, "transactional.id": txid})
    producer.init_transactions(30)
    return time.monotonic() - started


def goka_start(brokers: str, group: str, partition: int) -> float:
    started = time.monotonic()
    Transactions({"bootstrap.servers": brokers}, group, partition).close()
    return time.monotonic() - started


def first_delivery(brokers: str, topic: str, connect: bool) -> float:
    """Seconds from an idempotent producer's start to its first record's delivery report."""
    producer = KafkaProducer(producer_config(brokers, {"linger.ms": 10}))
    if connect:
        producer.connect(topic)
    delivered: list[float] = []

    def on_delivery(error: object, message: object) -> None:
        delivered.append(time.monotonic())

    producer.produce(topic, b"v", b"k", partition=0, on_delivery=on_delivery)
    assert producer.flush(30) == 0 and delivered
    return delivered[0] - producer.started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=24, help="starts of each side")
    add_broker(parser)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"bare": [], "goka": []}
    firsts: dict[str, list[float]] = {"bare": [], "connected": []}
    with start_broker(args.broker) as broker:
        brokers = broker.bootstrap
        topic = fresh_topic(brokers, "producer-start", 4)
        for n in range(args.starts):
            for side in ("bare", "goka") if n % 2 == 0 else ("goka", "bare"):
                group, partition = f"bench-start-{side}", n % 4
                committed(brokers, topic, f"{group}-{partition}")  # (goka's id: group-partition)
                if side == "bare":
                    times[side].append(bare(brokers, f"{group}-{partition}"))
                else:
                    times[side].append(goka_start(brokers, group, partition))
        first_delivery(brokers, topic, connect=True)  # (the first producer ID of a new broker
        for n in range(args.starts):  # waits for its coordinator to load: not measured)
            for side in ("bare", "connected") if n % 2 == 0 else ("connected", "bare"):
                firsts[side].append(first_delivery(brokers, topic, side == "connected"))
    print(f"\n{args.starts} starts each, each after its id's last writer committed")
    for side, values in times.items():
        slow = sum(1 for t in values if t > SLOW)
        print(f"{side:<5} start s: {summary(values)}   over {SLOW} s: {slow}")
    print(f"bare / goka (medians): "
          f"{statistics.median(times['bare']) / statistics.median(times['goka']):.2f}")  # fmt: skip
    print(f"\nidempotent producer, start -> first delivery, {args.starts} each")
    for side, values in firsts.items():
        slow = sum(1 for t in values if t > SLOW)
        print(f"{side:<9} s: {summary(values)}   over {SLOW} s: {slow}")


if __name__ == "__main__":
    main()
