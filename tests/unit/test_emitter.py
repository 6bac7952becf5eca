from __future__ import annotations

import asyncio
import datetime as dt
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

import goka.emitter
from goka import (
    BrokerError,
    BytesCodec,
    CodecError,
    Delivery,
    DeliveryError,
    Emitter,
    EmitterClosedError,
    Int64Codec,
    JsonCodec,
    StringCodec,
    TopicError,
)

from .fake_producer import FakeError, FakeProducer

pytestmark = pytest.mark.usefixtures("emitter_path")


@pytest.fixture
def make_emitter() -> Callable[..., tuple[Emitter[Any], FakeProducer]]:
    made: list[Emitter[Any]] = []

    def make(
        codec: Any = None, *, reachable: bool = True, **kwargs: Any
    ) -> tuple[Emitter[Any], FakeProducer]:
        producers: list[FakeProducer] = []

        def build(config: dict[str, Any]) -> FakeProducer:
            producers.append(FakeProducer(config, reachable=reachable, **kwargs))
            return producers[0]

        emitter = Emitter("fake:9092", "clicks", codec or StringCodec(), producer_builder=build)  # type: ignore[arg-type]  # the fake is structural
        made.append(emitter)
        return emitter, producers[0]

    yield make  # type: ignore[misc]
    for emitter in made:
        emitter.close(timeout=1)


def test_producer_gets_goka_defaults_and_user_settings(make_emitter: Any) -> None:
    emitter, producer = make_emitter()
    assert producer.config["partitioner"] == "fnv1a"  # Go Goka / Sarama partitioning
    assert producer.config["enable.idempotence"] is True
    assert producer.config["bootstrap.servers"] == "fake:9092"


def test_kafka_config_overrides_defaults() -> None:
    seen: dict[str, Any] = {}

    def build(config: dict[str, Any]) -> FakeProducer:
        seen.update(config)
        return FakeProducer(config)

    Emitter(["a:1", "b:2"], "clicks", StringCodec(), producer_builder=build,  # type: ignore[arg-type]
            **{"linger.ms": 50, "enable.idempotence": False}).close()  # fmt: skip
    assert seen["linger.ms"] == 50
    assert seen["enable.idempotence"] is False
    assert seen["bootstrap.servers"] == "a:1,b:2"


def test_emit_returns_a_future_resolved_by_the_poll_thread(make_emitter: Any) -> None:
    emitter, producer = make_emitter()
    future = emitter.emit("alice", "hello", headers={"h": b"1"}, timestamp=1234)
    assert future.result(timeout=5) == Delivery("clicks", 0, 0)
    sent = producer.sent[0]
    assert (sent.key(), sent.value, sent.headers, sent.timestamp) == (
        b"alice",
        b"hello",
        {"h": b"1"},
        1234,
    )


def test_datetime_timestamps_become_epoch_milliseconds(make_emitter: Any) -> None:
    emitter, producer = make_emitter()
    when = dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
    emitter.emit_sync("k", "v", timestamp=when, timeout=5)
    assert producer.sent[0].timestamp == 1704164645678


def test_none_value_is_a_tombstone(make_emitter: Any) -> None:
    emitter, producer = make_emitter()
    emitter.emit_sync("gone", None, timeout=5)
    assert producer.sent[0].value is None


def test_emit_sync_returns_partition_and_offset(make_emitter: Any) -> None:
    emitter, _ = make_emitter(JsonCodec())
    first = emitter.emit_sync("a", {"n": 1}, timeout=5)
    second = emitter.emit_sync("b", {"n": 2}, timeout=5)
    assert (first.offset, second.offset) == (0, 1)


def test_delivery_failure_reaches_the_callers_future(make_emitter: Any) -> None:
    emitter, producer = make_emitter(fail_with=FakeError("Broker: Message size too large"))
    future = emitter.emit("bob", "x")
    with pytest.raises(
        DeliveryError, match="topic 'clicks' failed for key 'bob': Broker: Message size too large"
    ):
        future.result(timeout=5)
    assert isinstance(future.exception(timeout=0), DeliveryError)
    with pytest.raises(DeliveryError):
        emitter.emit_sync("bob", "y", timeout=5)


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, {"topic": "clicks", **labels}) or 0.0


def test_deliveries_failures_and_latency_are_exported_to_prometheus(make_emitter: Any) -> None:
    before = [_sample("goka_emitter_delivered_messages_total"), _sample("goka_emitter_failed_messages_total"),
              _sample("goka_emitter_delivery_latency_seconds_count"),
              _sample("goka_emitter_delivery_latency_seconds_bucket", le="0.001")]  # fmt: skip
    emitter, producer = make_emitter()
    emitter.emit_sync("a", "1", timeout=5)
    emitter.emit_sync("a", "2", timeout=5)
    producer.fail_with = FakeError("boom")
    with pytest.raises(DeliveryError):
        emitter.emit_sync("a", "3", timeout=5)
    assert _sample("goka_emitter_delivered_messages_total") == before[0] + 2
    assert _sample("goka_emitter_failed_messages_total") == before[1] + 1
    assert _sample("goka_emitter_delivery_latency_seconds_count") == before[2] + 2
    # the fake reports 1 ms: counted in the le="0.001" bucket (upper bounds are inclusive)
    assert _sample("goka_emitter_delivery_latency_seconds_bucket", le="0.001") == before[3] + 2
    assert _sample("goka_emitter_delivery_latency_seconds_sum") >= 0.002


def test_emit_after_close_raises(make_emitter: Any) -> None:
    emitter, _ = make_emitter()
    emitter.close()
    emitter.close()  # idempotent
    assert emitter.closed
    with pytest.raises(EmitterClosedError, match="emitter for topic 'clicks' is closed"):
        emitter.emit("a", "b")


def test_value_the_codec_cannot_encode_raises_before_queueing(make_emitter: Any) -> None:
    emitter, producer = make_emitter(Int64Codec())
    with pytest.raises(CodecError, match="int64 codec: expected int, got str"):
        emitter.emit("a", "not a number")
    assert producer.queued == [] and producer.sent == []


def test_key_must_be_str_or_bytes(make_emitter: Any) -> None:
    emitter, _ = make_emitter()
    with pytest.raises(CodecError, match="key codec: expected str or bytes, got int"):
        emitter.emit(42, "v")


def test_unreachable_broker_fails_at_construction() -> None:
    with pytest.raises(BrokerError, match="no Kafka broker answered"):
        Emitter("fake:9092", "clicks", StringCodec(),
                producer_builder=lambda c: FakeProducer(c, reachable=False))  # type: ignore[arg-type,return-value]  # fmt: skip


def test_missing_topic_fails_at_construction() -> None:
    with pytest.raises(TopicError, match="topic 'nope' does not exist"):
        Emitter("fake:9092", "nope", StringCodec(), producer_builder=FakeProducer)  # type: ignore[arg-type]


def test_full_queue_waits_for_space_then_sends(make_emitter: Any) -> None:
    emitter, producer = make_emitter(capacity=1, acking=False)
    emitter.emit("a", "1")
    releaser = threading.Timer(0.2, lambda: setattr(producer, "acking", True))
    releaser.start()
    second = emitter.emit("a", "2")  # blocks until the fake broker comes back and frees space
    assert second.result(timeout=5).offset == 1


def test_queue_full_for_too_long_raises(make_emitter: Any) -> None:
    emitter, producer = make_emitter(capacity=1, acking=False)
    emitter.max_block = 0.1
    emitter.emit("a", "1")
    with pytest.raises(BrokerError, match=r"stayed full for 0\.1s \(1 messages unacknowledged\)"):
        emitter.emit("a", "2")


def test_close_purges_what_cannot_be_delivered(make_emitter: Any) -> None:
    emitter, producer = make_emitter(acking=False)
    future = emitter.emit("a", "1")
    emitter.close(timeout=0.05)
    with pytest.raises(DeliveryError, match="Purged"):
        future.result(timeout=5)


def test_emit_async(make_emitter: Any) -> None:
    emitter, _ = make_emitter()

    async def main() -> list[Delivery]:
        return list(await asyncio.gather(*(emitter.emit_async(f"k{i}", "v") for i in range(50))))

    deliveries = asyncio.run(main())
    assert sorted(d.offset for d in deliveries) == list(range(50))


def test_emit_async_waits_for_space_without_blocking_the_loop(make_emitter: Any) -> None:
    emitter, producer = make_emitter(capacity=1, acking=False)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    async def main() -> Delivery:
        task = asyncio.create_task(ticker())
        emitter.emit("a", "1")
        asyncio.get_running_loop().call_later(0.2, setattr, producer, "acking", True)
        result = await emitter.emit_async("a", "2")
        task.cancel()
        return result

    assert asyncio.run(main()).offset == 1
    assert ticks >= 5  # the loop kept running while emit_async waited


def test_many_threads_share_one_emitter(make_emitter: Any) -> None:
    emitter, producer = make_emitter()
    futures: list[Any] = []
    lock = threading.Lock()

    def handler(n: int) -> None:
        mine = [emitter.emit(f"user-{n}", str(i)) for i in range(200)]
        with lock:
            futures.extend(mine)

    threads = [threading.Thread(target=handler, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    offsets = sorted(f.result(timeout=5).offset for f in futures)
    assert offsets == list(range(1600))


def test_the_chosen_path_serves_emit(make_emitter: Any, emitter_path: str) -> None:
    emitter, _ = make_emitter()
    future = emitter.emit("a", "1")
    c_future = goka.emitter.speedups is not None and isinstance(
        future, goka.emitter.speedups.DeliveryState
    )
    assert c_future == (emitter_path == "c")
    assert future.result(timeout=5) == Delivery("clicks", 0, 0)


def test_bytes_values_pass_unchanged_and_other_values_are_refused(make_emitter: Any) -> None:
    emitter, producer = make_emitter(BytesCodec())
    emitter.emit_sync("a", b"raw", timeout=5)
    emitter.emit_sync("a", bytearray(b"copied"), timeout=5)
    with pytest.raises(CodecError, match="bytes codec: expected bytes, got str"):
        emitter.emit("a", "text")
    assert [m.value for m in producer.sent] == [b"raw", b"copied"]


def test_headers_and_timestamp_stay_keyword_only(make_emitter: Any) -> None:
    emitter, producer = make_emitter()
    with pytest.raises(TypeError):
        emitter.emit("a", "1", {"h": b"1"})
    assert producer.queued == [] and producer.sent == []


def test_emitting_leaks_no_references(make_emitter: Any) -> None:
    emitter, producer = make_emitter(BytesCodec())
    key, value = "leak-check-key", b"leak-check-value"
    keys_before, values_before = sys.getrefcount(key), sys.getrefcount(value)
    futures = [emitter.emit(key, value) for _ in range(1000)]
    assert emitter.flush(5) == 0
    assert all(f.result(0).topic == "clicks" for f in futures)
    del futures
    producer.sent.clear()
    assert (sys.getrefcount(key), sys.getrefcount(value)) == (keys_before, values_before)
