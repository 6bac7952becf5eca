"""A group whose async callback awaits a real HTTP server over a loopback socket, with
``concurrency`` above 1, on Spark in micro-batches: several records of a partition are in
flight at once (the server sees them), each key's records still run in input order (each
sees the count its previous one left), and the table is exact."""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from goka import Context, Int64Codec, StringCodec, define_group, input, output, persist
from goka.kafka.consumer import read_to_end
from goka.topic_manager import TopicManager

from ..helpers import produce
from .fixtures import table_of
from .timed import run_to_end

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


async def enrich(ctx: Context[int], value: str) -> None:
    """Ask the server at the port the record names, then count and emit what it saw."""
    port, number = value.split(":")
    reader, writer = await asyncio.open_connection("127.0.0.1", int(port))
    writer.write(f"GET /{ctx.key} HTTP/1.0\r\n\r\n".encode())
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    assert answer.endswith(ctx.key.upper().encode()), answer
    seen = ctx.value() or 0
    ctx.set_value(seen + 1)
    ctx.emit(f"{ctx.topic}-out", ctx.key, f"{number}:{seen}")


class SlowServer:
    """An HTTP server that answers each request after ``delay`` s; counts those in flight."""

    def __init__(self, delay: float, first_after: float = 0.0) -> None:
        self.delay, self.now, self.most, self.first_after = delay, 0, 0, first_after
        self.asked: Counter[str] = Counter()  # requests by key
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.last = asyncio.Event()
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._answer, "127.0.0.1", 0))  # fmt: skip
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        self.now += 1
        self.most = max(self.most, self.now)
        self.asked[request.split(b" ")[1][1:].decode()] += 1
        if request.startswith(b"GET /last "):
            self.last.set()
        if request.startswith(b"GET /first "):  # (answered once /last was asked, and after)
            await self.last.wait()
            await asyncio.sleep(self.first_after)
        await asyncio.sleep(self.delay)
        self.now -= 1
        key = request.split(b" ")[1][1:]
        writer.write(b"HTTP/1.0 200 OK\r\n\r\n" + key.upper())
        await writer.drain()
        writer.close()

    def __enter__(self) -> SlowServer:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            self.server.close()
            await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def server() -> Iterator[SlowServer]:
    with SlowServer(0.02) as running:
        yield running


def test_records_of_a_partition_wait_on_a_server_together_in_key_order(
    brokers: str, new_topic: Callable[..., str], make_processor: Any, server: SlowServer
) -> None:
    topic = new_topic(partitions=4)
    rng = random.Random(1)
    keys = [rng.choice(["hot"] * 4 + [f"user-{i}" for i in range(40)]) for _ in range(600)]
    produce(brokers, topic, StringCodec(), [(k, f"{server.port}:{n}") for n, k in enumerate(keys)])
    TopicManager(brokers).ensure_stream_exists(f"{topic}-out", 4)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), enrich), persist(Int64Codec()),
                         output(f"{topic}-out", StringCodec()), concurrency=16)  # fmt: skip
    run = make_processor(graph, max_offsets_per_trigger=400).run_until_caught_up(timeout=300)
    assert run.processed == len(keys)
    assert table_of(brokers, graph.table, Int64Codec()) == dict(Counter(keys))
    told: defaultdict[str, list[tuple[int, int]]] = defaultdict(list)
    for record in read_to_end(brokers, f"{topic}-out"):
        number, seen = record.value.decode().split(":")
        told[record.key.decode()].append((int(number), int(seen)))
    for key in set(keys):  # each key's records in input order, each seeing the one before
        assert told[key] == [
            (n, i) for i, n in enumerate(n for n, k in enumerate(keys) if k == key)
        ]
    assert server.most > 2  # records of a partition were in flight together (two tasks run)
    parts = [part for batch in run.recent for part in batch.partitions]
    assert max(part.in_flight_most for part in parts) > 1  # as the summaries say
    assert 0 < run.key_waits < len(keys)  # (records behind their key in the same call)


def test_a_record_waits_for_one_read_after_it_in_continuous_mode(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    """The server answers the key ``first`` only once the last record asked, and 3 s after
    each of its three records: the first read (100 records) cannot end before the next
    read's records ran. Records stay in flight across reads, and across the ends of 3 s
    epochs, handed to the bridge after each and on to the next epoch's task (an end that
    waited 5 s for them, then for the first not done, would cancel the key's third record
    and ask it again); their effects still come out in offset order, each key's in input
    order."""
    with SlowServer(0.02, first_after=3.0) as server:
        _first_waits_for_last(brokers, new_topic, make_processor, server)


def _first_waits_for_last(brokers: str, new_topic: Callable[..., str], make_processor: Any,
                          server: SlowServer) -> None:  # fmt: skip
    topic = new_topic(partitions=1)
    rng = random.Random(2)
    keys = ["first"] * 3 + [rng.choice([f"user-{i}" for i in range(30)]) for _ in range(496)]
    keys.append("last")
    produce(brokers, topic, StringCodec(), [(k, f"{server.port}:{n}") for n, k in enumerate(keys)])
    TopicManager(brokers).ensure_stream_exists(f"{topic}-out", 1)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), enrich), persist(Int64Codec()),
                         output(f"{topic}-out", StringCodec()), concurrency=16)  # fmt: skip
    run_to_end(make_processor(graph, mode="continuous", epoch=3.0), "continuous")
    assert server.asked == Counter(keys)  # (each record once)
    assert table_of(brokers, graph.table, Int64Codec()) == dict(Counter(keys))
    out = [(r.key.decode(), r.value.decode()) for r in read_to_end(brokers, f"{topic}-out")]
    assert [int(v.split(":")[0]) for _, v in out] == list(range(len(keys)))  # (offset order)
