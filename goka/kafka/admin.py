"""Cluster metadata and topic administration over confluent-kafka's AdminClient."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import confluent_kafka
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported without __all__
    AdminClient,
    ConfigResource,
    NewTopic,
)

from goka.errors import BrokerError, ConfigurationError, TopicError
from goka.kafka.config import Brokers, admin_config

__all__ = ["KafkaAdmin", "partition_count", "topic_partitions"]


def topic_partitions(client: Any, timeout: float) -> dict[str, int]:
    """Return ``{topic: partition count}`` for every topic the cluster knows.

    ``client`` is any confluent-kafka client (producer, consumer, admin). The whole topic list is
    requested, never one topic, so no broker auto-creates a topic because we asked about it.

    Raises:
        BrokerError: if no broker answered within ``timeout`` seconds.
    """
    try:
        metadata = client.list_topics(timeout=timeout)
    except confluent_kafka.KafkaException as exc:
        raise BrokerError(f"no Kafka broker answered within {timeout:g}s: {exc}") from exc
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

    def topics(self) -> dict[str, int]:
        """Return ``{topic: partition count}`` for every topic."""
        return topic_partitions(self._client, self.timeout)

    def create_topic(
        self, name: str, partitions: int, replication: int, config: Mapping[str, str]
    ) -> bool:
        """Create ``name``; return False if it already existed.

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
                return False
            raise TopicError(f"cannot create topic {name!r}: {exc}") from exc
        return True

    def topic_config(self, name: str) -> dict[str, str]:
        """Return the settings the cluster reports for topic ``name``.

        Raises:
            TopicError: if they cannot be read.
        """
        resource = ConfigResource(ConfigResource.Type.TOPIC, str(name))
        future = self._client.describe_configs([resource], request_timeout=self.timeout)[resource]
        try:
            entries = future.result(timeout=self.timeout)
        except confluent_kafka.KafkaException as exc:
            raise TopicError(f"cannot read the configuration of topic {name!r}: {exc}") from exc
        return {key: entry.value for key, entry in entries.items() if entry.value is not None}

    def delete_topic(self, name: str) -> None:
        """Delete topic ``name`` (used by tests and tools; not on real data paths)."""
        name = str(name)
        future = self._client.delete_topics([name], request_timeout=self.timeout)[name]
        try:
            future.result(timeout=self.timeout)
        except confluent_kafka.KafkaException as exc:
            raise TopicError(f"cannot delete topic {name!r}: {exc}") from exc
