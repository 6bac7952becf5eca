"""Emitter time limits with the brokers down (a real librdkafka producer, nothing listening)."""

from __future__ import annotations

import asyncio
import time

import pytest

from goka import DeliveryError, Emitter, StringCodec
from goka.errors import ConfigurationError

DOWN = "127.0.0.1:1"  # nothing listens: every connection is refused


def _emitter(**kwargs: object) -> Emitter[str]:
    return Emitter(DOWN, "clicks", StringCodec(), check_topic=False, **kwargs)  # type: ignore[arg-type]


def test_a_message_fails_after_the_delivery_timeout() -> None:
    emitter = _emitter(delivery_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(DeliveryError, match="clicks"):
        emitter.emit_sync("user-1", "/home", timeout=10)
    assert 0.9 < time.monotonic() - started < 4
    emitter.close()


def test_emit_async_gives_up_after_its_timeout_naming_topic_and_key() -> None:
    async def main() -> float:
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"topic 'clicks', key 'user-1'.*0\.3 s"):
            await emitter.emit_async("user-1", "/home", timeout=0.3)
        return time.monotonic() - started

    emitter = _emitter(delivery_timeout=5.0)
    took = asyncio.run(main())
    assert 0.25 < took < 1.5, took
    emitter.close(timeout=0.5)


def test_emit_async_without_timeout_ends_with_the_delivery_timeout() -> None:
    emitter = _emitter(delivery_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(DeliveryError):
        asyncio.run(emitter.emit_async("user-1", "/home"))
    assert time.monotonic() - started < 4
    emitter.close()


@pytest.mark.slow
def test_close_by_default_gives_up_well_within_a_grace_period() -> None:
    emitter = _emitter(delivery_timeout=60.0)
    futures = [emitter.emit(f"user-{i}", "/") for i in range(10)]
    started = time.monotonic()
    emitter.close()  # default: 5 s, then the rest is purged
    assert time.monotonic() - started < 8
    for future in futures:
        with pytest.raises(DeliveryError):
            future.result(1)


def test_a_delivery_timeout_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="delivery_timeout"):
        _emitter(delivery_timeout=0)


def test_a_librdkafka_setting_wins_over_the_delivery_timeout() -> None:
    emitter = _emitter(delivery_timeout=30.0, **{"message.timeout.ms": 500})
    started = time.monotonic()
    with pytest.raises(DeliveryError):
        emitter.emit_sync("user-1", "/", timeout=10)
    assert time.monotonic() - started < 3
    emitter.close()
