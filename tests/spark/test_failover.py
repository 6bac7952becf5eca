"""A 3-broker Apache Kafka cluster loses the leader of a processor's input and table partitions
while the processor counts live clicks: the broker is SIGKILLed and later started again on its
data. A view and a PostgreSQL sink read the table meanwhile. Afterwards the table, the view and
the sink equal the clicks sent (nothing lost, nothing counted twice in state); the processor's
longest stall and its latency through the failover are reported.

Slow (minutes, four JVMs and two Spark jobs on 2 cores): ``make test-slow``."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from examples.click_count import demo
from examples.click_count.group import TOPIC
from goka import Emitter, Int64Codec, StringCodec, TopicManager
from goka.dev.cluster import KafkaCluster
from goka.dev.postgres import LocalPostgres, find_postgres
from goka.kafka.admin import KafkaAdmin
from goka.kafka.config import consumer_config
from goka.view import View

from ..helpers import wait_for
from .fixtures import table_of
from .model import told
from .timed import topic_rows
from .truth import committed

pytestmark = [pytest.mark.longrun, pytest.mark.kafka, pytest.mark.spark, pytest.mark.postgres]

TABLE = demo.TABLE
USERS = 40
RATE = 200  # clicks a second
PHASES = (20.0, 25.0, 25.0)  # seconds: before the kill, while it is down, after its restart


class Clicks(threading.Thread):
    """Sends ``RATE`` clicks a second until stopped; remembers when each user's n-th was sent.
    (A click whose delivery timed out while a broker was lost, the emitter's 10 s, is not in
    the topic: the truth is read from the topic, :func:`clicks_in`.)"""

    def __init__(self, brokers: str, topic: str = TOPIC) -> None:
        super().__init__(daemon=True)
        self.brokers, self.topic, self.stop = brokers, topic, threading.Event()
        self.sent: Counter[str] = Counter()
        self.sent_at: dict[tuple[str, int], float] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Emitter(self.brokers, self.topic, StringCodec()) as emitter:
                i, began = 0, time.monotonic()
                while not self.stop.is_set():
                    user = f"user-{i % USERS:02d}"
                    self.sent[user] += 1
                    self.sent_at[(user, self.sent[user])] = time.monotonic()
                    emitter.emit(user, "/home")
                    i += 1
                    time.sleep(max(0.0, began + i / RATE - time.monotonic()))
                emitter.flush(120)
        except BaseException as exc:  # reported by the test
            self.error = exc


class TableWatch(threading.Thread):
    """Follows a table topic, read committed; remembers when each user's count first reached
    each value, and when each record arrived. ``told``: the topic is a told group's output
    instead, and each value's first arrival (wall clock) is remembered."""

    def __init__(self, brokers: str, topic: str = TABLE, *, told: bool = False) -> None:
        super().__init__(daemon=True)
        self.stop, self.topic, self.told = threading.Event(), topic, told
        self.reached: dict[tuple[str, int], float] = {}
        self.arrivals: list[tuple[float, int]] = []  # (when, partition)
        self.values: dict[bytes, float] = {}  # (told)
        self._consumer = confluent_kafka.Consumer(
            consumer_config(brokers, {"group.id": "failover-watch", "fetch.wait.max.ms": 20})
        )

    def run(self) -> None:
        self._consumer.assign([confluent_kafka.TopicPartition(self.topic, p, 0) for p in range(4)])
        while not self.stop.is_set():
            for msg in self._consumer.consume(1000, 0.1):
                if msg.error() or msg.value() is None:
                    continue
                now = time.monotonic()
                self.arrivals.append((now, msg.partition()))
                if self.told:
                    self.values.setdefault(msg.value(), time.time())
                    continue
                user, value = msg.key().decode(), int(msg.value())
                self.reached.setdefault((user, value), now)
        self._consumer.close()


def latencies(clicks: Clicks, watch: TableWatch, since: float, until: float) -> list[float]:
    """Seconds from sending each user's n-th click (sent in [since, until)) to the table's
    first count of n or more for that user."""
    best: dict[str, list[tuple[int, float]]] = {}
    for (user, value), at in watch.reached.items():
        best.setdefault(user, []).append((value, at))
    found = []
    for user, pairs in best.items():
        pairs.sort()
        for n in range(1, clicks.sent[user] + 1):
            sent = clicks.sent_at[(user, n)]
            if since <= sent < until:
                seen = min((at for value, at in pairs if value >= n), default=None)
                if seen is not None:
                    found.append(seen - sent)
    return sorted(found)


def told_latencies(brokers: str, topic: str, watch: TableWatch, since: float,
                   until: float) -> list[float]:  # fmt: skip
    """Seconds from each click's append (its timestamp: when the emitter produced it, wall
    clock in [since, until)) to the first sight of its told output, read committed: one per
    click in the topic, whether or not its emit call was acknowledged."""
    created = {b"%d %d" % (p, row[1]): row[4] / 1000
               for p, rows in topic_rows(brokers, topic, 4).items() for row in rows}  # fmt: skip
    return sorted(watch.values[k] - at for k, at in created.items()
                  if since <= at < until and k in watch.values)  # fmt: skip


def p(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q / 100 * len(values)))] if values else float("nan")


def test_a_cluster_losing_the_leader_of_input_and_table_ends_exact(
    tmp_path: Path, record_property: Any
) -> None:
    if find_postgres() is None:
        pytest.skip("PostgreSQL is not installed (make test installs Debian's postgresql)")
    with KafkaCluster(3) as cluster, LocalPostgres() as postgres:
        brokers = cluster.bootstrap
        topics = TopicManager(brokers)  # the cluster's default replication: 3
        topics.ensure_stream_exists(TOPIC, 4)
        topics.ensure_table_exists(TABLE, 4)
        processor = demo.start_processor(brokers, tmp_path)
        processor.first_line()
        sink = demo.Service("sink", [
            "connect", "run", "examples.click_count.sinks:clicks", "--brokers", brokers,
            "--checkpoint", str(tmp_path / "sink-checkpoint"), "--http-port", "0",
        ], tmp_path, {**os.environ, "PYTHONPATH": str(demo.ROOT), "GOKA_LOG_LEVEL": "WARNING",
                      "CLICKS_DSN": postgres.dsn})  # fmt: skip
        view = View(brokers, TABLE, Int64Codec(), path=tmp_path / "view").start()
        watch, clicks = TableWatch(brokers), Clicks(brokers)
        watch.start()
        clicks.start()
        try:
            wait_for(lambda: watch.arrivals, timeout=120, what="the first count")
            began = time.monotonic()  # the processor runs: steady from here
            time.sleep(PHASES[0])
            leaders = {t: [cluster.leader(t, p) for p in range(4)] for t in (TOPIC, TABLE)}
            victim = max(cluster.nodes, key=lambda n: (  # leading input and table partitions
                min(leaders[t].count(n) for t in leaders), sum(leaders[t].count(n) for t in leaders)
            ))  # fmt: skip
            led = {t: [p for p, n in enumerate(found) if n == victim]
                   for t, found in leaders.items()}  # fmt: skip
            killed = time.monotonic()
            cluster.kill(victim)
            time.sleep(PHASES[1])
            cluster.start_node(victim)
            restarted = time.monotonic()
            time.sleep(PHASES[2])
            clicks.stop.set()
            clicks.join(180)
            assert clicks.error is None, clicks.error
            sent = dict(clicks.sent)
            processor.check_running()
            wait_for(lambda: dict(view.items()) == sent, timeout=300, what="the view's counts")
            sink.check_running()

            def rows() -> dict[str, int]:
                import psycopg

                try:
                    with psycopg.connect(postgres.dsn) as conn:
                        return dict(conn.execute("SELECT key, value FROM clicks").fetchall())
                except psycopg.errors.UndefinedTable:
                    return {}

            wait_for(lambda: rows() == sent, timeout=300, what="the PostgreSQL rows")
            watch.stop.set()
            watch.join(30)
        finally:
            clicks.stop.set()
            view.close()
            processor.stop()
            sink.stop()
        table = table_of(brokers, TABLE, Int64Codec())
    assert table == sent  # the table topic's last value per key, read afresh
    stalls = []  # the longest gap between table records of each partition the node led,
    for partition in led[TABLE]:  # across the outage (a gap ending after the restart counts)
        seen = [t for t, p in watch.arrivals if p == partition and began < t < restarted + 10]
        stalls.append(max((b - a for a, b in itertools.pairwise(seen)), default=0.0))
    stall = max(stalls, default=0.0)
    before = latencies(clicks, watch, began, killed)
    through = latencies(clicks, watch, killed - 1, restarted + 10)
    total = sum(sent.values())
    print(f"\n{total} clicks at {RATE}/s; node {victim} killed (leading {led}) "
          f"{killed - began:.0f} s in, restarted {restarted - killed:.0f} s later; "
          f"longest gap between records of a table partition it led {stall:.2f} s; latency "
          f"p50/p99 before "
          f"{p(before, 50) * 1000:.0f}/{p(before, 99) * 1000:.0f} ms, through the failover "
          f"{p(through, 50) * 1000:.0f}/{p(through, 99) * 1000:.0f} ms")  # fmt: skip
    record_property("stall_seconds", stall)
    record_property("p99_through_failover_ms", p(through, 99) * 1000)
    assert led[TOPIC] and led[TABLE], "the killed node led input and table partitions"
    assert stall < 60, "the processor stalled for a minute"


def clicks_in(brokers: str, topic: str) -> dict[str, int]:
    """The clicks per user the topic holds (what the brokers acknowledged)."""
    return dict(Counter(StringCodec().decode(row[2]) for rows in topic_rows(brokers, topic, 4)
                        .values() for row in rows))  # fmt: skip


def _java_hash(text: str) -> int:
    """Java's ``String.hashCode``, as Kafka places a group or a transactional id with it."""
    found = 0
    for char in text:
        found = (31 * found + ord(char)) & 0xFFFFFFFF
    return found


def _coordinator(cluster: KafkaCluster, internal: str, key: str, partitions: int = 10) -> int:
    """The node coordinating ``key`` (``__consumer_offsets``: a group; ``__transaction_state``:
    a transactional id): the leader of its partition, ``abs(hashCode) % partitions``."""
    return cluster.leader(internal, (_java_hash(key) & 0x7FFFFFFF) % partitions)


@pytest.mark.timeout(900)
def test_every_broker_lost_in_turn_under_exactly_once_ends_exactly_once(
    tmp_path: Path, record_property: Any
) -> None:
    """A 3-broker cluster loses each node in turn (SIGKILL, 15 s down, started again on its
    data) while a continuous exactly-once processor counts live clicks and tells each one:
    every leader of its input, table and output partitions, its transaction coordinators and
    its group coordinator are lost once. Read committed afterwards, every click is told once
    and the table is exact. Reported: the longest time no committed table record arrived
    across the outages (a commit carries table records of every partition that processed
    something), and each click's latency through them, from its append to its told output
    read committed."""
    with KafkaCluster(3) as cluster:
        brokers, topic = cluster.bootstrap, "eos-clicks"
        group, seen = f"{topic}-g", f"{topic}-told"
        topics = TopicManager(brokers)
        topics.ensure_stream_exists(topic, 4)
        topics.ensure_stream_exists(seen, 4)
        env = {**os.environ, "PYTHONPATH": str(demo.ROOT), "GOKA_LOG_LEVEL": "INFO",
               "GOKA_TEST_GROUP": group, "GOKA_TEST_TOPIC": topic}  # fmt: skip
        processor = demo.Service("processor", [
            "processor", "run", "tests.spark.crash_graph:told", "--brokers", brokers,
            "--state-dir", str(tmp_path / "state"), "--mode", "continuous",
            "--guarantee", "exactly-once", "--http-port", "0", "--create-topics",
        ], tmp_path, env)  # fmt: skip
        processor.first_line()
        watch, clicks = TableWatch(brokers, f"{group}-table"), Clicks(brokers, topic)
        outputs = TableWatch(brokers, seen, told=True)  # (when each click's output is seen)
        watch.start()
        outputs.start()
        clicks.start()
        roles: dict[int, set[str]] = {}
        try:
            wait_for(lambda: watch.arrivals, timeout=120, what="the first committed count")
            time.sleep(PHASES[0])  # (steady processing before the first loss)
            for name in (topic, f"{group}-table", seen):
                for partition, node in KafkaAdmin(brokers).leaders(name).items():
                    roles.setdefault(node, set()).add(f"{name}[{partition}]")
            for partition in range(4):
                node = _coordinator(cluster, "__transaction_state", f"{group}-{partition}")
                roles.setdefault(node, set()).add(f"transactions of {group}-{partition}")
            roles.setdefault(_coordinator(cluster, "__consumer_offsets", group),
                             set()).add("group coordinator")  # fmt: skip
            first_kill, first_kill_wall = time.monotonic(), time.time()
            for node in sorted(cluster.nodes, key=lambda n: -len(roles.get(n, ()))):
                cluster.kill(node)
                time.sleep(15.0)  # (down for a while: what the clients ride out)
                cluster.start_node(node)
                time.sleep(10.0)
            last_restart, last_restart_wall = time.monotonic(), time.time()
            time.sleep(10.0)
            clicks.stop.set()
            clicks.join(180)
            assert clicks.error is None, clicks.error
            sent = clicks_in(brokers, topic)
            total = sum(sent.values())
            wait_for(lambda: committed(brokers, group, topic, 4) == total, timeout=300,
                     what="every click committed")  # fmt: skip
            processor.check_running()
        finally:
            clicks.stop.set()
            processor.stop()
            for watcher in (watch, outputs):
                watcher.stop.set()
                watcher.join(30)
        duplicates, wrong_places = told(brokers, topic, 4)
        table = table_of(brokers, f"{group}-table", Int64Codec())
        through = told_latencies(brokers, topic, outputs, first_kill_wall - 1,
                                 last_restart_wall + 10)  # fmt: skip
    assert (duplicates, wrong_places) == (0, 0)
    assert table == sent
    arrivals = sorted(t for t, _ in watch.arrivals if first_kill - 1 <= t <= last_restart + 10)
    stall = max((b - a for a, b in itertools.pairwise(arrivals)), default=float("inf"))
    lost = sum(clicks.sent.values()) - total
    print(f"\n{total} clicks at {RATE}/s ({lost} not acknowledged), exactly-once; each node "
          f"killed in turn for 15 s "
          f"(roles: {({n: sorted(r) for n, r in roles.items()})}); longest time without a "
          f"committed record {stall:.2f} s; latency p50/p99/max through the failovers, from "
          f"each click's append to its output read committed ({len(through)} clicks) "
          f"{p(through, 50) * 1000:.0f}/{p(through, 99) * 1000:.0f}/"
          f"{max(through, default=0) * 1000:.0f} ms")  # fmt: skip
    record_property("stall_seconds", stall)
    record_property("p99_through_failover_ms", p(through, 99) * 1000)
    assert stall < 60, "the processor stalled for a minute"
