"""View recovery and gRPC read throughput, each against a baseline measured in the same run.

(a) Recovery: a View reads a 1M-record table into fresh LevelDB storage, against a bare
    confluent-kafka consumer reading the same records (assign all partitions, consume to the end,
    nothing stored). Runs alternate; ratio min/median/max.
(b) Get: 8 client threads call Get against our view server and against a trivial gRPC server that
    answers a constant (the framework's ceiling); each server runs in its own process with the
    same thread pool. Throughput ratio, and p50/p99 latency of both.
(c) GetMany of 100 keys against 100 Gets of the same keys.

    python -m bench.view [--records 1000000] [--runs 3] [--calls 2000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka
import grpc

from bench.common import add_broker, percentile, start_broker, summary
from goka import Int64Codec, TopicManager
from goka.grpc.v1 import view_pb2, view_pb2_grpc
from goka.kafka.config import consumer_config, producer_config
from goka.view import View

PARTITIONS = 8
TABLE = "bench-view-table"
CLIENTS = 8


def fill(brokers: str, records: int) -> None:
    TopicManager(brokers).ensure_table_exists(TABLE, PARTITIONS)
    producer = confluent_kafka.Producer(producer_config(brokers, {"linger.ms": 20}))
    for i in range(records):
        while True:
            try:
                producer.produce(TABLE, b"%d" % i, f"user-{i:07}")
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0


def bare_consumer(brokers: str, records: int) -> float:
    """Create a consumer, learn the partitions, assign them all, consume to the end: what the
    view does, minus storing. The clock covers the same span as the view's (from creation)."""
    # the view's consumer settings (fetch.wait.max.ms matters on the embedded broker)
    settings = {**consumer_config(brokers), "enable.partition.eof": True, "fetch.wait.max.ms": 50}
    started = time.perf_counter()
    consumer = confluent_kafka.Consumer(settings)
    partitions = len(consumer.list_topics(timeout=10).topics[TABLE].partitions)
    consumer.assign([confluent_kafka.TopicPartition(TABLE, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(partitions)])  # fmt: skip
    seen, open_partitions = 0, set(range(partitions))
    while open_partitions:
        for msg in consumer.consume(20_000, 0.1):  # as the view polls
            if msg.error() is None:
                seen += 1
            elif msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                open_partitions.discard(msg.partition())
    elapsed = time.perf_counter() - started
    consumer.close()
    assert seen == records, seen
    return elapsed


def view_recovery(brokers: str, records: int) -> float:
    with tempfile.TemporaryDirectory() as path:
        started = time.perf_counter()
        with View(brokers, TABLE, Int64Codec(), path=f"{path}/v") as view:
            view.wait_recovered(600)
            elapsed = time.perf_counter() - started
            assert view.stats().applied == records
    return elapsed


def start_server(*args: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, "-m", "bench.view_servers", *args],
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert process.stdout is not None
    return process, f"127.0.0.1:{process.stdout.readline().strip()}"


def hammer(address: str, calls: int, keys: int) -> tuple[float, list[float]]:
    """CLIENTS threads, each with its own channel, doing ``calls`` sequential Gets."""
    latencies: list[float] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        with grpc.insecure_channel(address) as channel:
            stub = view_pb2_grpc.ViewServiceStub(channel)
            stub.Get(view_pb2.GetRequest(table=TABLE, key="warm-up"))
            mine = []
            for i in range(calls):
                request = view_pb2.GetRequest(table=TABLE, key=f"user-{(n * calls + i) % keys:07}")
                started = time.perf_counter()
                stub.Get(request)
                mine.append(time.perf_counter() - started)
            with lock:
                latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return CLIENTS * calls / (time.perf_counter() - started), latencies


def batch_vs_single(address: str, rounds: int) -> tuple[float, float]:
    with grpc.insecure_channel(address) as channel:
        stub = view_pb2_grpc.ViewServiceStub(channel)
        keys = [f"user-{i:07}" for i in range(100)]
        started = time.perf_counter()
        for _ in range(rounds):
            answer = stub.GetMany(view_pb2.GetManyRequest(table=TABLE, keys=keys))
            assert len(answer.entries) == 100
        many = (time.perf_counter() - started) / rounds
        started = time.perf_counter()
        for _ in range(rounds):
            for key in keys:
                stub.Get(view_pb2.GetRequest(table=TABLE, key=key))
        single = (time.perf_counter() - started) / rounds
    return many, single


def timed(
    runs: int, first: Callable[[], Any], second: Callable[[], Any]
) -> tuple[list[Any], list[Any]]:
    a, b = [], []
    for _ in range(runs):
        a.append(first())
        b.append(second())
    return a, b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2_000, help="Gets per client thread")
    add_broker(parser)
    args = parser.parse_args()
    with start_broker(args.broker) as broker:
        brokers = broker.bootstrap
        fill(brokers, args.records)
        bare, ours = timed(args.runs, lambda: bare_consumer(brokers, args.records),
                           lambda: view_recovery(brokers, args.records))  # fmt: skip
        bare_rates = [args.records / t for t in bare]
        view_rates = [args.records / t for t in ours]
        print(
            f"(a) recovery of {args.records:,} records, {PARTITIONS} partitions, {args.runs} runs"
        )
        print(f"    bare consumer records/s : {summary(bare_rates)}")
        print(f"    view into LevelDB rec/s : {summary(view_rates)}")
        ratios = [v / b for v, b in zip(view_rates, bare_rates, strict=True)]
        print(f"    ratio view / bare       : {summary(ratios)}   (target >= 0.50)", flush=True)

        trivial, trivial_address = start_server("trivial")
        ours_server, view_address = start_server("view", brokers, TABLE)
        try:
            results = timed(args.runs, lambda: hammer(trivial_address, args.calls, args.records),
                            lambda: hammer(view_address, args.calls, args.records))  # fmt: skip
            ceiling = [r[0] for r in results[0]]
            served = [r[0] for r in results[1]]
            print(f"(b) Get with {CLIENTS} client threads x {args.calls} calls, {args.runs} runs")
            print(f"    trivial server req/s : {summary(ceiling)}")
            print(f"    view server req/s    : {summary(served)}")
            get_ratios = [s / c for s, c in zip(served, ceiling, strict=True)]
            print(f"    ratio view / trivial : {summary(get_ratios)}   (target >= 0.70)")
            for name, runs in (("trivial", results[0]), ("view", results[1])):
                lat = [x for _, latencies in runs for x in latencies]
                print(f"    {name:<8} latency  : p50 {percentile(lat, 50) * 1000:.2f} ms  "
                      f"p99 {percentile(lat, 99) * 1000:.2f} ms")  # fmt: skip
            many, single = batch_vs_single(view_address, 50)
            speedup = single / many
            print(f"(c) 100 keys: one GetMany {many * 1000:.2f} ms, "
                  f"100 Gets {single * 1000:.2f} ms ({speedup:.1f}x)")  # fmt: skip
        finally:
            for process in (trivial, ours_server):
                process.kill()
                process.wait()


if __name__ == "__main__":
    main()
