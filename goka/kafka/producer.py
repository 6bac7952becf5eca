"""The producer seam: confluent-kafka's Producer behind the small interface goka uses.

Everything in goka that writes to Kafka (emitters, processors, the tester's fakes) talks to a
:class:`Producer`; a *producer builder* (any ``Callable[[dict], Producer]``) creates it, which is
how tests and the tester swap in an in-memory implementation.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import confluent_kafka

from goka.errors import ConfigurationError, DeliveryError
from goka.kafka.admin import partition_count

__all__ = [
    "CONNECTED_START",
    "IDEMPOTENT_START",
    "DeliveredMessage",
    "Headers",
    "KafkaProducer",
    "ProduceError",
    "Producer",
    "ProducerBuilder",
    "Timestamp",
    "delivery_error",
    "failed_for_good",
    "positional_produce",
    "ready_in",
    "timestamp_ms",
]

#: A message's time: milliseconds since the epoch, or a datetime.
Timestamp = int | dt.datetime

#: Message headers, as confluent-kafka takes them.
Headers = dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]]


class DeliveredMessage(Protocol):
    """What a delivery callback learns about a message (confluent-kafka's Message API)."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> bytes | None: ...
    def latency(self) -> float | None: ...


class KafkaErrorLike(Protocol):
    """An error passed to a delivery callback (confluent-kafka's KafkaError API)."""

    def str(self) -> str: ...
    def retriable(self) -> bool: ...


#: ``on_delivery(error_or_None, message)``; called once per produced message, on a polling thread.
DeliveryCallback = Callable[[KafkaErrorLike | None, DeliveredMessage], None]


#: Raised by ``produce`` when a message is refused before it is queued.
ProduceError = confluent_kafka.KafkaException


def failed_for_good(error: ProduceError) -> bool:
    """Was ``produce`` refused because the producer failed for good (a transactional one
    fenced by a newer writer, say: librdkafka then refuses every message with ``_FATAL``,
    which it does not flag as fatal itself)?"""
    found = error.args[0] if error.args else None
    return found is not None and (
        found.fatal() or found.code() == confluent_kafka.KafkaError._FATAL
    )


class Producer(Protocol):
    """What goka needs from a Kafka producer. Thread-safe: ``produce`` from any thread."""

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: str | bytes | None,
        *,
        on_delivery: DeliveryCallback,
        headers: Headers | None = None,
        timestamp: int = 0,
        partition: int = -1,
    ) -> None:
        """Queue one message.

        Raises:
            BufferError: the local queue is full (backpressure: poll, then try again).
            ProduceError: the message was refused at once (too large, unknown partition...).
        """
        ...

    def poll(self, timeout: float) -> int:
        """Serve delivery callbacks for up to ``timeout`` seconds; return how many ran."""
        ...

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for all queued messages; return how many remain."""
        ...

    def __len__(self) -> int:
        """Messages queued or in flight."""
        ...

    def purge(self) -> None:
        """Drop queued messages; their delivery callbacks report a purge error."""
        ...

    def partition_count(self, topic: str, timeout: float) -> int:
        """Return the number of partitions of ``topic``.

        Raises:
            BrokerError: no broker answered within ``timeout`` seconds.
            TopicError: the topic does not exist.
        """
        ...


ProducerBuilder = Callable[[dict[str, Any]], Producer]


class KafkaProducer:
    """confluent-kafka's Producer as a :class:`Producer`.

    Args:
        config: complete librdkafka settings (see :func:`goka.kafka.config.producer_config`).

    Raises:
        ConfigurationError: if librdkafka rejects a setting.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.started = time.monotonic()
        self.idempotent = str(config.get("enable.idempotence", "")).lower() == "true"
        #: when it delivers without waiting for its producer ID (:func:`ready_in`)
        self.ready_at = self.started + (IDEMPOTENT_START if self.idempotent else 0.0)
        try:
            self._producer = confluent_kafka.Producer(dict(config))
        except (confluent_kafka.KafkaException, ValueError, TypeError) as exc:
            raise ConfigurationError(f"invalid producer settings: {exc}") from exc
        # Bound methods of the C producer: no Python frame per message on the hot path.
        self.produce = self._producer.produce
        self.poll = self._producer.poll
        self.flush = self._producer.flush
        self.purge = self._producer.purge

    def partition_count(self, topic: str, timeout: float) -> int:
        return partition_count(self._producer, topic, timeout)

    def connect(self, topic: str) -> None:
        """Ask ``topic``'s metadata now (for at most :data:`IDEMPOTENT_START`): librdkafka
        connects to the cluster, and an idempotent producer gets its producer ID at once
        instead of after its half-second retry (measured: a first delivery 0.06 s after the
        start, against 0.51 s). No answer in time changes nothing: the retry comes."""
        try:
            self._producer.list_topics(topic, IDEMPOTENT_START)
        except confluent_kafka.KafkaException:
            return
        self.ready_at = min(self.ready_at, time.monotonic() + CONNECTED_START)

    def __len__(self) -> int:
        return len(self._producer)

    @property
    def client(self) -> confluent_kafka.Producer:
        """confluent-kafka's Producer (its transactions' calls)."""
        return self._producer


#: How long after it starts librdkafka's idempotent producer asks for its producer ID; a
#: delivery before that waits for it (measured: a first delivery 0.50 s after the start, against
#: 1 ms from a producer a second old).
IDEMPOTENT_START = 0.5


#: How long after a metadata answer (:meth:`KafkaProducer.connect`) an idempotent producer has
#: its producer ID (measured: first deliveries 0.060-0.067 s after the start, the answer
#: included).
CONNECTED_START = 0.06


def ready_in(producer: Producer) -> float:
    """Seconds until ``producer`` delivers without waiting for its producer ID (0: it does
    now, or it is not an idempotent :class:`KafkaProducer`)."""
    if not isinstance(producer, KafkaProducer):
        return 0.0
    return max(0.0, producer.ready_at - time.monotonic())


@functools.cache
def positional_produce() -> bool:
    """Whether confluent-kafka's ``Producer.produce`` takes ``(topic, value, key, partition,
    callback, on_delivery, timestamp, headers)`` by position: a call 0.45 µs shorter than with
    keywords (1.1-1.2 µs against 1.6-1.7, measured), on a changelog row per record. Its
    documentation gives no positional order, so it is found out once per process: a record
    produced so to a producer connected nowhere, then purged, must come back to the callback
    given, with its partition (a timestamp or headers out of place fail to parse)."""
    seen: list[Any] = []
    try:
        probe = confluent_kafka.Producer({"log_level": 0})
        probe.produce("goka-probe", b"v", b"k", 3, lambda e, m: seen.append(m), None, 1234,
                      [("h", b"1")])  # fmt: skip
        probe.purge()
        probe.poll(0)
    except (TypeError, ValueError, BufferError, confluent_kafka.KafkaException):
        return False
    return len(seen) == 1 and seen[0].partition() == 3 and seen[0].key() == b"k"


def connect_soon(producer: Producer, topic: str) -> None:
    """:meth:`KafkaProducer.connect` on a thread of its own (for a producer that has it): the
    caller is not held up by a broker that is down, and an idempotent producer gets its
    producer ID at once (measured: an emitter built with ``check_topic=False`` delivered its
    first record 0.51 s after it was built, 7 times in 8)."""
    connect = getattr(producer, "connect", None)
    if connect is None:
        return

    def run() -> None:
        try:
            connect(topic)
        except Exception as exc:  # e.g. a producer closed meanwhile: the retry comes anyway
            logging.getLogger(__name__).debug("asking %s's metadata: %s", topic, exc)

    threading.Thread(target=run, name=f"goka-connect-{topic}", daemon=True).start()


def delivery_error(topic: str, key: bytes | None, error: KafkaErrorLike) -> DeliveryError:
    """Turn a delivery callback's error into a DeliveryError naming topic and key."""
    shown = key.decode(errors="replace") if key is not None else None
    return DeliveryError(topic, shown, error.str(), retriable=error.retriable())


def probe_message(partition: int, offset: int, latency: float) -> DeliveredMessage | None:
    """A confluent-kafka Message as a delivery report would carry it, built with its public
    constructor (for checking how reports are read), or None where that constructor is missing."""
    try:
        message: DeliveredMessage = confluent_kafka.Message(
            partition=partition, offset=offset, latency=latency
        )
    except Exception:  # a confluent-kafka without the constructor
        return None
    return message


def kafka_producer(config: dict[str, Any]) -> Producer:
    """The default producer builder."""
    return KafkaProducer(config)


def raw_producer(config: dict[str, Any]) -> Any:
    """confluent-kafka's own Producer, for loops that produce millions of records with a
    default delivery callback in ``config`` (``on_delivery``) instead of one per record."""
    return confluent_kafka.Producer(config)


def timestamp_ms(timestamp: Timestamp | None) -> int:
    """Kafka timestamps are milliseconds since the epoch; 0 lets the producer stamp the time."""
    if timestamp is None:
        return 0
    if isinstance(timestamp, dt.datetime):
        return int(timestamp.timestamp() * 1000)
    return int(timestamp)
