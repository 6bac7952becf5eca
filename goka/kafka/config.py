"""librdkafka settings: goka's defaults, and the merge with what the user passes."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from goka.errors import ConfigurationError
from goka.logs import RepeatFilter

__all__ = [
    "LIBRDKAFKA_LOGGER",
    "SCOPES",
    "Brokers",
    "admin_config",
    "bootstrap_servers",
    "check_settings",
    "consumer_config",
    "producer_config",
    "scoped",
]

#: Brokers as ``"host:port,host:port"`` or a sequence of ``"host:port"``.
Brokers = str | Sequence[str]

#: Every client's defaults: no metrics pushed to the broker (KIP-714; goka's metrics are
#: Prometheus'): else each client asks the broker for telemetry subscriptions again and again
#: (GetTelemetrySubscriptions: 3 requests a second from an idle processor's clients, measured
#: with ``bench.idle``).
CLIENT_DEFAULTS: dict[str, Any] = {"enable.metrics.push": False}

#: Producer defaults. ``fnv1a`` is the partitioner of Go Goka (Sarama's hash partitioner), so
#: Python and Go producers put a key on the same partition. Linger batches records: the
#: embedded broker degrades with millions of single-record batches, and so does throughput.
#: No auto-creation: a producer that outlives its topic (deleted, or the broker replaced while a
#: worker kept its client) must not recreate it with the broker's default partition count,
#: which would put keys on other partitions than their state; its records fail instead.
PRODUCER_DEFAULTS: dict[str, Any] = {
    **CLIENT_DEFAULTS,
    "allow.auto.create.topics": False,
    "partitioner": "fnv1a",
    "enable.idempotence": True,
    "linger.ms": 5,
    "message.timeout.ms": 60_000,
    "socket.keepalive.enable": True,
}

#: Consumer defaults. A consumer whose local queue holds ``queued.min.messages`` fetches again
#: only after ``fetch.queue.backoff.ms``, 1 s by librdkafka's default: that caps a consumer
#: reading a backlog at about ``queued.min.messages`` records a second, whatever its speed
#: (docs/processors.md, "On Apache Kafka", has the figures).
CONSUMER_DEFAULTS: dict[str, Any] = {
    **CLIENT_DEFAULTS,
    "fetch.queue.backoff.ms": 10,
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "socket.keepalive.enable": True,
}


def bootstrap_servers(brokers: Brokers) -> str:
    """Return ``bootstrap.servers`` for ``brokers``.

    Raises:
        ConfigurationError: if no broker is given.
    """
    joined = brokers if isinstance(brokers, str) else ",".join(brokers)
    if not joined.strip():
        raise ConfigurationError("no Kafka brokers given (expected 'host:port[,host:port...]')")
    return joined


#: librdkafka's own log lines go to this Python logger instead of stderr.
#: Repeated lines (one per connection attempt of every client) are folded (see RepeatFilter).
LIBRDKAFKA_LOGGER = logging.getLogger("goka.librdkafka")


class StartingBroker(logging.Filter):
    """librdkafka's lines about a broker that is still starting (``GETPID ... Failed to
    acquire idempotence PID ...: Coordinator load in progress: retrying``) at debug, for
    :data:`SECONDS` from the first: the client retries by itself, and a newcomer reads a
    warning as a failure. Later ones pass (a coordinator that never comes is a failure)."""

    #: What a starting broker answers (retriable; librdkafka retries).
    STARTING = ("Coordinator load in progress", "Coordinator not available",
                "Not coordinator")  # fmt: skip
    #: How long after the first such line they are taken for a broker's start.
    SECONDS = 120.0

    def __init__(self) -> None:
        super().__init__()
        self._first: float | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()  # (librdkafka: "%s [%s] %s" and its args)
        if (
            record.levelno > logging.DEBUG
            and "retrying" in message
            and any(s in message for s in self.STARTING)
        ):
            self._first = self._first or time.monotonic()
            if time.monotonic() - self._first > self.SECONDS:
                return True
            if not LIBRDKAFKA_LOGGER.isEnabledFor(logging.DEBUG):
                return False
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


if not any(isinstance(f, StartingBroker) for f in LIBRDKAFKA_LOGGER.filters):
    LIBRDKAFKA_LOGGER.addFilter(StartingBroker())
if not any(isinstance(f, RepeatFilter) for f in LIBRDKAFKA_LOGGER.filters):
    LIBRDKAFKA_LOGGER.addFilter(RepeatFilter())


#: Prefixes of settings meant for one kind of client only, as Kafka Streams' ``consumer.``,
#: ``producer.`` and ``admin.`` (no librdkafka property begins with one of them).
SCOPES = ("consumer.", "producer.", "admin.")


def scoped(user: Mapping[str, Any], scope: str) -> dict[str, Any]:
    """The settings of ``user`` a client of ``scope`` (one of :data:`SCOPES`) takes: those
    without a scope, then those of its scope without the prefix (they win). A consumer-only
    setting such as ``fetch.wait.max.ms`` then reaches no producer (whose librdkafka warns)."""
    taken = {k: v for k, v in user.items() if not k.startswith(SCOPES)}
    taken.update({k[len(scope) :]: v for k, v in user.items() if k.startswith(scope)})
    return taken


def _merge(
    defaults: Mapping[str, Any], brokers: Brokers, user: Mapping[str, Any], scope: str
) -> dict[str, Any]:
    config: dict[str, Any] = {"logger": LIBRDKAFKA_LOGGER, **defaults}
    config.update(scoped(user, scope))
    config["bootstrap.servers"] = bootstrap_servers(brokers)
    return config


def producer_config(brokers: Brokers, user: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Merge goka's producer defaults, the user's librdkafka settings (those prefixed
    ``producer.`` too, see :func:`scoped`) and the brokers."""
    return _merge(PRODUCER_DEFAULTS, brokers, user or {}, "producer.")


def consumer_config(brokers: Brokers, user: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Merge goka's consumer defaults, the user's librdkafka settings (those prefixed
    ``consumer.`` too) and the brokers."""
    config = _merge(CONSUMER_DEFAULTS, brokers, user or {}, "consumer.")
    config.setdefault("group.id", "goka-py-unused")  # librdkafka needs one even for assign()
    return config


def admin_config(brokers: Brokers, user: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Merge the user's librdkafka settings (those prefixed ``admin.`` too) and the brokers
    for an admin client."""
    return _merge(CLIENT_DEFAULTS, brokers, user or {}, "admin.")


#: Where librdkafka logs while it checks settings (see :func:`check_settings`): nowhere.
_QUIET = logging.getLogger("goka.librdkafka.check")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def check_settings(user: Mapping[str, Any], where: str = "kafka_config") -> None:
    """Have librdkafka check the settings of ``user`` now, merged with goka's defaults as each
    client gets them (see :func:`scoped`), rather than when a task starts its first client:
    an unknown property, a value it refuses, or one that contradicts another
    (``acks=1`` with the idempotent producer). Python callbacks (``error_cb``, ``oauth_cb``,
    ...) are left out: they are not called here.

    Raises:
        ConfigurationError: what librdkafka refused, named with ``where`` (the keyword it was
            given in).
    """
    from confluent_kafka import Consumer, KafkaException, Producer

    merges = ((producer_config, Producer, "producer."), (consumer_config, Consumer, "consumer."),
              (admin_config, Producer, "admin."))  # fmt: skip
    for merge, client, scope in merges:
        if not scoped(user, scope):
            continue
        config = {k: v for k, v in merge("localhost", user).items() if not callable(v)
                  and k not in ("logger", "bootstrap.servers")}  # fmt: skip
        try:
            made = client({**config, "logger": _QUIET})
        except KafkaException as exc:
            error = exc.args[0].str()
            raise ConfigurationError(f"{where}: {error} (librdkafka's CONFIGURATION.md lists "
                                     f"the properties)") from exc  # fmt: skip
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"{where}: {exc}") from exc
        if isinstance(made, Consumer):
            made.close()
