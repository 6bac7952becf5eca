"""Emitters write keyed events to one Kafka topic, like Go Goka's ``goka.Emitter``."""

from __future__ import annotations

import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from goka._accel import speedups
from goka.codec import Codec
from goka.delivery import USER_CALLBACKS_RUNNING as _USER_CALLBACKS_RUNNING
from goka.delivery import Delivery, DeliveryFuture, in_done_callback
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
    DeliveredMessage,
    Headers,
    KafkaErrorLike,
    ProduceError,
    Producer,
    ProducerBuilder,
    delivery_error,
    kafka_producer,
    probe_message,
)
from goka.keys import key_bytes
from goka.metrics import LATENCY_BUCKETS, EmitterStats, PyEmitterStats, emitter_stats, register

__all__ = ["Emitter"]

V = TypeVar("V")
Timestamp = int | dt.datetime  # int: milliseconds since the epoch

log = logging.getLogger(__name__)
_monotonic = time.monotonic


class _EmitterFuture(DeliveryFuture):
    """What both kinds of emitter futures share: failing, and building the Delivery lazily.

    A future keeps two ints (not the message, which holds a copy of key and value) and builds
    the :class:`Delivery` only if asked for. The emitter makes one subclass per emitter holding
    its topic and stats as class attributes, so creating a future takes no arguments.
    """

    if not TYPE_CHECKING:
        __slots__ = ()
    _topic: str
    _stats: EmitterStats
    _partition: int
    _offset: int
    _interest: Callable[[], None]  # wakes the emitter's poll thread: someone waits for a result

    if TYPE_CHECKING:

        def __call__(self, error: KafkaErrorLike | None, message: DeliveredMessage) -> None:
            """The producer's delivery callback."""

    def _fail(self, error: KafkaErrorLike, message: DeliveredMessage) -> None:
        self.set_exception(delivery_error(self._topic, message.key(), error))

    def _wait(self, timeout: float | None) -> None:
        if not self._done:
            self._interest()  # the poll thread serves at once, even while others emit
        super()._wait(timeout)

    def add_done_callback(self, fn: Callable[[DeliveryFuture], object]) -> None:
        if not self._done:
            self._interest()
        super().add_done_callback(fn)

    def _delivery(self) -> Delivery:
        if self._result is None:
            self._result = Delivery(self._topic, self._partition, self._offset)
        return self._result


class _PyPending(_EmitterFuture):
    """The pure-Python future: the future itself is the producer's delivery callback, so
    emitting allocates no bound method."""

    _partition = -1
    _offset = -1
    _record: Callable[[float], None]  # the stats' record, bound

    def __call__(self, error: KafkaErrorLike | None, message: DeliveredMessage) -> None:
        if error is None:
            self._partition = message.partition()  # type: ignore[assignment]  # set once delivered
            self._offset = message.offset()  # type: ignore[assignment]
            self._record(message.latency() or 0.0)
            self._done = True
            if self._event is not None or self._callbacks is not None:
                self._complete()
        else:
            self._stats.add_failed()
            self._fail(error, message)


if speedups is not None:
    from goka._speedups import Counters, DeliveryState, Sender, calibrate

    def _calibrate() -> bool:
        """Let the C callback read confluent-kafka's Message fields directly, if a probe built
        with the public constructor reads back right (else it calls the Message methods)."""
        partition, offset, latency_us = 123_457, 9_876_543_210_123, 375_000
        probe = probe_message(partition, offset, latency_us / 1e6)
        return probe is not None and calibrate(probe, partition, offset, latency_us)

    MESSAGE_FIELDS_READ_DIRECTLY = _calibrate()

    class _CPending(DeliveryState, _EmitterFuture):
        """The C future: goka._speedups.DeliveryState records the outcome in C and calls
        ``_complete`` only when someone waits or added a done-callback."""

        __slots__ = ()


F = TypeVar("F", bound=_EmitterFuture)


def _future_class(
    base: type[F], topic: str, stats: EmitterStats, interest: Callable[[], None]
) -> type[F]:
    """An emitter's own future class: its topic, stats and poll-thread wake-up as class
    attributes, so creating a future takes no arguments."""
    attributes = {"_topic": topic, "_stats": stats, "_record": stats.record,
                  "_interest": interest, "__slots__": ()}  # fmt: skip
    return type("_Pending", (base,), attributes)


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
            the topic exists (fail fast, instead of failing every message later).
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
        self.topic = topic
        self.codec = codec
        self.max_block = max_block
        self._wake = threading.Event()  # set when someone waits for a delivery
        self._encode = codec.encode
        self._producer: Producer = producer_builder(producer_config(brokers, kafka_config))
        self._produce = self._producer.produce
        self._serve = self._producer.poll
        if check_topic:
            self._producer.partition_count(topic, connect_timeout)
        register()
        self._stats = stats = emitter_stats(topic)
        self._sender: Sender | None = None
        self._new_future: Callable[[], _EmitterFuture]
        if speedups is not None and isinstance(stats, Counters):  # C futures count in C only
            c_type = _future_class(_CPending, topic, stats, self._wake.set)
            self._new_future = functools.partial(c_type, stats)
            if type(self).emit is Emitter.emit:  # not overridden: the C fast path serves emit()
                self._sender = self._c_sender(c_type, stats)
                self.__dict__["emit"] = self._sender.emit
        else:
            self._new_future = _future_class(_PyPending, topic, stats, self._wake.set)
        self._served = 0  # how often emit() served due deliveries itself (Python path)
        self._closed = False
        self._space = threading.Event()
        self._close_lock = threading.Lock()
        self._poller = threading.Thread(
            target=self._poll_loop, name=f"goka-emitter-{topic}", daemon=True
        )
        self._poller.start()

    def _c_sender(self, future_type: type[_CPending], counters: Counters) -> Sender:
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
                              headers=headers, timestamp=_millis(timestamp))  # fmt: skip
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
        self, future: _EmitterFuture, key: str | bytes, data: bytes | None, error: BaseException
    ) -> _EmitterFuture:
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
            return _key_error(key)
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
        future: _EmitterFuture,
        key: str | bytes,
        data: bytes | None,
        headers: Headers | None,
        timestamp: Timestamp | None,
    ) -> bool:
        """Queue the message; return False if the local queue is full."""
        try:
            self._produce(self.topic, data, key, on_delivery=future,
                          headers=headers, timestamp=_millis(timestamp))  # fmt: skip
        except BufferError:
            return False
        except UnicodeEncodeError:  # a str key standing for bytes that are not UTF-8
            return self._try_produce(future, key_bytes(key), data, headers, timestamp)
        except (TypeError, ProduceError) as exc:
            raise self._refusal(key, exc) from exc
        return True

    def _produce_when_space(
        self,
        future: _EmitterFuture,
        key: str | bytes,
        data: bytes | None,
        headers: Headers | None,
        timestamp: Timestamp | None,
    ) -> None:
        deadline = _monotonic() + self.max_block
        while True:
            self._space.clear()
            if self._try_produce(future, key, data, headers, timestamp):
                return
            self._check_deadline(deadline)
            if _USER_CALLBACKS_RUNNING[0]:  # poll() must not be re-entered from a callback
                self._space.wait(0.01)  # set by the poll thread when acknowledgements free space
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
    def _poll_loop(self) -> None:
        """Serve delivery reports unless application threads are doing it.

        Threads calling emit() serve due reports themselves (a bare producer loop's poll(0)).
        While they keep doing so and nobody waits for a result, this thread stands back, looking
        every 5 ms: two threads serving at once fight over the GIL, which cost ~20% of emit
        throughput. A thread that starts waiting on a future (result(), emit_sync, await) wakes
        it at once, so waiting costs no extra latency.
        """
        poll, space, wake, stats = self._producer.poll, self._space, self._wake, self._stats
        py_stats = stats if isinstance(stats, PyEmitterStats) else None
        sender = self._sender
        last = -1
        while not self._closed:
            served = self._served + (sender.served if sender is not None else 0)
            if (served != last or (sender is not None and sender.serving)) and not wake.is_set():
                last = served
                wake.wait(0.005)
                continue
            wake.clear()
            try:
                if poll(0.1):
                    space.set()
                if py_stats is not None and py_stats.pending > 100_000:
                    py_stats.fold()
            except Exception:  # a user's done-callback raised; keep serving the others
                log.exception("emitter %s: a delivery callback raised", self.topic)

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
        self._poller.join()
        if remaining:
            log.warning("emitter %s: purging %d unacknowledged messages", self.topic, remaining)
            self._producer.purge()
            self._producer.flush(1.0)

    def status(self) -> dict[str, Any]:
        """What a status page shows: topic, messages delivered and failed (of every emitter of
        this topic in the process), queued now, delivery latency percentiles (upper bucket
        bounds, seconds) and whether this emitter is closed."""
        counts = self._stats.bucket_counts()
        return {
            "topic": self.topic,
            "delivered": self._stats.delivered,
            "failed": self._stats.failed,
            "queued": 0 if self._closed else len(self._producer),
            "latency_p50_seconds": _percentile(counts, 0.50),
            "latency_p99_seconds": _percentile(counts, 0.99),
            "closed": self._closed,
        }

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


def _key_error(key: object) -> CodecError:
    return CodecError("key", f"expected str or bytes, got {type(key).__name__}")


def _millis(timestamp: Timestamp | None) -> int:
    """Kafka timestamps are milliseconds since the epoch; 0 lets the producer stamp the time."""
    if timestamp is None:
        return 0
    if isinstance(timestamp, dt.datetime):
        return int(timestamp.timestamp() * 1000)
    return int(timestamp)


def _percentile(counts: list[int], q: float) -> float | None:
    """The upper bound of the latency bucket holding the ``q`` quantile (None: no data)."""
    total = sum(counts)
    if not total:
        return None
    running = 0
    for bound, count in zip((*LATENCY_BUCKETS, float("inf")), counts, strict=True):
        running += count
        if running >= q * total:
            return bound
    return float("inf")
