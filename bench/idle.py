"""What an idle processor costs the broker, against an idle plain consumer of the same
partitions, in the same run (``python -m bench.idle [--seconds 60]``).

Every client talks to the embedded broker through a counting proxy (the broker advertises the
proxy's address, so every connection goes through it): the Kafka requests per second by API,
and the broker process's CPU seconds, over ``--seconds`` each:

* baseline: a plain confluent-kafka consumer assigned to the 4 input partitions, polling
  (``fetch.wait.max.ms`` as the processor's), and nothing else;
* the count group in continuous mode (local[2]), after it processed one event.

Then busy, at ``--rate`` events a second (2,000) emitted into the input (the emitter's own
requests are left out: the proxy skips clients named ``bench-...``), over ``--busy-seconds``
each: a plain relay doing the processor's work by hand (a consumer of the 4 partitions, a
producer of each key's new count to a table topic, the group's offsets committed as often as
the processor commits them), then the count group. Requests per second in all and per
partition, by API.

The last lines: ``busy processor/relay: requests X, broker CPU Y`` and
``idle processor/consumer broker CPU: X`` (target <= 2).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import confluent_kafka

from bench.common import add_broker, start_broker
from bench.latency import count
from goka import Int64Codec, StringCodec, TopicManager, define_group, input, persist
from goka.dev import EmbeddedBroker
from goka.kafka.config import consumer_config, producer_config
from goka.processing.group_offsets import GROUP_COMMIT_SECONDS
from goka.spark import Processor, build_session
from goka.view import View

#: Kafka API keys by name (those a client sends).
APIS = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
        9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
        18: "ApiVersions", 19: "CreateTopics", 22: "InitProducerId", 32: "DescribeConfigs",
        60: "DescribeCluster", 71: "GetTelemetrySubscriptions"}  # fmt: skip
PARTITIONS = 4


class CountingProxy:
    """Forwards 127.0.0.1:<port> to the broker and counts the requests clients send, by API."""

    def __init__(self, upstream: int) -> None:
        self.upstream, self.requests, self._lock = upstream, Counter[str](), threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self._server.accept()
            broker = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._requests, args=(client, broker), daemon=True).start()
            threading.Thread(target=_pipe, args=(broker, client), daemon=True).start()

    def _requests(self, client: socket.socket, broker: socket.socket) -> None:
        buffer = b""
        while data := _recv(client):
            broker.sendall(data)
            buffer += data
            while len(buffer) >= 6:
                size, api = struct.unpack(">ih", buffer[:6])
                if len(buffer) < 4 + size:
                    break
                request, buffer = buffer[: 4 + size], buffer[4 + size :]
                if _client(request).startswith(b"bench-"):
                    continue  # the bench's own emitter and view
                with self._lock:
                    self.requests[APIS.get(api, f"api {api}")] += 1
        broker.close()

    def take(self) -> Counter[str]:
        """The requests counted since the last call."""
        with self._lock:
            found, self.requests = self.requests, Counter()
        return found


def _client(request: bytes) -> bytes:
    """The client id of a request (size, API key, version, correlation id, client id)."""
    if len(request) < 14:
        return b""
    (length,) = struct.unpack(">h", request[12:14])
    return request[14 : 14 + max(length, 0)]


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _pipe(source: socket.socket, target: socket.socket) -> None:
    while data := _recv(source):
        try:
            target.sendall(data)
        except OSError:
            break
    target.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def watch(
    broker: EmbeddedBroker, proxy: CountingProxy, seconds: float
) -> tuple[float, Counter[str]]:
    """Broker CPU seconds and the requests, over ``seconds``."""
    assert broker.pid is not None
    proxy.take()
    before = cpu_seconds(broker.pid)
    time.sleep(seconds)  # the measurement window itself, not a synchronisation
    return cpu_seconds(broker.pid) - before, proxy.take()


def describe(name: str, cpu: float, requests: Counter[str], seconds: float, *,
             per_partition: bool = False) -> str:  # fmt: skip
    per_second = ", ".join(f"{api} {n / seconds:.1f}" for api, n in requests.most_common())
    total = sum(requests.values()) / seconds
    each = f" ({total / PARTITIONS:.1f} per partition)" if per_partition else ""
    return (f"{name:<15}: broker CPU {cpu:.2f} s in {seconds:.0f} s ({cpu / seconds:.3f}/s); "
            f"requests/s {total:.1f}{each}: {per_second}")  # fmt: skip


class Emitter:
    """Emits ``rate`` events a second to ``topic`` on a thread (client id ``bench-emitter``:
    the proxy leaves its requests out), until :meth:`stop`."""

    def __init__(self, brokers: str, topic: str, rate: int) -> None:
        self._stop = threading.Event()
        config = producer_config(brokers, {"client.id": "bench-emitter", "linger.ms": 1})
        self._producer = confluent_kafka.Producer(config)
        self._thread = threading.Thread(target=self._run, args=(topic, rate), daemon=True)
        self._thread.start()

    def _run(self, topic: str, rate: int) -> None:
        sent, started = 0, time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * rate)
            for _ in range(due - sent):
                self._producer.produce(topic, b"/p", f"user-{sent % 1000}".encode())
                sent += 1
            self._producer.poll(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(30)


def relay(brokers: str, topic: str, target: str, stop: threading.Event) -> None:
    """The processor's work done by hand: a consumer of the input's partitions and a producer
    writing each key's new count to ``target``; the group's offsets committed every
    :data:`~goka.processing.group_offsets.GROUP_COMMIT_SECONDS`, as the processor commits them."""
    consumer = confluent_kafka.Consumer({**consumer_config(brokers), "fetch.wait.max.ms": 10,
                                         "group.id": f"{target}-relay"})  # fmt: skip
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    producer = confluent_kafka.Producer(producer_config(brokers))
    counts: Counter[bytes] = Counter()
    committed = time.monotonic()
    while not stop.is_set():
        for message in consumer.consume(500, 0.05):
            if message.error() is None:
                key = message.key() or b""
                counts[key] += 1
                producer.produce(target, struct.pack(">q", counts[key]), key,
                                 partition=message.partition() or 0)  # fmt: skip
        producer.poll(0)
        if time.monotonic() - committed >= GROUP_COMMIT_SECONDS:
            consumer.commit(asynchronous=True)
            committed = time.monotonic()
    producer.flush(30)
    consumer.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--busy-seconds", type=float, default=30)
    parser.add_argument("--rate", type=int, default=2_000, help="events/s while busy")
    add_broker(parser)
    args = parser.parse_args(argv)
    port = socket.create_server(("127.0.0.1", 0))
    upstream = port.getsockname()[1]
    port.close()
    proxy = CountingProxy(upstream)
    spark = build_session("bench", "local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    with start_broker(args.broker, port=upstream, advertised=f"127.0.0.1:{proxy.port}") as broker:
        brokers = f"127.0.0.1:{proxy.port}"
        topic = f"idle-{time.monotonic_ns()}"
        TopicManager(brokers).ensure_stream_exists(topic, PARTITIONS)
        graph = define_group(f"{topic}-g", input(topic, StringCodec(), count),
                             persist(Int64Codec()))  # fmt: skip
        TopicManager(brokers).ensure_table_exists(graph.table, PARTITIONS)
        cpu, found = watch(broker, proxy, 5)
        print(describe("nothing", cpu, found, 5), flush=True)

        stop = threading.Event()

        def plain() -> None:
            config = {**consumer_config(brokers), "fetch.wait.max.ms": 10}
            consumer = confluent_kafka.Consumer(config)
            consumer.assign([confluent_kafka.TopicPartition(topic, p, 0)
                             for p in range(PARTITIONS)])  # fmt: skip
            while not stop.is_set():
                consumer.poll(0.05)
            consumer.close()

        thread = threading.Thread(target=plain, daemon=True)
        thread.start()
        time.sleep(2)  # connected and fetching before the window
        consumer_cpu, found = watch(broker, proxy, args.seconds)
        stop.set()
        thread.join(10)
        print(describe("plain consumer", consumer_cpu, found, args.seconds), flush=True)

        source, relayed = f"{topic}-relay", f"{topic}-relayed"  # (the group's input stays idle)
        TopicManager(brokers).ensure_stream_exists(source, PARTITIONS)
        TopicManager(brokers).ensure_table_exists(relayed, PARTITIONS)
        stop = threading.Event()
        thread = threading.Thread(target=relay, args=(brokers, source, relayed, stop),
                                  daemon=True)  # fmt: skip
        thread.start()
        emitter = Emitter(brokers, source, args.rate)
        time.sleep(2)  # relaying before the window
        relay_cpu, relay_requests = watch(broker, proxy, args.busy_seconds)
        emitter.stop()
        stop.set()
        thread.join(30)
        print(describe("busy relay", relay_cpu, relay_requests, args.busy_seconds,
                       per_partition=True), flush=True)  # fmt: skip

        state = Path(tempfile.mkdtemp(prefix="goka-idle-"))
        processor = Processor(graph, brokers, spark=spark, state_dir=state,
                              mode="continuous", checkpoint_dir=state / "checkpoint")  # fmt: skip
        runner = threading.Thread(target=processor.run, daemon=True)
        runner.start()
        producer = confluent_kafka.Producer(producer_config(brokers))
        producer.produce(topic, b"/p", b"user-1")
        producer.flush(30)
        with View(brokers, graph.table, Int64Codec()) as view:  # the event counted
            view.wait_recovered(60)
            deadline = time.monotonic() + 120
            while view.get("user-1") != 1:
                assert time.monotonic() < deadline, "the event was not processed within 120 s"
                time.sleep(0.05)
        time.sleep(2)  # settled, before the window
        processor_cpu, found = watch(broker, proxy, args.seconds)
        print(describe("idle processor", processor_cpu, found, args.seconds), flush=True)
        emitter = Emitter(brokers, topic, args.rate)
        time.sleep(2)  # processing before the window
        busy_cpu, busy_requests = watch(broker, proxy, args.busy_seconds)
        emitter.stop()
        print(describe("busy processor", busy_cpu, busy_requests, args.busy_seconds,
                       per_partition=True), flush=True)  # fmt: skip
        processor.stop()
        runner.join(60)
        shutil.rmtree(state, ignore_errors=True)
    spark.stop()
    requests = sum(busy_requests.values()) / max(1, sum(relay_requests.values()))
    print(f"busy processor/relay: requests {requests:.2f}, broker CPU "
          f"{busy_cpu / max(relay_cpu, 1e-9):.2f}")  # fmt: skip
    print(f"idle processor/consumer broker CPU: {processor_cpu / max(consumer_cpu, 1e-9):.2f}")


if __name__ == "__main__":
    main()
