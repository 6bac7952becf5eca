"""The emitter against the embedded broker: real produce, real consume."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from goka import (
    BrokerError,
    DeliveryError,
    DeliveryFuture,
    Emitter,
    GokaError,
    JsonCodec,
    StringCodec,
    TopicError,
)
from goka.kafka.consumer import read_to_end

from ..helpers import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.usefixtures("emitter_path")]


def fnv1a_32(data: bytes) -> int:
    """FNV-1a, 32 bit, written from the published algorithm (offset basis, prime)."""
    h = 0x811C9DC5
    for byte in data:
        h ^= byte
        h = (h * 0x01000193) % 2**32
    return h


def sarama_partition(key: bytes, partitions: int) -> int:
    """Sarama's hash partitioner: int32(hash) % n, negated when negative (Go's % keeps the sign)."""
    signed = fnv1a_32(key) - 2**32 if fnv1a_32(key) >= 2**31 else fnv1a_32(key)
    remainder = abs(signed) % partitions  # Go: -(|x| % n) for negative x, then made positive
    return remainder


KEYS = ["", "a", "b", "user-1", "user-2", "user-42", "alice", "bob", "carol", "dave",
        "Zoë", "日本語", "key with spaces", "x" * 300, "0", "-1", "9223372036854775807",
        "order/2024/01/02", "\x00", "🙂", "the quick brown fox", "goka", "sarama",
        "kafka"]  # fmt: skip


@pytest.mark.smoke
def test_keys_land_on_the_partition_go_goka_would_choose(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    high_bit = [k for k in KEYS if fnv1a_32(k.encode()) >= 2**31]
    assert len(high_bit) >= 5, "the vector must exercise Sarama's negative-hash rule"
    for partitions in (10, 7):
        topic = new_topic(partitions=partitions)
        with Emitter(brokers, topic, StringCodec()) as emitter:
            delivered = {k: emitter.emit(k, "v") for k in KEYS}
            emitter.flush(10)
            for key, future in delivered.items():
                expected = sarama_partition(key.encode(), partitions)
                assert future.result(10).partition == expected, key


@pytest.mark.smoke
def test_emitted_messages_are_read_back_exactly(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=4)
    with Emitter(brokers, topic, JsonCodec()) as emitter:
        futures = [
            emitter.emit(
                f"user-{i % 37}",
                {"n": i},
                headers={"source": b"test"},
                timestamp=1_700_000_000_000 + i,
            )
            for i in range(2_000)
        ]
        emitter.flush(30)
    deliveries = [f.result(0) for f in futures]
    records = {(r.partition, r.offset): r for r in read_to_end(brokers, topic)}
    assert len(records) == 2_000
    for i, delivery in enumerate(deliveries):
        record = records[(delivery.partition, delivery.offset)]
        assert record.key == f"user-{i % 37}".encode()
        assert JsonCodec().decode(record.value or b"") == {"n": i}
        assert record.headers == (("source", b"test"),)
        assert record.timestamp == 1_700_000_000_000 + i


def test_threads_and_asyncio_share_one_emitter(brokers: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=3)
    with Emitter(brokers, topic, StringCodec()) as emitter:

        def handler(n: int) -> None:
            for i in range(250):
                emitter.emit(f"t{n}", str(i))

        threads = [threading.Thread(target=handler, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()

        async def requests() -> None:
            await asyncio.gather(*(emitter.emit_async(f"a{i % 5}", str(i)) for i in range(200)))

        asyncio.run(requests())
        for thread in threads:
            thread.join()
        assert emitter.flush(30) == 0
    per_key: dict[bytes, list[bytes]] = {}
    for record in read_to_end(brokers, topic):
        per_key.setdefault(record.key or b"", []).append(record.value or b"")
    assert sum(map(len, per_key.values())) == 1_200
    for n in range(4):  # one thread's messages keep their order within the key's partition
        assert per_key[f"t{n}".encode()] == [str(i).encode() for i in range(250)]


def test_no_reachable_broker_fails_fast_at_construction() -> None:
    started = time.monotonic()
    with pytest.raises(BrokerError, match="no Kafka broker answered within 1s"):
        Emitter(f"127.0.0.1:{free_port()}", "clicks", StringCodec(), connect_timeout=1.0)
    assert time.monotonic() - started < 5


def test_unchecked_emitter_reports_unreachable_broker_on_the_future() -> None:
    emitter = Emitter(f"127.0.0.1:{free_port()}", "clicks", StringCodec(),
                      check_topic=False, **{"message.timeout.ms": 1000})  # fmt: skip
    with (
        emitter,
        pytest.raises(DeliveryError, match=r"topic 'clicks' failed for key 'k'.*timed out"),
    ):
        emitter.emit_sync("k", "v", timeout=10)


def test_missing_topic_fails_at_construction(brokers: str) -> None:
    with pytest.raises(TopicError, match="topic 'no-such-topic' does not exist"):
        Emitter(brokers, "no-such-topic", StringCodec())


def test_done_callbacks_may_emit_but_not_wait(brokers: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=2)
    chained: list[DeliveryFuture] = []
    refused: list[BaseException] = []
    with Emitter(brokers, topic, StringCodec()) as emitter:

        def again(done: DeliveryFuture) -> None:
            if len(chained) < 100:
                chained.append(emitter.emit("chain", str(len(chained))))
                chained[-1].add_done_callback(again)
            else:
                try:
                    emitter.emit_sync("chain", "sync")
                except GokaError as exc:
                    refused.append(exc)

        emitter.emit("chain", "start").add_done_callback(again)
        for i in range(2_000):  # concurrent traffic served inline by this thread
            emitter.emit(f"other-{i}", "x")
        deadline = time.monotonic() + 20
        while not refused and time.monotonic() < deadline:
            emitter.flush(1)
    assert len(chained) == 100
    assert all(f.result(0).topic == topic for f in chained)
    assert "called from a delivery future's done-callback" in str(refused[0])


def test_a_raising_done_callback_is_logged_and_others_still_run(
    brokers: str, new_topic: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    topic = new_topic(partitions=1)
    seen: list[int] = []
    with Emitter(brokers, topic, StringCodec()) as emitter:
        future = emitter.emit("k", "v")
        future.add_done_callback(lambda f: 1 / 0)
        future.add_done_callback(lambda f: seen.append(f.result().offset))
        emitter.flush(10)
        assert future.result(10).offset == 0
    assert seen == [0]
    assert "ZeroDivisionError" in caplog.text
