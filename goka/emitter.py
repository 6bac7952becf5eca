"""Emitters write keyed events to one Kafka topic, like Go Goka's ``goka.Emitter``."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
import time
from types import TracebackType
from typing import Any, Generic, TypeVar

from goka.codec import Codec
from goka.delivery import Delivery, DeliveryFuture
from goka.errors import BrokerError, CodecError, DeliveryError, EmitterClosedError
from goka.kafka.config import Brokers, producer_config
from goka.kafka.producer import (
    DeliveredMessage,
    Headers,
    KafkaErrorLike,
    ProduceError,
    Producer,
    ProducerBuilder,
    delivery_error,
    kafka_producer,
)
from goka.metrics import EmitterStats, emitter_stats, register

__all__ = ["Emitter"]

V = TypeVar("V")
Timestamp = int | dt.datetime  # int: milliseconds since the epoch

log = logging.getLogger(__name__)
_monotonic = time.monotonic


class _Pending(DeliveryFuture):
    """A future that also records when its message was emitted, for the latency metric."""

    __slots__ = ("_since", "_stats", "_topic")
    _since: float
    _stats: EmitterStats
    _topic: str

    def _on_delivery(self, error: KafkaErrorLike | None, message: DeliveredMessage) -> None:
        if error is None:
            self._stats.observe(_monotonic() - self._since)
            self.set_result(Delivery(self._topic, message.partition(), message.offset()))  # type: ignore[arg-type]  # set on success
        else:
            self._stats.failed += 1
            self.set_exception(delivery_error(self._topic, message.key(), error))


class Emitter(Generic[V]):
    """Produces keyed events to one topic.

    One emitter can be shared by all threads of a process (a web app's request handlers) and by
    asyncio code. Messages are batched by the producer; a background thread serves delivery
    reports, so ``emit`` never waits for the network. Keys go to partitions by FNV-1a, like Go
    Goka, so Go and Python services agree on where a key lives.

    Args:
        brokers: bootstrap servers, ``"host:port,..."`` or a list.
        topic: destination topic.
        codec: encodes values.
        check_topic: at construction, check within ``connect_timeout`` that a broker answers and
            the topic exists (fail fast, instead of failing every message later).
        connect_timeout: seconds for that check.
        max_block: seconds ``emit`` may wait for space in a full local queue before raising.
        producer_builder: creates the producer from librdkafka settings (tests swap it).
        **kafka_config: librdkafka settings, e.g. ``**{"linger.ms": 20, "acks": "all"}``.

    Raises:
        ConfigurationError: librdkafka rejected a setting.
        BrokerError: ``check_topic`` and no broker answered.
        TopicError: ``check_topic`` and the topic does not exist.
    """

    def __init__(
        self,
        brokers: Brokers,
        topic: str,
        codec: Codec[V],
        *,
        check_topic: bool = True,
        connect_timeout: float = 10.0,
        max_block: float = 30.0,
        producer_builder: ProducerBuilder = kafka_producer,
        **kafka_config: Any,
    ) -> None:
        self.topic = topic
        self.codec = codec
        self.max_block = max_block
        self._encode = codec.encode
        self._producer: Producer = producer_builder(producer_config(brokers, kafka_config))
        self._produce = self._producer.produce
        if check_topic:
            self._producer.partition_count(topic, connect_timeout)
        register()
        self._stats: EmitterStats = emitter_stats(topic)
        self._closed = False
        self._close_lock = threading.Lock()
        self._poller = threading.Thread(
            target=self._poll_loop, name=f"goka-emitter-{topic}", daemon=True
        )
        self._poller.start()

    # -- emitting --------------------------------------------------------------------------------
    def emit(
        self,
        key: str,
        value: V | None,
        *,
        headers: Headers | None = None,
        timestamp: Timestamp | None = None,
    ) -> DeliveryFuture:
        """Queue one message and return a future of its :class:`~goka.delivery.Delivery`.

        ``value=None`` sends a tombstone (a null value), as Goka does. Returns at once unless the
        local queue is full, then waits up to ``max_block`` seconds for space.

        Raises:
            EmitterClosedError: the emitter was closed.
            CodecError: the key is not a str or the codec cannot encode the value.
            BrokerError: the queue stayed full for ``max_block`` seconds.
            DeliveryError: the producer refused the message at once (e.g. too large).
        """
        future, args = self._prepare(key, value)
        try:
            self._produce(*args, on_delivery=future._on_delivery, headers=headers,
                          timestamp=_millis(timestamp))  # fmt: skip
        except BufferError:
            self._produce_when_space(future, args, headers, timestamp)
        except ProduceError as exc:
            raise DeliveryError(self.topic, key, str(exc)) from exc
        return future

    def emit_sync(
        self,
        key: str,
        value: V | None,
        *,
        headers: Headers | None = None,
        timestamp: Timestamp | None = None,
        timeout: float | None = None,
    ) -> Delivery:
        """Emit one message and wait for the broker's acknowledgement.

        Returns:
            The partition and offset the message was stored at.

        Raises:
            DeliveryError: the broker did not acknowledge it (after the producer's retries, at the
                latest after ``message.timeout.ms``).
            TimeoutError: no outcome within ``timeout`` seconds.
        """
        return self.emit(key, value, headers=headers, timestamp=timestamp).result(timeout)

    async def emit_async(
        self,
        key: str,
        value: V | None,
        *,
        headers: Headers | None = None,
        timestamp: Timestamp | None = None,
    ) -> Delivery:
        """Emit one message from asyncio code and await its acknowledgement.

        Never blocks the event loop: a full local queue is waited for with ``asyncio.sleep``.
        Cancelling the awaiting task does not take back the message.
        """
        future, args = self._prepare(key, value)
        deadline = _monotonic() + self.max_block
        while True:
            try:
                self._produce(*args, on_delivery=future._on_delivery, headers=headers,
                              timestamp=_millis(timestamp))  # fmt: skip
                break
            except BufferError:
                self._check_deadline(deadline)
                await asyncio.sleep(0.001)
            except ProduceError as exc:
                raise DeliveryError(self.topic, key, str(exc)) from exc
        delivery: Delivery = await future
        return delivery

    def _prepare(
        self, key: str, value: V | None
    ) -> tuple[_Pending, tuple[str, bytes | None, bytes]]:
        if self._closed:
            raise EmitterClosedError(f"emitter for topic {self.topic!r} is closed")
        try:
            raw_key = key.encode()
        except AttributeError:
            raise CodecError("key", f"expected str, got {type(key).__name__}") from None
        data = None if value is None else self._encode(value)
        future = _Pending()
        future._topic = self.topic
        future._stats = self._stats
        future._since = _monotonic()
        return future, (self.topic, data, raw_key)

    def _produce_when_space(
        self,
        future: _Pending,
        args: tuple[str, bytes | None, bytes],
        headers: Headers | None,
        timestamp: Timestamp | None,
    ) -> None:
        deadline = _monotonic() + self.max_block
        while True:
            self._check_deadline(deadline)
            time.sleep(0.0005)  # the poll thread frees space as acknowledgements arrive
            try:
                self._produce(*args, on_delivery=future._on_delivery, headers=headers,
                              timestamp=_millis(timestamp))  # fmt: skip
                return
            except BufferError:
                continue

    def _check_deadline(self, deadline: float) -> None:
        if self._closed:
            raise EmitterClosedError(f"emitter for topic {self.topic!r} closed while waiting")
        if _monotonic() > deadline:
            raise BrokerError(
                f"local queue for topic {self.topic!r} stayed full for {self.max_block:g}s "
                f"({len(self._producer)} messages unacknowledged): is the broker reachable?"
            )

    # -- lifecycle -------------------------------------------------------------------------------
    def _poll_loop(self) -> None:
        poll = self._producer.poll
        while not self._closed:
            try:
                poll(0.1)
            except Exception:  # a user's done-callback raised; keep serving the others
                log.exception("emitter %s: a delivery callback raised", self.topic)

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every queued message is acknowledged or failed.

        Returns:
            The number of messages still unacknowledged when ``timeout`` expired (0 if all done).
        """
        return self._producer.flush(-1 if timeout is None else timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Deliver what is queued (up to ``timeout`` seconds), then stop. Idempotent.

        Messages still unacknowledged after ``timeout`` are purged; their futures fail with a
        DeliveryError, so no caller is left waiting.
        """
        with self._close_lock:
            if self._closed:
                return
            remaining = self._producer.flush(timeout)
            self._closed = True
        self._poller.join()
        if remaining:
            log.warning("emitter %s: purging %d unacknowledged messages", self.topic, remaining)
            self._producer.purge()
            self._producer.flush(1.0)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> Emitter[V]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"Emitter(topic={self.topic!r}, codec={self.codec!r}, {state})"


def _millis(timestamp: Timestamp | None) -> int:
    """Kafka timestamps are milliseconds since the epoch; 0 lets the producer stamp the time."""
    if timestamp is None:
        return 0
    if isinstance(timestamp, dt.datetime):
        return int(timestamp.timestamp() * 1000)
    return int(timestamp)
