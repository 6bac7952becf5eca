"""Emitters write keyed events to one Kafka topic, like Go Goka's ``goka.Emitter``: an
:class:`Emitter` encodes keys and values for one confluent-kafka producer, from any thread or
asyncio loop; each message gets a future (:mod:`goka.emitter.pending`, what it holds:
:mod:`goka.delivery`), its delivery report served by ``emit`` or a background thread.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, TypeVar

from goka._accel import speedups
from goka.codec import Codec
from goka.delivery import USER_CALLBACKS_RUNNING as _USER_CALLBACKS_RUNNING
from goka.delivery import Delivery, DeliveryFuture, in_done_callback
from goka.emitter.pending import CPending, DeliveryServer, EmitterFuture, PyPending, future_class
from goka.errors import (
    BrokerError,
    CodecError,
    ConfigurationError,
    DeliveryError,
    EmitterClosedError,
    GokaError,
)
from goka.kafka.config import Brokers, producer_config
from goka.kafka.producer import (
    Headers,
    ProduceError,
    Producer,
    ProducerBuilder,
    Timestamp,
    connect_soon,
    kafka_producer,
    timestamp_ms,
)
from goka.keys import key_bytes
from goka.metrics import delivery_figures, emitter_stats, register

if speedups is not None:
    from goka._speedups import Counters, Sender

__all__ = ["Emitter"]

V = TypeVar("V")

log = logging.getLogger(__name__)
_monotonic = time.monotonic


class Emitter(Generic[V]):
    """Produces keyed events to one topic.

    One emitter can be shared by all threads of a process (a web app's request handlers) and by
    asyncio code. Messages are batched by the producer, so ``emit`` never waits for the network;
    delivery reports are served by ``emit`` itself (reports already due) and by a background
    thread whenever emitting pauses or someone waits on a future. Keys go to partitions by
    FNV-1a, like Go Goka, so Go and Python services agree on where a key lives.

    ``emit`` runs in C where goka._speedups is built (see the README); the behaviour is the same
    on the pure-Python path.

    Args:
        brokers: bootstrap servers, ``"host:port,..."`` or a list.
        topic: destination topic.
        codec: encodes values.
        check_topic: at construction, check within ``connect_timeout`` that a broker answers and
            the topic exists (fail fast, instead of failing every message later); without it
            the emitter asks the topic's metadata in the background (its producer ID at once).
        connect_timeout: seconds for that check.
        max_block: seconds ``emit`` may wait for space in a full local queue before raising.
        delivery_timeout: seconds the brokers have to acknowledge a message, retries included
            (librdkafka's ``message.timeout.ms``; a setting given in ``kafka_config`` wins);
            after it, the message's future fails with a DeliveryError. 10 s by default, so a
            request that awaits its event fails well within a web server's time limits when
            the brokers are down.
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
        delivery_timeout: float = 10.0,
        producer_builder: ProducerBuilder = kafka_producer,
        **kafka_config: Any,
    ) -> None:
        if delivery_timeout <= 0:
            raise ConfigurationError(f"delivery_timeout must be positive, got {delivery_timeout}")
        kafka_config.setdefault("message.timeout.ms", int(delivery_timeout * 1000))
        self.topic, self.codec, self.max_block = topic, codec, max_block
        self._encode = codec.encode
        self._producer: Producer = producer_builder(producer_config(brokers, kafka_config))
        self._produce = self._producer.produce
        self._serve = self._producer.poll
        if check_topic:
            self._producer.partition_count(topic, connect_timeout)
        else:
            connect_soon(self._producer, topic)
        register()
        self._stats = stats = emitter_stats(topic)
        self._deliveries = DeliveryServer(topic, self._producer.poll, stats)
        self._sender: Sender | None = None
        self._new_future: Callable[[], EmitterFuture]
        if speedups is not None and isinstance(stats, Counters):  # C futures count in C only
            c_type = future_class(CPending, topic, stats, self._deliveries.wake.set)
            self._new_future = functools.partial(c_type, stats)
            if type(self).emit is Emitter.emit:  # not overridden: the C fast path serves emit()
                self._sender = self._c_sender(c_type, stats)
                self.__dict__["emit"] = self._sender.emit
        else:
            self._new_future = future_class(PyPending, topic, stats, self._deliveries.wake.set)
        self._served = 0  # how often emit() served due deliveries itself (Python path)
        self._closed = False
        self._close_lock = threading.Lock()
        sender = self._sender
        self._deliveries.start(
            served=lambda: self._served + (sender.served if sender is not None else 0),
            serving=lambda: sender is not None and bool(sender.serving),
            closed=lambda: self._closed,
        )

    def _c_sender(self, future_type: type[CPending], counters: Counters) -> Sender:
        """emit()'s C fast path; it hands anything unusual to the Python code below."""
        return Sender(
            self.topic,
            None if getattr(self.codec, "bytes_unchanged", False) else self.codec.encode,
            future_type,
            counters,
            self._produce,
            self._serve,
            Emitter.emit.__get__(self),
            self._produce_failed,
            _USER_CALLBACKS_RUNNING,
        )

    # -- emitting --------------------------------------------------------------------------------
    def emit(
        self,
        key: str | bytes,
        value: V | None,
        *,
        headers: Headers | None = None,
        timestamp: Timestamp | None = None,
    ) -> DeliveryFuture:
        """Queue one message and return a future of its :class:`~goka.delivery.Delivery`.

        ``value=None`` sends a tombstone (a null value), as Goka does. Returns at once unless the
        local queue is full, then waits up to ``max_block`` seconds for space. ``key`` is text
        (sent as UTF-8) or any bytes; a ``str`` with surrogate escapes is sent as the bytes it
        stands for (see :mod:`goka.keys`).

        Raises:
            EmitterClosedError: the emitter was closed.
            CodecError: the key is not str or bytes, or the codec cannot encode the value.
            BrokerError: the queue stayed full for ``max_block`` seconds.
            DeliveryError: the producer refused the message at once (e.g. too large).
        """
        if self._closed:
            raise EmitterClosedError(f"emitter for topic {self.topic!r} is closed")
        data = None if value is None else self._encode(value)
        future = self._new_future()
        try:
            if headers is None and timestamp is None:
                self._produce(self.topic, data, key, on_delivery=future)
            else:
                self._produce(self.topic, data, key, on_delivery=future,
                              headers=headers, timestamp=timestamp_ms(timestamp))  # fmt: skip
        except BufferError:
            self._produce_when_space(future, key, data, headers, timestamp)
        except UnicodeEncodeError:  # a str key standing for bytes that are not UTF-8
            self._produce_when_space(future, key_bytes(key), data, headers, timestamp)
        except (TypeError, ProduceError) as exc:
            raise self._refusal(key, exc) from exc
        if not _USER_CALLBACKS_RUNNING[0]:
            self._served += 1  # before: the poll thread stands back from the start of a burst
            self._serve(0)  # serve due acknowledgements here: no thread handoff per message
        return future

    def _produce_failed(
        self, future: EmitterFuture, key: str | bytes, data: bytes | None, error: BaseException
    ) -> EmitterFuture:
        """The C fast path's produce() raised: wait for space or raise what emit() raises."""
        if isinstance(error, UnicodeEncodeError):  # a key standing for bytes that are not UTF-8
            self._produce_when_space(future, key_bytes(key), data, None, None)
            return future
        if not isinstance(error, BufferError):
            raise self._refusal(key, error) from error
        self._produce_when_space(future, key, data, None, None)
        return future

    def _refusal(self, key: str | bytes, error: BaseException) -> BaseException:
        """What emit() raises when produce() refuses a message at once."""
        if isinstance(error, TypeError):  # the key: confluent-kafka takes str and bytes only
            return CodecError("key", f"expected str or bytes, got {type(key).__name__}")
        if isinstance(error, ProduceError):
            return DeliveryError(self.topic, key, str(error))
        return error

    def emit_sync(
        self,
        key: str | bytes,
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
        self._refuse_in_done_callback("emit_sync")
        return self.emit(key, value, headers=headers, timestamp=timestamp).result(timeout)

    async def emit_async(
        self,
        key: str | bytes,
        value: V | None,
        *,
        headers: Headers | None = None,
        timestamp: Timestamp | None = None,
        timeout: float | None = None,
    ) -> Delivery:
        """Emit one message from asyncio code and await its acknowledgement.

        Never blocks the event loop: a full local queue is waited for with ``asyncio.sleep``.
        Cancelling the awaiting task, or the timeout, does not take back the message.

        Args:
            timeout: seconds to wait in all (queueing and acknowledgement); None waits for the
                outcome, which comes within ``delivery_timeout`` after queueing.

        Raises:
            DeliveryError: the brokers refused the message or did not acknowledge it within
                ``delivery_timeout``.
            TimeoutError: no outcome within ``timeout`` seconds (names topic and key; the
                message may still be delivered).
        """
        import asyncio

        if self._closed:
            raise EmitterClosedError(f"emitter for topic {self.topic!r} is closed")
        started = _monotonic()
        data = None if value is None else self._encode(value)
        future = self._new_future()
        deadline = started + (self.max_block if timeout is None else min(timeout, self.max_block))
        while not self._try_produce(future, key, data, headers, timestamp):
            self._check_deadline(deadline)
            await asyncio.sleep(0.001)
        if timeout is None:
            delivery: Delivery = await future
            return delivery
        try:
            left = max(0.0, started + timeout - _monotonic())
            return await asyncio.wait_for(asyncio.ensure_future(future), left)
        except TimeoutError:
            raise TimeoutError(
                f"emit_async to topic {self.topic!r}, key {key!r}: no acknowledgement within "
                f"{timeout} s (the message stays queued and may still be delivered)"
            ) from None

    def _try_produce(
        self,
        future: EmitterFuture,
        key: str | bytes,
        data: bytes | None,
        headers: Headers | None,
        timestamp: Timestamp | None,
    ) -> bool:
        """Queue the message; return False if the local queue is full."""
        try:
            self._produce(self.topic, data, key, on_delivery=future,
                          headers=headers, timestamp=timestamp_ms(timestamp))  # fmt: skip
        except BufferError:
            return False
        except UnicodeEncodeError:  # a str key standing for bytes that are not UTF-8
            return self._try_produce(future, key_bytes(key), data, headers, timestamp)
        except (TypeError, ProduceError) as exc:
            raise self._refusal(key, exc) from exc
        return True

    def _produce_when_space(
        self,
        future: EmitterFuture,
        key: str | bytes,
        data: bytes | None,
        headers: Headers | None,
        timestamp: Timestamp | None,
    ) -> None:
        deadline = _monotonic() + self.max_block
        while True:
            self._deliveries.space.clear()
            if self._try_produce(future, key, data, headers, timestamp):
                return
            self._check_deadline(deadline)
            if _USER_CALLBACKS_RUNNING[0]:  # poll() must not be re-entered from a callback
                self._deliveries.space.wait(0.01)  # set when acknowledgements free space
            else:
                self._served += 1
                self._serve(0.001)  # serve acknowledgements here, as a bare producer loop does

    def _check_deadline(self, deadline: float) -> None:
        if self._closed:
            raise EmitterClosedError(f"emitter for topic {self.topic!r} closed while waiting")
        if _monotonic() > deadline:
            raise BrokerError(
                f"local queue for topic {self.topic!r} stayed full for {self.max_block:g}s "
                f"({len(self._producer)} messages unacknowledged): is the broker reachable?"
            )

    # -- lifecycle -------------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> int:
        """Wait until every queued message is acknowledged or failed.

        Returns:
            The number of messages still unacknowledged when ``timeout`` expired (0 if all done).
        """
        self._refuse_in_done_callback("flush")
        return self._producer.flush(-1 if timeout is None else timeout)

    def _refuse_in_done_callback(self, method: str) -> None:
        if in_done_callback():
            raise GokaError(
                f"Emitter.{method}() called from a delivery future's done-callback: it would wait "
                "for deliveries that this callback is holding up; use emit() there"
            )

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued (up to ``timeout`` seconds), then stop. Idempotent.

        The default of 5 s fits well inside a container's grace period (Kubernetes gives 30 s
        between SIGTERM and SIGKILL, shared with the rest of the shutdown).

        Messages still unacknowledged after ``timeout`` are purged; their futures fail with a
        DeliveryError, so no caller is left waiting.
        """
        self._refuse_in_done_callback("close")
        with self._close_lock:
            if self._closed:
                return
            remaining = self._producer.flush(timeout)
            self._closed = True
            if self._sender is not None:
                self._sender.close()  # later emit() calls take the Python path, which refuses
        self._deliveries.join()
        if remaining:
            log.warning("emitter %s: purging %d unacknowledged messages", self.topic, remaining)
            self._producer.purge()
            self._producer.flush(1.0)

    def status(self) -> dict[str, Any]:
        """What a status page shows: topic, messages delivered and failed (of every emitter of
        this topic in the process), queued now, delivery latency percentiles (upper bucket
        bounds, seconds) and whether this emitter is closed."""
        queued = 0 if self._closed else len(self._producer)
        return {"topic": self.topic, **delivery_figures(self._stats), "queued": queued,
                "closed": self._closed}  # fmt: skip

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
