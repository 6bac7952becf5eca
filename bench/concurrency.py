"""Key-ordered concurrency: a group whose callback waits on the network, beside
confluentinc/parallel-consumer (``KEY`` ordering) on the same broker, input and service.

100,000 records over 10,000 keys, 4 partitions. For each record the callback awaits a loopback
HTTP service that answers after 10 ms (``bench/peers/slowhttp``, a Go program: the service
costs the machine little of its two cores), then counts the key and emits the count:

* goka-py: ``async def`` callback with aiohttp, the count in the group's table, in continuous
  mode on a local SparkSession with a task slot per partition (``local[4]``; ``--slots 1``:
  one task runs the 4 partitions, their records in flight at once), at ``concurrency`` 64
  a partition (and 1: the floor, on fewer records, since it runs at about 4 x 100
  records/s);
* parallel-consumer 0.5.3.3 (:mod:`bench.peers.parallel_consumer`): ``KEY`` ordering,
  ``maxConcurrency`` 256 (its whole consumer's: as many in flight as goka-py's 4 x 64), a
  blocking ``java.net.http`` call per record on its worker threads, the count in memory, the
  output produced through it (each worker waits for its acknowledgement, ``linger.ms`` 0);
  offsets committed by its consumer (at least once, as goka-py's default).

The two take turns (which goes first alternates), and are timed the same way: records/s from
the service's first request of the run to the last output's append time (``LogAppendTime``:
the broker's clock, on this machine). (From the first output instead, goka-py would gain up
to a commit interval: its outputs reach the broker in bursts as it commits, parallel-
consumer's one by one.) Every run is checked: one output per input record, each key's counts
1 to its number of records, the service asked once per record.

The ideal is 4 x 64 / 10 ms = 25,600 records/s. A reference of what Python's asyncio HTTP
client costs here is shown beside it: one Python process, and one a core, doing nothing but
aiohttp requests to the service (256 in flight each, no Kafka).

Then a hot key (``--hot-runs``): 10% of the records on one key, the rest as before; the other
keys' records/s against the uniform runs' median, for both: by their outputs (from the run's
first request to their last output: with effects released in offset order, the other keys of
the hot key's partition come out behind its records) and by their work (to the service's last
answer to one of them: the records run on, their effects waiting in memory).

    python -m bench.concurrency [--runs 3] [--messages 100000] [--hot-runs 1]

It ends with ``concurrency: goka/parallel-consumer min X median Y max Z`` (the runs' ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import collections
import contextlib
import functools
import hashlib
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import add_broker, produce_keys, start_broker, summary
from bench.peers import parallel_consumer
from bench.processor import goka_continuous
from goka import Context, Int64Codec, StringCodec, define_group, input, output, persist
from goka.dev.kafka import cache_root, fill_cache
from goka.group.concurrent import await_on_loop
from goka.group.graph import GroupGraph
from goka.spark import build_session

PARTITIONS = 4
KEYS = 10_000
DELAY_MS = 10
CONCURRENCY = 64
HOT = "hot-key"
SERVICE = Path(__file__).resolve().parent / "peers" / "slowhttp"


def service_binary() -> Path:
    """The slow service (``bench/peers/slowhttp``), built with ``go build`` into the cache
    once for its sources."""
    digest = hashlib.sha256()
    for path in sorted(SERVICE.iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())

    def make(work: Path) -> None:
        go = shutil.which("go")
        if go is None:
            raise RuntimeError("bench.concurrency needs the Go toolchain (`go` on PATH)")
        subprocess.run([go, "build", "-o", str(work / "slowhttp"), "."], cwd=SERVICE,
                       check=True, timeout=600)  # fmt: skip

    return fill_cache(cache_root() / "slowhttp" / digest.hexdigest()[:16], make) / "slowhttp"


@contextmanager
def slow_service(delay_ms: int = DELAY_MS) -> Iterator[str]:
    """The service running on a loopback port: its ``/score`` URL."""
    command = [str(service_binary()), "-delay", f"{delay_ms}ms"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline().split()[1])
        yield f"http://127.0.0.1:{port}/score"
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(10)


def service_stats(url: str) -> dict[str, int]:
    """What the service counted: ``answered``, ``most_in_flight``."""
    import urllib.request

    with urllib.request.urlopen(url.replace("/score", "/stats"), timeout=10) as answer:
        return {k: int(v) for k, v in (p.split("=") for p in answer.read().decode().split())}


def fill(brokers: str, topic: str, messages: int, hot: float = 0.0,
         seed: int = 7) -> collections.Counter[str]:  # fmt: skip
    """``messages`` records over :data:`KEYS` keys, a share ``hot`` of them on :data:`HOT`;
    the records per key."""
    _create(brokers, topic)
    rng = random.Random(seed)
    keys = [HOT if rng.random() < hot else f"user-{rng.randrange(KEYS)}" for _ in range(messages)]
    produce_keys(brokers, topic, keys)
    return collections.Counter(keys)


def _create(brokers: str, topic: str, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": brokers})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=config)]).values():
        future.result(30)


def output_topic(brokers: str, topic: str) -> str:
    """A new output topic whose records carry the broker's append time."""
    _create(brokers, topic, **{"message.timestamp.type": "LogAppendTime"})
    return topic


def output_times(brokers: str, topic: str, truth: collections.Counter[str],
                 ) -> list[tuple[bytes, int]]:  # fmt: skip
    """``(key, append time in ms)`` of every record of ``topic``, read committed (waiting up
    to two minutes for as many as ``truth`` has records), checked: one output per input
    record, each key's counts 1 to its records, once each."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": brokers, "group.id": "bench-read",
                                         "enable.auto.commit": False,
                                         "enable.partition.eof": True,
                                         "isolation.level": "read_committed"})  # fmt: skip
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    found: list[tuple[bytes, int]] = []
    counts: dict[bytes, list[int]] = {}
    expect, ended = sum(truth.values()), set()
    deadline = time.monotonic() + 120
    try:
        while (len(found) < expect or len(ended) < PARTITIONS) and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.5):
                if message.error() is not None:  # (the end of a partition, for now)
                    ended.add(message.partition())
                    continue
                ended.discard(message.partition())
                found.append((message.key(), message.timestamp()[1]))
                counts.setdefault(message.key(), []).append(int(message.value()))
    finally:
        consumer.close()
    assert len(found) == expect, f"{topic}: {len(found)} outputs for {expect} records"
    wrong = [
        k for k, n in truth.items() if sorted(counts.get(k.encode(), [])) != list(range(1, n + 1))
    ]
    assert not wrong, f"{topic}: counts of {len(wrong)} keys wrong, e.g. {wrong[:3]}"
    return found


def rate(times: list[tuple[bytes, int]], began: int, but: bytes | None = None) -> float:
    """Records/s from ``began`` (the service's first request, ms) to the last output (of the
    keys other than ``but``)."""
    stamps = [t for key, t in times if key != but]
    return len(stamps) * 1000 / max(1, max(stamps) - began)


def reset(url: str) -> None:
    """Zero the service's figures as a run begins (none of the last run's requests may still
    be in flight)."""
    import urllib.request

    with urllib.request.urlopen(url.replace("/score", "/reset"), timeout=10) as answer:
        said = answer.read().decode()
    assert said == "in_flight=0", f"the service still answers the last run: {said}"


_sessions: dict[int, aiohttp.ClientSession] = {}


@atexit.register
def _close_sessions() -> None:
    """Close the worker's sessions on the loop that made them (else aiohttp warns)."""
    for session in _sessions.values():
        with contextlib.suppress(Exception):
            await_on_loop(session.close())


async def score(url: str, out: str, ctx: Context[int], page: Any) -> None:
    """The callback: ask the service about the key, then count it and emit the count."""
    loop = id(asyncio.get_running_loop())
    session = _sessions.get(loop)
    if session is None:  # one per worker process's callback loop, kept across records
        session = _sessions[loop] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=512))
    async with session.get(url, params={"key": ctx.key}) as answer:
        answer.raise_for_status()
        await answer.read()
    count = (ctx.value() or 0) + 1
    ctx.set_value(count)
    ctx.emit(out, ctx.key, str(count))


def group(topic: str, url: str, out: str, concurrency: int) -> GroupGraph:
    return define_group(f"{topic}-g{time.monotonic_ns()}",
                        input(topic, StringCodec(), functools.partial(score, url, out)),
                        persist(Int64Codec()), output(out, StringCodec()),
                        concurrency=concurrency)  # fmt: skip


def goka_rate(spark: object, brokers: str, topic: str, url: str, truth: collections.Counter[str],
              concurrency: int, hot: bool = False) -> tuple[float, float, int, float]:  # fmt: skip
    """goka-py's figures (:func:`_rates`)."""
    out = output_topic(brokers, f"{topic}-goka-{concurrency}-{time.monotonic_ns()}")
    messages = sum(truth.values())
    reset(url)
    goka_continuous(spark, brokers, topic, messages, graph=group(topic, url, out, concurrency))
    return _rates(brokers, out, url, truth, hot)


def _rates(brokers: str, out: str, url: str, truth: collections.Counter[str],
           hot: bool) -> tuple[float, float, int, float]:  # fmt: skip
    """records/s by outputs (all keys, the keys but the hot one), the most requests in
    flight, and the keys but the hot one's records/s by their work: their requests answered
    over the time from the run's first request to their last answer."""
    times, stats = output_times(brokers, out, truth), service_stats(url)
    assert stats["answered"] == sum(truth.values()), stats  # (no record asked twice)
    began = stats["first_ms"]
    return (
        rate(times, began),
        rate(times, began, HOT.encode() if hot else None),
        stats["most_in_flight"],
        stats["others_answered"] * 1000 / max(1, stats["others_last_ms"] - began),
    )


def peer_rate(brokers: str, topic: str, url: str, truth: collections.Counter[str],
              concurrency: int, hot: bool = False) -> tuple[float, float, int, float]:  # fmt: skip
    """parallel-consumer's figures, as :func:`goka_rate`'s; ``concurrency`` is its whole
    consumer's (``maxConcurrency``), goka-py's a partition's."""
    out = output_topic(brokers, f"{topic}-pc-{concurrency}-{time.monotonic_ns()}")
    reset(url)
    parallel_consumer.run(brokers, topic, out, group=f"{topic}-pc{time.monotonic_ns()}",
                          url=url, concurrency=concurrency, expect=sum(truth.values()))  # fmt: skip
    return _rates(brokers, out, url, truth, hot)


def aiohttp_rate(url: str, processes: int) -> float:
    """Requests/s ``processes`` Python processes get from the service alone (aiohttp, 256 in
    flight each, no Kafka; each process timed from its first request to its last): a
    reference for what Python's asyncio HTTP client costs here."""
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        figures = pool.map(_requests, [url] * processes)
    return sum(n for n, _ in figures) / max(seconds for _, seconds in figures)


def _requests(url: str, requests: int = 20_000, in_flight: int = 256) -> tuple[int, float]:
    """Send ``requests`` to the service from this process, ``in_flight`` at once: how many,
    in how many seconds."""

    async def main() -> tuple[int, float]:
        left = iter(range(requests))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=512)) as session:

            async def worker() -> None:
                for n in left:
                    async with session.get(url, params={"key": f"k{n}"}) as answer:
                        await answer.read()

            began = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(in_flight)))
            return requests, time.perf_counter() - began

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--floor-messages", type=int, default=4_000,
                        help="records of the concurrency 1 run")  # fmt: skip
    parser.add_argument("--hot-runs", type=int, default=1)
    parser.add_argument("--slots", type=int, default=PARTITIONS,
                        help="task slots of the local SparkSession (default: one a "
                        "partition)")  # fmt: skip
    add_broker(parser)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    ideal = PARTITIONS * CONCURRENCY * 1000 / DELAY_MS
    peer_concurrency = PARTITIONS * CONCURRENCY  # (its maxConcurrency is the whole consumer's)
    with start_broker(args.broker) as broker, slow_service() as url:
        brokers = broker.bootstrap
        parallel_consumer.build()
        spark = build_session("bench-concurrency", f"local[{args.slots}]")
        one, alone = aiohttp_rate(url, 1), aiohttp_rate(url, os.cpu_count() or 1)
        print(f"ideal {ideal:,.0f} records/s ({PARTITIONS} partitions x {CONCURRENCY} in flight "
              f"/ {DELAY_MS} ms; parallel-consumer: maxConcurrency {peer_concurrency}, as many "
              f"in flight); aiohttp alone (256 in flight a process, no Kafka): {one:,.0f} "
              f"requests/s from one Python process, {alone:,.0f} from {os.cpu_count()}",
              flush=True)  # fmt: skip
        floor_topic = f"bench-conc-floor-{time.monotonic_ns()}"
        floor_truth = fill(brokers, floor_topic, args.floor_messages)
        floor, *_ = goka_rate(spark, brokers, floor_topic, url, floor_truth, 1)
        print(f"goka-py concurrency 1: {floor:,.0f} records/s "
              f"(the floor: {PARTITIONS} x {1000 // DELAY_MS} = "
              f"{PARTITIONS * 1000 // DELAY_MS})", flush=True)  # fmt: skip
        topic = f"bench-conc-{time.monotonic_ns()}"
        truth = fill(brokers, topic, args.messages)
        gokas, peers, ratios, goka_works, peer_works = [], [], [], [], []
        for run in range(args.runs):
            both = {}
            for side in ("goka", "peer") if run % 2 == 0 else ("peer", "goka"):  # (in turn)
                both[side] = (goka_rate(spark, brokers, topic, url, truth, CONCURRENCY)
                              if side == "goka" else
                              peer_rate(brokers, topic, url, truth, peer_concurrency))  # fmt: skip
            (goka, _, goka_most, goka_work), (peer, _, peer_most, peer_work) = (
                both["goka"],
                both["peer"],
            )
            gokas.append(goka)
            peers.append(peer)
            goka_works.append(goka_work)
            peer_works.append(peer_work)
            ratios.append(goka / peer)
            print(f"run {run}: goka-py {goka:,.0f} records/s ({goka / ideal:.0%} of ideal, "
                  f"{goka / alone:.0%} of aiohttp alone; at most {goka_most} requests in "
                  f"flight), parallel-consumer {peer:,.0f} records/s (at most {peer_most} in "
                  f"flight); ratio {goka / peer:.2f}", flush=True)  # fmt: skip
        print(f"goka-py {CONCURRENCY} a partition: {summary(gokas)} records/s; of ideal "
              f"{summary([g / ideal for g in gokas])}; of aiohttp alone "
              f"{summary([g / alone for g in gokas])}")  # fmt: skip
        print(f"parallel-consumer {peer_concurrency}: {summary(peers)} records/s")
        if args.hot_runs:
            hot_topic = f"bench-conc-hot-{time.monotonic_ns()}"
            hot_truth = fill(brokers, hot_topic, args.messages, hot=0.1)
            for run in range(args.hot_runs):
                _, goka_others, _, goka_work = goka_rate(
                    spark, brokers, hot_topic, url, hot_truth, CONCURRENCY, hot=True)  # fmt: skip
                _, peer_others, _, peer_work = peer_rate(
                    brokers, hot_topic, url, hot_truth, peer_concurrency, hot=True)  # fmt: skip
                goka_drop = goka_others / statistics.median(gokas) - 1
                peer_drop = peer_others / statistics.median(peers) - 1
                goka_work_drop = goka_work / statistics.median(goka_works) - 1
                peer_work_drop = peer_work / statistics.median(peer_works) - 1
                print(f"hot run {run}: 10% on one key, the other keys by their outputs: goka-py "
                      f"{goka_others:,.0f} records/s ({goka_drop:+.0%} against uniform), "
                      f"parallel-consumer {peer_others:,.0f} records/s ({peer_drop:+.0%}); "
                      f"by their work (requests answered): goka-py {goka_work:,.0f} records/s "
                      f"({goka_work_drop:+.0%}), parallel-consumer {peer_work:,.0f} records/s "
                      f"({peer_work_drop:+.0%})", flush=True)  # fmt: skip
        spark.stop()  # type: ignore[attr-defined]
    print(f"concurrency: goka/parallel-consumer {summary(ratios)}")


if __name__ == "__main__":
    main()
