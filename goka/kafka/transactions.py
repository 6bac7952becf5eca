"""Kafka transactions for one group partition: what its commit writes (outputs, changelog
rows, the group's input offsets) becomes visible to ``read_committed`` readers all at once or
not at all, and a second writer of the same partition fences the first.

Each group partition has its own *transactional id*, ``<group>-<partition>``, stable across
runs, machines and modes: the broker keeps an epoch per id, bumped by every
``init_transactions``, so a twin of a task (Spark running it again, a lost executor coming
back, a second processor of the group started by mistake) is refused from its next write on
(:class:`FencedError`). One id per partition, not per process as Kafka Streams' EOS v2 has: a
partition moves between Spark tasks and processes, and the id must move with it.

A transaction of Apache Kafka stays open at most ``transaction.timeout.ms`` (60 s here: longer
than any commit interval, shorter than Kafka's 15 minutes, so that a crashed task's open
transaction does not hold every ``read_committed`` reader of its topics back for long); a
producer paused past it is fenced by the broker too.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import confluent_kafka

from goka.errors import (
    BrokerError,
    ConfigurationError,
    FencedError,
    GokaError,
    TransactionAbortedError,
    TransactionError,
)
from goka.kafka.config import scoped
from goka.kafka.producer import KafkaProducer, Producer

__all__ = [
    "FENCED_CODES",
    "RETRY_BACKOFF_MS",
    "TRANSACTION_SECONDS",
    "TRANSACTION_TIMEOUT_MS",
    "FencedError",
    "TransactionAbortedError",
    "Transactions",
    "check_transactions",
    "isolates_aborted",
    "probe_topic",
    "transactional_id",
]

log = logging.getLogger(__name__)

#: How long the broker lets a transaction stay open before it aborts it and fences its writer.
TRANSACTION_TIMEOUT_MS = 60_000
#: About how long goka keeps a transaction open when it has much to write (a micro-batch's
#: backlog, the final results of a window boundary): well below the timeout, and what a crash
#: makes it write again.
TRANSACTION_SECONDS = 5.0
#: How long the group's offsets may take to join a transaction (a coordinator found and
#: asked; seconds when it moved), and how much longer the call may take before the producer is
#: given up (see :meth:`Transactions._within`).
OFFSETS_SECONDS, CALL_GRACE_SECONDS = 10.0, 2.0
#: librdkafka's wait before it asks again, 100 ms by default: the first write of a transaction
#: that follows a commit is answered CONCURRENT_TRANSACTIONS while the broker writes the last
#: one's markers, and the default wait made a commit take 110 ms at the median (5 ms: 20 ms).
RETRY_BACKOFF_MS = 5


#: The settings of a producer's that its group's consumer takes too (where the brokers are).
_CONSUMER_SETTINGS = ("bootstrap.servers", "security.protocol", "ssl.ca.location",
                      "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
                      "sasl.mechanisms", "sasl.username", "sasl.password",
                      "client.dns.lookup")  # fmt: skip


def transactional_id(group: str, partition: int) -> str:
    """The transactional id of a group partition."""
    return f"{group}-{partition}"


_transactional_id = transactional_id  # (a parameter of Transactions has its name)


class Transactions:
    """A transactional producer for one group partition (see the module docstring).

    :meth:`begin`, produce with :attr:`producer`, then :meth:`commit` (with the group's input
    offsets) or :meth:`abort`. Not thread-safe.

    Args:
        config: complete librdkafka producer settings (``transactional.id`` and the
            transaction timeout are set here).
        group, partition: the group partition it writes for.
        timeout: seconds :meth:`commit`, :meth:`abort` and the start may wait for the broker.
        transaction_timeout_ms: how long a transaction may stay open (the broker aborts it
            and fences this writer after that).
        transactional_id: its id, if not the group partition's (a probe's).

    Raises:
        ConfigurationError: librdkafka refused a setting.
        FencedError: a newer writer of the partition started meanwhile.
        TransactionError: the transaction coordinator did not answer in ``timeout`` seconds.
    """

    def __init__(
        self, config: Mapping[str, Any], group: str, partition: int, timeout: float = 30.0, *,
        transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS, transactional_id: str = "",
    ) -> None:  # fmt: skip
        self.group, self.partition, self.timeout = group, partition, timeout
        self.id = transactional_id or _transactional_id(group, partition)
        settings = {"retry.backoff.ms": RETRY_BACKOFF_MS, **config, "transactional.id": self.id,
                    "enable.idempotence": True,
                    "transaction.timeout.ms": transaction_timeout_ms}  # fmt: skip
        made = KafkaProducer(settings)
        self._client = made.client
        #: the producer the transaction's records are produced with
        self.producer: Producer = made
        self.open, self.config, self._metadata = False, dict(config), None
        #: this producer, among the writers of its transactional id (see ``Clients``)
        self.token = uuid.uuid4().hex
        started = time.monotonic()
        # a broker connection first: librdkafka asks for the producer ID at once, finds no
        # broker up yet and asks again only 500 ms later (half the starts took 0.51 s; after
        # a metadata request every one 0.06-0.08 s, measured on Apache Kafka 4.4)
        self._call("list_topics", self._client.list_topics, None, timeout)
        self._call("init_transactions", self._client.init_transactions, timeout)
        log.debug("%s: transactional producer started in %.3f s", self.id,
                 time.monotonic() - started)  # fmt: skip

    def begin(self) -> None:
        """Begin a transaction (every message produced until :meth:`commit` belongs to it)."""
        self._call("begin_transaction", self._client.begin_transaction)
        self.open = True

    def send_offsets(self, offsets: Mapping[str, int]) -> None:
        """Add the group's next ``offsets`` of its inputs in this partition (``{topic:
        offset}``) to the open transaction: they are committed with it, as the group's commit
        (Go Goka and lag tools see them). May be sent while its records are in flight.

        Raises: as :meth:`commit`.
        """
        assert self.open, "offsets without begin"
        if offsets:
            found = [confluent_kafka.TopicPartition(t, self.partition, o)
                     for t, o in offsets.items()]  # fmt: skip
            metadata, send = self._group_metadata(), self._client.send_offsets_to_transaction
            wait = min(self.timeout, OFFSETS_SECONDS)
            self._call("send_offsets_to_transaction", self._within,
                       lambda: send(found, metadata, wait), wait)  # fmt: skip

    def _within(self, call: Callable[[], object], seconds: float) -> None:
        """``call()`` on a thread of its own, waited for at most ``seconds`` (and a little):
        librdkafka's ``send_offsets_to_transaction`` ignores its timeout while the group's
        coordinator is lost (confluentinc/librdkafka#5456, #5511: it blocked an epoch for
        minutes in the failover test). Past it, the producer is given up: the task goes on
        from its last commit with a new one, whose start fences this one.

        Raises:
            TransactionError: no answer in time.
        """
        outcome: list[BaseException | None] = []

        def run() -> None:
            try:
                call()
                outcome.append(None)
            except BaseException as exc:  # raised below, on the caller's thread
                outcome.append(exc)

        # a daemon thread: one that librdkafka never lets go must not hold the process's exit
        caller = threading.Thread(target=run, name=f"goka-txn-{self.id}", daemon=True)
        caller.start()
        caller.join(seconds + CALL_GRACE_SECONDS)
        if not outcome:
            self.open = False
            raise TransactionError(
                f"{self.id}: no answer from the group's coordinator in "
                f"{seconds + CALL_GRACE_SECONDS:g}s: the producer is given up"
            )
        if outcome[0] is not None:
            raise outcome[0]

    def commit(self, offsets: Mapping[str, int] | None = None) -> None:
        """Commit the transaction (with ``offsets``: :meth:`send_offsets` first).

        Raises:
            FencedError: a newer writer took over (the transaction is aborted by the broker).
            TransactionAbortedError: it could not commit (it was aborted here).
            TransactionError: the coordinator did not answer in time (the state is unknown:
                the task must not write its store; the next start of the partition's producer
                aborts or completes it).
        """
        assert self.open, "commit without begin"
        if offsets:
            self.send_offsets(offsets)
        self._call("commit_transaction", self._client.commit_transaction, self.timeout)
        self.open = False

    def _group_metadata(self) -> Any:
        """The group's metadata, as a consumer of it that joins nothing has it (the broker
        takes offsets of a group without members, as Goka's tasks commit theirs)."""
        if self._metadata is None:
            brokers = {k: v for k, v in self.config.items() if k in _CONSUMER_SETTINGS}
            consumer = confluent_kafka.Consumer({**brokers, "group.id": self.group})
            try:
                self._metadata = consumer.consumer_group_metadata()
            finally:
                consumer.close()
        return self._metadata

    def abort(self) -> None:
        """Abort the open transaction, if any (what it wrote is never read committed)."""
        if self.open:
            self.open = False
            self._call("abort_transaction", self._client.abort_transaction, self.timeout)

    def close(self) -> None:
        """Abort what is open (fenced or gone: nothing to abort) and let the producer go."""
        try:
            self.abort()
        except GokaError as exc:
            log.info("%s: not aborted at close: %s", self.id, exc)

    def _call(self, what: str, call: Any, *args: Any) -> None:
        """``call(*args)``, librdkafka's errors raised as goka's: a fenced producer's as
        :class:`FencedError`; one that needs an abort is aborted (an abort that fails raises
        as it does)."""
        try:
            call(*args)
        except confluent_kafka.KafkaException as exc:
            error = exc.args[0]
            if error.code() in FENCED_CODES:
                self.open = False
                raise FencedError(self.group, self.partition, self.id, error.str()) from exc
            if error.txn_requires_abort():
                self.open = False
                self._call("abort_transaction", self._client.abort_transaction, self.timeout)
                raise TransactionAbortedError(f"{self.id}: {what} failed, transaction "
                                              f"aborted: {error.str()}") from exc  # fmt: skip
            self.open = False  # (its outcome is settled by the next start of the producer)
            if error.fatal():  # (not fenced: refused for good, authorization say; no retry)
                raise BrokerError(f"{self.id}: {what} failed for good: {error.str()}") from exc
            raise TransactionError(f"{self.id}: {what} failed: {error.str()}") from exc


#: What librdkafka says where a newer writer of the transactional id took over (or the broker
#: aborted a transaction open past its timeout, which bumps the producer's epoch too).
FENCED_CODES = (confluent_kafka.KafkaError._FENCED, confluent_kafka.KafkaError.PRODUCER_FENCED,
                confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH)  # fmt: skip


def probe_topic(group: str) -> str:
    """The topic :func:`isolates_aborted` writes its probe to for ``group`` (one partition,
    kept an hour): named for the group, as its transactional ids are, so that ACLs granted on
    the prefix ``<group>-`` cover it."""
    return f"{group}-transactions-check"


def isolates_aborted(config: Mapping[str, Any], group: str, timeout: float = 30.0) -> bool:
    """Does the cluster hide aborted transactions from ``read_committed`` readers? Found out,
    not assumed from the broker's name: one aborted and one committed record are written to
    :func:`probe_topic` (made if missing), then read back committed from before them. The
    probe's transactional id is its own (``<group>-transactions-check-<random>``): probes
    of processors starting at once do not fence each other, nor any writer of the group.

    ``config``: librdkafka settings with ``bootstrap.servers``.

    Raises:
        BrokerError: the brokers did not answer, or the probe could not be written.
    """
    from goka.topic_manager import TopicManager  # (the topic manager imports the clients)

    brokers, topic = config["bootstrap.servers"], probe_topic(group)
    clients = {k: v for k, v in config.items() if k != "bootstrap.servers"}
    TopicManager(brokers, **clients).ensure_stream_exists(topic, 1, retention_ms=3_600_000)
    marker = uuid.uuid4().hex
    writer = Transactions(scoped(config, "producer."), group, 0, timeout,
                          transactional_id=f"{topic}-{marker[:12]}")  # fmt: skip
    reader = confluent_kafka.Consumer({**scoped(config, "consumer."), "group.id": topic,
                                       "isolation.level": "read_committed",
                                       "enable.auto.commit": False})  # fmt: skip
    try:
        start = reader.get_watermark_offsets(
            confluent_kafka.TopicPartition(topic, 0), timeout=timeout, cached=False
        )[1]
        for commit, value in ((False, b"aborted"), (True, b"committed")):
            writer.begin()
            writer.producer.produce(
                topic, value, marker.encode(), partition=0,
                on_delivery=lambda error, message: None,
            )  # fmt: skip
            writer.producer.flush(timeout)
            writer.commit({}) if commit else writer.abort()
        reader.assign([confluent_kafka.TopicPartition(topic, 0, max(start, 0))])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for message in reader.consume(100, 0.5):
                if message.error() is None and message.key() == marker.encode():
                    return message.value() != b"aborted"  # (the committed one comes after)
        raise BrokerError(f"the probe written to {topic!r} at {brokers} was not read back "
                          f"in {timeout:g}s")  # fmt: skip
    finally:
        reader.close()
        writer.close()


_ISOLATING: dict[str, bool] = {}  # brokers -> found by a probe, in this process


def check_transactions(group: str, brokers: str, kafka_config: Mapping[str, Any]) -> None:
    """Raise unless the brokers hide aborted transactions from ``read_committed`` readers,
    which ``guarantee="exactly-once"`` stands on (probed once per process and brokers, with
    the first group's probe: see :func:`isolates_aborted`).

    Raises:
        ConfigurationError: they do not (Tansu, say).
        BrokerError: the probe could not be written or read.
    """
    if brokers not in _ISOLATING:
        _ISOLATING[brokers] = isolates_aborted({**kafka_config, "bootstrap.servers": brokers},
                                               group)  # fmt: skip
    if not _ISOLATING[brokers]:
        raise ConfigurationError(
            f"group {group!r}: guarantee='exactly-once' needs brokers that hide aborted "
            f"transactions from read_committed readers; those at {brokers} do not (a record "
            f"of an aborted transaction was read as committed): use Apache Kafka, or "
            f"guarantee='at-least-once'"
        )
