"""Cluster metadata and topic administration over confluent-kafka's AdminClient."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import confluent_kafka
from confluent_kafka import TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported without __all__
    AdminClient,
    ConfigResource,
    NewTopic,
)

from goka.errors import BrokerError, ConfigurationError, TopicError
from goka.kafka.config import Brokers, admin_config, consumer_config

__all__ = [
    "Cluster", "KafkaAdmin", "cluster_of", "metadata_of", "partition_count",
    "prime_group_coordinator", "topic_partitions",
]  # fmt: skip


@dataclass(frozen=True)
class Cluster:
    """What a cluster's metadata says of the cluster itself.

    Attributes:
        cluster_id: its id (None where the broker gives none).
        controller: the node id of its active controller (-1: none known).
        brokers: ``{node id: "host:port"}`` of its live brokers.
    """

    cluster_id: str | None
    controller: int
    brokers: dict[int, str]


def metadata_of(client: Any, timeout: float) -> Any:
    """The whole cluster's metadata as any confluent-kafka client asks it (every topic: asking
    for one would let a broker auto-create it).

    Raises:
        BrokerError: if no broker answered within ``timeout`` seconds.
    """
    try:
        return client.list_topics(timeout=timeout)
    except confluent_kafka.KafkaException as exc:
        raise BrokerError(f"no Kafka broker answered within {timeout:g}s: {exc}") from exc


def cluster_of(client: Any, timeout: float) -> Cluster:
    """Return what the metadata of any confluent-kafka client's cluster says of it.

    Raises:
        BrokerError: if no broker answered within ``timeout`` seconds.
    """
    metadata = metadata_of(client, timeout)
    brokers = {b.id: f"{b.host}:{b.port}" for b in metadata.brokers.values()}
    return Cluster(metadata.cluster_id, metadata.controller_id, brokers)


def topic_partitions(client: Any, timeout: float) -> dict[str, int]:
    """Return ``{topic: partition count}`` for every topic the cluster knows.

    ``client`` is any confluent-kafka client (producer, consumer, admin). The whole topic list is
    requested, never one topic, so no broker auto-creates a topic because we asked about it.

    Raises:
        BrokerError: if no broker answered within ``timeout`` seconds.
    """
    metadata = metadata_of(client, timeout)
    return {name: len(meta.partitions) for name, meta in metadata.topics.items() if not meta.error}


def partition_count(client: Any, topic: str, timeout: float) -> int:
    """Return the partition count of ``topic``.

    Raises:
        BrokerError: if no broker answered within ``timeout`` seconds.
        TopicError: if the topic does not exist.
    """
    counts = topic_partitions(client, timeout)
    if topic not in counts:
        raise TopicError(f"topic {topic!r} does not exist")
    return counts[topic]


#: The priming client's librdkafka log: errors only.
_PRIME_LOG = logging.getLogger("goka.librdkafka.prime")
_PRIME_LOG.setLevel(logging.ERROR)


def prime_group_coordinator(brokers: Brokers, timeout: float) -> None:
    """Make a new cluster's group coordinator ready, as that of a cluster up a while is (its
    topic ``__consumer_offsets`` created and loaded, which a first group request waits for
    otherwise).

    Raises:
        BrokerError: it was not ready within ``timeout`` seconds.
    """
    settings = {"logger": _PRIME_LOG, "group.id": "goka-prime"}  # errors are expected here
    consumer = confluent_kafka.Consumer(consumer_config(brokers, settings))
    deadline = time.monotonic() + timeout
    try:
        while True:  # the coordinator answers errors until it is loaded
            try:
                consumer.committed([TopicPartition("goka-prime", 0)], timeout)
                return
            except confluent_kafka.KafkaException as exc:
                if time.monotonic() > deadline:
                    raise BrokerError(f"the group coordinator was not ready within "
                                      f"{timeout:g}s: {exc}") from exc  # fmt: skip
            time.sleep(0.05)
    finally:
        consumer.close()


class KafkaAdmin:
    """Topic administration on one cluster. Thread-safe.

    Args:
        brokers: bootstrap servers.
        config: extra librdkafka settings (security, timeouts).
        timeout: seconds to wait for each request.
    """

    def __init__(
        self, brokers: Brokers, config: Mapping[str, Any] | None = None, *, timeout: float = 30.0
    ) -> None:
        settings = admin_config(brokers, config)
        try:
            self._client = AdminClient(settings)
        except (confluent_kafka.KafkaException, ValueError, TypeError) as exc:
            raise ConfigurationError(f"invalid admin settings: {exc}") from exc
        self.timeout = timeout

    def cluster(self) -> Cluster:
        """Return the cluster's id, controller and live brokers."""
        return cluster_of(self._client, self.timeout)

    def leaders(self, topic: str) -> dict[int, int]:
        """Return ``{partition: node id of its leader}`` of ``topic`` (-1: none now).

        Raises:
            BrokerError: if no broker answered.
            TopicError: if the topic does not exist.
        """
        try:
            metadata = self._client.list_topics(timeout=self.timeout)  # all: none auto-created
        except confluent_kafka.KafkaException as exc:
            raise BrokerError(f"no Kafka broker answered within {self.timeout:g}s: {exc}") from exc
        found = metadata.topics.get(str(topic))
        if found is None or found.error is not None:
            raise TopicError(f"topic {topic!r} does not exist")
        return {p: meta.leader for p, meta in found.partitions.items()}

    def topics(self) -> dict[str, int]:
        """Return ``{topic: partition count}`` for every topic."""
        return topic_partitions(self._client, self.timeout)

    def create_topic(
        self, name: str, partitions: int, replication: int, config: Mapping[str, str]
    ) -> bool:
        """Create ``name`` (``replication`` -1: the cluster's default); return False if it
        already existed. Returns once metadata names a leader for each of its partitions (a
        broker may learn of a new topic a moment after the controller made it).

        Raises:
            TopicError: if the cluster refused to create it.
        """
        name = str(name)  # confluent-kafka wants exactly str, not goka's Stream/Table
        spec = NewTopic(
            name, num_partitions=partitions, replication_factor=replication, config=dict(config)
        )
        future = self._client.create_topics([spec], request_timeout=self.timeout)[name]
        try:
            future.result(timeout=self.timeout)
        except confluent_kafka.KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if (
                getattr(error, "code", lambda: None)()
                == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS
            ):
                self._await(name, lambda led: led is not None and min(led.values()) >= 0)
                return False
            raise TopicError(f"cannot create topic {name!r}: {exc}") from exc
        self._await(name, lambda led: led is not None and min(led.values()) >= 0)
        return True

    def settled_partitions(self, topic: str) -> int:
        """The partition count of ``topic`` once the broker asked names a leader for each
        (every broker of a cluster learns of a new topic a moment after the controller).

        Raises:
            TopicError: not within the admin's timeout.
        """
        found: list[int] = []

        def ready(led: dict[int, int] | None) -> bool:
            found[:] = [len(led)] if led and min(led.values()) >= 0 else []
            return bool(found)

        self._await(topic, ready)
        return found[0]

    def _await(self, topic: str, ready: Callable[[dict[int, int] | None], bool]) -> None:
        """Wait until ``ready({partition: leader} or None: no such topic)``.

        Raises:
            TopicError: not within the admin's timeout.
        """
        deadline = time.monotonic() + self.timeout
        while True:
            found = metadata_of(self._client, self.timeout).topics.get(topic)
            led = None if found is None or found.error is not None else {
                p: meta.leader for p, meta in found.partitions.items()}  # fmt: skip
            if ready(led):
                return
            if time.monotonic() > deadline:
                raise TopicError(f"topic {topic!r}: its metadata did not settle within "
                                 f"{self.timeout:g}s (partition leaders: {led})")  # fmt: skip
            time.sleep(0.02)

    def topic_config(self, name: str) -> dict[str, str]:
        """Return the settings the cluster reports for topic ``name``.

        Raises:
            TopicError: if they cannot be read.
        """
        resource = ConfigResource(ConfigResource.Type.TOPIC, str(name))
        deadline = time.monotonic() + min(self.timeout, 10.0)
        while True:  # a broker of a cluster may learn of a new topic after another did
            future = self._client.describe_configs([resource], request_timeout=self.timeout)
            try:
                entries = future[resource].result(timeout=self.timeout)
                break
            except confluent_kafka.KafkaException as exc:
                code = exc.args[0].code() if exc.args else None
                unknown = code == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART
                if not unknown or time.monotonic() > deadline:
                    raise TopicError(
                        f"cannot read the configuration of topic {name!r}: {exc}"
                    ) from exc
            time.sleep(0.05)
        return {key: entry.value for key, entry in entries.items() if entry.value is not None}

    def delete_topic(self, name: str) -> None:
        """Delete topic ``name`` (used by tests and tools; not on real data paths)."""
        name = str(name)
        future = self._client.delete_topics([name], request_timeout=self.timeout)[name]
        try:
            future.result(timeout=self.timeout)
        except confluent_kafka.KafkaException as exc:
            raise TopicError(f"cannot delete topic {name!r}: {exc}") from exc
        self._await(name, lambda led: led is None)
